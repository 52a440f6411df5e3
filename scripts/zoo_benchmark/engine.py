"""Speed of the training engine: the data path per loader worker, and end-to-end runs of `alternet-train` with the
checkpoint bytes of the full recipe's cadence."""

import math
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import numpy as np
import torch
from PIL import Image

from alternet_hf.training.recipe import recipe_config

from .timing import device_name, torch_threads


def cifar_like_dataset(path: str, *, num_labels: int, image_size: int, train: int, test: int, seed: int = 0) -> str:
    """A `save_to_disk` dataset in CIFAR's schema (img, label; PNG-encoded random pixels, the hardest to compress):
    what the engine reads, without a download."""
    rng = np.random.default_rng(seed)
    features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(num_classes=num_labels)})

    def split(n: int) -> datasets.Dataset:
        images = [Image.fromarray(rng.integers(0, 256, (image_size, image_size, 3), dtype=np.uint8)) for _ in range(n)]
        labels = (np.arange(n) % num_labels).tolist()
        return datasets.Dataset.from_dict({"img": images, "label": labels}, features=features)

    datasets.DatasetDict({"train": split(train), "test": split(test)}).save_to_disk(path)
    return path


def write_parquet_split(dataset, folder, split: str, files: int = 1) -> None:
    """`dataset` as the `split` of `files` parquet files in `folder`/data, laid out as the Hub lays out a split."""
    for index in range(files):
        dataset.shard(files, index).to_parquet(f"{folder}/data/{split}-{index:05d}-of-{files:05d}.parquet")


def _recipe_on_random_images(name: str, recipe: str, folder: str, *, train: int, test: int, **settings):
    """The config of `recipe` for `name` (`settings` override its fields) on `train` and `test` random images of the
    model's size and classes, written to `folder` (with `streaming`: as four parquet files)."""
    from alternet_hf.models.presets import create_config

    config = create_config(name, **settings.get("model_overrides", {}))
    data = cifar_like_dataset(
        f"{folder}/data", num_labels=config.num_labels, image_size=config.image_size, train=train, test=test
    )
    if settings.get("streaming"):
        splits, data = datasets.load_from_disk(data), f"{folder}/parquet"
        write_parquet_split(splits["train"], data, "train", files=4)
        write_parquet_split(splits["test"], data, "test")
    return recipe_config(name, recipe, dataset=data, image_column="img", **settings)


@dataclass
class DataPathSpeed:
    """CPU time of the training data path per image, in one process (as one loader worker runs it)."""

    model: str
    recipe: str
    images: int
    milliseconds_per_image: list[float]  # CPU (process) time, one per pass over the images
    streaming: bool = False  # read as `alternet-train --streaming` reads a split of parquet files
    images_per_second_per_worker: float = field(init=False)  # of the fastest pass

    def __post_init__(self):
        self.images_per_second_per_worker = 1000 / min(self.milliseconds_per_image)


def measure_data_path(
    name: str,
    *,
    recipe: str = "paper",
    images: int = 960,
    batch_size: int = 96,
    repeats: int = 3,
    workdir: str | None = None,
    streaming: bool = False,
) -> DataPathSpeed:
    """CPU time per image of what `alternet-train`'s loader workers do (read, decode, augment, collate), on one
    thread as in a worker; `streaming`: read as `alternet-train --streaming` reads four parquet files."""
    from alternet_hf.training.engine import build_model_and_data

    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        settings = dict(batch_size=batch_size, num_workers=0, eval_batch_size=1, streaming=streaming)
        run = _recipe_on_random_images(name, recipe, tmp, train=images, test=1, **settings)
        _, augmentation, loader, _, _ = build_model_and_data(run)
        milliseconds = []
        with torch_threads(1):
            for epoch in range(repeats):
                augmentation.epoch = epoch
                if streaming:
                    loader.set_epoch(epoch)
                started = time.process_time()
                count = sum(len(batch["labels"]) for batch in loader)
                milliseconds.append(1000 * (time.process_time() - started) / count)
    return DataPathSpeed(name, recipe, count, milliseconds, streaming)


