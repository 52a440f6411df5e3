"""What only `scripts/device_check.py` measures: the machine, bf16 against fp32, and the training engine in steady
state."""

import gc
import importlib.metadata
import itertools
import os
import platform
import time
import warnings
from contextlib import contextmanager
from functools import partial

import torch

from analysis.inputs import choose_device
from analysis.shared import synchronize

from .timing import device_name, timed

PACKAGES = ("torch", "triton", "transformers", "timm", "accelerate", "datasets", "huggingface_hub", "numpy", "pyarrow")


def environment() -> dict:
    """Python, the packages the zoo runs on, the CPU and the accelerator."""
    versions = {}
    for package in PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    found = {
        "python": platform.python_version(),
        "packages": versions,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": "cpu",
    }
    if torch.cuda.is_available():
        properties = torch.cuda.get_device_properties(0)
        found.update(
            device=properties.name,
            capability=f"{properties.major}.{properties.minor}",
            memory_gib=round(properties.total_memory / 2**30, 1),
            multiprocessors=properties.multi_processor_count,
            cuda=torch.version.cuda,
        )
    return found


def matmul_rate(size: int, dtype: torch.dtype, *, repeats: int = 10) -> float:
    """FLOP/s of a `size`³ matrix product on random data: the ceiling the engine's share of the peak is read against."""
    device = choose_device()
    generator = torch.Generator(device).manual_seed(0)
    a, b = (torch.randn(size, size, device=device, dtype=dtype, generator=generator) for _ in range(2))
    (seconds,) = timed(lambda: a @ b, calls=repeats, warmup=3, device=device)
    return 2 * size**3 * repeats / seconds


def precision_gap(name: str, *, batch_size: int, seed: int = 0, **overrides) -> dict:
    """bf16 autocast against strict fp32 (no TF32) on one batch of random images: the relative error of the logits and
    of the gradient's norm, and how often the top-1 classes agree. In eval mode, so that both passes compute the same
    function and the difference is the arithmetic's alone."""
    from alternet_hf.models.presets import create_model
    from alternet_hf.training.engine import training_loss

    device = choose_device()
    torch.manual_seed(seed)
    model = create_model(name, **overrides).to(device).to(memory_format=torch.channels_last).eval()
    size, num_labels = model.config.image_size, model.config.num_labels
    generator = torch.Generator().manual_seed(seed)
    images = torch.randn(batch_size, 3, size, size, generator=generator).to(device, memory_format=torch.channels_last)
    labels = torch.randint(0, num_labels, (batch_size,), generator=generator).to(device)
    parameters = [p for p in model.parameters() if p.requires_grad]

    def one_pass(bf16: bool):
        model.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            logits = model(images).logits
        loss = training_loss(logits, labels)
        loss.backward()
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad.float()) for p in parameters]))
        return logits.detach().float(), norm.item(), loss.item()

    matmul, convolution = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        logits, norm, loss = one_pass(bf16=False)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, convolution
    logits_bf16, norm_bf16, loss_bf16 = one_pass(bf16=True)
    return {
        "model": name,
        "batch_size": batch_size,
        "device": str(device),
        "logits_relative_error": (torch.linalg.norm(logits_bf16 - logits) / torch.linalg.norm(logits)).item(),
        "gradient_norm_relative_error": abs(norm_bf16 - norm) / norm,
        "loss_fp32": loss,
        "loss_bf16": loss_bf16,
        "top1_agreement": (logits_bf16.argmax(-1) == logits.argmax(-1)).float().mean().item(),
    }


@contextmanager
def counting_syncs():
    """A list that fills with one entry per synchronizing CUDA call made inside the block (None off CUDA)."""
    if not torch.cuda.is_available():
        yield None
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield caught
        finally:
            torch.cuda.set_sync_debug_mode("default")


