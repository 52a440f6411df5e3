"""The training engine on Accelerate: one code path for a CPU, one GPU, or many processes and nodes.

`train(config)` builds data, model, optimizer and schedule from a `TrainingConfig`, trains with the
recipe's augmentation, evaluates the paper's metrics every epoch, and writes

    <output_dir>/                 the final model (save_pretrained + image processor), metrics.json,
                                  history.json, training_curves.png, reliability_diagram.png, config
    <output_dir>/best/            the model of the best evaluation accuracy
    <output_dir>/checkpoints/     Accelerate states for `resume=True`
    <output_dir>/logs/            TensorBoard

Checkpoints are written to a temporary folder, renamed into place, and only then named by the
`latest` pointer (itself replaced atomically), so a kill at any moment leaves a usable checkpoint.
Resuming restores model, optimizer, schedule, every RNG and the position inside the epoch.
"""

import json
import math
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration, ProjectConfiguration, set_seed
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from .data import SeededAugmentation, class_names_of, collate_images, load_image_classification, with_transform
from .metrics import classification_metrics, plot_reliability_diagram, reliability_diagram
from .presets import create_model
from .recipe import BatchMixer, TrainingConfig, build_optimizer, build_scheduler, eval_transform, train_transform


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


class CheckpointManager:
    """Atomic Accelerate checkpoints under `root`, the newest named by the file `root/latest`."""

    def __init__(self, root: Path, keep: int):
        self.root, self.keep = Path(root), keep

    def latest(self) -> Path | None:
        """The checkpoint `latest` names, else (a pointer lost or dangling) the newest complete one."""
        pointer = self.root / "latest"
        if pointer.exists():
            path = self.root / pointer.read_text().strip()
            if (path / "train_state.json").exists():
                return path
        complete = self._complete()
        return complete[-1] if complete else None

    def _complete(self) -> list[Path]:
        """Finished checkpoints, oldest first by training progress (not by name)."""
        found = [
            p for p in self.root.glob("checkpoint-*") if p.suffix != ".partial" and (p / "train_state.json").exists()
        ]

        def progress(path: Path) -> tuple[int, int]:
            state = json.loads((path / "train_state.json").read_text())
            return state["global_step"], state["epoch"]

        return sorted(found, key=progress)

    def save(self, accelerator: Accelerator, state: TrainState) -> Path:
        final = self.root / f"checkpoint-{state.global_step:08d}-{state.step_in_epoch:06d}"
        partial = final.with_name(final.name + ".partial")
        if accelerator.is_main_process:
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir(parents=True)
        accelerator.wait_for_everyone()
        accelerator.save_state(str(partial))
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            (partial / "train_state.json").write_text(json.dumps(asdict(state)))
            shutil.rmtree(final, ignore_errors=True)
            os.replace(partial, final)
            pointer = self.root / "latest.tmp"
            pointer.write_text(final.name)
            os.replace(pointer, self.root / "latest")
            self._prune(keep=final)
        accelerator.wait_for_everyone()
        return final

    def _prune(self, keep: Path) -> None:
        checkpoints = [p for p in self._complete() if p != keep]
        unfinished = list(self.root.glob("checkpoint-*.partial"))  # left by a kill during a save
        for old in checkpoints[: max(len(checkpoints) - (self.keep - 1), 0)] + unfinished:
            shutil.rmtree(old, ignore_errors=True)


def build_model_and_data(config: TrainingConfig):
    """The model (labels named after the dataset's classes), the training augmentation and both data loaders."""
    columns = dict(image_column=config.image_column, label_column=config.label_column)
    train_data = load_image_classification(config.dataset, split=config.train_split, **columns)
    names = train_data.features["label"].names
    eval_data = load_image_classification(config.dataset, split=config.eval_split, class_names=names, **columns)
    labels = {"id2label": dict(enumerate(names)), "label2id": {name: i for i, name in enumerate(names)}}
    if Path(config.model).is_dir() or "/" in config.model:
        model = create_model(config.model, num_labels=len(names), **config.model_overrides)
        model.config.id2label, model.config.label2id = labels["id2label"], labels["label2id"]
    else:
        model = create_model(config.model, **labels, **config.model_overrides)
    size, mean, std = model.config.image_size, model.config.image_mean, model.config.image_std
    augment = train_transform(
        size,
        mean,
        std,
        crop_padding=config.random_crop_padding,
        horizontal_flip=config.horizontal_flip,
        rand_augment=config.rand_augment,
    )
    augmentation = SeededAugmentation(augment, config.seed)
    train_data = with_transform(train_data, augmentation)
    eval_data = with_transform(eval_data, eval_transform(size, mean, std))
    if len(train_data) < config.batch_size:
        raise ValueError(f"{len(train_data)} training images are fewer than one batch ({config.batch_size})")
    # Own generators: creating a loader iterator must not draw from the global RNG, or a resumed run
    # (which creates one more iterator) would drift from the uninterrupted one.
    options = dict(collate_fn=collate_images, num_workers=config.num_workers)
    train_loader_rng, eval_loader_rng = (torch.Generator().manual_seed(config.seed + i) for i in range(2))
    train_loader = DataLoader(
        train_data, batch_size=config.batch_size, shuffle=True, drop_last=True, generator=train_loader_rng, **options
    )
    eval_loader = DataLoader(
        eval_data,
        batch_size=config.eval_batch_size,
        generator=eval_loader_rng,
        persistent_workers=config.num_workers > 0,
        **options,
    )
    return model, augmentation, train_loader, eval_loader


