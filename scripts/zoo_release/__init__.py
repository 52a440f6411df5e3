"""The zoo's release as one resumable run (`scripts/release.py`; what it does and in which order: docs/release.md):
the options and refusals (`checks`), the manifest and the steps (`run`), the CIFAR-100-C evaluation and the Space repo
(`outputs`), durations (`estimates`), each repo checked as a user loads it (`verify`), the stand-ins (`rehearsal`).
Each is imported when first used."""

from alternet_hf.utils import lazy_package

__getattr__ = lazy_package(
    __name__,
    {
        "checks": (
            "CIFAR100C_BUDGET",
            "MANIFEST",
            "MAX_ACCURACY_GAP",
            "TRAINING_BUDGET",
            "ReleaseError",
            "ReleaseOptions",
            "check_out_dir",
            "check_reference_files",
            "evaluation_rules",
            "inductor_available",
            "preflight",
        ),
        "estimates": ("parse_duration",),
        "outputs": ("round_down", "write_robustness"),
        "run": ("RUNNING_ADVICE", "Release", "file_hash"),
    },
)