def engine_steady_state(
    name: str,
    *,
    dataset: str,
    workdir: str,
    compiled: bool,
    bf16: bool,
    compile_mode: str = "auto",
    batch_size: int | None = None,
    num_workers: int | None = None,
    warmup_steps: int = 10,
    seconds: float = 5.0,
    min_steps: int = 10,
    model_overrides: dict | None = None,
    reference_dir: str | None = None,
) -> dict:
    """The paper recipe's training steps for preset `name` through the engine's own `TrainingSession` on the
    CIFAR-schema `dataset`, timed for `seconds` (at least `min_steps` steps) after `warmup_steps` untimed ones.
    `reference_dir`: a checkout of the reference code, whose AlterNet (in the preset's layout) the engine trains
    instead, as its users run it (contiguous tensors); everything else, data, batch and optimizer included, the same."""
    from accelerate.state import AcceleratorState
    from torch._dynamo.utils import counters
    from tqdm.auto import tqdm

    from alternet_hf.training.engine import TrainingSession
    from alternet_hf.training.recipe import recipe_config

    from .flops import ASSUMED_UTILISATION, H100_BF16_FLOPS, training_flops_per_image
    from .models import ReferenceClassifier

    recipe = recipe_config(name)
    overrides = {**recipe.model_overrides, **(model_overrides or {})}
    config = recipe_config(
        name,
        dataset=dataset,
        image_column="img",
        batch_size=batch_size or recipe.batch_size,
        num_workers=recipe.num_workers if num_workers is None else num_workers,
        compile=compiled,
        compile_mode=compile_mode,
        mixed_precision="bf16" if bf16 else "no",
        output_dir=workdir,
        eval_batch_size=1,
        save_every_minutes=None,
        model_overrides=overrides,
        **({"channels_last": False} if reference_dir else {}),
    )
    torch._dynamo.reset()
    counters.clear()
    AcceleratorState._reset_state(reset_partial_state=True)  # one Accelerator per run, each its own precision
    started = time.perf_counter()
    session = TrainingSession(config)
    session.build(model_init=None if reference_dir is None else partial(ReferenceClassifier, reference_dir))
    session.start(resume=False)

    def epochs(session):
        for epoch in itertools.count():
            session.train_loader.set_epoch(epoch)
            session.augmentation.epoch = epoch  # before the iterator exists: its workers read it
            yield from session.train_loader

    batches = epochs(session)
    quiet = tqdm(disable=True)
    try:
        session.train_batches(itertools.islice(batches, warmup_steps), quiet)
        session.read_losses()
        synchronize(choose_device())
        warmup_seconds = time.perf_counter() - started
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        session.timing["data"] = 0.0
        first_step, stop_at = session.state.step_in_epoch, time.perf_counter() + seconds

        def until_time_is_up():
            steps = 0
            while steps < min_steps or time.perf_counter() < stop_at:
                yield next(batches)
                steps += 1

        with counting_syncs() as syncs:
            timed_from = time.perf_counter()
            session.train_batches(until_time_is_up(), quiet)
            session.read_losses()
            synchronize(choose_device())
            elapsed = time.perf_counter() - timed_from
        steps = session.state.step_in_epoch - first_step
    finally:
        batches.close()
        session.accelerator.end_training()
    peak = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None
    images_per_second = steps * config.batch_size / elapsed
    flops = training_flops_per_image(name, **overrides)
    graphs = counters["stats"]["unique_graphs"]
    result = {
        "model": name,
        "code": "reference" if reference_dir else "alternet_hf",
        "channels_last": config.channels_last,
        "precision": "bf16" if bf16 else "fp32",
        "compiled": compiled,
        "compile_mode": session.compile_mode,
        "batch_size": config.batch_size,
        "num_workers": config.num_workers,
        "device": device_name(),
        "warmup_seconds": warmup_seconds,
        "steps": steps,
        "seconds": elapsed,
        "images_per_second": images_per_second,
        "milliseconds_per_step": 1000 * elapsed / steps,
        "data_wait_share": session.timing["data"] / elapsed,
        "syncs_per_step": None if syncs is None else sum("synchroniz" in str(w.message) for w in syncs) / steps,
        "graph_breaks": sum(counters["graph_break"].values()),
        "recompiles": max(graphs - 1, 0) if compiled else None,
        "peak_memory_gib": peak,
        "flops_per_image": flops,
        "tflops_per_second": flops * images_per_second / 1e12,
        "share_of_bf16_peak": flops * images_per_second / H100_BF16_FLOPS if torch.cuda.is_available() else None,
        "goal_share_of_bf16_peak": ASSUMED_UTILISATION,
    }
    del session
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return result
