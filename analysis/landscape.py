"""Loss landscapes along random normalised directions (Li et al. 2018; Park & Kim 2022, Fig. 1; docs/paper.md §6).

The loss is NLL + the L2 term (`analysis.shared.l2_term`, the Hessian's) on batches drawn once, on an odd grid whose
centre is the trained weights exactly, under one of two protocols:

- `"filter"` (Li et al.): each direction Gaussian, rescaled filter by filter (each slice along dim 0) to the norm of
  the weights it perturbs; parameters of one dimension, position tables and class tokens fixed; BatchNorm in train
  mode.
- `"reference"` (the paper's code, `ops/loss_landscapes.py` of how-do-vits-work, which made Fig. 1): each direction
  normalised over dim 0; every parameter of two or more dimensions perturbed but position tables; BatchNorm in eval
  mode.
"""

import itertools
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from . import shared
from .hessian import cross_entropy_loss
from .shared import AnalysisResult, analysis_mode, l2_term, logits_of, materialize, new_axes

# Parameters named like this are embeddings of positions or tokens, not filters: never perturbed under "filter".
FIXED_NAME_PARTS = ("position", "pos_embed", "cls_token", "mask_token", "register_tokens")
# The reference excludes its "pos_embed" and "relative_position" tables; "position" covers transformers' names.
REFERENCE_FIXED_NAME_PARTS = ("position", "pos_embed", "relative_position")
# protocol -> BatchNorm mode it evaluates in
PROTOCOLS = {"filter": "train", "reference": "eval"}


@dataclass
class LandscapeResult(AnalysisResult):
    """`loss[i]` (1-D) or `loss[i, j]` (2-D) at weights w + coordinates[i]·d1 (+ coordinates[j]·d2): `nll` +
    `weight_decay` × the `penalty` L2 term, under `protocol` with BatchNorm in `batchnorm` mode."""

    coordinates: np.ndarray
    loss: np.ndarray
    nll: np.ndarray
    accuracy: np.ndarray
    weight_decay: float
    penalty: str
    protocol: str = "filter"
    batchnorm: str = "train"


def is_perturbed(name: str, parameter: torch.Tensor, protocol: str = "filter") -> bool:
    """Which parameters a direction moves under `protocol` (see the module docstring)."""
    fixed = REFERENCE_FIXED_NAME_PARTS if protocol == "reference" else FIXED_NAME_PARTS
    return parameter.ndim > 1 and not any(part in name for part in fixed)


