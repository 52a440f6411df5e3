"""Feature-map variance by depth (Park & Kim 2022, Fig. 9; PAPER.md §6).

The variance over spatial positions of each sample and channel, averaged over samples and channels,
for the input and every block output. MSAs reduce it (they ensemble and smooth feature maps);
convolutions and MLPs increase it. Token states lose their prefix tokens first.

Differs from the reference notebook on purpose: it uses torch's default sample variance (divided by
H·W − 1), which inflates small maps more than large ones (by 1.07 on 4×4, 1.001 on 32×32) and so puts
a step into the curve at every stage change. A feature map is the whole population of its positions:
here the variance is divided by H·W.
"""

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from . import _common
from ._common import AnalysisResult
from .blocks import BlockAdapter, feature_maps_by_batch


@dataclass
class VarianceResult(AnalysisResult):
    """`variance[i]` of state i: the input (i = 0) or the output of block i-1, of kind `kinds[i]`."""

    variance: np.ndarray
    kinds: list[str]


def spatial_variance(feature_map: torch.Tensor) -> torch.Tensor:
    """Variance over positions per sample and channel, summed over the batch, averaged over channels."""
    return feature_map.double().flatten(2).var(dim=-1, correction=0).mean(dim=1).sum()


def feature_map_variance(
    model: nn.Module,
    data,
    *,
    adapter: BlockAdapter | None = None,
    max_batches: int | None = None,
    device: str | torch.device | None = None,
    progress: bool = False,
) -> VarianceResult:
    """Feature-map variance of the input and every block output of `model`, averaged over `data`
    (model inputs (B, C, H, W), one batch `(inputs, targets)` or a DataLoader)."""
    sums, count, kinds = None, 0, None
    stream = feature_maps_by_batch(
        model, data, adapter=adapter, max_batches=max_batches, device=device, progress=progress, desc="variance"
    )
    for kinds_of_batch, maps in stream:
        kinds = kinds_of_batch
        batch_sums = np.array([np.nan if m is None else spatial_variance(m).item() for m in maps])
        sums = batch_sums if sums is None else sums + batch_sums
        count += len(maps[0])
    if sums is None:
        raise ValueError("no images were given")
    return VarianceResult(sums / count, kinds)


def plot_variance(result: VarianceResult, ax=None):
    """Feature-map variance by depth on a log scale, MSA blocks shaded."""
    ax = _common.plot_by_depth(
        result.variance, result.kinds, ax, ylabel="feature-map variance",
        title="Feature-map variance (MSA shaded)", color="tab:red",
    )  # fmt: skip
    ax.set_yscale("log")
    return ax
