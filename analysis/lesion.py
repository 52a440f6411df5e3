"""Lesion study (Park & Kim 2022, Fig. 11; docs/paper.md §6): the accuracy lost when one block's residual branch is
removed. A forward hook zeroes the branch's output, leaving the block's shortcut, with nothing rebuilt or copied, on
any model whose branches can be named (`analysis.blocks`).
"""

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from . import shared
from .blocks import AccuracyAccumulator, AccuracyResult, BlockAdapter, describe_blocks, residual_branches
from .shared import AnalysisResult, analysis_mode, materialize, new_axes


@dataclass
class LesionResult(AnalysisResult):
    """Accuracy and mean NLL with block i's residual branch removed (NaN for blocks without one)."""

    kinds: list[str]
    baseline_accuracy: float
    baseline_nll: float
    accuracy: np.ndarray
    nll: np.ndarray
    num_samples: int

    @property
    def accuracy_drop(self) -> np.ndarray:
        """Baseline minus lesioned accuracy per block: how much the network relies on that block."""
        return self.baseline_accuracy - np.asarray(self.accuracy)


def zero_branch_output(module: nn.Module, args, output):
    """Forward hook that removes a residual branch; of a tuple (output, attention weights, ...) only the
    first element is the branch's contribution to the residual stream."""
    if isinstance(output, tuple):
        return (torch.zeros_like(output[0]), *output[1:])
    return torch.zeros_like(output)


def _evaluate(model: nn.Module, batches: list[shared.Batch], device) -> AccuracyResult:
    accumulator = AccuracyAccumulator()
    for inputs, targets in batches:
        accumulator.add(model(inputs.to(device, non_blocking=True)), targets)
    return accumulator.result()


@torch.no_grad()
def lesion_study(
    model: nn.Module,
    data,
    *,
    adapter: BlockAdapter | None = None,
    max_batches: int | None = None,
    device: str | torch.device | None = None,
    progress: bool = False,
) -> LesionResult:
    """Accuracy and NLL of `model` on `data` intact, then once per residual block with its branch removed, on batches
    drawn once (every lesion sees the same images) and kept where the loader made them (a test set may not fit on the
    GPU), moved to `device` one at a time."""
    adapter = describe_blocks(model, adapter)
    kinds = adapter.kinds
    branches = residual_branches(model, adapter)
    batches = materialize(data, max_batches=max_batches)
    accuracy, nll = np.full(len(kinds), np.nan), np.full(len(kinds), np.nan)
    lesions = [(index, branch) for index, branch in enumerate(branches) if branch is not None]
    with analysis_mode(model, device=device) as device:
        baseline = _evaluate(model, batches, device)
        for index, branch in shared.progress(lesions, enabled=progress, desc="lesion", unit="block"):
            handle = branch.register_forward_hook(zero_branch_output)
            try:
                lesioned = _evaluate(model, batches, device)
            finally:
                handle.remove()
            accuracy[index], nll[index] = lesioned.accuracy, lesioned.nll
    return LesionResult(kinds, baseline.accuracy, baseline.nll, accuracy, nll, baseline.num_samples)


# Bar colours and labels of the lesion plot by block kind (the shading behind them is `shared.SHADES`).
BAR_COLOURS = {"conv": "tab:blue", "mlp": "tab:green", "msa": "tab:orange", "pool": "tab:purple"}
BAR_LABELS = shared.KIND_LABELS | {"pool": "downsampling block"}


def plot_lesion(result: LesionResult, ax=None):
    """Accuracy drop (points) per removed block, as in the paper: MSA bars orange on grey bands; block i at depth
    i + 1, where its output is in the Fourier and variance plots (0 = input)."""
    from matplotlib.patches import Patch

    ax = new_axes(ax)
    kinds = np.asarray(result.kinds)
    depths = np.arange(1, len(kinds) + 1)
    lesioned = ~np.isnan(np.asarray(result.accuracy, dtype=float))
    shades = shared.shade_blocks(ax, list(kinds), depths)
    colours = [BAR_COLOURS.get(kind, "0.5") for kind in kinds[lesioned]]
    ax.bar(depths[lesioned], 100 * result.accuracy_drop[lesioned], color=colours, zorder=2)
    ax.axhline(0, color="0.3", linewidth=0.8, zorder=1)
    ax.set_xlim(0.5, len(kinds) + 0.5)
    ax.set_xlabel("depth of the removed block (0 = input)")
    ax.set_ylabel("accuracy drop (points)")
    ax.set_title(f"Lesion study (baseline accuracy {100 * result.baseline_accuracy:.1f}%)")
    present = [kind for kind in BAR_COLOURS if kind in set(kinds[lesioned])]
    bars = [Patch(color=BAR_COLOURS[kind], label=BAR_LABELS[kind]) for kind in present]
    unbarred = [shade for shade, kind in zip(shades, [k for k in shared.SHADES if k in kinds]) if kind not in present]
    ax.legend(handles=bars + unbarred, fontsize=7)
    return ax


# --- as the analysis commands run it (analysis.registry) -------------------------------------------------------


def lesion_analysis(model: nn.Module, inputs, settings, *, on_partial=None, **common) -> LesionResult:
    return lesion_study(model, inputs.test, adapter=inputs.adapter, max_batches=settings.max_batches, **common)


def lesion_summary(result: LesionResult) -> str:
    drop = 100 * np.nanmax(result.accuracy_drop)
    return f"lesion: baseline accuracy {100 * result.baseline_accuracy:.2f}%, largest drop {drop:.2f} points"


def lesion_estimate(costs: dict, settings) -> tuple[float, str]:
    return shared.passes(costs, 1 + costs["num_branches"])


def lesion_comparison(found: dict[str, LesionResult]):
    drops = {n: (np.concatenate([[np.nan], 100 * r.accuracy_drop]), ["input", *r.kinds]) for n, r in found.items()}
    return shared.by_depth_figure(
        drops, ylabel="accuracy drop (points)", title="Lesion study: accuracy lost without each block (Fig. 11)"
    )