def filter_normalized_direction(model: nn.Module, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """A Gaussian direction with each filter (slice along dim 0) scaled to its weight's norm."""
    return normalized_direction(model, generator, protocol="filter")


def normalized_direction(
    model: nn.Module, generator: torch.Generator, *, protocol: str = "filter"
) -> dict[str, torch.Tensor]:
    """A Gaussian direction over the parameters `protocol` perturbs, normalised as it prescribes."""
    direction = {}
    for name, parameter in model.named_parameters():
        if not is_perturbed(name, parameter, protocol):
            continue
        noise = torch.randn(parameter.shape, generator=generator, dtype=torch.float64).to(parameter.device)
        weight = parameter.detach().double()
        if protocol == "reference":
            scale = weight.norm(dim=0, keepdim=True) / (noise.norm(dim=0, keepdim=True) + 1e-7)
        else:
            scale = weight.flatten(1).norm(dim=1) / noise.flatten(1).norm(dim=1).clamp_min(1e-12)
            scale = scale.view(-1, *[1] * (noise.ndim - 1))
        direction[name] = (noise * scale).to(parameter.dtype)
    return direction


def symmetric_grid(num_points: int, span: float) -> np.ndarray:
    """`num_points` (odd) coordinates from -span to span whose middle one is exactly 0."""
    if num_points < 1 or num_points % 2 == 0:
        raise ValueError(f"num_points must be odd so that the grid contains the trained weights, not {num_points}")
    half = num_points // 2
    return np.arange(-half, half + 1) / max(half, 1) * span


@torch.no_grad()
def _evaluate(model, batches, loss_fn) -> tuple[float, float]:
    total_loss, correct, count = 0.0, 0, 0
    for inputs, targets in batches:
        logits = logits_of(model(inputs))
        total_loss += loss_fn(logits, targets).item() * len(targets)
        hard = targets.argmax(dim=-1) if targets.ndim > 1 else targets
        correct += (logits.argmax(dim=-1) == hard).sum().item()
        count += len(targets)
    return total_loss / count, correct / count


def loss_landscape(
    model: nn.Module,
    data,
    *,
    num_directions: int = 2,
    num_points: int = 21,
    span: float = 1.0,
    weight_decay: float = 0.05,
    penalty: str = "reference",
    protocol: str = "filter",
    loss_fn=None,
    batchnorm: str | None = None,
    max_batches: int | None = None,
    seed: int = 0,
    device: str | torch.device | None = None,
    progress: bool = False,
) -> LandscapeResult:
    """The loss on a 1-D line or 2-D plane of weights through the trained ones. `loss_fn(logits, targets)`: default
    the mean NLL (targets may be soft); `batchnorm` ("train" or "eval") overrides the `protocol`'s own mode."""
    if num_directions not in (1, 2):
        raise ValueError(f"num_directions must be 1 or 2, not {num_directions}")
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {sorted(PROTOCOLS)}, not {protocol!r}")
    batchnorm = batchnorm or PROTOCOLS[protocol]
    coordinates = symmetric_grid(num_points, span)
    loss_fn = loss_fn or cross_entropy_loss
    device = shared.resolve_device(model, device)
    batches = materialize(data, max_batches=max_batches, device=device)
    generator = torch.Generator().manual_seed(seed)
    with analysis_mode(model, batchnorm=batchnorm, device=device), torch.no_grad():
        parameters = dict(model.named_parameters())
        directions = [normalized_direction(model, generator, protocol=protocol) for _ in range(num_directions)]
        original = {name: parameters[name].detach().clone() for name in directions[0]}
        points = list(itertools.product(coordinates, repeat=num_directions))
        values = []  # (NLL, accuracy, L2 term) at each point
        try:
            for point in shared.progress(points, enabled=progress, desc="loss landscape", unit="point"):
                for name, weight in original.items():
                    # From the original each time: no drift, and the centre is the trained weights bit for bit.
                    moved = weight.clone()
                    for step, direction in zip(point, directions):
                        moved += step * direction[name]
                    parameters[name].copy_(moved)
                l2 = l2_term([p.detach().double() for p in model.parameters()], penalty).item()
                values.append((*_evaluate(model, batches, loss_fn), l2))
        finally:
            for name, weight in original.items():
                parameters[name].copy_(weight)
    shape = (num_points,) * num_directions
    nll, accuracy, l2 = (np.array(column).reshape(shape) for column in zip(*values))
    return LandscapeResult(
        coordinates, nll + weight_decay * l2, nll, accuracy, weight_decay, penalty, protocol, batchnorm
    )


def plot_landscape(result: LandscapeResult, ax=None, *, kind: str = "contour", levels=15, norm=None):
    """A 1-D loss curve, or for a 2-D landscape a contour map (`kind="contour"`, labelled lines at `levels`: a count
    or the loss values, e.g. shared by several models), filled contours (`kind="filled"`, on `levels`, for one
    colour bar across models, with `norm`, e.g. a LogNorm) or a 3-D surface (`kind="surface"`; a given `ax` must then
    be a 3-D axes)."""
    import matplotlib.pyplot as plt

    if result.loss.ndim == 1:
        ax = new_axes(ax)
        ax.plot(result.coordinates, result.loss)
        ax.set_xlabel("direction 1")
        ax.set_ylabel("loss (NLL + L2)")
        return ax
    if result.loss.size == 1:  # a one-point grid: the trained weights alone, nothing to draw contours of
        ax = new_axes(ax)
        ax.plot([0], [0], marker="*", color="k")
        ax.set_title(f"Loss at the trained weights: {result.loss.item():.4g} (NLL + L2)")
        return ax
    x, y = np.meshgrid(result.coordinates, result.coordinates, indexing="ij")
    if kind == "surface":
        if ax is None:
            ax = plt.figure(figsize=(5, 4), constrained_layout=True).add_subplot(projection="3d")
        ax.plot_surface(x, y, result.loss, cmap="viridis", linewidth=0, antialiased=True)
        ax.set_zlabel("loss")
    elif kind == "contour":
        ax = new_axes(ax, figsize=(4.5, 4))
        contours = ax.contour(x, y, result.loss, levels=levels, cmap="viridis")
        ax.clabel(contours, fontsize=6)
        ax.plot([0], [0], marker="*", color="k")
        ax.set_aspect("equal")
    elif kind == "filled":
        ax = new_axes(ax, figsize=(4.5, 4))
        ax.contourf(x, y, result.loss, levels=levels, cmap="viridis", norm=norm, extend="both")
        ax.contour(x, y, result.loss, levels=levels, colors="k", linewidths=0.3, alpha=0.5)
        ax.plot([0], [0], marker="*", color="w", markeredgecolor="k")
        ax.set_aspect("equal")
    else:
        raise ValueError(f"kind must be 'contour', 'filled' or 'surface', not {kind!r}")
    ax.set_xlabel("direction 1")
    ax.set_ylabel("direction 2")
    ax.set_title(f"Loss landscape (NLL + L2, {result.protocol} protocol)")
    return ax


# --- as the analysis commands run it (analysis.registry) -------------------------------------------------------


def landscape_analysis(model: nn.Module, inputs, settings, *, on_partial=None, **common) -> LandscapeResult:
    return loss_landscape(
        model,
        inputs.train(),
        num_points=settings.landscape_points,
        span=settings.landscape_span,
        weight_decay=settings.weight_decay,
        penalty=settings.penalty,
        protocol=settings.landscape_protocol,
        batchnorm=settings.batchnorm,
        max_batches=settings.landscape_batches,
        seed=settings.seed,
        **common,
    )


def landscape_figure(result: LandscapeResult):
    import matplotlib.pyplot as plt

    figure = plt.figure(figsize=(10, 4), constrained_layout=True)
    plot_landscape(result, figure.add_subplot(1, 2, 1), kind="contour")
    plot_landscape(result, figure.add_subplot(1, 2, 2, projection="3d"), kind="surface")
    return figure


def landscape_summary(result: LandscapeResult) -> str:
    centre = result.loss[(len(result.coordinates) // 2,) * result.loss.ndim]
    return (
        f"landscape ({result.protocol} protocol): loss {centre:.4f} at the trained weights, "
        f"max {result.loss.max():.4f} on the grid"
    )


def landscape_estimate(costs: dict, settings) -> tuple[float, str] | None:
    if "train_forward" not in costs:
        return None
    points = settings.landscape_points**2
    return (
        points * settings.landscape_batches * costs["train_forward"],
        f"{points} grid points × {settings.landscape_batches} minibatch",
    )


def landscape_comparison(found: dict[str, LandscapeResult]):
    """The loss's rise along each direction from the trained weights, every model on one axis, and each one's map."""
    figure, axes = shared.row_of_axes(1 + len(found), 4.2, 3.8)
    colours = shared.model_colours(list(found))
    ax = axes[0]
    for name, result in found.items():
        loss = np.asarray(result.loss)
        centre = len(result.coordinates) // 2
        slices = [loss] if loss.ndim == 1 else [loss[:, centre], loss[centre, :]]
        for direction, values in enumerate(slices):
            ax.plot(
                result.coordinates,
                values - loss[(centre,) * loss.ndim],
                color=colours[name],
                linestyle="-" if direction == 0 else ":",
                label=name if direction == 0 else None,
            )
    protocols = sorted({r.protocol for r in found.values()})
    ax.set(
        xlabel="step along direction 1 (solid) / 2 (dotted)",
        ylabel="loss − loss at the trained weights",
        title=f"Loss-landscape slices ({', '.join(protocols)} protocol)",
    )
    shared.legend_beside(ax, fontsize=7)
    # One colour scale for every model's map (each on its own linear levels made the flattest look the sharpest),
    # logarithmic where the losses span decades (the reference protocol's edges reach thousands).
    from matplotlib import cm, colors

    maps = [np.asarray(r.loss) for r in found.values() if np.asarray(r.loss).ndim == 2 and np.asarray(r.loss).size > 1]
    low, high = (min(m.min() for m in maps), max(m.max() for m in maps)) if maps else (0.0, 0.0)
    one_scale = bool(maps) and low < high
    logarithmic = one_scale and low > 0 and high / low > 10
    levels = np.geomspace(low, high, 16) if logarithmic else np.linspace(low, high, 16) if one_scale else 15
    norm = colors.LogNorm(low, high) if logarithmic else colors.Normalize(low, high) if one_scale else None
    for ax, (name, result) in zip(axes[1:], found.items()):
        if one_scale and np.asarray(result.loss).ndim == 2 and np.asarray(result.loss).size > 1:
            plot_landscape(result, ax=ax, kind="filled", levels=levels, norm=norm)
        else:
            plot_landscape(result, ax=ax)
        ax.set_title(f"{name}: NLL + L2", fontsize=9)
    if one_scale:
        label = f"loss (NLL + L2), one {'log ' if logarithmic else ''}scale for all models"
        figure.colorbar(cm.ScalarMappable(norm=norm, cmap="viridis"), ax=list(axes[1:]), label=label, shrink=0.9)
    return figure
