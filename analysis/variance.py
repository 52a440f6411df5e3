"""Feature-map variance by depth (Park & Kim 2022, Fig. 9; docs/paper.md §6).

Unlike the reference notebook, whose `latent.var(dim=[-1, -2])` divides by H·W − 1 and so inflates small maps more
than large ones, putting a step into the curve at every stage change, a map here is the whole population of its
positions (divided by H·W, in float64). The notebook's number on the same maps comes beside it (`reference_variance`).
"""

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from . import shared
from .blocks import accumulate
from .fourier import ImageSpread
from .shared import AnalysisResult


@dataclass
class VarianceResult(AnalysisResult):
    """`variance[i]` of state i: the input (i = 0) or the output of block i-1, of kind `kinds[i]`;
    `reference_variance[i]` the reference notebook's number for the same maps (see the module docstring)."""

    variance: np.ndarray
    kinds: list[str]
    reference_variance: np.ndarray | None = None
    # Over images: {block kind: standard error of the mean log variance ratio (after / before) over that kind's
    # blocks}, from each image's own variances; empty where not measured.
    kind_log_ratio_error: dict[str, float] = field(default_factory=dict)


def reference_spatial_variance(feature_map: torch.Tensor) -> torch.Tensor:
    """The notebook's `latent.var(dim=[-1, -2])` (divided by H·W − 1, float32) per sample and channel, averaged over
    channels, summed over the batch."""
    return feature_map.float().flatten(2).var(dim=-1).mean(dim=1).double().sum()


def image_variances(feature_map: torch.Tensor) -> torch.Tensor:
    """Each image's variance over positions (population), averaged over channels: (B,), float64."""
    return feature_map.double().flatten(2).var(dim=-1, correction=0).mean(dim=1)


class VarianceAccumulator:
    """Feature-map variance of every state by both definitions, over the batches of `analysis.blocks.block_batches`."""

    def __init__(self):
        self.sums, self.reference_sums, self.count, self.kinds = None, None, 0, None
        self.spread = ImageSpread()

    def update(self, batch) -> None:
        self.kinds = batch.kinds
        per_image = [None if m is None else image_variances(m) for m in batch.maps]  # one pass serves both sums
        sums = np.array([np.nan if v is None else v.sum().item() for v in per_image])
        reference = np.array([np.nan if m is None else reference_spatial_variance(m).item() for m in batch.maps])
        self.sums = sums if self.sums is None else self.sums + sums
        self.reference_sums = reference if self.reference_sums is None else self.reference_sums + reference
        size = len(batch.maps[0])
        self.count += size
        logs = [np.full(size, np.nan) if v is None else v.log().cpu().numpy() for v in per_image]
        self.spread.update(batch.kinds, np.stack(logs))

    def result(self) -> VarianceResult:
        if self.sums is None:
            raise ValueError("no images were given")
        return VarianceResult(
            self.sums / self.count, self.kinds, self.reference_sums / self.count, self.spread.errors()
        )


def feature_map_variance(model: nn.Module, data, **options) -> VarianceResult:
    """Feature-map variance of the input and every block output of `model` over `data` (inputs, a batch or a
    DataLoader), by our definition and the reference notebook's; `options` as `analysis.blocks.block_batches` takes
    them (adapter, max_batches, device, progress)."""
    return accumulate(model, data, [VarianceAccumulator()], desc="variance", **options)[0]


def plot_variance(result: VarianceResult, ax=None):
    """Feature-map variance by depth on a log scale, MSA and downsampling blocks shaded."""
    ax = shared.plot_by_depth(
        result.variance, result.kinds, ax, ylabel="feature-map variance", title="Feature-map variance", color="tab:red"
    )
    ax.set_yscale("log")
    return ax


# --- as the analysis commands run it (analysis.registry) -------------------------------------------------------


def variance_summary(result: VarianceResult) -> str:
    value, kind = shared.last_with_map(result.variance, result.kinds)
    return f"variance: {result.variance[1]:.3g} (stem) to {value:.3g} ({kind}, the last with a map)"


def variance_by_depth(found: dict[str, VarianceResult]):
    return shared.by_depth_figure(
        {name: (r.variance, r.kinds) for name, r in found.items()},
        ylabel="feature-map variance",
        title="Feature-map variance by depth (Fig. 9)",
        log=True,
        extra={n: r.reference_variance for n, r in found.items() if r.reference_variance is not None},
        extra_label="reference notebook's definition",
    )
