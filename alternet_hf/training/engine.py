"""The training engine on Accelerate: one code path for a CPU, one GPU, or many processes and nodes.

`train(config)` runs a `TrainingConfig` phase by phase (`TrainingSession`) into `output_dir`. The hot path is built
for a GPU: normalisation, Mixup/CutMix and the loss run inside one (compiled) step, and the host waits for the device
only every `log_every_steps` batches; checkpoints are atomic, so a kill at any moment leaves one to resume from
(docs/training.md lists the outputs).
"""

import json
import math
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.utils import (
    DataLoaderConfiguration,
    DistributedType,
    ProjectConfiguration,
    broadcast_object_list,
    set_seed,
)
from torch import nn
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from ..data.augmentation import (
    BatchMixer,
    SeededAugmentation,
    channel_statistics,
    eval_transform,
    mix_batch,
    normalize_images,
    train_transform,
)
from ..data.collate import collate_images, with_transform
from ..data.rows import UNREADABLE_FILE, UnreadableRows
from ..data.sources import load_train_and_eval
from ..data.streaming import StreamBrokenError, StreamLoader, stream_loader
from ..metrics.classification import classification_metrics, plot_reliability_diagram, reliability_diagram
from ..models.presets import create_classifier
from ..utils import padded_to_first_batch, quiet_progress_bars, write_atomically, write_json
from ..utils.run_lock import hold_folder
from .recipe import TrainingConfig, build_optimizer, build_scheduler, model_record, remove_model_record

# What a second run on a folder in use is told (`run_lock.hold_folder`): resuming beside a live run would train twice.
RUNNING_ADVICE = "wait for it to end, or stop it and then continue it with --resume"
# What only a run that finished writes into its output folder (`best/` holds a metrics.json of its own).
FINISHED_OUTPUTS = ("metrics.json", "history.json")


@dataclass
class TrainState:
    """Where a run stands; saved as JSON inside every checkpoint."""

    epoch: int = 0  # the epoch in progress, from 0
    step_in_epoch: int = 0  # batches of that epoch already trained on
    global_step: int = 0  # optimizer steps so far
    best_accuracy: float = -1.0
    history: list = field(default_factory=list)  # one dict per finished epoch
    scheduler: dict = field(default_factory=dict)  # the LR schedule's state_dict: plain numbers, no pickle


@dataclass
class TrainResult:
    model: torch.nn.Module  # the trained model, unwrapped from Accelerate
    output_dir: Path
    metrics: dict  # of the last evaluation
    best_accuracy: float
    history: list
    logits: torch.Tensor | None = None  # of the last evaluation, one row per image (None where none ran)
    labels: torch.Tensor | None = None


# Where Accelerate's backward, clipping and optimizer wrappers only call torch (`TrainingSession.train_batches`).
DIRECT_TORCH_CALLS = (DistributedType.NO, DistributedType.MULTI_CPU, DistributedType.MULTI_GPU)


class NonFiniteLossError(ValueError):
    """The loss (or the weights) stopped being finite: the run cannot go on."""