EVERY_EPOCH = dict(eval_every_epochs=1, save_every_epochs=1, save_every_minutes=None)


@dataclass
class TrainingRun:
    """An end-to-end run of `alternet-train` (loader workers, evaluation and checkpoints on), and what the full
    recipe's checkpoint cadence writes."""

    model: str
    device: str
    compiled: bool
    batch_size: int
    num_workers: int
    epochs: int
    train_images: int
    seconds: float
    images_per_second: float  # of the whole run: training images / wall-clock seconds, start-up included
    last_epoch_images_per_second: float  # training images of the last epoch / its training seconds
    shares: dict  # of the wall-clock time: data (waiting for batches), step, evaluation, checkpoint, start-up
    checkpoint_bytes: int  # one checkpoint of this model (weights, optimizer, RNG states)
    recipe_checkpoints: int  # written by the full recipe in `recipe_minutes`, from its cadence
    recipe_minutes: float
    recipe_checkpoint_bytes: int


def measure_training_run(
    name: str,
    *,
    recipe: str = "paper",
    epochs: int = 2,
    images: int = 960,
    eval_images: int = 480,
    batch_size: int = 96,
    num_workers: int = 2,
    compiled: bool | None = None,
    recipe_minutes: float = 30.0,
    model_overrides: dict | None = None,
    workdir: str | None = None,
) -> TrainingRun:
    """`epochs` epochs of the real engine with the recipe on random images, and the bytes the full recipe's
    checkpoint cadence writes in `recipe_minutes`. `model_overrides` replace the recipe's."""
    from alternet_hf.training.engine import train

    full_recipe = recipe_config(name, recipe)
    overrides = full_recipe.model_overrides if model_overrides is None else model_overrides
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        settings = dict(epochs=epochs, batch_size=batch_size, num_workers=num_workers, compile=compiled)
        settings.update(output_dir=f"{tmp}/run", model_overrides=overrides, **EVERY_EPOCH)
        run = _recipe_on_random_images(name, recipe, tmp, train=images, test=eval_images, **settings)
        started = time.perf_counter()
        history = train(run).history
        seconds = time.perf_counter() - started
        checkpoint = max(Path(f"{tmp}/run/checkpoints").glob("checkpoint-*"))
        checkpoint_bytes = sum(f.stat().st_size for f in checkpoint.iterdir())
    train_images = sum(h["train_images"] for h in history)
    parts = {
        "data": sum(h["data_seconds"] for h in history),
        "step": sum(h["train_seconds"] - h["data_seconds"] for h in history),
        "evaluation": sum(h.get("evaluation_seconds", 0.0) for h in history),
        "checkpoint": sum(h["checkpoint_seconds"] for h in history),
    }
    parts["start-up"] = seconds - sum(parts.values())
    epochs_saved = math.ceil(full_recipe.epochs / full_recipe.save_every_epochs)  # every N-th epoch and the last
    timed = int(recipe_minutes // full_recipe.save_every_minutes) if full_recipe.save_every_minutes else 0
    return TrainingRun(
        model=name,
        device=device_name(),
        compiled=bool(run.compile if run.compile is not None else torch.cuda.is_available()),
        batch_size=batch_size,
        num_workers=num_workers,
        epochs=epochs,
        train_images=train_images,
        seconds=seconds,
        images_per_second=train_images / seconds,
        last_epoch_images_per_second=history[-1]["train_images"] / history[-1]["train_seconds"],
        shares={part: value / seconds for part, value in parts.items()},
        checkpoint_bytes=checkpoint_bytes,
        recipe_checkpoints=epochs_saved + timed,
        recipe_minutes=recipe_minutes,
        recipe_checkpoint_bytes=(epochs_saved + timed) * checkpoint_bytes,
    )
