"""Training recipes: the paper's strong-augmentation recipe (docs/paper.md §4), a plain SGD one, and the
small offline default, as one dataclass that the command line and JSON config files fill in (docs/training.md).
"""

import dataclasses
import math
import shutil
import typing
from dataclasses import dataclass, field
from pathlib import Path

from ..utils import write_json

# torch and transformers are imported where they are used: a TrainingConfig is plain data (JSON files, flags).

# "auto" is the engine's own choice (`training.resolve_compile_mode`); the others are torch.compile's modes.
COMPILE_MODES = ("auto", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
DEFAULT_MODEL = "alternet-18-cifar10"
# The offline first run's AlterNet-18 at a quarter of the width, so that it runs on a CPU; the default model's only.
DEFAULT_MODEL_OVERRIDES = dict(
    hidden_sizes=[32, 64, 128, 256],
    embedding_size=32,
    num_attention_heads=[1, 2, 4, 4],
    attention_head_dim=32,
    drop_path_rate=0.0,
)

# `alternet-finetune`'s defaults: brief for trained weights, longer for a preset, which is trained from scratch
# (`scripts/benchmark.py finetune` measures both).
FINETUNE_DEFAULTS = dict(epochs=3.0, learning_rate=1e-3, warmup=0.1)
FROM_SCRATCH_DEFAULTS = dict(epochs=30.0, learning_rate=2e-3, warmup=0.1)
# What a fine-tune leaves beside its model, named as transformers' examples name them (`Trainer.save_metrics`,
# `save_state`), its settings, and its TensorBoard events where a Hub repo keeps them; `alternet-push` reads them.
FINETUNE_CONFIG = "finetune_config.json"
FINETUNE_TRAINING = "train_results.json"
FINETUNE_EVALUATION = "eval_results.json"  # the final evaluation, which a card reports
FINETUNE_ALL = "all_results.json"  # both of the above in one
FINETUNE_STATE = "trainer_state.json"  # the history: every logged loss and evaluation
FINETUNE_RESULTS = (FINETUNE_ALL, FINETUNE_TRAINING, FINETUNE_EVALUATION, FINETUNE_STATE)
FINETUNE_EVENTS = "runs/training"
FINETUNE_ARGUMENTS = "training_args.bin"  # `Trainer.save_model`'s pickle of its arguments: never loaded, never pushed
# What `alternet-train` writes into its output folder (`engine.TrainingSession.claim_output_dir`).
RUN_OUTPUTS = tuple(
    "checkpoints best logs training_config.json history.json metrics.json training_curves.png reliability_diagram.png "
    "config.json model.safetensors preprocessor_config.json holdout.json unreadable.jsonl".split()
)
# alternet-evaluate's results beside the model it evaluated (`apps.evaluation.evaluation_stem`).
EVALUATION_FILES = "eval_*"


def model_record(folder: Path) -> list[str]:
    """The names of what in `folder` belongs to the model it holds: the model itself, alternet-train's run,
    alternet-finetune's record and alternet-evaluate's results. Whatever replaces the model removes all of them: left
    beside a new model, an old evaluation would be reported on its card as the new one's."""
    names = (*RUN_OUTPUTS, *FINETUNE_RESULTS, FINETUNE_CONFIG, FINETUNE_EVENTS, FINETUNE_ARGUMENTS)
    found = [name for name in names if (folder / name).exists()]
    return found + sorted(p.name for p in folder.glob(EVALUATION_FILES) if p.name not in found)


def remove_model_record(folder: Path, names: list[str], whose: str = "model") -> str:
    """Remove `names` (of `model_record`) from `folder`; returns the line that says so, of the earlier `whose`."""
    for name in names:
        path = folder / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()
        if path.parent != folder and not any(path.parent.iterdir()):  # runs/ without runs/training
            path.parent.rmdir()
    return f"--overwrite: removed the earlier {whose}'s {', '.join(names)} from {folder}"


# What `TrainingConfig.validate` requires of numeric fields, rule after rule: the words of its error, the test, the
# fields (a null, where a field allows one, is not tested).
NUMBER_RULES = (
    ("must be a finite number", math.isfinite, "learning_rate warmup_epochs weight_decay momentum clip_grad_norm"),
    ("must be a finite number", math.isfinite, "horizontal_flip mixup_alpha cutmix_alpha label_smoothing"),
    ("must be a finite number", math.isfinite, "save_every_minutes"),
    ("must be at least 1", lambda v: v >= 1, "epochs batch_size gradient_accumulation_steps eval_batch_size"),
    ("must be at least 1", lambda v: v >= 1, "eval_every_epochs log_every_steps save_every_epochs save_every_steps"),
    ("must be at least 1", lambda v: v >= 1, "keep_checkpoints shuffle_buffer"),
    ("must be positive", lambda v: v > 0, "learning_rate"),
    ("must be positive (null turns it off)", lambda v: v > 0, "save_every_minutes clip_grad_norm"),
    ("must be within 0…1", lambda v: 0 <= v <= 1, "horizontal_flip label_smoothing"),
    ("must not be negative", lambda v: v >= 0, "warmup_epochs weight_decay momentum mixup_alpha cutmix_alpha"),
    ("must not be negative", lambda v: v >= 0, "random_crop_padding num_workers"),
)

# What `TrainingConfig.validate` requires of the fields that take one of a few names.
CHOICES = {
    "optimizer": ("adamw", "sgd"),
    "mixed_precision": ("auto", "no", "bf16", "fp16"),
    "compile_mode": COMPILE_MODES,
}


# The flag of every command that reads a dataset to train or evaluate on.
SKIP_UNREADABLE_HELP = (
    "leave out rows whose image cannot be read, counted and listed in the output folder (*unreadable.jsonl), "
    "rather than stop at the first; a folder's image files are checked before the first step either way"
)


@dataclass
class TrainingConfig:
    """Everything a training run needs; the defaults are the offline first run on the embedded digits."""

    model: str = field(default=DEFAULT_MODEL, metadata={"help": "preset name, folder or Hub id"})
    model_overrides: dict | None = field(
        default=None,
        metadata={
            "help": "config fields to override, as JSON, added to those of the recipe or file; null removes one "
            "(default: the small widths for the default model)"
        },
    )
    dataset: str = field(default="digits", metadata={"help": "'digits', a Hub id, or a local folder/parquet file"})
    image_column: str | None = None
    label_column: str | None = None
    train_split: str = "train"
    eval_split: str = field(
        default="test", metadata={"help": "a split name, or holdout[:fraction] of the training split (seeded)"}
    )
    output_dir: str = "outputs/alternet-digits"

    epochs: int = 6
    warmup_epochs: float = 1.0
    batch_size: int = field(default=64, metadata={"help": "per process, per optimizer step before accumulation"})
    gradient_accumulation_steps: int = 1
    optimizer: str = field(default="adamw", metadata={"help": "adamw or sgd"})
    learning_rate: float = 2e-3
    weight_decay: float = 0.05
    momentum: float = 0.9
    clip_grad_norm: float | None = 5.0

    random_crop_padding: int = field(default=2, metadata={"help": "0 disables RandomCrop"})
    horizontal_flip: float = field(default=0.0, metadata={"help": "probability; digits must not be mirrored"})
    rand_augment: str | None = field(default=None, metadata={"help": "timm string, e.g. rand-m9-n2-mstd1.0"})
    mixup_alpha: float = 0.0
    cutmix_alpha: float = 0.0
    label_smoothing: float = 0.0

    eval_batch_size: int = 256
    eval_every_epochs: int = field(default=1, metadata={"help": "evaluate every N epochs (the last one always)"})
    mixed_precision: str = field(default="auto", metadata={"help": "auto (bf16 on GPU), no, bf16, fp16"})
    channels_last: bool = True
    compile: bool | None = field(
        default=None, metadata={"help": "torch.compile the training and evaluation steps (default: on CUDA only)"}
    )
    compile_mode: str = field(
        default="auto",
        metadata={
            "help": f"torch.compile mode: {', '.join(COMPILE_MODES)} (auto: CUDA graphs, i.e. reduce-overhead, on one "
            "GPU without gradient accumulation; default otherwise)"
        },
    )
    num_workers: int = field(default=0, metadata={"help": "data-loading processes per training process"})
    streaming: bool = field(
        default=False,
        metadata={
            "help": "train from the training split as a stream, read as it is needed and never prepared on disk, "
            "each process reading its own files (the evaluation split is prepared)"
        },
    )
    shuffle_buffer: int = field(
        default=1_000, metadata={"help": "rows each data-loading process shuffles within, with --streaming"}
    )
    skip_unreadable: bool = field(default=False, metadata={"help": SKIP_UNREADABLE_HELP})
    seed: int = 0
    deterministic: bool = field(default=False, metadata={"help": "deterministic algorithms (for exact resume checks)"})
    log_every_steps: int = field(
        default=20, metadata={"help": "log the mean loss, and check that it is finite, every N batches"}
    )
    save_every_epochs: int = field(default=1, metadata={"help": "checkpoint after every N-th epoch (and the last)"})
    save_every_minutes: float | None = field(
        default=None, metadata={"help": "also checkpoint inside an epoch once N minutes passed since the last one"}
    )
    save_every_steps: int | None = field(default=None, metadata={"help": "also checkpoint every N optimizer steps"})
    keep_checkpoints: int = 2

    def __post_init__(self):
        if self.model_overrides is None:
            self.model_overrides = dict(DEFAULT_MODEL_OVERRIDES) if self.model == DEFAULT_MODEL else {}

    @classmethod
    def fields_help(cls) -> dict[str, str]:
        return {f.name: f.metadata.get("help", "") for f in dataclasses.fields(cls)}

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def save(self, path: str | Path) -> None:
        write_json(path, self.to_dict())

    def validate(self) -> None:
        """Types and ranges of every field, with errors that name the field (configs come from JSON files)."""
        hints = typing.get_type_hints(TrainingConfig)
        for f in dataclasses.fields(self):
            value, allowed = getattr(self, f.name), typing.get_args(hints[f.name]) or (hints[f.name],)
            if float in allowed:
                allowed = (*allowed, int)
            if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
                names = " or ".join(
                    "null" if a is type(None) else a.__name__ for a in allowed if a is not int or float not in allowed
                )
                raise ValueError(f"TrainingConfig.{f.name} must be {names}, got {value!r}")
        for requirement, holds, names in NUMBER_RULES:
            for name in names.split():
                value = getattr(self, name)
                if value is not None and not holds(value):
                    raise ValueError(f"TrainingConfig.{name} {requirement}, got {value}")
        for name, choices in CHOICES.items():
            if getattr(self, name) not in choices:
                raise ValueError(
                    f"TrainingConfig.{name} must be one of {', '.join(choices)}, got {getattr(self, name)!r}"
                )
        if (self.mixup_alpha > 0 or self.cutmix_alpha > 0) and self.batch_size % 2:
            raise ValueError("Mixup/CutMix pair samples within a batch: TrainingConfig.batch_size must be even")
        if self.rand_augment is not None:
            from ..data.augmentation import check_rand_augment

            try:
                check_rand_augment(self.rand_augment)
            except ValueError as error:
                raise ValueError(f"TrainingConfig.rand_augment: {error}") from None


# How often a long GPU run evaluates and checkpoints (`scripts/benchmark.py training` counts the bytes it writes).
GPU_RUN_CADENCE = dict(eval_every_epochs=5, save_every_epochs=10, save_every_minutes=10.0)
# The paper's recipe for every CIFAR preset (docs/paper.md §4): AdamW lr 1.25e-4 at batch 96. `batch_size`
# is per process and the learning rate is not rescaled: on several GPUs, scale it with the global batch.
PAPER_RECIPE = dict(
    epochs=305,
    warmup_epochs=5,
    batch_size=96,
    optimizer="adamw",
    learning_rate=1.25e-4,
    weight_decay=0.05,
    clip_grad_norm=5.0,
    random_crop_padding=4,
    horizontal_flip=0.5,
    rand_augment="rand-m9-n2-mstd1.0",
    mixup_alpha=1.0,
    cutmix_alpha=0.8,
    label_smoothing=0.1,
    model_overrides={"drop_path_rate": 0.1},
    num_workers=8,  # augmentation must keep up with a GPU
    **GPU_RUN_CADENCE,
)
# A plain baseline: SGD with momentum, crop and flip only (the paper's crop, flip, workers and cadence).
SGD_RECIPE = dict(
    PAPER_RECIPE,
    epochs=200,
    warmup_epochs=1,
    batch_size=128,
    optimizer="sgd",
    learning_rate=0.1,
    momentum=0.9,
    weight_decay=5e-4,
    clip_grad_norm=None,
    rand_augment=None,
    mixup_alpha=0.0,
    cutmix_alpha=0.0,
    label_smoothing=0.0,
    model_overrides={},
)
DATASET_SOURCES = {"cifar10": "uoft-cs/cifar10", "cifar100": "uoft-cs/cifar100", "imagenet": "ILSVRC/imagenet-1k"}
# ImageNet's test split has no labels; its training split is streamed, not prepared on every node.
DATASET_SETTINGS = {"imagenet": dict(eval_split="validation", streaming=True)}


def recipe_config(preset: str, recipe: str = "paper", **overrides) -> TrainingConfig:
    """The recipe (`paper` or `sgd`) for a zoo preset such as `alternet-50-cifar100`, on its Hub dataset."""
    recipes = {"paper": PAPER_RECIPE, "sgd": SGD_RECIPE}
    if recipe not in recipes:
        raise ValueError(f"unknown recipe {recipe!r}: choose one of {sorted(recipes)}")
    name = preset.rsplit("-", 1)[-1]
    if name not in DATASET_SOURCES:
        raise ValueError(f"{preset!r} names no known dataset (its last part must be one of {sorted(DATASET_SOURCES)})")
    fields = {**recipes[recipe], "model": preset, "dataset": DATASET_SOURCES[name], **DATASET_SETTINGS.get(name, {})}
    fields["output_dir"] = f"outputs/{preset}-{recipe}"
    return TrainingConfig(**{**fields, **overrides})


def build_optimizer(config: TrainingConfig, model, *, fused: bool = False):
    """Weight decay on weights only: biases and norm parameters (1-D tensors) are not decayed. `fused=True` (on
    CUDA): one kernel per step, without the host reads of the step counters that the foreach implementation makes."""
    import torch

    decay = [p for p in model.parameters() if p.requires_grad and p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim <= 1]
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    implementation = {"fused": True} if fused else {}
    if config.optimizer == "sgd":
        return torch.optim.SGD(
            groups, lr=config.learning_rate, momentum=config.momentum, nesterov=True, **implementation
        )
    return torch.optim.AdamW(groups, lr=config.learning_rate, **implementation)


def build_scheduler(config: TrainingConfig, optimizer, steps_per_epoch: int):
    """Linear warm-up per step, then cosine to zero, over the whole run."""
    from transformers import get_cosine_schedule_with_warmup

    return get_cosine_schedule_with_warmup(
        optimizer,
        num_warmup_steps=round(config.warmup_epochs * steps_per_epoch),
        num_training_steps=config.epochs * steps_per_epoch,
    )
