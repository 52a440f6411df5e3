"""What every analysis shares: data in any of the usual shapes, logits out of any model, the model's
mode and buffers restored afterwards, and results as plain dataclasses of numpy arrays."""

import contextlib
import dataclasses
import math
from collections.abc import Iterable, Iterator

import numpy as np
import torch
from torch import nn

from alternet_hf.data.augmentation import channel_statistics

Batch = tuple[torch.Tensor, torch.Tensor]


@dataclasses.dataclass
class AnalysisResult:
    """Base of every result: numpy arrays and plain values, `to_dict()` ready for `json.dump`."""

    def to_dict(self) -> dict:
        return {field.name: plain(getattr(self, field.name)) for field in dataclasses.fields(self)}


def plain(value, *, nulls: bool = False):
    """`value` with numpy arrays and scalars as Python lists and numbers, tuples as lists, dict keys as strings; with
    `nulls`, NaN and infinities as None (JSON has neither: what is written to a file)."""
    if isinstance(value, (np.ndarray, np.generic)):
        value = value.tolist()  # a numpy scalar's is its Python number
    if isinstance(value, (list, tuple)):
        return [plain(v, nulls=nulls) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v, nulls=nulls) for k, v in value.items()}
    if nulls and isinstance(value, float) and not math.isfinite(value):
        return None
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
    """Yield `(inputs, targets)` from one batch (two tensors, or a dict with `pixel_values` and `labels`) or from an
    iterable of batches (a DataLoader)."""
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
    """The batches, drawn once and kept: every Lanczos step or landscape point sees the same augmented images."""
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
    """The L2 term of `parameters`, differentiable twice for the Hessian: ‖p‖ has no derivative at p = 0 (autograd
    gives NaN), so an all-zero tensor, such as a bias never trained away from zero, is left out."""
    parameters = list(parameters)
    if penalty == "reference":
        return sum(p.norm() for p in parameters if p.detach().any())
    if penalty == "squared":
        return 0.5 * sum(p.pow(2).sum() for p in parameters)
    raise ValueError(f"penalty must be one of {L2_PENALTIES}, not {penalty!r}")


BATCHNORM_MODES = ("eval", "train")


@contextlib.contextmanager
def analysis_mode(model: nn.Module, *, batchnorm: str = "eval", device: torch.device | None = None):
    """Eval mode (no dropout or stochastic depth) on `device`, BatchNorm with each batch's own statistics where
    `batchnorm="train"`; afterwards the running statistics, every module's training flag and the device restored.
    Yields the device it runs on (`resolve_device`)."""
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
        yield resolve_device(model, device)
    finally:
        for module, buffers in zip(norms, saved_buffers):
            for name, value in buffers.items():
                getattr(module, name).copy_(value)
        for module, flag in flags.items():
            module.train(flag)
        model.to(original_device)


def model_normalization(model: nn.Module, mean=None, std=None, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean and std to normalise a model's inputs with (those given, else its config's, else 0.5), as
    `alternet_hf.data.augmentation.channel_statistics` gives them on `device`."""
    config = getattr(model, "config", None)
    mean = (getattr(config, "image_mean", None) or (0.5, 0.5, 0.5)) if mean is None else mean
    std = (getattr(config, "image_std", None) or (0.5, 0.5, 0.5)) if std is None else std
    return channel_statistics(mean, std, device)


def minibatches(count: int) -> str:
    """ "1 minibatch", "2 minibatches": how every summary and warning counts them."""
    return f"{count} minibatch{'es' * (count != 1)}"


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
SHADES = {"msa": "0.85", "pool": "#c6dbef"}
KIND_LABELS = {"msa": "MSA", "pool": "downsampling", "mlp": "MLP", "conv": "Conv"}


def shade_blocks(ax, kinds: list[str], positions=None) -> list:
    """Bands behind MSA and downsampling blocks; returns legend handles for the kinds present."""
    from matplotlib.patches import Patch

    positions = range(len(kinds)) if positions is None else positions
    for position, kind in zip(positions, kinds):
        if kind in SHADES:
            ax.axvspan(position - 0.5, position + 0.5, color=SHADES[kind], zorder=0, linewidth=0)
    return [Patch(color=SHADES[kind], label=KIND_LABELS[kind]) for kind in SHADES if kind in kinds]


def plot_by_depth(values, kinds: list[str], ax=None, *, ylabel: str, title: str, color: str):
    """One value per state (0 = input) against depth, MSA and downsampling blocks shaded: the paper's figures."""
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


def legend_beside(ax, **options):
    """The legend to the right of the axes, off the data, as every figure of several curves has it."""
    return ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, **options)


def new_axes(ax, figsize=(5, 3.5)):
    """`ax`, else the axes of a new figure of `figsize`."""
    return ax if ax is not None else row_of_axes(1, *figsize)[1][0]


# --- figures of several models (the comparisons) -------------------------------------------------------

# Every kind visibly coloured on a white page (a white Conv swatch read as a gap).
STRIP_COLOURS = {
    "msa": "0.55",
    "pool": "#6baed6",
    "conv": "#f6dfb2",
    "mlp": "#b8e0b0",
    "stem": "0.88",
    "head": "0.88",
    "input": "0.97",
}
KIND_MARKERS = {"msa": "o", "pool": "v", "conv": "D", "mlp": "s", "stem": "x", "head": "x", "input": "."}


