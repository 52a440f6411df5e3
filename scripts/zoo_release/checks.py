"""What a release is asked for (`ReleaseOptions`), and every refusal that can come before anything is written."""

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from alternet_hf.data.sources import KNOWN_COLUMNS
from alternet_hf.hub.reference import REFERENCE_FILES
from alternet_hf.models.presets import PAPER_MODELS
from alternet_hf.utils import format_duration
from alternet_hf.utils.run_lock import LOCK_FILE

from .estimates import h100_estimate

DATASET = "uoft-cs/cifar100"
COLUMNS = KNOWN_COLUMNS[DATASET]
COLUMN_NAMES = {"image_column": COLUMNS.image, "label_column": COLUMNS.label}
RELEASE_MODELS = ("resnet-50-cifar100", "vit-ti-cifar100", "alternet-50-cifar100")
CIFAR100C_REPO = "cifar100-c"
SPACE_REPO = "how-do-vits-work"
ATLAS_REPO = "frequency-atlas"  # the atlas of the zoo's models among public classifiers (`alternet-atlas`'s dataset)
COLLECTION_TITLE = "How Do Vision Transformers Work?"  # the Hub Collection of the paper, its models, data and Space
MANIFEST = "release.json"
MANIFEST_VERSION = 1

MAX_ACCURACY_GAP = 5.0  # points of top-1 a converted model may lie from the reported value before it is refused
CIFAR100C_BUDGET = 3600.0  # seconds of CIFAR-100-C evaluation per model on a CPU before a subset is evaluated
TRAINING_BUDGET = 24 * 3600.0  # seconds of training per model on this machine before it is left pending
CPU_EVALUATION_BATCH = 32  # the fastest batch of the four models, compiled, on a 2-core CPU (docs/benchmarks.md)
GPU_EVALUATION_BATCH = 1024
SUBSET_SEED = 0
BF16_CHECK_PER_CLASS = 2  # images of each class and corruption (severity 3) on which a CPU release weighs bf16


class ReleaseError(ValueError):
    """Something the person releasing can fix, said before anything is trained where it can be."""


@dataclass
class ReleaseOptions:
    """What `scripts/release.py` was asked for. `out` is the dry-run folder or the staging folder of a real release."""

    org: str
    out: Path
    models: tuple[str, ...] | None = None  # default: PAPER_MODELS if from_reference, else RELEASE_MODELS
    cifar100c_dir: Path | None = None
    without_cifar100c: bool = False
    dry_run: bool = False
    rehearsal: bool = False
    overwrite: bool = False
    private: bool = False
    num_processes: int | None = None  # training processes; default: one per visible GPU (at least one)
    from_reference: bool = False  # convert the reference's released files (the models that have one)
    reference_dir: Path | None = None  # where those files are; None: download them
    max_accuracy_gap: float = MAX_ACCURACY_GAP
    cifar100c_budget: float = CIFAR100C_BUDGET
    training_budget: float = TRAINING_BUDGET

    def __post_init__(self):
        self.models = tuple(self.models or (PAPER_MODELS if self.from_reference else RELEASE_MODELS))

    def identity(self) -> dict:
        """What makes two runs the same release (a folder holding another one is refused). A dry run and the real
        one are the same release: publishing after a dry run uploads its folder without redoing a step."""
        identity = dict(
            org=self.org, models=list(self.models), rehearsal=self.rehearsal, cifar100c=not self.without_cifar100c
        )
        return identity | ({"from_reference": True} if self.from_reference else {})

    def converted(self, preset: str) -> bool:
        """Whether `preset` is released from the reference's file rather than trained."""
        return self.from_reference and preset in REFERENCE_FILES


def preflight(options: ReleaseOptions, *, estimate: bool = True) -> None:
    """Every check before the first step (`check_*`, in this order), then what the release will take."""
    check_options(options)
    if not options.dry_run:
        print(f"Hub: logged in as {check_hub(options)}")
    check_reference_files(options)
    check_training_data(options)
    trained = [p for p in options.models if not options.converted(p)]
    if estimate and trained:
        print(f"training on one H100 (paper recipe, full-size models):\n{h100_estimate(trained)[1]}")
    if not options.without_cifar100c:
        print(
            f"CIFAR-100-C: on a CPU at most {format_duration(options.cifar100c_budget)} per model "
            "(--cifar100c-budget; beyond it a seeded, class-stratified subset of each set, with its standard "
            "error); a GPU evaluates every image"
        )