def training_loss(logits: torch.Tensor, targets: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
    """The engine's loss: cross-entropy against class indices or soft targets, with label smoothing, in float32
    (timm's SoftTargetCrossEntropy on mixed targets). Not the model's, which checks the labels' range (a host sync).
    """
    return F.cross_entropy(logits.float(), targets, label_smoothing=label_smoothing)


def build_steps(
    model, model_config, device, *, label_smoothing: float = 0.0, channels_last: bool, compile_mode: str | None
):
    """The training step `(uint8 images, labels, mix parameters or None) -> loss` and the evaluation step
    `(uint8 images) -> float32 logits` of `model` (its `model_config`'s normalisation and labels, on `device`), each
    one graph under `torch.compile` when `compile_mode` is given."""
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    mean, std = channel_statistics(model_config.image_mean, model_config.image_std, device=device)
    num_labels = model_config.num_labels

    def train_step(pixel_values, labels, mix_parameters):
        images = normalize_images(pixel_values, mean, std)
        if mix_parameters is not None:
            images, labels = mix_batch(images, labels, mix_parameters, num_labels)
        logits = model(images.contiguous(memory_format=memory_format)).logits
        return training_loss(logits, labels, label_smoothing)

    def eval_step(pixel_values):
        images = normalize_images(pixel_values, mean, std)
        return model(images.contiguous(memory_format=memory_format)).logits.float()

    if compile_mode is None:
        return train_step, eval_step
    return torch.compile(train_step, mode=compile_mode), padded_to_first_batch(
        torch.compile(eval_step, mode=compile_mode)
    )


class LossMonitor:
    """The losses of the batches since the last read, kept on the device (no host sync per batch). `read()` (one
    sync) checks them and returns their mean; a loss that is not finite stops the run, naming its step."""

    def __init__(self, accelerator: Accelerator, capacity: int, batches_per_epoch: int):
        self.accelerator, self.batches_per_epoch = accelerator, batches_per_epoch
        self.losses = torch.zeros(capacity, device=accelerator.device)
        self.positions: list[tuple[int, int, int]] = []  # (epoch, batch in epoch, optimizer step) of each loss
        self.epoch_sum, self.epoch_count = 0.0, 0

    @property
    def full(self) -> bool:
        return len(self.positions) == len(self.losses)

    def add(self, loss: torch.Tensor, state: TrainState) -> None:
        self.losses[len(self.positions)] = loss.detach()
        self.positions.append((state.epoch, state.step_in_epoch, state.global_step))

    def read(self) -> float | None:
        """The mean loss since the last read (over all processes), or None when there was no batch."""
        if not self.positions:
            return None
        count = len(self.positions)
        losses = self.accelerator.reduce(self.losses[:count], reduction="mean").tolist()  # the sync
        for value, (epoch, batch, step) in zip(losses, self.positions):
            if not math.isfinite(value):
                raise NonFiniteLossError(
                    f"the loss is {value} at optimizer step {step + 1} (epoch {epoch + 1}, batch {batch + 1} of "
                    f"{self.batches_per_epoch})"
                )
        self.positions.clear()
        self.epoch_sum, self.epoch_count = self.epoch_sum + sum(losses), self.epoch_count + count
        return sum(losses) / count

    def epoch_mean(self) -> float:
        mean = self.epoch_sum / max(self.epoch_count, 1)
        self.epoch_sum, self.epoch_count = 0.0, 0
        return mean


class CheckpointManager:
    """Atomic Accelerate checkpoints under `root`, each with a manifest of its files' sizes; the newest is named
    by the file `root/latest`. A checkpoint with any file missing, cut short or unreadable counts as damaged."""

    MANIFEST = "manifest.json"

    def __init__(self, root: Path, keep: int):
        self.root, self.keep = Path(root), keep

    def save(self, accelerator: Accelerator, state: TrainState) -> Path:
        final = self.root / f"checkpoint-{state.global_step:08d}-{state.epoch:04d}"
        partial = final.with_name(final.name + ".partial")
        if accelerator.is_main_process:
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir(parents=True)
        accelerator.wait_for_everyone()
        accelerator.save_state(str(partial))
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            (partial / "train_state.json").write_text(json.dumps(asdict(state)))
            sizes = {p.name: p.stat().st_size for p in sorted(partial.iterdir()) if p.is_file()}
            (partial / self.MANIFEST).write_text(json.dumps(sizes, indent=1))
            shutil.rmtree(final, ignore_errors=True)
            os.replace(partial, final)
            write_atomically(self.root / "latest", final.name)
            self._prune(keep=final)
        accelerator.wait_for_everyone()
        return final

    def newest_first(self) -> list[Path]:
        """Every checkpoint written to the end (renamed into place), the furthest in training first."""
        found = [p for p in self.root.glob("checkpoint-*") if p.is_dir() and "." not in p.name]
        return sorted(found, key=_progress, reverse=True)

    def latest(self) -> Path | None:
        """The checkpoint `latest` names, else (a pointer lost or dangling) the furthest one."""
        pointer = self.root / "latest"
        if pointer.exists():
            path = self.root / pointer.read_text().strip()
            if path.is_dir():
                return path
        found = self.newest_first()
        return found[0] if found else None

    def problem(self, path: Path) -> str | None:
        """What makes the checkpoint `path` unusable (a file missing, of another size than written, or unreadable),
        or None. Accelerate alone would resume from a cut-short RNG state with a log line, and drift."""
        from accelerate.utils import load

        manifest = path / self.MANIFEST
        try:
            sizes = json.loads(manifest.read_text())
        except FileNotFoundError:
            return f"its {self.MANIFEST} is missing"
        except ValueError:
            return f"its {self.MANIFEST} is unreadable"
        for name, size in sizes.items():
            if not (path / name).is_file():
                return f"{name} is missing"
            if (path / name).stat().st_size != size:
                return f"{name} has {(path / name).stat().st_size:,} bytes where {size:,} were written"
        try:
            TrainState(**json.loads((path / "train_state.json").read_text()))
        except (OSError, ValueError, TypeError) as error:
            return f"train_state.json is unreadable ({type(error).__name__}: {error})"
        for rng_file in sorted(path.glob("random_states_*.pkl")):
            try:
                load(rng_file)
            except Exception as error:  # any failure to unpickle means the file is damaged
                return f"{rng_file.name} is unreadable ({type(error).__name__})"
        return None

    def _prune(self, keep: Path) -> None:
        checkpoints = [p for p in reversed(self.newest_first()) if p != keep]
        unfinished = list(self.root.glob("checkpoint-*.partial"))  # left by a kill during a save
        for old in checkpoints[: max(len(checkpoints) - (self.keep - 1), 0)] + unfinished:
            shutil.rmtree(old, ignore_errors=True)


def _progress(path: Path) -> tuple[int, int]:
    """(optimizer step, epoch) of a checkpoint: from its train state, else (damaged) from its name."""
    try:
        state = json.loads((path / "train_state.json").read_text())
        return state["global_step"], state["epoch"]
    except (OSError, ValueError, KeyError, TypeError):
        match = re.fullmatch(r"checkpoint-(\d+)-(\d+)", path.name)
        return (int(match[1]), int(match[2])) if match else (-1, -1)


# The config fields `load_train_and_eval` reads, by its keyword arguments' names.
DATA_FIELDS = ("train_split", "eval_split", "image_column", "label_column", "seed", "streaming")


def unreadable_rows(config: TrainingConfig) -> UnreadableRows | None:
    """Where a run with `skip_unreadable` lists the rows it left out; None: the first unreadable row stops it."""
    return UnreadableRows(Path(config.output_dir) / UNREADABLE_FILE) if config.skip_unreadable else None


def build_model_and_data(config: TrainingConfig, *, pin_memory: bool = False):
    """The model (labels named after the dataset's classes), the training augmentation, both data loaders (of uint8
    images, normalised on the device) and the splits (`load_train_and_eval`)."""
    splits = load_train_and_eval(config.dataset, **{name: getattr(config, name) for name in DATA_FIELDS})
    train_data, eval_data = splits.train, splits.eval
    model = create_classifier(config.model, train_data.features["label"].names, **config.model_overrides)
    size, mean, std = model.config.image_size, model.config.image_mean, model.config.image_std
    augment = train_transform(
        size,
        mean,
        std,
        crop_padding=config.random_crop_padding,
        horizontal_flip=config.horizontal_flip,
        rand_augment=config.rand_augment,
        normalize=False,
    )
    augmentation = SeededAugmentation(augment, config.seed)
    train_source = f"{config.dataset} (split {config.train_split!r})"
    eval_source = f"{config.dataset} (split {config.eval_split!r})"
    unreadable = unreadable_rows(config)
    eval_transforms = eval_transform(size, mean, std, normalize=False)
    eval_data = with_transform(eval_data, eval_transforms, source=eval_source, unreadable=unreadable)
    # Own generators: creating a loader iterator must not draw from the global RNG, or a resumed run
    # (which creates one more iterator) would drift from the uninterrupted one.
    workers = config.num_workers
    options = dict(
        collate_fn=collate_images, num_workers=workers, persistent_workers=workers > 0, pin_memory=pin_memory
    )
    train_rng, eval_rng = (torch.Generator().manual_seed(config.seed + i) for i in range(2))
    if config.streaming:
        train_loader = stream_loader(
            config, train_data, augmentation, source=train_source, pin_memory=pin_memory, unreadable=unreadable
        )
    else:
        train_data = with_transform(train_data, augmentation, source=train_source, unreadable=unreadable)
        if len(train_data) < config.batch_size:
            raise ValueError(f"{len(train_data)} training images are fewer than one batch ({config.batch_size})")
        train_loader = DataLoader(
            train_data, batch_size=config.batch_size, shuffle=True, drop_last=True, generator=train_rng, **options
        )
    eval_loader = DataLoader(eval_data, batch_size=config.eval_batch_size, generator=eval_rng, **options)
    return model, augmentation, train_loader, eval_loader, splits


@torch.no_grad()
def evaluate(model, loader, accelerator: Accelerator, eval_step) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """The paper's metrics on `loader` (gathered over processes), plus all logits and labels, from `eval_step`
    (`build_steps`'s, which normalises the loader's uint8 images)."""
    model.eval()
    all_logits, all_labels = [], []
    for batch in tqdm(loader, desc="evaluate", leave=False, disable=not accelerator.is_local_main_process):
        logits = eval_step(batch["pixel_values"])
        logits, labels = accelerator.gather_for_metrics((logits, batch["labels"]))
        all_logits.append(logits.cpu())
        all_labels.append(labels.cpu())
    logits, labels = torch.cat(all_logits), torch.cat(all_labels)
    return classification_metrics(logits.numpy(), labels.numpy()), logits, labels


def plot_training_curves(history: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    evaluated = [h for h in history if "eval_accuracy" in h]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    left.plot([h["epoch"] for h in history], [h["train_loss"] for h in history], marker="o", label="train loss")
    left.plot([h["epoch"] for h in evaluated], [h["eval_nll"] for h in evaluated], marker="o", label="eval NLL")
    left.set(xlabel="epoch", ylabel="loss")
    left.legend()
    right.plot(
        [h["epoch"] for h in evaluated], [100 * h["eval_accuracy"] for h in evaluated], marker="o", color="tab:green"
    )
    right.set(xlabel="epoch", ylabel="eval accuracy (%)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def save_reliability_diagram(logits: torch.Tensor, labels: torch.Tensor, path: Path) -> None:
    import matplotlib.pyplot as plt

    ax = plot_reliability_diagram(reliability_diagram(logits.numpy(), labels.numpy()))
    ax.figure.savefig(path, dpi=120)
    plt.close(ax.figure)


def resolve_compile_mode(config: TrainingConfig, accelerator: Accelerator) -> str:
    """torch.compile's mode for `config.compile_mode`; "auto" is CUDA graphs ("reduce-overhead") where one process
    on a GPU steps after every batch, whose step is launch-bound (docs/benchmarks.md), else the default mode, as CUDA
    graphs have not run with gradient accumulation or DDP."""
    if config.compile_mode != "auto":
        return config.compile_mode
    one_step_per_batch = accelerator.num_processes == 1 and config.gradient_accumulation_steps == 1
    return "reduce-overhead" if accelerator.device.type == "cuda" and one_step_per_batch else "default"


def train(config: TrainingConfig, *, resume: bool = False, overwrite: bool = False) -> TrainResult:
    """Run the training `config` describes, from the latest usable checkpoint with `resume`, over an earlier run's
    outputs with `overwrite`."""
    config.validate()
    if resume and overwrite:
        raise ValueError("resume and overwrite exclude each other: continue the run, or start it again")
    session = TrainingSession(config)
    with hold_folder(config.output_dir, advice=RUNNING_ADVICE):
        session.claim_output_dir(resume=resume, overwrite=overwrite)
        session.build()
        session.start(resume=resume)
        session.train_epochs()
        return session.finish()


class TrainingSession:
    """One run of `train`, phase by phase: the Accelerator and seeds (here), the output folder claimed, everything
    built, the state restored or started, the epochs, the final outputs."""

    def __init__(self, config: TrainingConfig):
        self.config, self.output_dir = config, Path(config.output_dir)
        precision = config.mixed_precision
        if precision == "auto":
            precision = "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "no"
        project = ProjectConfiguration(project_dir=str(self.output_dir), logging_dir=str(self.output_dir / "logs"))
        loading = DataLoaderConfiguration(use_seedable_sampler=True, data_seed=config.seed, non_blocking=True)
        self.accelerator = Accelerator(
            mixed_precision=precision,
            gradient_accumulation_steps=config.gradient_accumulation_steps,
            log_with="tensorboard",
            project_config=project,
            dataloader_config=loading,
        )
        self.on_cuda = self.accelerator.device.type == "cuda"
        set_seed(config.seed)
        if config.deterministic:
            torch.use_deterministic_algorithms(True)
        if self.on_cuda:
            torch.backends.cudnn.benchmark = not config.deterministic  # fixed shapes: pick the fastest kernels once
        self.checkpoints = CheckpointManager(self.output_dir / "checkpoints", keep=config.keep_checkpoints)
        self.state = TrainState()
        self.timing = dict(data=0.0, checkpoint=0.0)
        self.record_closed: float | None = None  # when the last epoch's record was (`run_epoch`)
        self.metrics, self.logits, self.labels = {}, None, None  # of the last evaluation

    def claim_output_dir(self, *, resume: bool, overwrite: bool) -> None:
        """Refuse to write over an earlier run or model (unless `overwrite`: then remove its `model_record`, and only
        that). With `resume`, a run killed before its first complete checkpoint (never finished, nothing to resume)
        starts again."""
        accelerator, output_dir, checkpoints = self.accelerator, self.output_dir, self.checkpoints
        earlier = model_record(output_dir)  # a run's outputs, or a fine-tuned or evaluated model's
        has_checkpoints = bool(checkpoints.newest_first())
        finished = any((output_dir / name).exists() for name in FINISHED_OUTPUTS)
        if not earlier or (resume and (has_checkpoints or not finished)):
            if resume and not has_checkpoints:
                before = " (the run there stopped before its first)" if earlier else ""
                accelerator.print(f"no checkpoint in {checkpoints.root}{before}: starting from scratch")
            return
        if not overwrite:
            if has_checkpoints:
                raise FileExistsError(
                    f"{output_dir} holds checkpoints of an earlier run: continue it with --resume (resume=True), start "
                    "it again with --overwrite (overwrite=True), or choose another --output-dir"
                )
            what = "has no checkpoint to resume from but holds" if resume else "holds"
            raise FileExistsError(
                f"{output_dir} {what} an earlier run ({', '.join(earlier)}), which this run would overwrite: replace "
                "it with --overwrite (overwrite=True), or choose another --output-dir"
            )
        accelerator.wait_for_everyone()  # every process has looked before anything is removed
        if accelerator.is_main_process:
            accelerator.print(remove_model_record(output_dir, earlier, "run"))
        accelerator.wait_for_everyone()

    def build(self, model_init: Callable[[nn.Module], nn.Module] | None = None) -> None:
        """Data, model, optimizer and schedule prepared by Accelerate; the steps; the batch mixer, if any.
        `model_init`: the model to train in place of the config's, given the config's (a benchmark's peer: a module
        whose output has `.logits` and which carries the config's `config`)."""
        config, accelerator = self.config, self.accelerator
        model, self.augmentation, train_loader, eval_loader, self.splits = build_model_and_data(
            config, pin_memory=self.on_cuda
        )
        if model_init is not None:
            model = model_init(model)
        if self.splits.holdout is not None:
            accelerator.print(self.splits.holdout_note(config.dataset, config.train_split))
        if config.channels_last:
            model = model.to(memory_format=torch.channels_last)
        optimizer = build_optimizer(config, model, fused=self.on_cuda)
        if isinstance(train_loader, StreamLoader):  # already this process's part, and on its device
            accelerator.print(train_loader.stream.plan.describe())
            self.model, self.optimizer, self.eval_loader = accelerator.prepare(model, optimizer, eval_loader)
            self.train_loader = train_loader
        else:
            self.model, self.optimizer, self.train_loader, self.eval_loader = accelerator.prepare(
                model, optimizer, train_loader, eval_loader
            )
        # Accelerate also steps on an epoch's last, incomplete accumulation window.
        steps_per_epoch = math.ceil(len(self.train_loader) / config.gradient_accumulation_steps)
        # Stepped by hand, once per optimizer step; on the optimizer Accelerate wraps, whose `step` it counts.
        self.scheduler = build_scheduler(config, self.optimizer.optimizer, steps_per_epoch)
        model_config = accelerator.unwrap_model(self.model).config
        compiled = config.compile if config.compile is not None else self.on_cuda
        self.compile_mode = resolve_compile_mode(config, accelerator) if compiled else None
        self.train_step, self.eval_step = build_steps(
            self.model,
            model_config,
            accelerator.device,
            label_smoothing=config.label_smoothing,
            channels_last=config.channels_last,
            compile_mode=self.compile_mode,
        )
        mixes = config.mixup_alpha > 0 or config.cutmix_alpha > 0
        mixing = dict(mixup_alpha=config.mixup_alpha, cutmix_alpha=config.cutmix_alpha, seed=config.seed)
        self.mixer = BatchMixer(**mixing, image_size=model_config.image_size) if mixes else None
        self.parameters = [p for p in self.model.parameters() if p.requires_grad]
        self.monitor = LossMonitor(accelerator, config.log_every_steps, batches_per_epoch=len(self.train_loader))

    def start(self, *, resume: bool) -> None:
        """The state resumed (else a fresh one); the run's settings and hold-out rows written; the trackers started."""
        config, accelerator = self.config, self.accelerator
        if resume:
            self.state = self.resumed_state() or self.state
        if accelerator.is_main_process:
            config.save(self.output_dir / "training_config.json")
            self.splits.write_holdout(self.output_dir, config.dataset, config.train_split)
        hparams = config.to_dict()  # TensorBoard takes scalars and strings only
        hparams = {k: v if isinstance(v, int | float | str | bool) else json.dumps(v) for k, v in hparams.items()}
        accelerator.init_trackers("train", config=hparams)
        last_evaluation = next((h for h in reversed(self.state.history) if "eval_accuracy" in h), {})
        self.metrics = {k[len("eval_") :]: v for k, v in last_evaluation.items() if k.startswith("eval_")}
        self.last_save = time.monotonic()

    def resumed_state(self) -> TrainState | None:
        """Load the furthest checkpoint that loads completely (setting damaged ones aside) and return its state."""
        accelerator, checkpoints, config = self.accelerator, self.checkpoints, self.config
        candidates = checkpoints.newest_first()
        if not candidates:
            return None
        _check_resumable(config, Path(config.output_dir) / "training_config.json")
        damaged = []
        for path in candidates:
            problem = checkpoints.problem(path)
            if problem is None:
                self.check_world_size(path)
                try:
                    accelerator.load_state(str(path))
                except Exception as error:  # a file that passed the checks and still does not load
                    problem = f"it does not load ({type(error).__name__}: {error})"
            if problem is None:
                break
            damaged.append((path, problem))
        else:
            details = "; ".join(f"{p.name}: {problem}" for p, problem in damaged)
            raise ValueError(
                f"no usable checkpoint in {checkpoints.root} ({details}). Start the run again with --overwrite, or "
                "in another --output-dir"
            )
        accelerator.wait_for_everyone()
        for old, problem in damaged:
            aside = next(
                old.with_name(f"{old.name}.damaged{suffix}")
                for suffix in ("", *(f"-{i}" for i in range(2, 10_000)))
                if not old.with_name(f"{old.name}.damaged{suffix}").exists()
            )
            accelerator.print(f"checkpoint {old.name} is damaged: {problem}; set aside as {aside.name}")
            if accelerator.is_main_process:
                os.replace(old, aside)
        state = TrainState(**json.loads((path / "train_state.json").read_text()))
        self.scheduler.load_state_dict(state.scheduler)
        earlier = " (the previous complete checkpoint)" if damaged else ""
        accelerator.print(f"resumed from {path}{earlier} (epoch {state.epoch + 1}, step {state.global_step})")
        if state.epoch >= config.epochs:  # killed after its last checkpoint: only the final outputs remain to write
            accelerator.print(f"{config.output_dir} has finished its {config.epochs} epochs: nothing left to train")
        return state

    def check_world_size(self, path: Path) -> None:
        """Each process saves its own RNG state, so a checkpoint's RNG files count the processes that wrote it."""
        written_by = len(list(path.glob("random_states_*.pkl")))
        if written_by and written_by != self.accelerator.num_processes:
            batch, now = self.config.batch_size, self.accelerator.num_processes
            raise ValueError(
                f"{path} was written by {written_by} processes (a global batch of {written_by} × {batch} = "
                f"{written_by * batch} images); this run has {now} (a global batch of {now * batch}), which changes "
                "the batches per epoch, the learning-rate schedule and every step after, so it would not continue the "
                f"same run. Resume it on {written_by} processes (`accelerate launch --num_processes {written_by} -m "
                "alternet_hf.cli.train ... --resume`), or start a new run with --overwrite or in another --output-dir"
            )

    def train_epochs(self) -> None:
        """Every epoch left; a loss or weights that stop being finite end the run, the last good checkpoint kept."""
        try:
            while self.state.epoch < self.config.epochs:
                self.run_epoch()
        except NonFiniteLossError as error:
            self.accelerator.end_training()
            raise NonFiniteLossError(self.diverged_message(error)) from None
        except StreamBrokenError as error:
            raise StreamBrokenError(f"{error}. {self.stop_at_break()}") from error.__cause__

    def diverged_message(self, error: NonFiniteLossError) -> str:
        """Why the run stopped, what is kept, and what usually helps."""
        config, latest = self.config, self.checkpoints.latest()
        kept = f"the last good checkpoint, {latest}, is kept" if latest else "no checkpoint had been written before it"
        clipping = " or gradient clipping (--clip-grad-norm 5)" if config.clip_grad_norm is None else ""
        return (
            f"training stopped: {error}, so nothing after it was saved; {kept}. A lower --learning-rate (this run: "
            f"{config.learning_rate:g}){clipping} usually helps: start again with --overwrite, or in another "
            "--output-dir"
        )

    def stop_at_break(self) -> str:
        """Where a run whose stream broke can resume: one process checkpoints the batches it trained (between two
        optimizer steps; several processes cannot, as the others wait inside a step); otherwise the last checkpoint."""
        state, accelerator = self.state, self.accelerator
        between_steps = state.step_in_epoch % self.config.gradient_accumulation_steps == 0
        if accelerator.num_processes == 1 and between_steps and state.step_in_epoch > 0:
            self.save_checkpoint()
            accelerator.end_training()
            return (
                f"Checkpointed at batch {state.step_in_epoch} of epoch {state.epoch + 1}: once the data reads again, "
                "the same command with --resume continues from there"
            )
        accelerator.end_training()
        latest = self.checkpoints.latest()
        if latest is None:
            return (
                "No checkpoint was written yet: once the data reads again, the same command with --resume starts over"
            )
        return f"Once the data reads again, the same command with --resume continues from {latest}"

    def run_epoch(self) -> None:
        config, accelerator, state = self.config, self.accelerator, self.state
        # An epoch's record spans the time since the previous one closed: the checkpoint that ends an epoch, which
        # holds the epoch's record, is counted in the next one.
        started = self.record_closed or time.perf_counter()
        self.timing["data"] = 0.0
        self.train_loader.set_epoch(state.epoch)
        self.augmentation.epoch = state.epoch  # before the loader's iterator exists: its workers read it
        resumed_at = state.step_in_epoch
        loader = self.train_loader
        if resumed_at:
            streamed = isinstance(loader, StreamLoader)
            loader = loader.starting_at(resumed_at) if streamed else accelerator.skip_first_batches(loader, resumed_at)
        progress = tqdm(
            total=len(self.train_loader),
            initial=state.step_in_epoch,
            desc=f"epoch {state.epoch + 1}/{config.epochs}",
            disable=not accelerator.is_local_main_process,
        )
        try:
            self.train_batches(loader, progress)
        finally:
            progress.close()  # before any error message
        self.read_losses()
        record = {
            "epoch": state.epoch + 1,
            "train_loss": self.monitor.epoch_mean(),
            "lr": self.scheduler.get_last_lr()[0],
            "train_seconds": time.perf_counter() - started - self.timing["checkpoint"],
            "data_seconds": self.timing["data"],
            "train_images": (state.step_in_epoch - resumed_at) * config.batch_size * accelerator.num_processes,
        }
        last_epoch = state.epoch + 1 == config.epochs
        if last_epoch or (state.epoch + 1) % config.eval_every_epochs == 0:
            self.evaluate_into(record)
        else:
            accelerator.print(f"epoch {state.epoch + 1}: train loss {record['train_loss']:.4f}")
        # Whole before the checkpoint that holds it: a run resumed from there has every field.
        record.update(checkpoint_seconds=self.timing["checkpoint"], seconds=time.perf_counter() - started)
        state.history.append(record)
        self.timing["checkpoint"], self.record_closed = 0.0, time.perf_counter()
        state.epoch, state.step_in_epoch = state.epoch + 1, 0
        if last_epoch or state.epoch % config.save_every_epochs == 0 or self.time_to_save():
            self.save_checkpoint()

    def train_batches(self, loader, progress: tqdm) -> None:
        """Train on `loader` (already advanced past `state.step_in_epoch` batches), `after_batch` after every batch."""
        accelerator, state, optimizer, clip = self.accelerator, self.state, self.optimizer, self.config.clip_grad_norm
        self.model.train()
        # Accelerate's optimizer, backward and clipping wrappers cost host time per step (docs/benchmarks.md, "The
        # training engine"): where they only forward to torch (no fp16 scaler; one device or DDP), torch is called.
        direct = accelerator.scaler is None and accelerator.distributed_type in DIRECT_TORCH_CALLS
        accumulation = accelerator.gradient_accumulation_steps
        batches = iter(loader)
        while True:
            waiting = time.perf_counter()
            batch = next(batches, None)
            self.timing["data"] += time.perf_counter() - waiting
            if batch is None:
                return
            with accelerator.accumulate(self.model):
                mix = None
                if self.mixer is not None:
                    mix = self.mixer.parameters(state.epoch, state.step_in_epoch, accelerator.process_index)
                    mix = mix.to(accelerator.device, non_blocking=True)
                loss = self.train_step(batch["pixel_values"], batch["labels"], mix)
                if not direct:
                    accelerator.backward(loss)
                    if accelerator.sync_gradients and clip is not None:
                        accelerator.clip_grad_norm_(self.parameters, clip)
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                else:
                    (loss / accumulation if accumulation > 1 else loss).backward()
                    if accelerator.sync_gradients:
                        if clip is not None:
                            torch.nn.utils.clip_grad_norm_(self.parameters, clip)
                        optimizer.optimizer.step()
                        optimizer.optimizer.zero_grad(set_to_none=True)
            self.monitor.add(loss, state)
            state.step_in_epoch += 1
            progress.update(1)
            if accelerator.sync_gradients:
                self.scheduler.step()
                state.global_step += 1
            self.after_batch(accelerator.sync_gradients)

    def evaluate_into(self, record: dict) -> None:
        """Evaluate, log and print; keep the model as `best/` when it is the most accurate so far."""
        started = time.perf_counter()
        self.metrics, self.logits, self.labels = evaluate(
            self.model, self.eval_loader, self.accelerator, self.eval_step
        )
        metrics = self.metrics
        record["evaluation_seconds"] = time.perf_counter() - started
        record.update({f"eval_{k}": v for k, v in metrics.items()})
        self.accelerator.log({f"eval/{k}": v for k, v in metrics.items()}, step=self.state.global_step)
        self.accelerator.print(
            f"epoch {self.state.epoch + 1}: train loss {record['train_loss']:.4f}, eval accuracy "
            f"{100 * metrics['accuracy']:.2f}%, NLL {metrics['nll']:.4f}, ECE {metrics['ece']:.4f}"
        )
        if metrics["accuracy"] > self.state.best_accuracy:
            self.state.best_accuracy = metrics["accuracy"]
            _save_model(self.accelerator, self.model, self.output_dir / "best", metrics)

    def read_losses(self) -> None:
        """The one regular host sync: log the mean loss since the last read, and stop if one was not finite."""
        mean_loss = self.monitor.read()
        if mean_loss is not None:
            self.accelerator.log(
                {"train/loss": mean_loss, "train/lr": self.scheduler.get_last_lr()[0]}, step=self.state.global_step
            )

    def save_checkpoint(self) -> None:
        started = time.perf_counter()
        self.read_losses()  # every loss up to here must be finite: a diverged run is never saved
        weights = [t for t in self.accelerator.unwrap_model(self.model).state_dict().values() if t.is_floating_point()]
        if not torch.stack([torch.isfinite(t).all() for t in weights]).all().item():  # BatchNorm statistics too
            raise NonFiniteLossError(f"the weights are no longer finite after optimizer step {self.state.global_step}")
        self.state.scheduler = self.scheduler.state_dict()
        self.checkpoints.save(self.accelerator, self.state)
        self.last_save = time.monotonic()
        self.timing["checkpoint"] += time.perf_counter() - started

    def time_to_save(self) -> bool:
        """Whether `save_every_minutes` have passed, by the main process's clock (a save is collective)."""
        due = (time.monotonic() - self.last_save) / 60 >= (self.config.save_every_minutes or math.inf)
        return due if self.accelerator.num_processes == 1 else broadcast_object_list([due])[0]

    def after_batch(self, optimizer_stepped: bool) -> None:
        """Between batches: a checkpoint when due, else the losses read when the monitor is full."""
        state, every = self.state, self.config.save_every_steps
        if state.step_in_epoch == len(self.train_loader):
            return  # the epoch's end reads the losses and decides about a checkpoint
        if optimizer_stepped and every and state.global_step % every == 0:
            self.save_checkpoint()
        elif self.monitor.full:
            self.read_losses()
            if self.time_to_save():
                self.save_checkpoint()

    def finish(self) -> TrainResult:
        """The final model, history, training curves and reliability diagram; the trackers closed."""
        accelerator, state, output_dir = self.accelerator, self.state, self.output_dir
        if accelerator.is_main_process and state.history:
            _save_model(accelerator, self.model, output_dir, self.metrics)
            write_json(output_dir / "history.json", state.history)
            plot_training_curves(state.history, output_dir / "training_curves.png")
            if self.logits is not None:
                save_reliability_diagram(self.logits, self.labels, output_dir / "reliability_diagram.png")
        unreadable = unreadable_rows(self.config)
        if unreadable is not None and unreadable.rows():
            accelerator.print(unreadable.summary())
        accelerator.end_training()
        unwrapped = accelerator.unwrap_model(self.model)
        return TrainResult(
            unwrapped, output_dir, self.metrics, state.best_accuracy, state.history, self.logits, self.labels
        )


# What a resumed run may change: where it writes, and how fast (not what) it computes; and whether it leaves out
# unreadable rows, so that a run stopped by one goes on. Everything else defines the run (model, data,
# augmentation, optimizer, schedule, seed) and must stay as it was.
RESUMABLE_CHANGES = tuple(
    "output_dir num_workers eval_batch_size eval_every_epochs log_every_steps save_every_epochs save_every_minutes "
    "save_every_steps keep_checkpoints compile compile_mode channels_last mixed_precision deterministic "
    "skip_unreadable".split()
)


def changed_settings(saved: dict, config: TrainingConfig, may_change=RESUMABLE_CHANGES) -> dict[str, tuple]:
    """{name: (saved, now)} of the settings of `config` outside `may_change` that differ from the `saved` ones."""
    current = json.loads(json.dumps(config.to_dict()))  # as the saved file has it: tuples become lists
    return {
        name: (saved.get(name), now)
        for name, now in current.items()
        if name not in may_change and saved.get(name) != now
    }


def _check_resumable(config: TrainingConfig, saved_path: Path) -> None:
    if not saved_path.exists():
        return
    # A stream's order depends on how many loader workers deal out its files.
    may_change = set(RESUMABLE_CHANGES) - ({"num_workers"} if config.streaming else set())
    changed = changed_settings(json.loads(saved_path.read_text()), config, may_change)
    if changed:
        details = ", ".join(f"{name} {before!r} -> {now!r}" for name, (before, now) in changed.items())
        raise ValueError(
            f"cannot resume {saved_path.parent} with a different run: {details}. Resume with the settings of "
            f"{saved_path} (e.g. --config {saved_path}), or start a new run in another --output-dir"
        )


def _save_model(accelerator: Accelerator, model, path: Path, metrics: dict) -> None:
    if accelerator.is_main_process:
        unwrapped = accelerator.unwrap_model(model)
        with quiet_progress_bars():
            unwrapped.save_pretrained(path)
        write_json(Path(path) / "metrics.json", {k: v if math.isfinite(v) else None for k, v in metrics.items()})