def train_one_epoch(
    model,
    forward,
    loader,
    optimizer,
    scheduler,
    accelerator: Accelerator,
    mixer: BatchMixer,
    state: TrainState,
    *,
    clip_grad_norm: float | None,
    channels_last: bool,
    on_optimizer_step,
    progress: tqdm,
) -> float:
    """Train on `loader` (already advanced past `state.step_in_epoch` batches); return the mean loss."""
    model.train()
    total_loss, count = torch.zeros((), device=accelerator.device), 0
    for batch in loader:
        with accelerator.accumulate(model):
            pixel_values, labels = batch["pixel_values"], batch["labels"]
            if channels_last:
                pixel_values = pixel_values.contiguous(memory_format=torch.channels_last)
            pixel_values, labels = mixer(pixel_values, labels)
            loss = forward(pixel_values, labels=labels).loss
            accelerator.backward(loss)
            if accelerator.sync_gradients and clip_grad_norm:
                accelerator.clip_grad_norm_(model.parameters(), clip_grad_norm)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        total_loss += loss.detach()
        count += 1
        state.step_in_epoch += 1
        progress.update(1)
        if accelerator.sync_gradients:
            scheduler.step()
            state.global_step += 1
            on_optimizer_step(loss)
    return (total_loss / max(count, 1)).item()


@torch.no_grad()
def evaluate(
    model, loader, accelerator: Accelerator, *, channels_last: bool = False
) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """The paper's metrics on `loader` (gathered over processes), plus all logits and labels."""
    model.eval()
    all_logits, all_labels = [], []
    for batch in tqdm(loader, desc="evaluate", leave=False, disable=not accelerator.is_local_main_process):
        pixel_values = batch["pixel_values"]
        if channels_last:
            pixel_values = pixel_values.contiguous(memory_format=torch.channels_last)
        logits = model(pixel_values).logits.float()
        logits, labels = accelerator.gather_for_metrics((logits, batch["labels"]))
        all_logits.append(logits.cpu())
        all_labels.append(labels.cpu())
    logits, labels = torch.cat(all_logits), torch.cat(all_labels)
    return classification_metrics(logits.numpy(), labels.numpy()), logits, labels


