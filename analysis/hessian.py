"""The Hessian of the training loss from Hessian-vector products (Park & Kim 2022, Fig. 1 and 4; docs/paper.md §6):
extreme eigenvalues by Lanczos, the trace by Hutchinson, the density by stochastic Lanczos quadrature, and the paper's
max-eigenvalue spectra.

The loss is the mean over every sample given plus weight_decay times `analysis.shared.l2_term`, the landscape's,
on batches drawn once, so that every product is of one fixed function. BatchNorm is in "train" mode (batch
statistics, the loss the optimiser sees; the paper's) or "eval" (running statistics, PyHessian's); dropout and
stochastic depth are off.
"""

import contextlib
import copy
import functools
import inspect
import math
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from . import shared
from .shared import AnalysisResult, analysis_mode, l2_term, logits_of, materialize, new_axes, resolve_device

LossFn = Callable[[object, torch.Tensor], torch.Tensor]


def cross_entropy_loss(outputs, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of the logits; targets are class indices or probabilities."""
    return F.cross_entropy(logits_of(outputs).float(), targets)


class HessianOperator:
    """v ↦ H v of the mean loss of `model` over fixed `batches` plus weight_decay times the L2 term, on flat vectors
    in the order of the trainable parameters; `num_hvps` counts the products. `restricted` gives a diagonal block."""

    def __init__(
        self,
        model: nn.Module,
        batches,
        *,
        loss_fn: LossFn | None = None,
        weight_decay: float = 0.0,
        penalty: str = "reference",
    ):
        self.model, self.batches, self.loss_fn = model, batches, loss_fn or cross_entropy_loss
        self.weight_decay, self.penalty = weight_decay, penalty
        self.parameters = [p for p in model.parameters() if p.requires_grad]
        if not self.parameters:
            raise ValueError("the model has no trainable parameters")
        self.device, self.dtype = self.parameters[0].device, self.parameters[0].dtype
        self.dimension = sum(p.numel() for p in self.parameters)
        self.num_samples = sum(len(targets) for _, targets in batches)
        self.num_hvps = 0
        # With one batch the gradient graph is built once and reused by every product.
        self._cached_gradients = self._gradients(*batches[0]) if len(batches) == 1 else None

    def _gradients(self, inputs, targets):
        # The fused attention kernels have no second derivative; the math one does.
        with sdpa_kernel(SDPBackend.MATH):
            loss = self.loss_fn(self.model(inputs), targets)
        if self.weight_decay:  # in every batch's loss: batches are averaged, so it counts once
            loss = loss + self.weight_decay * l2_term(self.parameters, self.penalty)
        return torch.autograd.grad(loss, self.parameters, create_graph=True)

    def __call__(self, vector: torch.Tensor) -> torch.Tensor:
        pieces = list(torch.split(vector.to(self.dtype), [p.numel() for p in self.parameters]))
        pieces = [piece.view_as(p) for piece, p in zip(pieces, self.parameters)]
        product = torch.zeros_like(vector, dtype=torch.float64)
        for inputs, targets in self.batches:
            gradients = self._cached_gradients or self._gradients(inputs, targets)
            # allow_unused: a parameter whose gradient does not depend on the parameters given (a bias before a
            # BatchNorm, restricted to its own block) has a zero block
            hvp = torch.autograd.grad(
                gradients, self.parameters, grad_outputs=pieces, retain_graph=True, allow_unused=True
            )
            hvp = [torch.zeros_like(p) if h is None else h for h, p in zip(hvp, self.parameters)]
            weight = len(targets) / self.num_samples
            product += weight * torch.cat([h.reshape(-1) for h in hvp]).double()
        self.num_hvps += 1
        return product

    def restricted(self, parameters) -> "HessianOperator":
        """The diagonal block H_bb of `parameters` (some of this operator's): v_b ↦ ∂(g_b·v_b)/∂θ_b, which is H v with
        v zero outside the block, read on the block. It shares this operator's gradient graph (one batch: built
        once for every block) and counts its own products."""
        chosen = {id(p) for p in parameters}
        block = copy.copy(self)
        block.parameters = [p for p in self.parameters if id(p) in chosen]
        if not block.parameters or len(block.parameters) != len(chosen):
            raise ValueError("a block must be a non-empty set of the operator's trainable parameters")
        block.dimension, block.num_hvps = sum(p.numel() for p in block.parameters), 0
        if self._cached_gradients is not None:
            kept = zip(self.parameters, self._cached_gradients)
            block._cached_gradients = [g for p, g in kept if id(p) in chosen]
        return block

    def random_vector(self, generator: torch.Generator) -> torch.Tensor:
        """A Rademacher vector of unit norm (float64, on the parameters' device)."""
        signs = torch.randint(0, 2, (self.dimension,), generator=generator, device=generator.device)
        return (signs.double() * 2 - 1).to(self.device) / math.sqrt(self.dimension)


def _lanczos(
    operator: HessianOperator, start: torch.Tensor, max_steps: int, basis: list | None = None
) -> Iterator[tuple[np.ndarray, ...]]:
    """Lanczos with full re-orthogonalisation; after each step yields (alphas, betas), where betas[-1]
    is the residual norm β_m (0 when an invariant subspace is found, which ends the iteration). `basis`, an empty list
    where given, receives the orthonormal Lanczos vectors (after step m its first m span the Krylov space)."""
    basis = [] if basis is None else basis
    basis.append(start / start.norm())
    alphas, betas = [], []
    for _ in range(max_steps):
        w = operator(basis[-1])
        alphas.append(torch.dot(w, basis[-1]).item())
        for _ in range(2):  # twice is enough (Kahan–Parlett) to keep the basis orthogonal in floating point
            for q in basis:
                w -= torch.dot(w, q) * q
        beta = w.norm().item()
        betas.append(beta)
        yield np.array(alphas), np.array(betas)
        if beta <= 1e-10 * max(1.0, abs(alphas[-1])) or len(basis) == operator.dimension:
            return
        basis.append(w / beta)


def _ritz(alphas: np.ndarray, betas: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ritz values (descending), their residual bounds |β_m s_mi|, and the squared first components
    of the Ritz vectors (the quadrature weights of stochastic Lanczos quadrature)."""
    tridiagonal = np.diag(alphas) + np.diag(betas[:-1], 1) + np.diag(betas[:-1], -1)
    values, vectors = np.linalg.eigh(tridiagonal)
    order = np.argsort(values)[::-1]
    values, vectors = values[order], vectors[:, order]
    return values, np.abs(betas[-1] * vectors[-1]), vectors[0] ** 2


@dataclass
class EigenvalueResult(AnalysisResult):
    """`eigenvalues`: the top-k algebraically largest, descending; `residuals`: Lanczos bounds on their
    errors; `history`: the estimate of the largest after each Hessian-vector product. `smallest` (with
    `smallest_residuals`): the most negative ones, ascending, where asked for. `timed_out`: stopped at a
    deadline before converging (values not found by then are NaN)."""

    eigenvalues: np.ndarray
    residuals: np.ndarray
    num_hvps: int
    converged: bool
    history: np.ndarray
    smallest: np.ndarray = field(default_factory=lambda: np.empty(0))
    smallest_residuals: np.ndarray = field(default_factory=lambda: np.empty(0))
    timed_out: bool = False


@contextlib.contextmanager
def _hessian_of(
    model: nn.Module,
    data,
    *,
    batchnorm: str = "train",
    max_batches: int | None = None,
    device: str | torch.device | None = None,
    **loss,
) -> Iterator[HessianOperator]:
    """The `HessianOperator` of the `loss` (its `loss_fn`, `weight_decay` and `penalty`) on `data`'s first
    `max_batches` batches (a batch or a DataLoader, drawn once, on `device`), the model in the analysis mode (BatchNorm
    in `batchnorm` mode) for the block: the `**setup` every entry point but the spectrum takes."""
    device = resolve_device(model, device)
    batches = materialize(data, max_batches=max_batches, device=device)
    with analysis_mode(model, batchnorm=batchnorm, device=device):
        yield HessianOperator(model, batches, **loss)


def _padded(values: np.ndarray, size: int) -> np.ndarray:
    return np.concatenate([values[:size], np.full(max(size - len(values), 0), np.nan)])


def _lanczos_extremes(
    operator: HessianOperator,
    *,
    top_k: int,
    bottom_k: int = 0,
    tol: float,
    steps: int,
    seed: int,
    deadline: float | None = None,
) -> EigenvalueResult:
    """The `top_k` largest and `bottom_k` smallest eigenvalues from one Lanczos run, stopped once the residual bound
    |β_m s_mi| of each is below `tol` relative to it (for the bottom ones, which may lie near zero, relative to
    |λ|max), or at `deadline` (a `time.monotonic()` value)."""
    wanted = top_k + bottom_k
    if top_k < 1 or bottom_k < 0 or wanted > operator.dimension:
        raise ValueError(
            f"top_k must be at least 1 and top_k + bottom_k at most the number of parameters "
            f"({operator.dimension}), not {top_k} + {bottom_k}"
        )
    if steps < wanted:
        name = f"top_k={top_k}" + (f" + bottom_k={bottom_k}" if bottom_k else "")
        raise ValueError(f"lanczos_steps={steps} Lanczos steps cannot give {name} eigenvalues; raise lanczos_steps")
    history, values, residuals, converged, timed_out = [], np.empty(0), np.empty(0), False, False
    steps = min(steps, operator.dimension)
    for alphas, betas in _lanczos(operator, operator.random_vector(torch.Generator().manual_seed(seed)), steps):
        values, residuals, _ = _ritz(alphas, betas)
        history.append(values[0])
        if len(values) >= wanted:
            top_ok = np.all(residuals[:top_k] <= tol * np.maximum(np.abs(values[:top_k]), 1e-12))
            scale = max(abs(values[0]), abs(values[-1]), 1e-12)
            bottom_ok = bottom_k == 0 or np.all(residuals[len(values) - bottom_k :] <= tol * scale)
            if top_ok and bottom_ok:
                converged = True
                break
        if deadline is not None and time.monotonic() > deadline:
            timed_out = True
            break
    if len(values) < wanted and not timed_out:  # only an exact invariant subspace ends Lanczos this early
        raise RuntimeError(
            f"the Hessian has an invariant subspace of dimension {len(values)} containing the start vector, "
            f"so Lanczos cannot find {wanted} eigenvalues; try another seed or fewer eigenvalues"
        )
    bottom = slice(max(len(values) - bottom_k, top_k), None)  # empty without bottom_k: it never overlaps the top
    return EigenvalueResult(
        _padded(values, top_k),
        _padded(residuals, top_k),
        operator.num_hvps,
        converged,
        np.array(history),
        _padded(values[bottom][::-1], bottom_k),
        _padded(residuals[bottom][::-1], bottom_k),
        timed_out,
    )


def top_eigenvalues(model: nn.Module, data, *, top_k: int = 1, **options) -> EigenvalueResult:
    """`extreme_eigenvalues` without the bottom end. The Lanczos basis holds up to `lanczos_steps` float64 vectors of
    the parameter count (AlterNet-50: 264 MB each)."""
    return extreme_eigenvalues(model, data, top_k=top_k, bottom_k=0, **options)


def extreme_eigenvalues(
    model: nn.Module,
    data,
    *,
    top_k: int = 1,
    bottom_k: int = 1,
    tol: float = 1e-3,
    lanczos_steps: int = 100,
    seed: int = 0,
    **setup,
) -> EigenvalueResult:
    """The `top_k` largest and `bottom_k` most negative eigenvalues (`smallest`, ascending) of the Hessian of the mean
    loss on `data`, from one Lanczos run. `setup`: as `_hessian_of` takes it."""
    with _hessian_of(model, data, **setup) as operator:
        return _lanczos_extremes(operator, top_k=top_k, bottom_k=bottom_k, tol=tol, steps=lanczos_steps, seed=seed)


def power_iteration(
    model: nn.Module, data, *, tol: float = 1e-3, max_steps: int = 100, seed: int = 0, **setup
) -> EigenvalueResult:
    """The largest-*magnitude* eigenvalue by PyHessian's power iteration, stopped when the Rayleigh quotient changes
    by less than `tol` relative: the baseline Lanczos is measured against. `setup`: as `_hessian_of` takes it."""
    with _hessian_of(model, data, **setup) as operator:
        vector, history, converged = operator.random_vector(torch.Generator().manual_seed(seed)), [], False
        for _ in range(max_steps):
            product = operator(vector)
            history.append(torch.dot(product, vector).item())
            vector = product / product.norm()
            if len(history) > 1 and abs(history[-1] - history[-2]) <= tol * abs(history[-1]):
                converged = True
                break
        residual = (operator(vector) - history[-1] * vector).norm().item()
        operator.num_hvps -= 1  # the residual check is a diagnostic, not part of the method
        return EigenvalueResult(
            np.array(history[-1:]), np.array([residual]), operator.num_hvps, converged, np.array(history)
        )


TRACE_METHODS = ("deflated", "hutchinson")


@dataclass
class TraceResult(AnalysisResult):
    """`trace` ± `half_width`, a 95% confidence interval (Student's t over the samples; `standard_error` the
    estimate's), after `num_hvps` Hessian-vector products in all. `method` "deflated": `deflated_trace` is the exact
    trace of H on a Krylov space of `deflation_dimension` (no sampling error), `samples` Hutchinson's on the rest;
    "hutchinson": `samples` are of H itself. `converged`: the half-width reached `rtol`·|trace|; where not (`timed_out`
    at a time limit, or at `max_samples`), the interval is still the honest one, only wider."""

    trace: float
    standard_error: float
    num_samples: int
    converged: bool
    samples: np.ndarray
    half_width: float = float("nan")
    num_hvps: int = 0
    method: str = "hutchinson"
    deflated_trace: float = 0.0
    deflation_dimension: int = 0
    rtol: float = 1e-2
    timed_out: bool = False


def _confidence(samples: list[float]) -> tuple[float, float]:
    """(standard error of the mean, 95% half-width by Student's t) of `samples`; infinite for fewer than two."""
    if len(samples) < 2:
        return float("inf"), float("inf")
    from scipy.stats import t

    error = float(np.std(samples, ddof=1) / math.sqrt(len(samples)))
    return error, float(t.ppf(0.975, len(samples) - 1)) * error


def hessian_trace(model: nn.Module, data, **options) -> TraceResult:
    """The trace of the Hessian to a 95% confidence half-width of `rtol`·|trace|: `trace_of` on the Hessian of
    `model` on `data`. `options`: those of `trace_of` (its defaults), the rest as `_hessian_of` takes them."""
    estimator = inspect.signature(trace_of).parameters
    chosen = {name: options.pop(name) for name in list(options) if name in estimator and name != "operator"}
    with _hessian_of(model, data, **options) as operator:
        return trace_of(operator, **chosen)


def trace_of(
    operator: HessianOperator,
    *,
    method: str = "deflated",
    rtol: float = 1e-2,
    min_samples: int = 10,
    max_samples: int = 1000,
    deflation_steps: int = 30,
    time_limit: float | None = None,
    seed: int = 0,
    progress: bool = False,
) -> TraceResult:
    """tr H by Hutchinson's estimator with Rademacher vectors, stopped once the 95% half-width is at most
    `rtol`·|estimate| (after at least `min_samples` samples, or all `max_samples` where fewer).

    "deflated" (the default) first runs Lanczos and takes the trace of H on its Krylov space Q exactly, Σ qᵢᵀHqᵢ (the
    Lanczos αs, products already made), then samples only the rest: tr H = tr(QᵀHQ) + tr(PHP) with P = I − QQᵀ for
    any orthonormal Q, so the estimate stays unbiased whatever Q is, and Hutchinson's variance falls from about
    2‖H‖²_F to 2‖PHP‖²_F. A trained network's Hessian has most of its Frobenius mass in a few top eigenvalues, which
    Lanczos finds in few products, so the rest needs far fewer samples (on the digits AlterNet: docs/benchmarks.md).
    Lanczos step m removes exactly α_m² + 2β_m² from ‖PHP‖²_F; it stops once the last step saved less than one
    sample's worth of variance at the target error (or at `deflation_steps`), each sample costing one product too.
    A Krylov space rather than Hutch++'s (Meyer, Musco, Musco & Woodruff 2021) random sketch H·S: for a spectrum
    this steep, each Lanczos product captures the next eigenvalue, where the sketch needs several per direction.
    "hutchinson": plain Hutchinson on H, the baseline."""
    if method not in TRACE_METHODS:
        raise ValueError(f"method must be one of {TRACE_METHODS}, not {method!r}")
    if min_samples < 2 or max_samples < 2:
        raise ValueError(
            f"a confidence interval needs 2 samples at least: min_samples {min_samples}, max_samples {max_samples}"
        )
    min_samples = min(min_samples, max_samples)
    deadline = None if time_limit is None else time.monotonic() + time_limit
    generator, basis, deflated = torch.Generator().manual_seed(seed), [], 0.0
    start = operator.num_hvps
    if method == "deflated":
        basis, deflated = _deflation_space(operator, generator, rtol, deflation_steps, deadline)
    dimension = len(basis)
    # one matrix: projecting a sample is then two matrix-vector products, not a loop over the basis
    basis = torch.stack(basis) if basis else None
    samples, converged, timed_out = [], False, False
    error = half_width = float("inf")
    bar = shared.progress(range(max_samples), enabled=progress, desc="trace", unit="sample")
    for _ in bar:
        if deadline is not None and time.monotonic() > deadline:
            timed_out = True
            break
        vector = operator.random_vector(generator) * math.sqrt(operator.dimension)  # entries ±1
        if basis is not None:  # P z: the Krylov space's part is counted exactly already
            vector -= basis.T @ (basis @ vector)
        samples.append(torch.dot(operator(vector), vector).item())
        error, half_width = _confidence(samples)
        if len(samples) >= min_samples and half_width <= rtol * abs(deflated + np.mean(samples)):
            converged = True
            break
    if not samples:
        raise TimeoutError(f"the time limit of {time_limit:g} s ended the trace before its first sample")
    result = TraceResult(
        deflated + float(np.mean(samples)),
        error,
        len(samples),
        converged,
        np.array(samples),
        half_width,
        operator.num_hvps - start,
        method,
        deflated,
        dimension,
        rtol,
        timed_out,
    )
    if not converged:
        warnings.warn(trace_warning(result), stacklevel=2)
    return result


def trace_warning(result: TraceResult) -> str:
    """What an unconverged trace says of itself."""
    stop = "the time limit" if result.timed_out else f"{result.num_samples} samples"
    return (
        f"the Hessian trace did not reach its 95% half-width of rtol={result.rtol:g} relative: "
        f"{result.trace:.6g} ± {result.half_width:.3g} at {stop}"
    )


def _deflation_space(operator, generator, rtol: float, max_steps: int, deadline) -> tuple[list, float]:
    """The Lanczos basis to deflate and the exact trace of H on it (Σα): Lanczos until a step removes less variance
    from the remainder than one Hutchinson sample's worth at the target (see `trace_of`)."""
    if max_steps < 1:
        raise ValueError(f"the deflated trace needs deflation_steps >= 1, not {max_steps}")
    basis, alphas = [], np.zeros(0)
    start = operator.random_vector(generator)
    for alphas, betas in _lanczos(operator, start, min(max_steps, operator.dimension), basis):
        removed = alphas[-1] ** 2 + 2 * betas[-1] ** 2  # ‖PHP‖²_F falls by exactly this at this step
        target = rtol * abs(alphas.sum()) / 1.96  # the standard error the stop asks for, by the trace found so far
        # a sample's variance is about 2‖PHP‖²_F: this step saved about 2·removed/target² samples
        if 2 * removed < target**2 or (deadline is not None and time.monotonic() > deadline):
            break
    return basis[: len(alphas)], float(alphas.sum())


@dataclass
class DensityResult(AnalysisResult):
    """The smoothed spectral density on `grid` (integrates to 1), and the quadrature it comes from:
    `nodes[v]` (Ritz values) with `weights[v]` (summing to 1) for each random start vector v. Its error over the
    start vectors: `density_error`, the standard error at each grid point; `trace` ± `trace_half_width` (95%), the
    trace the quadrature implies (the parameter count times the mean of Σ weights·nodes), a check on the density's
    mass; `num_hvps` the products."""

    grid: np.ndarray
    density: np.ndarray
    nodes: np.ndarray
    weights: np.ndarray
    sigma: float
    density_error: np.ndarray = field(default_factory=lambda: np.empty(0))
    trace: float = float("nan")
    trace_half_width: float = float("nan")
    num_hvps: int = 0


def spectral_density(
    model: nn.Module,
    data,
    *,
    num_vectors: int = 4,
    num_steps: int = 64,
    num_points: int = 1000,
    sigma: float | None = None,
    seed: int = 0,
    progress: bool = False,
    **setup,
) -> DensityResult:
    """Eigenvalue density by stochastic Lanczos quadrature (Ghorbani et al. 2019): `num_vectors` Lanczos runs of
    `num_steps` from Rademacher starts, each Ritz value a Gaussian of width `sigma` (default: 1% of the spectrum's
    span) weighted by its squared first Ritz-vector component. `setup`: as `_hessian_of` takes it."""
    with _hessian_of(model, data, **setup) as operator:
        return _slq(operator, seed, num_vectors, num_steps, num_points, sigma, progress=progress)


def _slq(operator, seed, num_vectors, num_steps, num_points, sigma, *, progress=False) -> DensityResult:
    generator, all_nodes, all_weights = torch.Generator().manual_seed(seed), [], []
    steps = min(num_steps, operator.dimension)
    for _ in shared.progress(range(num_vectors), enabled=progress, desc="density", unit="vector"):
        *_, (alphas, betas) = _lanczos(operator, operator.random_vector(generator), steps)  # run to the end
        nodes, _, weights = _ritz(alphas, betas)
        all_nodes.append(np.pad(nodes, (0, steps - len(nodes)), constant_values=np.nan))
        all_weights.append(np.pad(weights, (0, steps - len(weights))))
    nodes, weights = np.array(all_nodes), np.array(all_weights)
    low, high = np.nanmin(nodes), np.nanmax(nodes)
    sigma = sigma or max(0.01 * (high - low), 1e-12 * max(abs(low), abs(high), 1.0))
    grid = np.linspace(low - 5 * sigma, high + 5 * sigma, num_points)
    gaussians = np.exp(-0.5 * ((grid[:, None, None] - np.nan_to_num(nodes)) / sigma) ** 2) / (
        sigma * math.sqrt(2 * math.pi)
    )
    per_vector = (gaussians * weights).sum(axis=2)  # (points, vectors): each start vector's own density
    density = per_vector.mean(axis=1)
    density_error = (
        per_vector.std(axis=1, ddof=1) / math.sqrt(num_vectors) if num_vectors > 1 else np.full_like(density, np.inf)
    )
    traces = operator.dimension * np.nansum(nodes * weights, axis=1)
    _, trace_half_width = _confidence(list(traces))
    return DensityResult(
        grid,
        density,
        nodes,
        weights,
        float(sigma),
        density_error,
        float(traces.mean()),
        trace_half_width,
        operator.num_hvps,
    )


@dataclass
class SpectrumResult(AnalysisResult):
    """Per minibatch b: the top-k eigenvalues `eigenvalues[b]` (descending, Lanczos error bounds
    `residuals[b]`) and, where asked for, the most negative `smallest_eigenvalues[b]` (ascending),
    `converged[b]` when both ends met the tolerance; every eigenvalue found pooled into a histogram
    (`counts` over `bin_edges`). `complete` is False when a time limit ended the run early. `density`: the SLQ
    spectral density of the first minibatch's Hessian, where asked for."""

    eigenvalues: np.ndarray
    residuals: np.ndarray
    converged: np.ndarray
    counts: np.ndarray
    bin_edges: np.ndarray
    num_hvps: int
    smallest_eigenvalues: np.ndarray = field(default_factory=lambda: np.empty((0, 0)))
    smallest_residuals: np.ndarray = field(default_factory=lambda: np.empty((0, 0)))
    complete: bool = True
    num_batches_requested: int | None = None
    weight_decay: float = 0.0
    penalty: str = "reference"
    batchnorm: str = "train"
    density: dict | None = None


def max_eigenvalue_spectrum(
    model: nn.Module,
    data,
    *,
    loss_fn: LossFn | None = None,
    top_k: int = 5,
    bottom_k: int = 0,
    weight_decay: float = 0.0,
    penalty: str = "reference",
    batchnorm: str = "train",
    tol: float = 1e-3,
    lanczos_steps: int = 100,
    max_batches: int | None = None,
    bins: int = 50,
    density_vectors: int = 0,
    density_steps: int = 32,
    time_limit: float | None = None,
    on_batch: Callable[["SpectrumResult"], None] | None = None,
    seed: int = 0,
    device: str | torch.device | None = None,
    progress: bool = False,
) -> SpectrumResult:
    """The paper's max-eigenvalue spectrum: the top-k (and bottom-k) Hessian eigenvalues of every (augmented training)
    minibatch of `data`, pooled into a histogram. `on_batch(result)` gets the spectrum so far after every minibatch;
    after `time_limit` seconds the minibatch in progress stops (kept if it found its eigenvalues, unconverged) and so
    does the run (`complete=False`). `density_vectors > 0` adds the SLQ density of the first minibatch."""
    deadline = None if time_limit is None else time.monotonic() + time_limit
    total = shared.count_batches(data, max_batches)
    per_batch, num_hvps, complete, first_batch = [], 0, True, None
    operator_of = functools.partial(HessianOperator, model, loss_fn=loss_fn, weight_decay=weight_decay, penalty=penalty)
    lanczos = dict(top_k=top_k, bottom_k=bottom_k, tol=tol, steps=lanczos_steps, deadline=deadline)

    def spectrum_so_far(density=None, done=False) -> SpectrumResult:
        eigenvalues = np.array([r.eigenvalues for r in per_batch])
        smallest = np.array([r.smallest for r in per_batch])
        found = np.concatenate([eigenvalues.ravel(), smallest.ravel()])
        counts, edges = np.histogram(found[np.isfinite(found)], bins=bins)
        return SpectrumResult(
            eigenvalues,
            np.array([r.residuals for r in per_batch]),
            np.array([r.converged for r in per_batch]),
            counts,
            edges,
            num_hvps,
            smallest,
            np.array([r.smallest_residuals for r in per_batch]),
            complete=complete and done,
            num_batches_requested=total,
            weight_decay=weight_decay,
            penalty=penalty,
            batchnorm=batchnorm,
            density=density,
        )

    with analysis_mode(model, batchnorm=batchnorm, device=device) as device:
        batches = shared.batches(data, max_batches=max_batches, enabled=progress, desc="max-eigenvalue spectrum")
        for index, (inputs, targets) in enumerate(batches):
            batch = [(inputs.to(device), targets.to(device))]
            first_batch = first_batch or batch
            result = _lanczos_extremes(operator_of(batch), seed=seed + index, **lanczos)
            num_hvps += result.num_hvps
            if not np.isnan(result.eigenvalues).any():
                per_batch.append(result)
            if result.timed_out or (deadline is not None and time.monotonic() > deadline):
                complete = False
                break
            if on_batch is not None:
                on_batch(spectrum_so_far())
        density = None
        if density_vectors > 0 and first_batch is not None and complete:
            operator = operator_of(first_batch)
            density = _slq(operator, seed, density_vectors, density_steps, 500, None).to_dict()
            num_hvps += operator.num_hvps
    if not per_batch:
        if not complete:
            raise TimeoutError(f"the time limit of {time_limit:g} s ended the first minibatch before it had results")
        raise ValueError("the data gave no batches")
    spectrum = spectrum_so_far(density, done=True)
    if not complete:
        warnings.warn(
            f"the time limit of {time_limit:g} s stopped the spectrum after {len(per_batch)} of "
            f"{total if total is not None else 'all'} minibatches",
            stacklevel=2,
        )
    if not spectrum.converged.all():
        batches = shared.minibatches(len(per_batch))
        warnings.warn(
            f"Lanczos did not reach tol={tol} within lanczos_steps={lanczos_steps} on "
            f"{int((~spectrum.converged).sum())} of {batches}; their eigenvalues are less accurate (see `residuals`). "
            "Raise lanczos_steps or tol.",
            stacklevel=2,
        )
    return spectrum


def plot_spectrum(result: SpectrumResult, ax=None, *, label: str | None = None, color=None, fill: bool = True):
    """The max-eigenvalue spectrum as the paper draws it: a density histogram with a log count axis
    (both ends of the spectrum where the most negative eigenvalues were computed too). `fill=False` draws the
    outline only, for several spectra on one axis."""
    ax = new_axes(ax)
    fractions = result.counts / max(result.counts.sum(), 1)
    style = dict(fill=True, alpha=0.5) if fill else dict(fill=False, linewidth=1.6)
    ax.stairs(fractions, result.bin_edges, label=label, color=color, **style)
    ax.axvline(0.0, color="0.5", linewidth=0.8, linestyle="--")
    ax.set_yscale("log")
    if (fractions > 0).any():
        bottom = 0.5 * fractions[fractions > 0].min()  # a bin holding a single eigenvalue stays visible
        overlaid = len(ax.patches) > 1  # other spectra drawn before (as filled or outlined stairs): keep them visible
        ax.set_ylim(bottom=min(bottom, ax.get_ylim()[0]) if overlaid else bottom)
    ax.set_xlabel("Hessian eigenvalue")
    ends = "top-k and bottom-k" if np.size(result.smallest_eigenvalues) else "top-k"
    ax.set_ylabel(f"fraction of {ends} eigenvalues")
    ax.set_title("Hessian max-eigenvalue spectrum" if ends == "top-k" else "Hessian eigenvalue spectrum (both ends)")
    if label:
        ax.legend()
    return ax


def plot_density(result: DensityResult, ax=None, *, label: str | None = None, color=None):
    """The spectral density on a log axis, floored so that empty regions stay visible."""
    ax = new_axes(ax)
    ax.plot(result.grid, np.maximum(result.density, 1e-12 * result.density.max()), label=label, color=color)
    ax.set_yscale("log")
    ax.set_xlabel("Hessian eigenvalue")
    ax.set_ylabel("density")
    ax.set_title("Hessian spectral density (SLQ)")
    return ax


# --- as the analysis commands run it (analysis.registry) -------------------------------------------------------


def hessian_loss(settings) -> dict:
    """The loss every Hessian analysis differentiates, as `settings` define it: weight decay, its L2 penalty, and
    BatchNorm's mode (batch statistics, the paper's, unless set)."""
    return dict(weight_decay=settings.weight_decay, penalty=settings.penalty, batchnorm=settings.batchnorm or "train")


def spectrum_analysis(model: nn.Module, inputs, settings, *, on_partial=None, **common) -> SpectrumResult:
    return max_eigenvalue_spectrum(
        model,
        inputs.train(),
        top_k=settings.top_k,
        bottom_k=settings.bottom_k,
        **hessian_loss(settings),
        tol=settings.hessian_tol,
        lanczos_steps=settings.lanczos_steps,
        max_batches=settings.hessian_batches,
        density_vectors=settings.density_vectors,
        density_steps=settings.density_steps,
        time_limit=settings.hessian_time_limit,
        seed=settings.seed,
        on_batch=on_partial,
        **common,
    )


def spectrum_figure(result: SpectrumResult):
    if result.density is None:
        return plot_spectrum(result)
    figure, axes = shared.row_of_axes(2, 5, 3.5)
    plot_spectrum(result, ax=axes[0])
    plot_density(DensityResult(**shared.as_arrays(result.density)), ax=axes[1])
    axes[1].set_title("SLQ density (first minibatch)")
    return figure


def spectrum_summary(result: SpectrumResult) -> str:
    top = np.median(result.eigenvalues[:, 0])
    text = f"hessian: top eigenvalue per minibatch {top:.4g} (median of {len(result.eigenvalues)})"
    if np.size(result.smallest_eigenvalues):
        text += f", most negative {np.median(result.smallest_eigenvalues[:, 0]):.4g}"
    return text + ("" if result.complete else " (stopped at the time limit)")


def spectrum_estimate(costs: dict, settings) -> tuple[float, str] | None:
    """An upper bound: every Lanczos step taken."""
    if "hvp" not in costs:
        return None
    products = settings.hessian_batches * settings.lanczos_steps + settings.density_vectors * settings.density_steps
    hvp, batches, vectors = costs["hvp"], settings.hessian_batches, settings.density_vectors
    density = f" + {vectors}×{settings.density_steps} for the density" if vectors else ""
    steps = f"at most {shared.minibatches(batches)} × {settings.lanczos_steps} Lanczos steps{density}"
    return products * hvp, f"{steps}, about {hvp:.2g} s per Hessian-vector product"


def spectra_comparison(found: dict[str, SpectrumResult]):
    densities = {name: r.density for name, r in found.items() if r.density is not None}
    figure, axes = shared.row_of_axes(1 + bool(densities), 5.5, 3.6)
    colours = shared.model_colours(list(found))
    both = {n: np.concatenate([np.ravel(r.eigenvalues), np.ravel(r.smallest_eigenvalues)]) for n, r in found.items()}
    values = np.concatenate(list(both.values()))
    values = values[np.isfinite(values)]
    edges = np.linspace(values.min(), values.max(), 41) if values.size and values.min() < values.max() else 41
    ax = axes[0]
    if values.size and values.min() < 0:  # the negative side, where the loss is not locally convex
        ax.axvspan(values.min(), 0.0, color="#fde0dd", linewidth=0, zorder=0, label="negative eigenvalues")
    for name, result in found.items():
        counts, bins = np.histogram(both[name][np.isfinite(both[name])], bins=edges)
        spectrum = replace(result, counts=counts, bin_edges=bins)
        plot_spectrum(spectrum, ax=ax, label=name, color=colours[name], fill=False)  # outlines: none hidden
    both_ends = any(np.size(r.smallest_eigenvalues) for r in found.values())
    ends = "top-k and bottom-k" if both_ends else "top-k"
    ax.set_title(f"Hessian eigenvalue spectra, {ends} per minibatch (Fig. 1b / 4)", fontsize=9)
    shared.legend_beside(ax, fontsize=7)
    if densities:
        ax = axes[1]
        for name, density in densities.items():
            plot_density(DensityResult(**shared.as_arrays(density)), ax=ax, label=name, color=colours[name])
        ax.axvline(0.0, color="0.5", linewidth=0.8, linestyle="--")
        ax.set_title("SLQ spectral density")
        shared.legend_beside(ax, fontsize=7)
    return figure


# --- the trace and the density, as the analysis commands run them ------------------------------------------------


@dataclass
class TracesResult(AnalysisResult):
    """The Hessian trace of each training minibatch b: `traces[b]` ± `half_widths[b]` (95%; standard error
    `standard_errors[b]`), of which `deflated_traces[b]` is exact, on a Krylov space of `deflation_dimensions[b]` (the
    ends of the spectrum), and the rest from `num_samples[b]` Hutchinson samples (`hessian_trace`'s deflated
    estimator); `converged[b]` where the half-width reached `rtol`·|trace|. `num_hvps`: products in all."""

    traces: np.ndarray
    half_widths: np.ndarray
    standard_errors: np.ndarray
    deflated_traces: np.ndarray
    deflation_dimensions: np.ndarray
    num_samples: np.ndarray
    converged: np.ndarray
    num_hvps: int
    rtol: float
    weight_decay: float = 0.0
    penalty: str = "reference"
    batchnorm: str = "train"


def _minibatch_operators(model: nn.Module, inputs, settings, *, device, progress: bool, desc: str, count: int):
    """(index, `HessianOperator`) of each of the first `count` training minibatches, as the settings define the loss,
    the model in the analysis mode throughout."""
    loss = hessian_loss(settings)
    with analysis_mode(model, batchnorm=loss.pop("batchnorm"), device=device) as device:
        batches = shared.batches(inputs.train(), max_batches=count, enabled=progress, desc=desc)
        for index, (images, targets) in enumerate(batches):
            yield index, HessianOperator(model, [(images.to(device), targets.to(device))], **loss)


def trace_analysis(model: nn.Module, inputs, settings, *, on_partial=None, device=None, progress=False) -> TracesResult:
    found = []
    operators = _minibatch_operators(
        model, inputs, settings, device=device, progress=progress, desc="Hessian trace", count=settings.hessian_batches
    )
    for index, operator in operators:
        with warnings.catch_warnings():  # one warning for every minibatch follows
            warnings.simplefilter("ignore")
            found.append(
                trace_of(
                    operator,
                    rtol=settings.trace_rtol,
                    max_samples=settings.trace_max_samples,
                    deflation_steps=settings.deflation_steps,
                    seed=settings.seed + index,
                )
            )
    if not found:
        raise ValueError("the data gave no batches")
    result = TracesResult(
        *(np.array([getattr(r, name) for r in found]) for name in TRACE_FIELDS),
        sum(r.num_hvps for r in found),
        settings.trace_rtol,
        **hessian_loss(settings),
    )
    if not result.converged.all():
        warnings.warn(
            f"the Hessian trace did not reach its 95% half-width of trace_rtol={settings.trace_rtol:g} relative within "
            f"trace_max_samples={settings.trace_max_samples} on {int((~result.converged).sum())} of "
            f"{shared.minibatches(len(found))}: their intervals are wider (see half_widths). Raise trace_max_samples "
            "or deflation_steps.",
            stacklevel=2,
        )
    return result


# The fields of `TracesResult` read from each minibatch's `TraceResult`, in order.
TRACE_FIELDS = (
    "trace",
    "half_width",
    "standard_error",
    "deflated_trace",
    "deflation_dimension",
    "num_samples",
    "converged",
)


def trace_figure(result: TracesResult):
    ax = new_axes(None)
    positions = np.arange(len(result.traces))
    ax.bar(positions, result.deflated_traces, color="0.85", label="exact: on the Lanczos space (the spectrum's ends)")
    ax.errorbar(positions, result.traces, yerr=result.half_widths, fmt="o", color="tab:blue", capsize=3)
    ax.plot([], [], "o", color="tab:blue", label="trace, 95% interval")
    ax.set(xlabel="training minibatch", ylabel="Hessian trace", title="Hessian trace per minibatch")
    ax.set_xticks(positions)
    ax.legend(fontsize=7)
    return ax


def trace_summary(result: TracesResult) -> str:
    share, dimension = np.mean(result.deflated_traces / result.traces), int(np.median(result.deflation_dimensions))
    count = len(result.traces)
    text = (
        f"hessian-trace: {np.median(result.traces):.4g} ± {np.median(result.half_widths):.2g} (95%, median of "
        f"{shared.minibatches(count)}), {100 * share:.0f}% of it exact on {dimension} Lanczos "
        f"directions (the spectrum's ends), {result.num_hvps} Hessian-vector products; a larger trace: a sharper "
        "minimum"
    )
    unreached = int((~result.converged).sum())
    return text + (f" (the {100 * result.rtol:g}% stop not reached on {unreached})" if unreached else "")


def trace_estimate(costs: dict, settings) -> tuple[float, str] | None:
    """An upper bound: every Lanczos step and sample allowed; the stop usually comes far earlier."""
    if "hvp" not in costs:
        return None
    per_batch = settings.deflation_steps + settings.trace_max_samples
    hvp, batches = costs["hvp"], settings.hessian_batches
    how = (
        f"at most {shared.minibatches(batches)} × ({settings.deflation_steps} Lanczos steps + "
        f"{settings.trace_max_samples} samples), about {hvp:.2g} s per Hessian-vector product"
    )
    return batches * per_batch * hvp, how


def traces_comparison(found: dict[str, TracesResult]):
    ax = new_axes(None, figsize=(1.2 + 1.1 * len(found), 3.6))
    colours = shared.model_colours(list(found))
    for position, (name, result) in enumerate(found.items()):
        spread = np.full(len(result.traces), position) + np.linspace(-0.15, 0.15, len(result.traces))
        ax.errorbar(spread, result.traces, yerr=result.half_widths, fmt="o", color=colours[name], capsize=3)
    ax.set_xticks(range(len(found)), list(found))
    ax.set(ylabel="Hessian trace", title="Hessian trace per minibatch, 95% intervals")
    return ax


def density_analysis(model: nn.Module, inputs, settings, *, on_partial=None, device=None, progress=False):
    operators = _minibatch_operators(
        model, inputs, settings, device=device, progress=False, desc="Hessian density", count=1
    )
    for _, operator in operators:
        return _slq(operator, settings.seed, settings.slq_vectors, settings.slq_steps, 1000, None, progress=progress)
    raise ValueError("the data gave no batches")


def density_figure(result: DensityResult):
    ax = plot_density(result)
    if np.isfinite(result.density_error).all() and result.density_error.size:
        low = np.maximum(result.density - 1.96 * result.density_error, 1e-12 * result.density.max())
        ax.fill_between(result.grid, low, result.density + 1.96 * result.density_error, alpha=0.3, linewidth=0)
    ax.axvline(0.0, color="0.5", linewidth=0.8, linestyle="--")
    ax.set_title(f"Hessian spectral density (SLQ, {len(result.nodes)} vectors; band: 95%)", fontsize=9)
    return ax


def density_summary(result: DensityResult) -> str:
    negative = float(np.trapezoid(result.density[result.grid < 0], result.grid[result.grid < 0]))
    return (
        f"hessian-density: eigenvalues from {np.nanmin(result.nodes):.4g} to {np.nanmax(result.nodes):.4g}, "
        f"{100 * negative:.1f}% of the mass below zero (negative curvature: a non-convex loss), trace by quadrature "
        f"{result.trace:.4g} ± {result.trace_half_width:.2g} (95%, {len(result.nodes)} vectors)"
    )


def density_estimate(costs: dict, settings) -> tuple[float, str] | None:
    if "hvp" not in costs:
        return None
    products = settings.slq_vectors * settings.slq_steps
    how = f"{settings.slq_vectors} × {settings.slq_steps} Lanczos steps, about {costs['hvp']:.2g} s per product"
    return products * costs["hvp"], how


def densities_comparison(found: dict[str, DensityResult]):
    ax = new_axes(None, figsize=(5.5, 3.6))
    colours = shared.model_colours(list(found))
    for name, result in found.items():
        plot_density(result, ax=ax, label=name, color=colours[name])
    ax.axvline(0.0, color="0.5", linewidth=0.8, linestyle="--")
    shared.legend_beside(ax, fontsize=7)
    return ax
