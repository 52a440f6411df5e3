"""Minibatch CKA between blocks (Kornblith et al. 2019; Nguyen, Raghu & Kornblith 2021; docs/paper.md §6).

CKA(i, j) = Σ_b HSIC₁(K_i, L_j) / √(Σ_b HSIC₁(K_i, K_i) · Σ_b HSIC₁(L_j, L_j)) with linear kernels and the unbiased
HSIC₁ of Song et al. (2012) summed over minibatches, so memory depends on the batch size, not the number of samples.
Unlike the usual PyTorch package: float64 throughout (in float32 the Gram matrices of large activations overflow to
NaN), features centred first (`linear_gram`), and every layer pair of a batch from one matrix product (`u_centre`).
"""

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from . import shared
from .blocks import BlockAdapter, accumulate, block_batches, describe_blocks, run_blocks
from .shared import AnalysisResult, analysis_mode, new_axes, resolve_device

MIN_BATCH_SIZE = 4  # the unbiased HSIC estimator divides by n(n-3)


def linear_gram(features: torch.Tensor) -> torch.Tensor:
    """X Xᵀ of the features flattened per sample, in float64, centred over the batch: HSIC₁ does not notice, but a
    large mean would swamp the spread's digits."""
    device = torch.device("cpu") if features.device.type == "mps" else features.device  # MPS has no float64
    flat = features.reshape(features.shape[0], -1).to(device, torch.float64)
    flat = flat - flat.mean(dim=0)
    return flat @ flat.T


def _check_grams(*grams: torch.Tensor) -> int:
    n = grams[0].shape[0] if grams[0].ndim == 2 else -1
    if any(gram.shape != (n, n) for gram in grams) or n < MIN_BATCH_SIZE:
        shapes = ", ".join(str(tuple(gram.shape)) for gram in grams)
        raise ValueError(
            f"unbiased HSIC needs n×n Gram matrices with n ≥ 4 samples, got {shapes}; "
            "use batches of at least 4 samples (drop_last=True in the DataLoader)"
        )
    return n


def unbiased_hsic(gram_x: torch.Tensor, gram_y: torch.Tensor) -> torch.Tensor:
    """HSIC₁ of two n×n Gram matrices (Song et al. 2012), in float64: [tr(K̃L̃) + 1ᵀK̃1 · 1ᵀL̃1 / ((n−1)(n−2))
    − 2/(n−2) · 1ᵀK̃L̃1] / (n(n−3)), K̃ = K without its diagonal, which biases the plain estimator."""
    n = _check_grams(gram_x, gram_y)
    k = gram_x.to(torch.float64).clone().fill_diagonal_(0)
    l = gram_y.to(k.device, torch.float64).clone().fill_diagonal_(0)  # noqa: E741
    k_sums, l_sums = k.sum(dim=1), l.sum(dim=0)  # K̃1 and 1ᵀL̃
    trace = (k * l.T).sum()
    return (trace + k_sums.sum() * l_sums.sum() / ((n - 1) * (n - 2)) - 2 * (k_sums @ l_sums) / (n - 2)) / (n * (n - 3))


def u_centre(gram: torch.Tensor) -> torch.Tensor:
    """The U-centred Gram matrix (Székely & Rizzo 2014), scaled so that HSIC₁(K, L) = ⟨U(K), U(L)⟩: one matrix
    product then gives every layer pair of a batch."""
    n = _check_grams(gram)
    k = gram.to(torch.float64).clone().fill_diagonal_(0)
    row_sums = k.sum(dim=1)
    centred = k - row_sums[:, None] / (n - 2) - row_sums[None, :] / (n - 2) + row_sums.sum() / ((n - 1) * (n - 2))
    return centred.fill_diagonal_(0) / np.sqrt(n * (n - 3))


class MinibatchCKA:
    """Sums HSIC₁ between every pair of layers of two representations (or of one with itself) over batches, each
    batch one tensor per layer (any shape, samples on dimension 0), as many layers in every batch."""

    def __init__(self):
        self.cross: torch.Tensor | None = None  # Σ_b HSIC₁(K_i, L_j)
        self.self_a: torch.Tensor | None = None  # Σ_b HSIC₁(K_i, K_i)
        self.self_b: torch.Tensor | None = None  # Σ_b HSIC₁(L_j, L_j)
        self.num_samples = 0
        self.num_batches = 0

    @staticmethod
    def _centred_grams(features: Sequence[torch.Tensor]) -> torch.Tensor:
        if not features:
            raise ValueError("no layers were given")
        sizes = {f.shape[0] for f in features}
        if len(sizes) != 1:
            raise ValueError(f"every layer must hold the same samples; got batch sizes {sorted(sizes)}")
        return torch.stack([u_centre(linear_gram(f)).flatten() for f in features])  # (layers, n²)

    def update(self, features_a: Sequence[torch.Tensor], features_b: Sequence[torch.Tensor] | None = None) -> None:
        """Add one batch; `features_b=None` compares `features_a` with itself at half the cost."""
        grams_a = self._centred_grams(features_a)
        if features_b is None:
            cross = grams_a @ grams_a.T
            self_a = self_b = cross.diagonal()
        else:
            if features_b and features_b[0].shape[0] != features_a[0].shape[0]:
                raise ValueError(
                    f"both representations must hold the same samples: {features_a[0].shape[0]} vs "
                    f"{features_b[0].shape[0]}"
                )
            grams_b = self._centred_grams(features_b).to(grams_a.device)
            cross = grams_a @ grams_b.T
            self_a, self_b = (grams_a * grams_a).sum(dim=1), (grams_b * grams_b).sum(dim=1)
        cross, self_a, self_b = cross.cpu(), self_a.cpu(), self_b.cpu()
        if self.cross is None:
            self.cross, self.self_a, self.self_b = cross, self_a.clone(), self_b.clone()
        elif self.cross.shape != cross.shape:
            raise ValueError(f"this batch has {tuple(cross.shape)} layers, earlier ones {tuple(self.cross.shape)}")
        else:
            self.cross, self.self_a, self.self_b = self.cross + cross, self.self_a + self_a, self.self_b + self_b
        self.num_samples += features_a[0].shape[0]
        self.num_batches += 1

    def compute(self) -> np.ndarray:
        """CKA of every layer pair, float64 (NaN for a layer whose features are constant)."""
        if self.cross is None:
            raise ValueError("no batches were accumulated")
        return (self.cross / torch.sqrt(self.self_a[:, None] * self.self_b[None, :])).numpy()


