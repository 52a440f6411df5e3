"""The release of the zoo as one resumable run (`scripts/release.py`): CIFAR-100-C published as parquet, each model
converted from the reference's released weights or trained with the paper's recipe, evaluated on the clean test split
and on CIFAR-100-C, analysed and compared, pushed with its card, and the Space pushed configured for this release's
organisation.

Two ways onto the shelf. With `from_reference`, the paper's line-up: the reference's four released CIFAR-100 files
(ResNet-50, ViT-Ti, PiT-Ti, Swin-Ti; `alternet_hf.reference`), read from a folder or downloaded, converted exactly
and evaluated again here, their top-1 checked against the paper's before anything is published, their cards naming
the file and its SHA-256; and AlterNet-50, which the authors never released, trained. Otherwise every model is
trained. A model whose training would outlast `training_budget` on this machine (the paper's recipe on a CPU) is
*pending*: the rest is published without it, and the same command run again where it can be trained (a GPU) adds it,
redoing only what depends on it (the comparison, the Space). Nothing is published before the release has checked its
own numbers: CIFAR-100-C's labels against the test split's, each card against its repo as a user loads it, the Space
against the model (`verify`).

Every step is recorded in `<out>/release.json` (its settings, the hashes of its outputs, its wall time) and skipped
when it is complete with the same settings and its outputs are unchanged, so a killed release resumes at the step it
was in (training itself resumes from its last checkpoint, a download from its partial file). `<out>` holds each
repository exactly as it is uploaded:

    <out>/release.json
    <out>/datasets/cifar100-c/          the CIFAR-100-C dataset repo (parquet, a config per corruption, + card)
    <out>/models/<preset>/              each model repo (weights, config, remote code, card with figures)
    <out>/spaces/how-do-vits-work/      the Space repo (app, pinned packages, stored results, space.json)
    <out>/work/                         downloads, conversions, training runs, analyses and the comparison

With `dry_run` nothing is uploaded. The rehearsal (`rehearsal=True`) is the same run on the stand-ins of
`rehearsal`, built offline in the real schemas and file formats, with tiny models and epochs and the GPU branches
(inductor, bf16 autocast, channels-last) on the CPU. Only the data source and the sizes differ from the real release.

- `checks`: the options, and every refusal that comes before anything is written;
- `run`: the manifest and the steps (`Release`);
- `outputs`: the CIFAR-100-C evaluation within a time budget, the Space repo with its packages pinned;
- `estimates`: durations, the H100 estimate, a CPU's training time;
- `verify`: each repo as a user loads it against its card, and the Space against the model;
- `rehearsal`: the stand-ins.
"""

from .checks import (
    CIFAR100C_BUDGET,
    MANIFEST,
    MAX_ACCURACY_GAP,
    RELEASE_MODELS,
    TRAINING_BUDGET,
    ReleaseError,
    ReleaseOptions,
    check_hub,
    check_options,
    check_out_dir,
    check_reference_files,
    check_training_data,
    default_models,
    inductor_available,
)
from .estimates import format_duration, h100_estimate, parse_duration
from .outputs import round_down, space_requirements, write_robustness, write_space_repo
from .run import RUNNING_ADVICE, Manifest, Release, file_hash

__all__ = [
    "CIFAR100C_BUDGET",
    "MANIFEST",
    "MAX_ACCURACY_GAP",
    "RELEASE_MODELS",
    "RUNNING_ADVICE",
    "TRAINING_BUDGET",
    "Manifest",
    "Release",
    "ReleaseError",
    "ReleaseOptions",
    "check_hub",
    "check_options",
    "check_out_dir",
    "check_reference_files",
    "check_training_data",
    "default_models",
    "file_hash",
    "format_duration",
    "h100_estimate",
    "inductor_available",
    "parse_duration",
    "round_down",
    "space_requirements",
    "write_robustness",
    "write_space_repo",
]
