"""Throughput of the zoo's models: images per second for inference and for a training step."""

import time
from dataclasses import asdict, dataclass

import torch

from .presets import create_model


@dataclass
class Throughput:
    model: str
    device: str
    dtype: str
    compiled: bool
    batch_size: int
    mode: str  # "forward" (no grad, eval) or "forward+backward" (train mode, loss, backward, SGD step)
    images_per_second: float
    milliseconds_per_batch: float

    def to_dict(self) -> dict:
        return asdict(self)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_throughput(
    name: str,
    *,
    batch_size: int,
    mode: str = "forward",
    compiled: bool = False,
    device: str | torch.device | None = None,
    dtype: torch.dtype = torch.float32,
    warmup: int = 2,
    iterations: int = 5,
) -> Throughput:
    """Time `iterations` batches of random images after `warmup` untimed ones (compilation happens there)."""
    if mode not in ("forward", "forward+backward"):
        raise ValueError(f"mode must be 'forward' or 'forward+backward', got {mode!r}")
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model = create_model(name).to(device).to(memory_format=torch.channels_last)
    size = model.config.image_size
    pixel_values = torch.randn(batch_size, 3, size, size, device=device).to(memory_format=torch.channels_last)
    labels = torch.randint(0, model.config.num_labels, (batch_size,), device=device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    autocast = torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32)
    forward = torch.compile(model) if compiled else model

    def step():
        with autocast:
            if mode == "forward":
                with torch.no_grad():
                    forward(pixel_values)
            else:
                loss = forward(pixel_values, labels=labels).loss
        if mode != "forward":
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    model.train(mode != "forward")
    for _ in range(warmup):
        step()
    _synchronize(device)
    start = time.perf_counter()
    for _ in range(iterations):
        step()
    _synchronize(device)
    seconds = (time.perf_counter() - start) / iterations
    return Throughput(
        model=name,
        device=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        dtype=str(dtype).removeprefix("torch."),
        compiled=compiled,
        batch_size=batch_size,
        mode=mode,
        images_per_second=batch_size / seconds,
        milliseconds_per_batch=1000 * seconds,
    )


def measure_training_throughput(
    name: str,
    *,
    recipe: str = "paper",
    images: int = 960,
    batch_size: int = 96,
    num_workers: int = 0,
    compiled: bool = False,
    workdir: str | None = None,
) -> Throughput:
    """Images/s of one epoch of the real training engine: data loading, augmentation, Mixup/CutMix on the
    device, forward, backward, clipping, optimizer. The data are random photos-sized images written in
    CIFAR's schema to a temporary folder, so no download is needed."""
    import tempfile

    import datasets
    import numpy as np
    from PIL import Image

    from .presets import create_config
    from .recipe import recipe_config
    from .training import train

    config = create_config(name)
    rng = np.random.default_rng(0)
    size = config.image_size
    features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(num_classes=config.num_labels)})
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        splits = {
            split: datasets.Dataset.from_dict(
                {
                    "img": [Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)) for _ in range(n)],
                    "label": (np.arange(n) % config.num_labels).tolist(),
                },
                features=features,
            )
            for split, n in (("train", images), ("test", batch_size))
        }
        datasets.DatasetDict(splits).save_to_disk(f"{tmp}/data")
        run = recipe_config(
            name,
            recipe,
            dataset=f"{tmp}/data",
            image_column="img",
            label_column="label",
            epochs=1,
            batch_size=batch_size,
            num_workers=num_workers,
            compile=compiled,
            output_dir=f"{tmp}/run",
            save_every_steps=10**9,
        )
        record = train(run).history[-1]
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    seconds_per_batch = record["train_seconds"] / (record["train_images"] / batch_size)
    return Throughput(
        model=name,
        device=device,
        dtype="bfloat16" if torch.cuda.is_available() else "float32",
        compiled=compiled,
        batch_size=batch_size,
        mode=f"train ({recipe} recipe, data included)",
        images_per_second=record["train_images"] / record["train_seconds"],
        milliseconds_per_batch=1000 * seconds_per_batch,
    )