def plot_training_curves(history: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [h["epoch"] for h in history]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    left.plot(epochs, [h["train_loss"] for h in history], marker="o", label="train loss")
    left.plot(epochs, [h["eval_nll"] for h in history], marker="o", label="eval NLL")
    left.set(xlabel="epoch", ylabel="loss")
    left.legend()
    right.plot(epochs, [100 * h["eval_accuracy"] for h in history], marker="o", color="tab:green")
    right.set(xlabel="epoch", ylabel="eval accuracy (%)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _mixed_precision(config: TrainingConfig) -> str:
    if config.mixed_precision == "auto":
        return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "no"
    return config.mixed_precision


def _tracker_config(config: TrainingConfig) -> dict:
    """TensorBoard hparams take scalars and strings only."""
    return {k: v if isinstance(v, int | float | str | bool) else json.dumps(v) for k, v in config.to_dict().items()}


def train(config: TrainingConfig, *, resume: bool = False) -> TrainResult:
    """Run (or, with `resume=True`, continue from the latest checkpoint) the training `config` describes."""
    config.validate()
    output_dir = Path(config.output_dir)
    accelerator = Accelerator(
        mixed_precision=_mixed_precision(config),
        gradient_accumulation_steps=config.gradient_accumulation_steps,
        log_with="tensorboard",
        project_config=ProjectConfiguration(project_dir=str(output_dir), logging_dir=str(output_dir / "logs")),
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=config.seed),
    )
    set_seed(config.seed)
    if config.deterministic:
        torch.use_deterministic_algorithms(True)
    checkpoints = CheckpointManager(output_dir / "checkpoints", keep=config.keep_checkpoints)
    latest = checkpoints.latest() if resume else None
    if not resume and checkpoints.latest() is not None:
        raise FileExistsError(
            f"{output_dir} holds checkpoints of an earlier run: continue it with --resume (resume=True), "
            "or choose another --output-dir"
        )

    model, augmentation, train_loader, eval_loader = build_model_and_data(config)
    if config.channels_last:
        model = model.to(memory_format=torch.channels_last)
    optimizer = build_optimizer(config, model)
    model, optimizer, train_loader, eval_loader = accelerator.prepare(model, optimizer, train_loader, eval_loader)
    # Accelerate also steps on an epoch's last, incomplete accumulation window.
    steps_per_epoch = math.ceil(len(train_loader) / config.gradient_accumulation_steps)
    scheduler = build_scheduler(config, optimizer, steps_per_epoch)  # stepped by hand, once per optimizer step
    forward = torch.compile(model) if config.compile else model
    mixer = BatchMixer(config, accelerator.unwrap_model(model).config.num_labels)

    state = TrainState()
    if latest is not None:
        _check_resumable(config, output_dir / "training_config.json")
        accelerator.load_state(str(latest))
        state = TrainState(**json.loads((latest / "train_state.json").read_text()))
        if not state.scheduler:
            raise ValueError(
                f"{latest} was written by an older alternet-hf that kept no learning-rate schedule state, so "
                "it cannot be continued exactly: start a new run in another --output-dir"
            )
        scheduler.load_state_dict(state.scheduler)
        accelerator.print(f"resumed from {latest} (epoch {state.epoch + 1}, step {state.global_step})")
        if state.epoch >= config.epochs:  # killed after its last checkpoint: only the final outputs remain to write
            accelerator.print(f"{output_dir} has finished its {config.epochs} epochs: nothing left to train")
    elif resume:
        accelerator.print(f"no checkpoint in {checkpoints.root}: starting from scratch")
    if accelerator.is_main_process:
        output_dir.mkdir(parents=True, exist_ok=True)
        config.save(output_dir / "training_config.json")
    accelerator.init_trackers("train", config=_tracker_config(config))

    def save_checkpoint():
        state.scheduler = scheduler.state_dict()
        checkpoints.save(accelerator, state)

    def on_optimizer_step(loss):
        if state.global_step % 10 == 0:
            accelerator.log({"train/loss": loss.item(), "train/lr": scheduler.get_last_lr()[0]}, step=state.global_step)
        # On an epoch's last batch the end-of-epoch checkpoint follows at once (after evaluation).
        if state.global_step % config.save_every_steps == 0 and state.step_in_epoch < len(train_loader):
            save_checkpoint()

    last_evaluation = state.history[-1] if state.history else {}
    metrics = {k[len("eval_") :]: v for k, v in last_evaluation.items() if k.startswith("eval_")}
    logits = labels = None
    while state.epoch < config.epochs:
        started = time.perf_counter()
        train_loader.set_epoch(state.epoch)
        augmentation.epoch = state.epoch
        resumed_at = state.step_in_epoch
        loader = accelerator.skip_first_batches(train_loader, resumed_at) if resumed_at else train_loader
        progress = tqdm(
            total=len(train_loader),
            initial=state.step_in_epoch,
            desc=f"epoch {state.epoch + 1}/{config.epochs}",
            disable=not accelerator.is_local_main_process,
        )
        train_started = time.perf_counter()
        train_loss = train_one_epoch(
            model,
            forward,
            loader,
            optimizer,
            scheduler,
            accelerator,
            mixer,
            state,
            clip_grad_norm=config.clip_grad_norm,
            channels_last=config.channels_last,
            on_optimizer_step=on_optimizer_step,
            progress=progress,
        )
        progress.close()
        train_seconds = time.perf_counter() - train_started
        metrics, logits, labels = evaluate(model, eval_loader, accelerator, channels_last=config.channels_last)
        record = {
            "epoch": state.epoch + 1,
            "train_loss": train_loss,
            "lr": scheduler.get_last_lr()[0],
            "seconds": time.perf_counter() - started,
            "train_seconds": train_seconds,
            "train_images": (state.step_in_epoch - resumed_at) * config.batch_size * accelerator.num_processes,
            **{f"eval_{k}": v for k, v in metrics.items()},
        }
        accelerator.log(
            {k.replace("eval_", "eval/"): v for k, v in record.items() if k.startswith("eval_")}, step=state.global_step
        )
        accelerator.print(
            f"epoch {state.epoch + 1}: train loss {train_loss:.4f}, eval accuracy {100 * metrics['accuracy']:.2f}%, "
            f"NLL {metrics['nll']:.4f}, ECE {metrics['ece']:.4f}"
        )
        state.history.append(record)
        if metrics["accuracy"] > state.best_accuracy:
            state.best_accuracy = metrics["accuracy"]
            _save_model(accelerator, model, output_dir / "best", metrics)
        state.epoch, state.step_in_epoch = state.epoch + 1, 0
        save_checkpoint()

    if accelerator.is_main_process and state.history:
        _save_model(accelerator, model, output_dir, metrics)
        (output_dir / "history.json").write_text(json.dumps(state.history, indent=2))
        plot_training_curves(state.history, output_dir / "training_curves.png")
        if logits is not None:
            import matplotlib.pyplot as plt

            ax = plot_reliability_diagram(reliability_diagram(logits.numpy(), labels.numpy()))
            ax.figure.savefig(output_dir / "reliability_diagram.png", dpi=120)
            plt.close(ax.figure)
    accelerator.end_training()
    return TrainResult(accelerator.unwrap_model(model), output_dir, metrics, state.best_accuracy, state.history)


# What a resumed run may change: where it writes, and how fast (not what) it computes. Everything else
# defines the run (model, data, augmentation, optimizer, schedule, seed) and must stay as it was.
RESUMABLE_CHANGES = (
    "output_dir", "num_workers", "eval_batch_size", "save_every_steps", "keep_checkpoints", "compile",
    "channels_last", "mixed_precision", "deterministic",
)  # fmt: skip


def _check_resumable(config: TrainingConfig, saved_path: Path) -> None:
    if not saved_path.exists():
        return
    saved = json.loads(saved_path.read_text())
    current = json.loads(json.dumps(config.to_dict()))  # as the saved file has it: tuples become lists
    changed = [name for name in current if name not in RESUMABLE_CHANGES and saved.get(name) != current[name]]
    if changed:
        details = ", ".join(f"{name} {saved.get(name)!r} -> {current[name]!r}" for name in changed)
        raise ValueError(
            f"cannot resume {saved_path.parent} with a different run: {details}. Resume with the settings of "
            f"{saved_path} (e.g. --config {saved_path}), or start a new run in another --output-dir"
        )


def _save_model(accelerator: Accelerator, model, path: Path, metrics: dict) -> None:
    if accelerator.is_main_process:
        unwrapped = accelerator.unwrap_model(model)
        unwrapped.save_pretrained(path)
        (Path(path) / "metrics.json").write_text(
            json.dumps({k: _finite_or_none(v) for k, v in metrics.items()}, indent=2)
        )


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def evaluate_model(
    model_name_or_path: str,
    source: str,
    *,
    split: str = "test",
    image_column: str | None = None,
    label_column: str | None = None,
    batch_size: int = 256,
    num_workers: int = 0,
    mixed_precision: str = "no",
) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """The paper's metrics of a trained model (folder or Hub id) on a split of a dataset (see `data`).

    In float32 by default: these are the numbers that go into model cards, and bf16 logits shift NLL, ECE
    and the 90%-confidence metrics. Labels are matched to the model's classes by name where it has names.
    """
    accelerator = Accelerator(mixed_precision=mixed_precision)
    model = create_model(model_name_or_path)
    data = load_image_classification(
        source, split=split, image_column=image_column, label_column=label_column,
        class_names=class_names_of(model.config),
    )  # fmt: skip
    num_classes = data.features["label"].num_classes
    if num_classes > model.config.num_labels:
        raise ValueError(
            f"{source} has {num_classes} classes but {model_name_or_path} predicts {model.config.num_labels}: "
            "evaluate on the dataset the model was trained for"
        )
    data = with_transform(
        data, eval_transform(model.config.image_size, model.config.image_mean, model.config.image_std)
    )
    loader = DataLoader(
        data,
        batch_size=batch_size,
        collate_fn=collate_images,
        num_workers=num_workers,
        generator=torch.Generator().manual_seed(0),
    )
    model, loader = accelerator.prepare(model, loader)
    return evaluate(model, loader, accelerator)
