"""Speed of the training engine: the data path per loader worker, the loop's overhead against a hand-written loop,
and end-to-end runs of `alternet-train` with the checkpoint bytes of the full recipe's cadence."""

import io
import math
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import numpy as np
import torch
from PIL import Image

from alternet_hf.data.augmentation import channel_statistics, normalize_images
from alternet_hf.training.recipe import TrainingConfig, recipe_config

from .timing import device_name, timed_in_turn, torch_threads


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


def measure_engine_overhead(*, steps: int = 50, batch_size: int = 8, repeats: int = 15) -> dict:
    """CPU ms per step of the engine's loop (`TrainingSession.train_batches`) and of a hand-written one on the same
    model and tensors, timed alternately; the smallest AlterNet keeps the step short, so that the loops' cost shows."""
    from tqdm.auto import tqdm

    from alternet_hf.training.engine import TrainingSession, training_loss

    smallest = dict(
        embedding_size=8,
        depths=[2],
        hidden_sizes=[8],
        num_attention_blocks=[1],
        num_attention_heads=[1],
        attention_head_dim=8,
        image_size=8,
    )
    with tempfile.TemporaryDirectory() as folder:
        config = TrainingConfig(
            model="alternet-18-cifar10",
            model_overrides=smallest,
            epochs=1000,
            batch_size=batch_size,
            output_dir=folder,
            mixed_precision="no",
            compile=False,
            save_every_minutes=None,
        )
        session = TrainingSession(config)
        session.build()
        session.start(resume=False)
        model, optimizer, scheduler = session.model, session.optimizer, session.scheduler
        parameters, device = session.parameters, session.accelerator.device
        mean, std = channel_statistics(model.config.image_mean, model.config.image_std, device=device)
        generator = torch.Generator().manual_seed(0)
        batches = [
            {
                "pixel_values": torch.randint(0, 256, (batch_size, 8, 8, 3), dtype=torch.uint8, generator=generator)
                .permute(0, 3, 1, 2)
                .to(device),
                "labels": torch.randint(0, 10, (batch_size,), generator=generator).to(device),
            }
            for _ in range(steps)
        ]

        def hand_written():
            for batch in batches:
                logits = model(normalize_images(batch["pixel_values"], mean, std)).logits
                loss = training_loss(logits, batch["labels"])
                loss.backward()
                torch.nn.utils.clip_grad_norm_(parameters, config.clip_grad_norm)
                optimizer.optimizer.step()
                optimizer.optimizer.zero_grad(set_to_none=True)
                scheduler.step()

        def engine():
            session.state.step_in_epoch = 0
            with tqdm(total=steps, file=io.StringIO()) as progress:
                session.train_batches(batches, progress)
            session.read_losses()

        loops = {"hand-written loop": hand_written, "engine": engine}
        with torch_threads(1):  # parallel kernels' spinning threads would bury the loops' own time on a busy CPU
            try:
                model.train()
                seconds = timed_in_turn(loops, repeats)
            finally:
                session.accelerator.end_training()
    timings = {label: [1000 * cpu / steps for cpu in seconds["cpu", label]] for label in loops}
    medians = {label: statistics.median(values) for label, values in timings.items()}
    differences = [engine - hand for engine, hand in zip(timings["engine"], timings["hand-written loop"])]
    return {
        "milliseconds_per_step": timings,
        "median_milliseconds_per_step": medians,
        "overhead_milliseconds_per_step": statistics.median(differences),
        "batch_size": batch_size,
        "device": str(device),
    }


# The end-to-end run's cadence: an evaluation and a checkpoint after every epoch, none by the clock.
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


def image_check_speed(*, num_images: int, workdir: str, repeats: int = 2, size: int = 224) -> dict:
    """Files per second of the check an image folder gets before a run (`data.check_image_files`: headers and ends,
    no pixel decoded), on `num_images` JPEGs of `size`² noise (about an ImageNet photo's bytes), the best of
    `repeats` (the files in the page cache, as after the folder was written or read once)."""
    from alternet_hf.data.sources import check_image_files

    folder, rng = Path(workdir) / "images", np.random.default_rng(0)
    for i in range(num_images):
        (folder / str(i % 10)).mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / str(i % 10) / f"{i}.jpg", quality=90)
    split = datasets.load_dataset("imagefolder", data_dir=str(folder), split="train", cache_dir=f"{workdir}/cache")
    split = split.cast_column("image", datasets.Image(decode=False))
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        sound = check_image_files(split, "the benchmark's folder", None)
        seconds.append(time.perf_counter() - started)
    files_bytes = sum(path.stat().st_size for path in folder.rglob("*.jpg"))
    return {
        "num_images": num_images,
        "sound_files": len(sound),
        "mean_file_bytes": files_bytes / num_images,
        "seconds": min(seconds),
    }


def sample_speed(*, num_images: int, split_images: int, files: int, workdir: str, seed: int = 0) -> dict:
    """Seconds to a streamed sample of `num_images` of a split of `files` parquet files (`split_images` images in
    all), against preparing the split first and drawing as many rows; and the bytes each wrote into the cache."""
    from alternet_hf.data.sources import load_image_classification, load_image_sample

    folder = Path(workdir) / "split"
    saved = cifar_like_dataset(str(Path(workdir) / "saved"), num_labels=100, image_size=32, train=1, test=split_images)
    write_parquet_split(load_image_classification(saved, split="test"), folder, "test", files)

    def timed(way: str, load) -> dict:
        """Seconds of `load` with a datasets cache of its own, and the bytes it wrote there."""
        cache = Path(workdir) / f"cache-{way}"
        kept, datasets.config.HF_DATASETS_CACHE = datasets.config.HF_DATASETS_CACHE, str(cache)
        try:
            started = time.perf_counter()
            load()
            seconds = time.perf_counter() - started
        finally:
            datasets.config.HF_DATASETS_CACHE = kept
        written = sum(path.stat().st_size for path in cache.rglob("*") if path.is_file())
        return {f"{way}_seconds": seconds, f"{way}_cache_bytes": written}

    sample = lambda: load_image_sample(str(folder), split="test", num_images=num_images, seed=seed)
    prepare = lambda: load_image_classification(str(folder), split="test").shuffle(seed=seed).select(range(num_images))
    return {
        "split_images": split_images,
        "files": files,
        "num_images": num_images,
        **timed("sample", sample),
        **timed("prepare", prepare),
    }
