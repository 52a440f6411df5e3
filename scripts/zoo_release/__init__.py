"""The zoo's release as one resumable run (`scripts/release.py`; what it does and in which order: docs/release.md):
the options and refusals (`checks`), the manifest and the steps (`run`), the CIFAR-100-C evaluation and the Space repo
(`outputs`), durations (`estimates`), each repo checked as a user loads it (`verify`), the stand-ins (`rehearsal`)."""

from .checks import (
    CIFAR100C_BUDGET,
    MANIFEST,
    MAX_ACCURACY_GAP,
    TRAINING_BUDGET,
    ReleaseError,
    ReleaseOptions,
    check_out_dir,
    check_reference_files,
    inductor_available,
    preflight,
)
from .estimates import parse_duration
from .outputs import round_down, write_robustness
from .run import RUNNING_ADVICE, Release, file_hash

__all__ = [
    "CIFAR100C_BUDGET",
    "MANIFEST",
    "MAX_ACCURACY_GAP",
    "RUNNING_ADVICE",
    "TRAINING_BUDGET",
    "Release",
    "ReleaseError",
    "ReleaseOptions",
    "check_out_dir",
    "check_reference_files",
    "file_hash",
    "inductor_available",
    "parse_duration",
    "preflight",
    "round_down",
    "write_robustness",
]
