"""Minibatch CKA between blocks (Kornblith et al. 2019; Nguyen, Raghu & Kornblith 2021; PAPER.md §6).

Linear-kernel CKA with the unbiased, U-centred HSIC estimator (Song et al. 2012), accumulated over
minibatches: CKA(i, j) = Σ HSIC₁(K_i, L_j) / √(Σ HSIC₁(K_i, K_i) · Σ HSIC₁(L_j, L_j)), so the memory
needed does not grow with the number of samples. Everything is computed in float64: the common
PyTorch package works in float32, where the Gram matrices of large activations overflow or cancel
and return NaNs.
"""

import contextlib
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from . import _common
from ._common import AnalysisResult, analysis_mode, iterate_batches, new_axes, resolve_device
from .blocks import BlockAdapter, run_blocks


def unbiased_hsic(gram_x: torch.Tensor, gram_y: torch.Tensor) -> torch.Tensor:
    """HSIC₁ of two n×n Gram matrices (n ≥ 4): unbiased, with the diagonals removed (Song et al. 2012)."""
    n = gram_x.shape[0]
    if n < 4 or gram_x.shape != (n, n) or gram_y.shape != (n, n):
        raise ValueError(f"unbiased HSIC needs two n×n Gram matrices with n ≥ 4, got {tuple(gram_x.shape)}, "
                         f"{tuple(gram_y.shape)}: use batches of at least 4 samples")  # fmt: skip
    k = gram_x.double().clone().fill_diagonal_(0)
    l = gram_y.double().clone().fill_diagonal_(0)  # noqa: E741
    k_sum, l_sum = k.sum(dim=0), l.sum(dim=0)
    trace = (k * l).sum()  # tr(K L) for symmetric matrices
    return (trace + k_sum.sum() * l_sum.sum() / ((n - 1) * (n - 2)) - 2 * (k_sum @ l_sum) / (n - 2)) / (n * (n - 3))


def linear_gram(features: torch.Tensor) -> torch.Tensor:
    flat = features.reshape(features.shape[0], -1).double()
    return flat @ flat.T


class MinibatchCKA:
    """Accumulates HSIC₁ between every pair of layers of two representations over minibatches."""

    def __init__(self):
        self.cross = self.self_a = self.self_b = None
        self.num_samples = 0

    def update(self, features_a: list[torch.Tensor], features_b: list[torch.Tensor]) -> None:
        grams_a = [linear_gram(f) for f in features_a]
        grams_b = [linear_gram(f) for f in features_b]
        cross = torch.stack([torch.stack([unbiased_hsic(a, b) for b in grams_b]) for a in grams_a]).cpu()
        self_a = torch.stack([unbiased_hsic(a, a) for a in grams_a]).cpu()
        self_b = torch.stack([unbiased_hsic(b, b) for b in grams_b]).cpu()
        if self.cross is None:
            self.cross, self.self_a, self.self_b = cross, self_a, self_b
        else:
            self.cross, self.self_a, self.self_b = self.cross + cross, self.self_a + self_a, self.self_b + self_b
        self.num_samples += features_a[0].shape[0]

    def compute(self) -> np.ndarray:
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
    """Block × block minibatch CKA of `model` with itself, or with `other` on the same inputs."""
    device = resolve_device(model, device)
    accumulator, kinds_a, kinds_b = MinibatchCKA(), None, None
    with analysis_mode(model, device=device):
        with analysis_mode(other, device=device) if other is not None else contextlib.nullcontext():
            batches = iterate_batches(data, max_batches=max_batches)
            for inputs, _ in _common.progress(batches, enabled=progress, desc="CKA", unit="batch"):
                inputs = inputs.to(device)
                run_a = run_blocks(model, inputs, adapter)
                run_b = run_a if other is None else run_blocks(other, inputs, other_adapter)
                accumulator.update(run_a.states, run_b.states)
                kinds_a, kinds_b = run_a.kinds, run_b.kinds
    return CKAResult(accumulator.compute(), kinds_a, kinds_b, accumulator.num_samples)


def plot_cka(result: CKAResult, ax=None):
    """The similarity matrix as a heat map, MSA blocks marked on both axes."""
    ax = new_axes(ax, figsize=(4.5, 4))
    image = ax.imshow(result.similarity.T, origin="lower", cmap="magma", vmin=0, vmax=1)
    ax.figure.colorbar(image, ax=ax, label="CKA")
    for axis, kinds in ((ax.xaxis, result.kinds_a), (ax.yaxis, result.kinds_b)):
        msa = [i for i, kind in enumerate(kinds) if kind == "msa"]
        axis.set_ticks(msa, ["MSA"] * len(msa), fontsize=6, color="tab:cyan")
    ax.set_xlabel("block (first model)")
    ax.set_ylabel("block (second model)")
    ax.set_title("Minibatch CKA")
    return ax
