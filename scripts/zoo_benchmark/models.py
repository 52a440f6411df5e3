"""Speed of the zoo's models: images per second of bare forward and forward+backward steps (eager or compiled,
any autocast dtype), and a training step of AlterNet-50 against the reference implementation's."""

import statistics
import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch

from alternet_hf.models.presets import create_model
from analysis.inputs import choose_device
from analysis.shared import logits_of

from .timing import device_name, timed, timed_in_turn


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
    **overrides,
) -> Throughput:
    """Time `iterations` batches of random images after `warmup` untimed ones (compilation happens there) through
    the preset `name` (`overrides`: its config fields beyond the preset's)."""
    if mode not in ("forward", "forward+backward"):
        raise ValueError(f"mode must be 'forward' or 'forward+backward', got {mode!r}")
    device = choose_device(device)
    model = create_model(name, **overrides).to(device).to(memory_format=torch.channels_last)
    size = model.config.image_size
    pixel_values = torch.randn(batch_size, 3, size, size, device=device).to(memory_format=torch.channels_last)
    labels = torch.randint(0, model.config.num_labels, (batch_size,), device=device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    autocast = torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32)
    forward = torch.compile(model) if compiled else model
    training = mode != "forward"
    labelled = {"labels": labels} if training else {}

    def step():
        with autocast, torch.set_grad_enabled(training):
            output = forward(pixel_values, **labelled)
        if training:
            output.loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    model.train(training)
    seconds = timed(step, calls=iterations, warmup=warmup, device=device)[0] / iterations
    return Throughput(
        model=name,
        device=device_name(device),
        dtype=str(dtype).removeprefix("torch."),
        compiled=compiled,
        batch_size=batch_size,
        mode=mode,
        images_per_second=batch_size / seconds,
        milliseconds_per_batch=1000 * seconds,
    )


CIFAR100C_IMAGES = 15 * 5 * 10_000  # every corruption and severity of CIFAR-100-C


def evaluation_throughput(
    name: str,
    *,
    batch_size: int,
    variants: list[tuple[bool, bool]],
    device: str | torch.device | None = None,
    repeats: int = 3,
    **overrides,
) -> list[dict]:
    """Images/s of the release's CIFAR-100-C pass for the preset (or model folder) `name`, one row per (compiled,
    bf16) of `variants`, timed in turn batch by batch (`robustness.images_per_second_in_turn`: the compiled pass's
    gain over eager holds on a host whose speed drifts), also per core, and the hours all of CIFAR-100-C takes at that
    speed; compilation not timed."""
    from analysis.robustness import images_per_second_in_turn

    device = choose_device(device)
    model = create_model(name, **overrides).eval()
    rates = images_per_second_in_turn(model, variants, batch_size=batch_size, device=device, repeats=repeats)
    cores = torch.get_num_threads() if device.type == "cpu" else None
    return [
        {
            "model": name,
            "device": device_name(device),
            "compiled": compiled,
            "precision": "bf16" if bf16 else "float32",
            "batch_size": batch_size,
            "images_per_second": rate,
            "images_per_second_per_core": rate / cores if cores else None,
            "over_eager": rate / rates[False, bf16] if (False, bf16) in rates else None,
            "threads": cores,
            "cifar100c_hours": CIFAR100C_IMAGES / rate / 3600,
        }
        for (compiled, bf16), rate in rates.items()
    ]


