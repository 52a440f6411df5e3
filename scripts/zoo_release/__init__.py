"""The zoo's release as one resumable run (`scripts/release.py`; what it does and in which order: docs/release.md).

- `checks`: the options, and every refusal that comes before anything is written;
- `run`: the manifest (`<out>/release.json`, which makes the run resumable) and the steps (`Release`);
- `outputs`: the CIFAR-100-C evaluation within a time budget, the Space repo with its packages pinned;
- `estimates`: the durations people write, the H100 estimate, a CPU's training time;
- `verify`: each repo as a user loads it against its card, and the Space against the model;
- `rehearsal`: the stand-ins, built offline in the real schemas and file formats.
"""

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
