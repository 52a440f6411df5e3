"""Lesion study (Park & Kim 2022, Fig. 11; PAPER.md §6): the accuracy lost when one block's residual
branch is removed, block by block.

The branch is removed by a forward hook that zeroes its output, so the block becomes its shortcut
(identity, or the projection where the shape changes) with nothing rebuilt or copied. MSAs at the
end of a stage are the ones a network relies on most.
"""

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from . import _common
from ._common import AnalysisResult, analysis_mode, iterate_batches, logits_of, new_axes, resolve_device
from .blocks import BlockAdapter, block_kinds, residual_branches


@dataclass
class LesionResult(AnalysisResult):
    """Accuracy and NLL with block i's residual branch removed (NaN for blocks without one)."""

    kinds: list[str]
    baseline_accuracy: float
    baseline_nll: float
    accuracy: np.ndarray
    nll: np.ndarray

    @property
    def accuracy_drop(self) -> np.ndarray:
        return self.baseline_accuracy - self.accuracy


def _zero_output(module, args, output):
    if isinstance(output, tuple):
        return (torch.zeros_like(output[0]), *output[1:])
    return torch.zeros_like(output)


@torch.no_grad()
def _accuracy_and_nll(model, batches) -> tuple[float, float]:
    correct, nll, count = 0, 0.0, 0
    for inputs, targets in batches:
        logits = logits_of(model(inputs)).float()
        correct += (logits.argmax(-1) == targets).sum().item()
        nll += F.cross_entropy(logits, targets, reduction="sum").item()
        count += len(targets)
    return correct / count, nll / count


def lesion_study(
    model: nn.Module,
    data,
    *,
    adapter: BlockAdapter | None = None,
    max_batches: int | None = None,
    device: str | torch.device | None = None,
    progress: bool = False,
) -> LesionResult:
    """Evaluate `model` on `data` intact, then once per residual block with that block's branch removed."""
    device = resolve_device(model, device)
    kinds = block_kinds(model, adapter)
    branches = residual_branches(model, adapter)
    batches = [(x.to(device), y.to(device)) for x, y in iterate_batches(data, max_batches=max_batches)]
    if not batches:
        raise ValueError("the data gave no batches")
    accuracy, nll = np.full(len(kinds), np.nan), np.full(len(kinds), np.nan)
    with analysis_mode(model, device=device):
        baseline_accuracy, baseline_nll = _accuracy_and_nll(model, batches)
        lesions = [(i, branch) for i, branch in enumerate(branches) if branch is not None]
        for index, branch in _common.progress(lesions, enabled=progress, desc="lesion", unit="block"):
            handle = branch.register_forward_hook(_zero_output)
            try:
                accuracy[index], nll[index] = _accuracy_and_nll(model, batches)
            finally:
                handle.remove()
    return LesionResult(kinds, baseline_accuracy, baseline_nll, accuracy, nll)


def plot_lesion(result: LesionResult, ax=None):
    """Accuracy drop (points) per removed block; MSA blocks in orange, on a shaded band."""
    ax = new_axes(ax)
    positions = np.arange(len(result.kinds))
    _common.shade_msa_blocks(ax, result.kinds, positions)
    colours = ["tab:orange" if kind == "msa" else "tab:blue" for kind in result.kinds]
    ax.bar(positions, 100 * np.nan_to_num(result.accuracy_drop), color=colours)
    ax.set_xlabel("block")
    ax.set_ylabel("accuracy drop (points)")
    ax.set_title(f"Lesion study (baseline {100 * result.baseline_accuracy:.1f}%, MSA in orange)")
    return ax
