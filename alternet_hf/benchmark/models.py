"""Speed of the zoo's models: images per second of bare forward and forward+backward steps (eager or compiled,
any autocast dtype), and a training step of AlterNet-50 against the reference implementation's."""

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ..presets import create_model


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


def measure_reference_step(
    reference_dir: str, *, batch_size: int = 32, repeats: int = 5, channels_last: bool = True
) -> dict:
    """CPU seconds of one AlterNet-50 (CIFAR-100, paper layout, stochastic depth 0.1) training step — forward,
    cross-entropy, backward, AdamW — in the zoo's implementation and in the reference code's
    (`xxxnell/how-do-vits-work`, a checkout at `reference_dir`, imported from there and never copied), on the
    same batch, timed alternately. The zoo model runs as the engine runs it (channels-last by default)."""
    import statistics
    import sys
    from functools import partial

    if not (Path(reference_dir) / "models" / "alternet.py").is_file():
        raise ValueError(
            f"{reference_dir} is not a checkout of the reference code (no models/alternet.py): "
            "git clone https://github.com/xxxnell/how-do-vits-work and give its folder"
        )
    sys.path.insert(0, str(reference_dir))
    try:
        from models import alternet as reference_alternet
        from models import preresnet_dnn_block as reference_blocks
    finally:
        sys.path.remove(str(reference_dir))
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(batch_size, 3, 32, 32, generator=generator)
    labels = torch.randint(0, 100, (batch_size,), generator=generator)
    reference = reference_alternet.AlterNet(
        reference_blocks.Bottleneck,
        reference_alternet.AttentionBlockB,
        stem=partial(reference_alternet.StemB, pool=False),
        num_blocks=(3, 4, 6, 4),
        num_blocks2=(0, 1, 1, 2),  # the paper's layout, as the zoo's preset
        heads=(3, 6, 12, 24),
        num_classes=100,
        window_size=4,
        sd=0.1,
    )
    ours = create_model("alternet-50-cifar100", drop_path_rate=0.1)
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    ours = ours.to(memory_format=memory_format)
    ours_images = images.contiguous(memory_format=memory_format)
    if sum(p.numel() for p in ours.parameters()) != sum(p.numel() for p in reference.parameters()):
        raise RuntimeError("the reference model and the zoo's differ in size: not the same architecture")

    def step_of(model, batch, logits_of):
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        model.train()

        def step():
            loss = torch.nn.functional.cross_entropy(logits_of(model(batch)), labels)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        return step

    steps = {
        "reference": step_of(reference, images, lambda output: output),
        "alternet_hf": step_of(ours, ours_images, lambda output: output.logits),
    }
    for step in steps.values():
        step()  # warm-up
    seconds = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            started = time.process_time()
            step()
            seconds[name].append(time.process_time() - started)
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    return {
        "cpu_seconds_per_step": seconds,
        "median_cpu_seconds_per_step": medians,
        "ratio": medians["alternet_hf"] / medians["reference"],
        "batch_size": batch_size,
        "threads": torch.get_num_threads(),
        "channels_last": channels_last,
    }