@dataclass
class CKAResult(AnalysisResult):
    """`similarity[i, j]`: CKA between block i of the first model and block j of the second (or the same)."""

    similarity: np.ndarray
    kinds_a: list[str]
    kinds_b: list[str]
    num_samples: int


class CKAAccumulator:
    """CKA of a model's blocks with each other, or with a second model's (`cka`), fed by `block_batches`."""

    def __init__(self):
        self.minibatch, self.kinds, self.skipped = MinibatchCKA(), None, 0

    def update(self, batch, other_states: list[torch.Tensor] | None = None) -> None:
        """Add a batch of `block_batches` (with `other_states`: the second model's on its inputs); one smaller than
        `MIN_BATCH_SIZE` is skipped and counted in `skipped`."""
        self.kinds = batch.kinds[1:]  # blocks only, as `block_kinds`
        if len(batch.states[0]) < MIN_BATCH_SIZE:
            self.skipped += len(batch.states[0])
        else:
            self.minibatch.update(batch.states, other_states)

    def result(self, other_kinds: list[str] | None = None) -> CKAResult:
        """The similarity of the blocks fed (with `other_kinds`: those of a second model along the second axis)."""
        if self.skipped:
            warnings.warn(f"CKA skipped {self.skipped} samples in batches smaller than {MIN_BATCH_SIZE}", stacklevel=2)
        if self.minibatch.num_batches == 0:
            raise ValueError(f"the data gave no batches of at least {MIN_BATCH_SIZE} samples")
        kinds_b = self.kinds if other_kinds is None else other_kinds
        return CKAResult(self.minibatch.compute(), self.kinds, kinds_b, self.minibatch.num_samples)


@torch.no_grad()
def cka(
    model: nn.Module,
    data,
    *,
    other: nn.Module | None = None,
    adapter: BlockAdapter | None = None,
    other_adapter: BlockAdapter | None = None,
    max_batches: int | None = None,
    device: str | torch.device | None = None,
    progress: bool = False,
) -> CKAResult:
    """Block × block minibatch CKA of `model` with itself, or with `other` on the same `data` (inputs, a batch or a
    DataLoader); batches under `MIN_BATCH_SIZE` samples (a DataLoader's last) are skipped with a warning."""
    options = dict(adapter=adapter, max_batches=max_batches, progress=progress, desc="CKA")
    if other is None:
        return accumulate(model, data, [CKAAccumulator()], device=device, **options)[0]
    other_adapter = describe_blocks(other, other_adapter)
    accumulator = CKAAccumulator()
    with analysis_mode(other, device=resolve_device(model, device)) as device:
        for batch in block_batches(model, data, device=device, **options):  # the inputs, on the device: its first map
            accumulator.update(batch, run_blocks(other, batch.maps[0], other_adapter).states)
    return accumulator.result(other_adapter.kinds)


def plot_cka(result: CKAResult, ax=None):
    """The similarity matrix as a heat map (first model along x), MSA blocks marked by cyan ticks."""
    from matplotlib.ticker import MaxNLocator

    ax = new_axes(ax, figsize=(4.5, 4))
    image = ax.imshow(result.similarity.T, origin="lower", cmap="magma", vmin=0, vmax=1, interpolation="nearest")
    ax.figure.colorbar(image, ax=ax, label="CKA")
    for axis, kinds in ((ax.xaxis, result.kinds_a), (ax.yaxis, result.kinds_b)):
        axis.set_major_locator(MaxNLocator(integer=True))
        axis.set_ticks([i for i, kind in enumerate(kinds) if kind == "msa"], minor=True)
        axis.remove_overlapping_locs = False  # MSA marks sit on integer block ticks; keep them visible
    ax.tick_params(which="minor", length=5, width=2, color="tab:cyan")
    ax.set_xlabel("block")
    ax.set_ylabel("block" if list(result.kinds_a) == list(result.kinds_b) else "block (second model)")
    ax.set_title("Minibatch CKA (MSA ticks in cyan)")
    return ax


# --- as the analysis commands run it (analysis.registry) -------------------------------------------------------


def cka_summary(result: CKAResult) -> str:
    return f"cka: {result.similarity.shape[0]}×{result.similarity.shape[1]} similarity matrix"


def cka_comparison(found: dict[str, CKAResult]):
    return shared.panels(found, plot_cka, "CKA", (4.2, 3.6))