def check_options(options: ReleaseOptions) -> None:
    """Every refusal that needs no training: organisation name, presets, CIFAR-100-C arrays, the folder."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    from alternet_hf.models.presets import list_models

    try:
        validate_repo_id(f"{options.org}/{SPACE_REPO}")
    except HFValidationError:
        raise ReleaseError(
            f"--org {options.org!r} is not a valid Hugging Face user or organisation name (letters, digits, '-', "
            "'_' and '.', not starting or ending with '-' or '.', at most 96 characters)"
        ) from None
    for preset in options.models:
        if preset not in list_models("cifar100"):
            raise ReleaseError(
                f"{preset!r} is not a CIFAR-100 preset of the zoo; the release trains on {DATASET} and evaluates on "
                f"CIFAR-100-C: choose from {', '.join(list_models('cifar100'))}"
            )
    if len(set(options.models)) != len(options.models):
        raise ReleaseError(f"--models names a preset twice: {', '.join(options.models)}")
    if not options.max_accuracy_gap > 0:
        raise ReleaseError(f"--max-accuracy-gap must be a positive number of points, not {options.max_accuracy_gap}")
    for name, value in (
        ("--cifar100c-budget", options.cifar100c_budget),
        ("--training-budget", options.training_budget),
    ):
        if not value >= 0:
            raise ReleaseError(f"{name} must not be negative, not {value}")
    if not options.rehearsal and not options.without_cifar100c:
        check_cifar100c_dir(options.cifar100c_dir)
    check_out_dir(options)


def check_cifar100c_dir(folder: Path | None) -> None:
    from alternet_hf.data.cifar_c import CORRUPTIONS, ZENODO_URL

    where = (
        f"download CIFAR-100-C.tar from Zenodo record 3555552 ({ZENODO_URL}), unpack it and pass the folder as "
        "--cifar100c-dir; a release without CIFAR-100-C (no robustness on the cards, no dataset) needs "
        "--without-cifar100c"
    )
    if folder is None:
        raise ReleaseError(f"the release evaluates on CIFAR-100-C and publishes it: {where}")
    check_folder_holds(folder, ["labels.npy", *(f"{c}.npy" for c in CORRUPTIONS)], where)


def check_folder_holds(folder: Path, names, advice: str) -> None:
    """`folder` holds the files `names`, or a `ReleaseError` says what is missing, then `advice`."""
    if not Path(folder).is_dir():
        raise ReleaseError(f"there is no folder {folder}: {advice}")
    missing = [name for name in names if not (Path(folder) / name).is_file()]
    if missing:
        raise ReleaseError(f"{folder} lacks {', '.join(missing)}: {advice}")


def check_cifar100c_labels(folder: Path, test_labels, dataset: str) -> None:
    """CIFAR-100-C's `labels.npy` repeats the clean test split's labels, in its order, once per severity."""
    import numpy as np

    from alternet_hf.data.cifar_c import SEVERITIES

    labels, expected = np.load(Path(folder) / "labels.npy", mmap_mode="r"), np.asarray(test_labels)
    if len(labels) != len(SEVERITIES) * len(expected):
        raise ReleaseError(
            f"{folder}/labels.npy holds {len(labels):,} labels, not {len(SEVERITIES)} × the {len(expected):,} test "
            f"images of {dataset}: these arrays are not its CIFAR-100-C"
        )
    for severity, block in zip(SEVERITIES, np.split(np.asarray(labels), len(SEVERITIES))):
        differ = np.flatnonzero(block != expected)
        if len(differ):
            raise ReleaseError(
                f"{folder}/labels.npy is out of step with the test split of {dataset}: at severity {severity}, "
                f"{len(differ):,} of {len(expected):,} labels differ (first at row {differ[0]}: "
                f"{block[differ[0]]} where the test split has {expected[differ[0]]}). Every model would be scored "
                "against the wrong labels: use the arrays as released (Zenodo record 3555552), in their order"
            )


def check_out_dir(options: ReleaseOptions) -> None:
    """The folder is empty, or holds this same release (resumed); another release is refused unless `overwrite`."""
    out = options.out
    contents = [path for path in out.iterdir() if path.name != LOCK_FILE] if out.is_dir() else []
    if not contents:
        return
    manifest = out / MANIFEST
    held = json.loads(manifest.read_text()).get("release") if manifest.is_file() else None
    if held == options.identity():
        return
    if options.overwrite:  # all but the lock of this run, which holds the folder (`run_lock`)
        for path in contents:
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        return
    what = f"another release ({held})" if held else "files that are not a release"
    raise ReleaseError(
        f"{out} holds {what}; this one is {options.identity()}. Choose another folder, or pass --overwrite to delete "
        "it and start again"
    )


def check_hub(options: ReleaseOptions) -> str:
    """The user the token belongs to, or one clear error (no token, or the Hub unreachable) before any training."""
    from huggingface_hub import HfApi, get_token

    from alternet_hf.utils import UNREACHABLE, hub_failure

    if get_token() is None:
        raise ReleaseError(
            "no Hugging Face token: log in with `hf auth login` (or set HF_TOKEN) with write access to "
            f"{options.org}, or write the repositories locally with --dry-run DIR"
        )
    try:
        return HfApi().whoami()["name"]
    except Exception as error:
        failure = hub_failure(error)
        if failure == UNREACHABLE:
            raise ReleaseError(
                "the Hugging Face Hub cannot be reached (offline, HF_HUB_OFFLINE=1, or no network): nothing was "
                "trained. Run where the Hub is reachable, or write the repositories locally with --dry-run DIR"
            ) from error
        if failure is not None:
            raise ReleaseError(f"the Hub refused the token ({error}): log in again with `hf auth login`") from error
        raise


def check_training_data(options: ReleaseOptions) -> None:
    """The training set loads (from the Hub, or offline from its cache) before any step writes a file: a dry run
    would otherwise convert CIFAR-100-C into its folder and only then stop, at training."""
    if options.rehearsal:
        return
    from alternet_hf.data.sources import DatasetUnavailableError, load_raw_dataset

    try:
        load_raw_dataset(DATASET, split="test")
        return
    except DatasetUnavailableError as error:
        cause = error.__cause__ or error
    # raised outside the handler: the release has no --model or --dataset for the generic offline hint to name
    raise ReleaseError(
        f"the training set {DATASET} could not be loaded from the Hugging Face Hub or its cache ({cause}): nothing "
        "was written. Run once where the Hub is reachable (the dataset is then cached for offline runs), or rehearse "
        "the whole release offline with --rehearsal"
    )


def check_reference_files(options: ReleaseOptions) -> None:
    """The reference's files the release converts are in `reference_dir`, already downloaded, or reachable."""
    from alternet_hf.hub.reference import DownloadError, file_url, where_to_get_them

    presets = [p for p in options.models if options.converted(p)]
    if not presets or options.rehearsal:
        return
    if options.reference_dir is not None:
        check_folder_holds(options.reference_dir, [REFERENCE_FILES[p] for p in presets], where_to_get_them(presets))
        return
    downloads = Path(options.out) / "work" / "reference"
    for preset in presets:
        if (downloads / REFERENCE_FILES[preset]).is_file():
            continue
        try:
            reachable(file_url(REFERENCE_FILES[preset]))
        except DownloadError as error:
            raise ReleaseError(
                f"{error}: nothing was written. Without a network, {where_to_get_them(presets)}"
            ) from None


