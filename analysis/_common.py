"""What every analysis shares: data in any of the usual shapes, logits out of any model, the model's
mode and buffers restored afterwards, and results as plain dataclasses of numpy arrays."""

import contextlib
import dataclasses
from collections.abc import Iterable, Iterator

import numpy as np
import torch
from torch import nn

Batch = tuple[torch.Tensor, torch.Tensor]


@dataclasses.dataclass
class AnalysisResult:
    """Base of every result: numpy arrays and plain values, `to_dict()` ready for `json.dump`."""

    def to_dict(self) -> dict:
        return {field.name: _plain(getattr(self, field.name)) for field in dataclasses.fields(self)}


def _plain(value):
    """`value` with numpy arrays and scalars as Python lists and numbers, tuples as lists, dict keys as strings."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _as_batch(batch) -> Batch:
    if isinstance(batch, dict):
        inputs = batch.get("pixel_values", batch.get("inputs"))
        targets = batch.get("labels", batch.get("label"))
        if inputs is None or targets is None:
            raise ValueError(f"a dict batch needs 'pixel_values' and 'labels'; got keys {sorted(batch)}")
        return inputs, targets
    if isinstance(batch, (tuple, list)) and len(batch) == 2:
        return batch[0], batch[1]
    raise ValueError(
        f"a batch must be (inputs, targets) or a dict with 'pixel_values' and 'labels', not {type(batch).__name__}"
    )


def iterate_batches(data, *, max_batches: int | None = None) -> Iterator[Batch]:
    """Yield `(inputs, targets)` from one batch or from an iterable of batches (a DataLoader).

    One batch is `(inputs, targets)` with tensors (or a dict with `pixel_values` and `labels`).
    """
    batches: Iterable = [data] if _is_single_batch(data) else data
    for index, batch in enumerate(batches):
        if max_batches is not None and index >= max_batches:
            return
        yield _as_batch(batch)


def iterate_inputs_and_targets(data, *, max_batches: int | None = None) -> Iterator[tuple[torch.Tensor, object]]:
    """Yield `(inputs, targets)` of each batch; a bare input tensor gives `(inputs, None)`."""
    if isinstance(data, torch.Tensor):
        yield data, None
        return
    yield from iterate_batches(data, max_batches=max_batches)


def _is_single_batch(data) -> bool:
    """One `(inputs, targets)` pair or batch dict, rather than an iterable of them."""
    if isinstance(data, dict):
        return "pixel_values" in data or "inputs" in data
    return isinstance(data, (tuple, list)) and len(data) == 2 and all(isinstance(x, torch.Tensor) for x in data)


def materialize(data, *, max_batches: int | None = None, device: torch.device | None = None) -> list[Batch]:
    """The batches, drawn once and kept: repeated evaluations (Lanczos steps, landscape points) then see
    the same augmented images, as the math assumes, instead of fresh augmentations each time."""
    batches = [(x.to(device), y.to(device)) for x, y in iterate_batches(data, max_batches=max_batches)]
    if not batches:
        raise ValueError("the data gave no batches")
    return batches


def logits_of(outputs) -> torch.Tensor:
    """Logits from a tensor, a transformers output with `.logits`, or a (logits, ...) tuple."""
    if isinstance(outputs, torch.Tensor):
        return outputs
    logits = getattr(outputs, "logits", None)
    if logits is None and isinstance(outputs, dict):
        logits = outputs.get("logits")
    if logits is None and isinstance(outputs, (tuple, list)) and outputs:
        logits = outputs[0]
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"cannot find logits in a {type(outputs).__name__}; return a tensor or an object with .logits")
    return logits


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (a CUDA device runs asynchronously): before reading a clock."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def resolve_device(model: nn.Module, device: str | torch.device | None) -> torch.device:
    """`device` if given (the model is moved there by the caller's context), else where the model lives."""
    if device is not None:
        return torch.device(device)
    parameter = next(model.parameters(), None)
    return parameter.device if parameter is not None else torch.device("cpu")


# The L2 term of "NLL + L2" per unit of weight decay, over every parameter tensor p: the reference's
# Σ_p ‖p‖ (its landscape code: norms, not squared) or ½·Σ_p ‖p‖² (the penalty whose gradient is weight decay).
L2_PENALTIES = ("reference", "squared")


def l2_term(parameters, penalty: str = "reference") -> torch.Tensor:
    """The L2 term of `parameters` (differentiable: the Hessian analyses take its second derivative).

    ‖p‖ has no derivative at p = 0 (autograd's second derivative there is NaN): an all-zero tensor, such
    as a bias never trained away from its initialisation, adds 0 and is left out of the derivatives.
    """
    parameters = list(parameters)
    if penalty == "reference":
        return sum(p.norm() for p in parameters if p.detach().any())
    if penalty == "squared":
        return 0.5 * sum(p.pow(2).sum() for p in parameters)
    raise ValueError(f"penalty must be one of {L2_PENALTIES}, not {penalty!r}")


BATCHNORM_MODES = ("eval", "train")


@contextlib.contextmanager
def analysis_mode(model: nn.Module, *, batchnorm: str = "eval", device: torch.device | None = None):
    """Run analyses in eval mode (no dropout or stochastic depth), BatchNorm as asked, then restore.

    `batchnorm="train"` normalises with each batch's own statistics, as the network does during
    training; the running statistics it would update are restored afterwards, as are every module's
    training flag and the model's device.
    """
    if batchnorm not in BATCHNORM_MODES:
        raise ValueError(f"batchnorm must be one of {BATCHNORM_MODES}, not {batchnorm!r}")
    flags = {module: module.training for module in model.modules()}
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    saved_buffers = [{k: v.detach().clone() for k, v in m.named_buffers(recurse=False)} for m in norms]
    original_device = resolve_device(model, None)
    try:
        if device is not None:
            model.to(device)
        model.eval()
        if batchnorm == "train":
            for module in norms:
                module.train()
        yield model
    finally:
        for module, buffers in zip(norms, saved_buffers):
            for name, value in buffers.items():
                getattr(module, name).copy_(value)
        for module, flag in flags.items():
            module.train(flag)
        model.to(original_device)


def model_normalization(model: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean and std a model's inputs are normalised with (its config's, else 0.5)."""
    config = getattr(model, "config", None)
    mean = getattr(config, "image_mean", None) or (0.5, 0.5, 0.5)
    std = getattr(config, "image_std", None) or (0.5, 0.5, 0.5)
    return torch.tensor(mean).view(1, -1, 1, 1), torch.tensor(std).view(1, -1, 1, 1)


def count_batches(data, max_batches: int | None = None) -> int | None:
    """How many batches `iterate_batches(data, max_batches=...)` will give, if that is known up front."""
    if isinstance(data, torch.Tensor) or _is_single_batch(data):
        return 1
    total = len(data) if hasattr(data, "__len__") else None
    if total is None:
        return max_batches
    return total if max_batches is None else min(total, max_batches)


def batches(data, *, max_batches: int | None = None, enabled: bool = False, desc: str, iterate=iterate_batches):
    """`iterate(data, max_batches=...)` (`iterate_batches`, or `iterate_inputs_and_targets` where targets are not
    needed) with a progress bar over the number of batches where it is known, when `enabled`."""
    total = count_batches(data, max_batches)
    return progress(iterate(data, max_batches=max_batches), enabled=enabled, total=total, desc=desc, unit="batch")


def progress(iterable, *, enabled: bool, **kwargs):
    """`iterable` with a tqdm bar when `enabled` (pass `total=` for generators)."""
    if not enabled:
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, **kwargs)


# Background of the blocks the paper's figures shade: MSAs grey, downsampling ("subsampling") blue.
SHADES = {"msa": ("0.85", "MSA"), "pool": ("#c6dbef", "downsampling")}


def shade_blocks(ax, kinds: list[str], positions=None) -> list:
    """Bands behind MSA and downsampling blocks; returns legend handles for the kinds present."""
    from matplotlib.patches import Patch

    positions = range(len(kinds)) if positions is None else positions
    for position, kind in zip(positions, kinds):
        if kind in SHADES:
            ax.axvspan(position - 0.5, position + 0.5, color=SHADES[kind][0], zorder=0, linewidth=0)
    return [Patch(color=SHADES[kind][0], label=SHADES[kind][1]) for kind in SHADES if kind in kinds]


def plot_by_depth(values, kinds: list[str], ax=None, *, ylabel: str, title: str, color: str):
    """One value per state (0 = input) against depth, MSA and downsampling blocks shaded: the paper's
    by-depth figures."""
    ax = new_axes(ax)
    depth = np.arange(len(kinds))
    handles = shade_blocks(ax, kinds, depth)
    ax.plot(depth, values, marker="o", markersize=3, color=color)
    ax.set_xlabel("depth (0 = input)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if handles:
        ax.legend(handles=handles, fontsize=7)
    return ax


def new_axes(ax, figsize=(5, 3.5)):
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=figsize, constrained_layout=True)[1]