def normalized_depth(count: int) -> np.ndarray:
    """0 … 1 over `count` states, as the reference notebooks plot depth."""
    return np.arange(count) / max(count - 1, 1)


def model_colours(names) -> dict:
    """One colour of the default cycle per model, in order."""
    import matplotlib.pyplot as plt

    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return {name: palette[i % len(palette)] for i, name in enumerate(names)}


def by_depth_figure(
    series: dict[str, tuple[np.ndarray, list[str]]],
    *,
    ylabel: str,
    title: str,
    log: bool = False,
    extra: dict[str, np.ndarray] | None = None,
    extra_label: str = "",
):
    """One axis with every model's curve over normalised depth (markers by block kind), and below it one
    strip per model showing where its MSA and downsampling blocks are."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    names = list(series)
    colours = model_colours(names)
    figure = plt.figure(figsize=(7.5, 3.6 + 0.32 * len(names)), constrained_layout=True)
    grid = figure.add_gridspec(1 + len(names), 1, height_ratios=[8] + [1] * len(names))
    ax = figure.add_subplot(grid[0])
    for name in names:
        values, kinds = series[name]
        depth = normalized_depth(len(kinds))
        ax.plot(depth, values, color=colours[name], linewidth=1.2, label=name)
        for kind in dict.fromkeys(kinds):  # one drawing order, so one figure, whatever the hash seed
            chosen = [i for i, k in enumerate(kinds) if k == kind]
            filled = kind in ("msa", "pool")
            ax.scatter(
                depth[chosen],
                np.asarray(values)[chosen],
                marker=KIND_MARKERS.get(kind, "."),
                s=22 if filled else 12,
                color=colours[name],
                facecolors=colours[name] if filled else "none",
                zorder=3,
            )
        if extra and name in extra:
            ax.plot(depth, extra[name], color=colours[name], linewidth=0.8, linestyle="--")
    if log:
        ax.set_yscale("log")
    ax.set(ylabel=ylabel, title=title, xlim=(-0.02, 1.02))
    ax.tick_params(labelbottom=False)
    kinds_present = sorted({k for _, kinds in series.values() for k in kinds} & set(KIND_LABELS))
    handles = [Line2D([], [], color=colours[n], label=n) for n in names]
    handles += [Line2D([], [], linestyle="", marker=KIND_MARKERS[k], color="0.3", label=k) for k in kinds_present]
    if extra:
        handles.append(Line2D([], [], color="0.3", linestyle="--", label=extra_label))
    # the strips' colours too: one legend, off the data
    handles += [
        Patch(facecolor=STRIP_COLOURS[k], edgecolor="0.5", label=f"strip: {KIND_LABELS[k]}") for k in KIND_LABELS
    ]
    legend_beside(ax, handles=handles, fontsize=7)
    for row, name in enumerate(names, start=1):
        strip = figure.add_subplot(grid[row], sharex=ax)
        kinds = series[name][1]
        depth = normalized_depth(len(kinds))
        half = 0.5 / max(len(kinds) - 1, 1)
        for position, kind in zip(depth, kinds):
            strip.axvspan(position - half, position + half, color=STRIP_COLOURS.get(kind, "white"), linewidth=0)
        strip.set_yticks([])
        strip.set_ylabel(name, rotation=0, ha="right", va="center", fontsize=7)
        strip.tick_params(labelbottom=row == len(names), labelsize=7)
    strip.set_xlabel("normalised depth (0 = input)")
    return figure


def row_of_axes(count: int, width: float, height: float):
    """A figure of `count` axes side by side, each `width` × `height` inches, and its axes."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, count, figsize=(width * count, height), squeeze=False, constrained_layout=True)
    return figure, axes[0]


def panels(found: dict, plot, title: str, size: tuple[float, float]):
    """One panel per model, side by side, each drawn by `plot(result, ax=...)` and titled `<model>: title`."""
    figure, axes = row_of_axes(len(found), *size)
    for ax, (name, result) in zip(axes, found.items()):
        plot(result, ax=ax)
        ax.set_title(f"{name}: {title}", fontsize=9)
    return figure


def as_arrays(values: dict) -> dict:
    """JSON lists back as float arrays (a result nested in another, such as the Hessian's density)."""
    return {key: np.asarray(value, dtype=float) if isinstance(value, list) else value for key, value in values.items()}


def last_with_map(values, kinds: list[str]) -> tuple[float, str]:
    """The value and kind of the last state with a feature map (PiT's head, its class token alone, has none: NaN)."""
    values = np.asarray(values, dtype=float)
    index = max(i for i in range(len(values)) if np.isfinite(values[i]) or i == 1)
    return values[index], kinds[index]


def passes(costs: dict, count: int) -> tuple[float, str]:
    """The time estimate of `count` passes over the test batches (`runner.measure_costs`)."""
    batches = costs["test_batches"]
    return count * costs["test_forward"] * batches, f"{count} passes over {batches} test batches"