def reachable(url: str, timeout: float = 20.0) -> None:
    """A HEAD request to `url` (after its redirects) succeeds, or `DownloadError` says why not."""
    import urllib.error
    import urllib.request

    from alternet_hf.hub.reference import DownloadError

    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout).close()
    except urllib.error.HTTPError as error:
        raise DownloadError(f"{url} answered HTTP {error.code} {error.reason}") from error
    except (urllib.error.URLError, OSError) as error:
        raise DownloadError(f"{url} cannot be reached ({getattr(error, 'reason', error)})") from error


def inductor_available() -> bool:
    """Whether torch.compile can run here: on a GPU always, on a CPU where inductor finds a C++ compiler."""
    if torch.cuda.is_available():
        return True
    return any(shutil.which(name) for name in (os.environ.get("CXX", "g++"), "g++", "c++", "clang++"))


def evaluation_batch(device) -> int:
    """The batch of every evaluation of a release, clean and CIFAR-100-C."""
    return GPU_EVALUATION_BATCH if torch.device(device).type == "cuda" else CPU_EVALUATION_BATCH


def evaluation_rules(device) -> str:
    """How CIFAR-100-C is evaluated on `device`, in words: bf16 only on a CPU with bf16 matrix instructions, for
    a model whose top-1 on a fixed set bf16 leaves unchanged (`analysis.robustness.bf16_agreement`); on a CPU, also
    the library of the float32 linear layers (`analysis.robustness.onednn_linear_gain`)."""
    from analysis.robustness import ONEDNN_MIN_GAIN, bf16_matrix_units, onednn_linear_gain

    if torch.device(device).type != "cpu":
        return "float32"
    units = bf16_matrix_units()
    library = "oneDNN (MKL is slower here)" if onednn_linear_gain() >= ONEDNN_MIN_GAIN else "MKL"
    precision = "float32 (this CPU has no bf16 matrix instructions)"
    if units is not None:
        precision = f"bf16 where it leaves a model's top-1 on a fixed set unchanged, else float32 ({units} here)"
    return f"{precision}; float32 linear layers through {library}"