def race_reference(
    reference_dir: str,
    *,
    batch_size: int = 32,
    inference_batch_sizes: tuple[int, ...] = (1, 256),
    repeats: int = 5,
) -> list[dict]:
    """AlterNet-50 for CIFAR-100, the zoo's against the reference code's (a checkout at `reference_dir`), both given
    each memory format and timed alternately by wall clock and CPU time: one row per memory format and pass, medians
    of `repeats`, ratios the zoo's over the reference's."""
    config = create_model("alternet-50-cifar100", drop_path_rate=0.1).config  # as the paper trains it
    reference_model = partial(reference_alternet, reference_dir, config)
    generator = torch.Generator().manual_seed(0)
    passes = [("forward", batch_size), ("forward+backward", batch_size)]
    passes += [("inference", size) for size in inference_batch_sizes]
    rows = []
    for memory_format in (torch.contiguous_format, torch.channels_last):
        models = {
            "reference": reference_model().to(memory_format=memory_format),
            "alternet_hf": create_model("alternet-50-cifar100", drop_path_rate=0.1).to(memory_format=memory_format),
        }
        for kind, size in passes:
            images = torch.randn(size, 3, 32, 32, generator=generator).contiguous(memory_format=memory_format)
            labels = torch.randint(0, 100, (size,), generator=generator)
            timings = timed_in_turn(
                {name: _pass(model, kind, images, labels) for name, model in models.items()}, repeats
            )
            seconds = {
                f"{clock}_seconds_{name}": statistics.median(values) for (clock, name), values in timings.items()
            }
            rows.append(
                dict(
                    memory_format="channels_last" if memory_format == torch.channels_last else "contiguous",
                    pass_=kind,
                    batch_size=size,
                    threads=torch.get_num_threads(),
                    **seconds,
                    wall_ratio=seconds["wall_seconds_alternet_hf"] / seconds["wall_seconds_reference"],
                    cpu_ratio=seconds["cpu_seconds_alternet_hf"] / seconds["cpu_seconds_reference"],
                )
            )
    return rows


REFERENCE_CODE = "https://github.com/xxxnell/how-do-vits-work"


def reference_alternet(reference_dir: str, config) -> torch.nn.Module:
    """The reference code's AlterNet (a checkout at `reference_dir`) in the layout of the zoo's AlterNet `config`:
    its blocks, attention blocks and heads per stage, classes, window and stochastic depth (the reference's widths are
    fixed: those of AlterNet-50). Raises ValueError, saying where to get the code, when the folder is not a checkout."""
    if not (Path(reference_dir) / "models" / "alternet.py").is_file():
        raise ValueError(
            f"{reference_dir} is not a checkout of the reference code (no models/alternet.py): "
            f"git clone {REFERENCE_CODE} and give its folder"
        )
    sys.path.insert(0, str(reference_dir))
    try:
        from models import alternet as reference_alternet
        from models import preresnet_dnn_block as reference_blocks
    finally:
        sys.path.remove(str(reference_dir))
    model = reference_alternet.AlterNet(
        reference_blocks.Bottleneck,
        reference_alternet.AttentionBlockB,
        stem=partial(reference_alternet.StemB, pool=False),
        num_blocks=tuple(config.depths),
        num_blocks2=tuple(config.num_attention_blocks),
        heads=tuple(config.num_attention_heads),
        num_classes=config.num_labels,
        window_size=config.window_size,
        sd=config.drop_path_rate,
    )
    from alternet_hf.models.modeling_alternet import AlterNetForImageClassification

    with torch.device("meta"):
        zoo_model = AlterNetForImageClassification(config)
    if sum(p.numel() for p in model.parameters()) != sum(p.numel() for p in zoo_model.parameters()):
        raise RuntimeError("the reference model and the zoo's differ in size: not the same architecture")
    return model


class ReferenceClassifier(torch.nn.Module):
    """The reference code's AlterNet (a checkout at `reference_dir`) in the layout of the zoo `model`, as the training
    engine takes a zoo model (`model_init`): its logits as `.logits`, and the zoo model's `config` (image size,
    normalisation, labels), which the engine reads."""

    def __init__(self, reference_dir: str, model: torch.nn.Module):
        super().__init__()
        self.model, self.config = reference_alternet(reference_dir, model.config), model.config

    def forward(self, pixel_values: torch.Tensor):
        from transformers.modeling_outputs import ImageClassifierOutput

        return ImageClassifierOutput(logits=self.model(pixel_values))


def _pass(model: torch.nn.Module, kind: str, images: torch.Tensor, labels: torch.Tensor):
    """One `kind` of pass (`forward`, `forward+backward`, `inference`: eval, no grad) of `model` on `images`."""
    model.train(kind != "inference")

    def run():
        with torch.set_grad_enabled(kind != "inference"):
            logits = logits_of(model(images))
        if kind == "forward+backward":
            torch.nn.functional.cross_entropy(logits, labels).backward()
            model.zero_grad(set_to_none=True)

    return run
