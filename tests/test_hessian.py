"""Hessian analyses against closed forms: least squares (H = XᵀX/N) and indefinite quadratics."""

import time

import numpy as np
import pytest
import torch
from conftest import TINY
from torch import nn

import alternet_hf
from analysis import hessian


def mse(outputs, targets):
    return 0.5 * ((outputs - targets) ** 2).sum(dim=-1).mean()


@pytest.fixture
def least_squares():
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(64, 10, generator=generator, dtype=torch.float64)
    targets = torch.randn(64, 1, generator=generator, dtype=torch.float64)
    model = nn.Linear(10, 1, bias=False).double()
    exact = np.linalg.eigvalsh((inputs.T @ inputs / 64).numpy())[::-1]
    return model, (inputs, targets), exact


class Quadratic(nn.Module):
    """Outputs its weights; with loss ½ wᵀAw its Hessian is A, whatever the data."""

    def __init__(self, dimension):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dimension, dtype=torch.float64))

    def forward(self, inputs):
        return self.weight


def indefinite(eigenvalues, seed=0):
    rotation, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((len(eigenvalues),) * 2))
    matrix = torch.tensor(rotation @ np.diag(eigenvalues) @ rotation.T)
    return lambda weight, targets: 0.5 * weight @ matrix @ weight


NO_DATA = (torch.zeros(2, 1), torch.zeros(2))


def test_top_eigenvalues_of_least_squares(least_squares):
    model, batch, exact = least_squares
    result = hessian.top_eigenvalues(model, batch, loss_fn=mse, top_k=3, tol=1e-10)
    np.testing.assert_allclose(result.eigenvalues, exact[:3], rtol=1e-9)
    assert result.converged and result.num_hvps <= 10


def test_top_eigenvalues_are_signed_and_sorted_not_largest_magnitude():
    eigenvalues = [2.0, 0.5, -1.0, -7.0]  # the largest magnitude, -7, must not come first
    result = hessian.top_eigenvalues(Quadratic(4), NO_DATA, loss_fn=indefinite(eigenvalues), top_k=4, tol=1e-10)
    np.testing.assert_allclose(result.eigenvalues, [2.0, 0.5, -1.0, -7.0], atol=1e-9)
    power = hessian.power_iteration(Quadratic(4), NO_DATA, loss_fn=indefinite(eigenvalues), tol=1e-12, max_steps=500)
    np.testing.assert_allclose(power.eigenvalues, [-7.0], rtol=1e-6)  # what PyHessian would report as "top"


def test_weight_decay_shifts_the_spectrum(least_squares):
    model, batch, exact = least_squares
    result = hessian.top_eigenvalues(model, batch, loss_fn=mse, weight_decay=0.3, penalty="squared", top_k=2, tol=1e-10)
    np.testing.assert_allclose(result.eigenvalues, exact[:2] + 0.3, rtol=1e-9)


def test_the_reference_l2_term_has_its_exact_hessian(least_squares):
    """wd·‖w‖ (the reference's term, the landscape's default) adds wd·(I − ŵŵᵀ)/‖w‖: checked against the
    Hessian autograd builds of the whole loss."""
    model, (inputs, targets), _ = least_squares

    def loss_of(weight):
        return 0.5 * ((inputs @ weight.view(10, 1) - targets) ** 2).sum(dim=-1).mean() + 0.3 * weight.norm()

    exact = np.linalg.eigvalsh(torch.autograd.functional.hessian(loss_of, model.weight.detach().view(-1)).numpy())
    result = hessian.extreme_eigenvalues(
        model, (inputs, targets), loss_fn=mse, weight_decay=0.3, top_k=2, bottom_k=2, tol=1e-10
    )
    np.testing.assert_allclose(result.eigenvalues, exact[::-1][:2], rtol=1e-8)
    np.testing.assert_allclose(result.smallest, exact[:2], rtol=1e-8)


def test_both_ends_of_an_indefinite_spectrum():
    eigenvalues = [2.0, 0.5, 0.1, -1.0, -7.0]
    result = hessian.extreme_eigenvalues(
        Quadratic(5), NO_DATA, loss_fn=indefinite(eigenvalues), top_k=1, bottom_k=2, tol=1e-10
    )
    np.testing.assert_allclose(result.eigenvalues, [2.0], atol=1e-9)
    np.testing.assert_allclose(result.smallest, [-7.0, -1.0], atol=1e-9)  # ascending: the most negative first


def test_batches_are_averaged_not_summed(least_squares):
    model, (inputs, targets), exact = least_squares
    loader = [(inputs[:40], targets[:40]), (inputs[40:], targets[40:])]  # unequal sizes
    result = hessian.top_eigenvalues(model, loader, loss_fn=mse, top_k=1, tol=1e-10)
    np.testing.assert_allclose(result.eigenvalues, exact[:1], rtol=1e-9)


def test_hutchinson_trace_stops_when_confident(least_squares):
    model, batch, exact = least_squares
    result = hessian.hessian_trace(model, batch, method="hutchinson", rtol=0.05, max_samples=5000, loss_fn=mse)
    assert result.converged and result.num_samples >= 10
    assert 1.96 * result.standard_error <= 0.05 * abs(result.trace)
    assert abs(result.trace - exact.sum()) <= 4 * result.standard_error
    diagonal = Quadratic(5)  # a diagonal Hessian: every Rademacher sample is the trace exactly
    exact_trace = hessian.hessian_trace(
        diagonal,
        NO_DATA,
        method="hutchinson",
        loss_fn=lambda w, t: 0.5 * (torch.tensor([1, 2, 3, -4, 5.0], dtype=torch.float64) * w * w).sum(),
    )
    assert exact_trace.trace == pytest.approx(7.0, rel=1e-12) and exact_trace.standard_error < 1e-12
    assert exact_trace.num_samples >= 10


def test_spectral_density_reproduces_the_spectrum(least_squares):
    model, batch, exact = least_squares
    result = hessian.spectral_density(model, batch, loss_fn=mse, num_vectors=64, num_steps=10)
    np.testing.assert_allclose(np.sort(result.nodes[0]), np.sort(exact), rtol=1e-8)  # full Lanczos: exact nodes
    np.testing.assert_allclose(result.weights.sum(axis=1), 1.0, rtol=1e-9)
    assert np.trapezoid(result.density, result.grid) == pytest.approx(1.0, abs=1e-3)
    slq_trace = 10 * (result.nodes * result.weights).sum(axis=1).mean()
    assert slq_trace == pytest.approx(exact.sum(), rel=0.05)


def test_negative_eigenvalues_show_in_the_density():
    result = hessian.spectral_density(
        Quadratic(6), NO_DATA, loss_fn=indefinite([3, 2, 1, -1, -2, -3.0]), num_vectors=8, num_steps=6
    )
    assert result.grid[np.argmax(result.density)] != 0 and result.nodes.min() == pytest.approx(-3.0)
    assert result.density[result.grid < -2.5].max() > 0.01


def test_batchnorm_mode_is_explicit_and_restored():
    model = alternet_hf.create_model("resnet-50-cifar100", **TINY["resnet-50-cifar100"]).double()
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    batch = (torch.randn(8, 3, 16, 16, dtype=torch.float64), torch.randint(0, 5, (8,)))
    in_train = hessian.top_eigenvalues(model, batch, batchnorm="train", top_k=2, tol=1e-4)
    in_eval = hessian.top_eigenvalues(model, batch, batchnorm="eval", top_k=2, tol=1e-4)
    assert in_train.eigenvalues[0] >= in_train.eigenvalues[1]
    assert not np.allclose(in_train.eigenvalues, in_eval.eigenvalues)
    assert model.training
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, before[key], rtol=0, atol=0)  # running statistics untouched
    with pytest.raises(ValueError, match="batchnorm"):
        hessian.top_eigenvalues(model, batch, batchnorm="frozen")


def test_max_eigenvalue_spectrum_pools_every_minibatch():
    model = alternet_hf.create_model("vit-ti-cifar100", **TINY["vit-ti-cifar100"])
    loader = [(torch.randn(4, 3, 16, 16), torch.randint(0, 5, (4,))) for _ in range(3)]
    result = hessian.max_eigenvalue_spectrum(model, loader, top_k=2, weight_decay=0.05, tol=1e-2, bins=10)
    assert result.eigenvalues.shape == (3, 2)
    assert np.all(np.diff(result.eigenvalues, axis=1) <= 0)
    assert result.counts.sum() == 6 and len(result.bin_edges) == 11
    assert result.residuals.shape == (3, 2) and result.converged.dtype == bool
    assert result.num_hvps > 0 and result.complete and result.density is None
    assert result.weight_decay == 0.05 and result.penalty == "reference" and result.batchnorm == "train"


def test_spectrum_of_both_ends_with_density_and_partial_reports():
    eigenvalues = [3.0, 1.0, -0.5, -2.0]
    reports = []
    result = hessian.max_eigenvalue_spectrum(
        Quadratic(4),
        [NO_DATA] * 3,
        loss_fn=indefinite(eigenvalues),
        top_k=1,
        bottom_k=1,
        tol=1e-10,
        bins=8,
        density_vectors=2,
        density_steps=4,
        on_batch=reports.append,
    )
    np.testing.assert_allclose(result.eigenvalues[:, 0], 3.0)
    np.testing.assert_allclose(result.smallest_eigenvalues[:, 0], -2.0)
    assert result.counts.sum() == 6 and result.bin_edges[0] == pytest.approx(-2.0)  # negatives in the histogram
    assert [len(r.eigenvalues) for r in reports] == [1, 2, 3] and not reports[0].complete and result.complete
    assert min(result.density["nodes"][0]) == pytest.approx(-2.0)


def test_a_time_limit_keeps_the_finished_minibatches():
    def slow(weight, targets):
        time.sleep(0.05)  # once per minibatch: its gradient graph is built once
        return 0.5 * (weight * weight).sum()

    with pytest.warns(UserWarning, match="time limit of 0.3 s stopped the spectrum after"):
        result = hessian.max_eigenvalue_spectrum(Quadratic(3), [NO_DATA] * 200, loss_fn=slow, top_k=1, time_limit=0.3)
    assert not result.complete and 1 <= len(result.eigenvalues) < 200 and result.num_batches_requested == 200
    with pytest.raises(TimeoutError, match="first minibatch"):
        hessian.max_eigenvalue_spectrum(Quadratic(3), [NO_DATA], loss_fn=slow, top_k=2, time_limit=0.0)


def test_unconverged_minibatches_are_reported(least_squares):
    model, batch, _ = least_squares
    with pytest.warns(UserWarning, match="did not reach tol=1e-12 within lanczos_steps=2 on 2 of 2 minibatches"):
        result = hessian.max_eigenvalue_spectrum(
            model, [batch, batch], loss_fn=mse, top_k=2, tol=1e-12, lanczos_steps=2
        )
    assert not result.converged.any() and np.all(result.residuals > 0)
    with pytest.warns(UserWarning, match="within lanczos_steps=2 on 1 of 1 minibatch; their eigenvalues"):
        hessian.max_eigenvalue_spectrum(model, [batch], loss_fn=mse, top_k=2, tol=1e-12, lanczos_steps=2)


def test_too_few_lanczos_steps_for_top_k_is_a_clear_error(least_squares):
    model, batch, _ = least_squares
    with pytest.raises(ValueError, match="lanczos_steps=3 Lanczos steps cannot give top_k=5"):
        hessian.top_eigenvalues(model, batch, loss_fn=mse, top_k=5, lanczos_steps=3)


class TinyHybrid(nn.Module):
    """A stem, a conv block, an attention block and a head: 259 float64 parameters, few enough to build the whole
    Hessian, and each block a module of its own (`tiny_hybrid` names them as blocks)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 1)
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.attention = nn.MultiheadAttention(4, 1, batch_first=True)
        self.head = nn.Linear(4, 3)

    def forward(self, inputs):
        x = self.stem(inputs)
        x = x + torch.tanh(self.conv(x))
        tokens = x.flatten(2).transpose(1, 2)
        tokens = tokens + self.attention(tokens, tokens, tokens, need_weights=False)[0]
        return self.head(tokens.mean(1))


@pytest.fixture
def tiny_hybrid():
    """(model, batch, its full Hessian, the parameters' names and their slices of it), the Hessian built by
    autograd over the flat parameters, independently of `HessianOperator`."""
    from torch.func import functional_call
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    model = TinyHybrid().double().eval()
    generator = torch.Generator().manual_seed(1)
    batch = (
        torch.randn(32, 3, 4, 4, dtype=torch.float64, generator=generator),
        torch.randint(0, 3, (32,), generator=generator),
    )
    names = [name for name, _ in model.named_parameters()]
    shapes = [p.shape for p in model.parameters()]
    sizes = [shape.numel() for shape in shapes]

    def loss(flat):
        pieces = dict(zip(names, (piece.view(shape) for piece, shape in zip(torch.split(flat, sizes), shapes))))
        return nn.functional.cross_entropy(functional_call(model, pieces, (batch[0],)), batch[1])

    with sdpa_kernel(SDPBackend.MATH):
        full = torch.autograd.functional.hessian(loss, torch.cat([p.detach().view(-1) for p in model.parameters()]))
    offsets = np.cumsum([0, *sizes])
    slices = {name: np.arange(offsets[i], offsets[i + 1]) for i, name in enumerate(names)}
    return model, batch, full.numpy(), slices


def test_the_deflated_trace_agrees_with_the_full_hessian_and_with_plain_hutchinson(tiny_hybrid):
    model, batch, full, _ = tiny_hybrid
    exact = np.trace(full)
    deflated = hessian.hessian_trace(model, batch, rtol=0.02, batchnorm="eval")
    assert deflated.method == "deflated" and deflated.converged and deflated.half_width <= 0.02 * abs(deflated.trace)
    assert abs(deflated.trace - exact) <= deflated.half_width
    # the Krylov part is exact: the trace of H on the basis Lanczos built, with no sampling error
    assert (
        1 <= deflated.deflation_dimension <= 30
        and deflated.num_hvps == deflated.deflation_dimension + deflated.num_samples
    )
    with pytest.warns(UserWarning, match="did not reach its 95% half-width of rtol=0 relative"):
        plain = hessian.hessian_trace(model, batch, method="hutchinson", rtol=0.0, max_samples=800, batchnorm="eval")
    assert plain.num_samples == 800 and not plain.converged  # rtol=0 is never reached, and says so
    assert abs(plain.trace - exact) <= plain.half_width
    assert abs(plain.trace - deflated.trace) <= np.hypot(plain.half_width, deflated.half_width)
    assert deflated.half_width < plain.half_width and deflated.num_hvps < plain.num_hvps


def test_a_trace_that_stops_short_says_so_and_the_same_seed_gives_the_same_numbers(tiny_hybrid):
    model, batch, _, _ = tiny_hybrid
    with pytest.warns(UserWarning, match=r"did not reach its 95% half-width of rtol=0.001 relative: .* at 12 samples"):
        short = hessian.hessian_trace(model, batch, rtol=1e-3, max_samples=12, deflation_steps=4, seed=3)
    assert not short.converged and short.num_samples == 12 and short.num_hvps == 16
    assert np.isfinite(short.half_width) and short.half_width > 1e-3 * abs(short.trace)
    with pytest.warns(UserWarning):
        again = hessian.hessian_trace(model, batch, rtol=1e-3, max_samples=12, deflation_steps=4, seed=3)
    assert again.trace == short.trace and np.array_equal(again.samples, short.samples)
    with pytest.raises(ValueError, match="method must be one of"):
        hessian.hessian_trace(model, batch, method="hutch")


def test_each_block_s_curvature_is_its_diagonal_block_of_the_full_hessian(tiny_hybrid):
    from analysis.blocks import Block, BlockAdapter
    from analysis.curvature import block_curvature

    model, batch, full, slices = tiny_hybrid
    # the stem and head left out of the blocks: their parameters are the rest
    adapter = BlockAdapter(
        [Block("conv", model.conv, "conv"), Block("msa", model.attention, "attention")], num_prefix_tokens=0
    )
    result = block_curvature(model, batch, adapter=adapter, batchnorm="eval", tol=1e-8, rtol=0.02)
    groups = [("conv.",), ("attention.",), ("stem.", "head.")]
    blocks = [np.concatenate([slices[n] for n in slices if n.startswith(prefixes)]) for prefixes in groups]
    exact = [full[np.ix_(b, b)] for b in blocks]
    tops = [*result.top_eigenvalues[0], result.rest_top_eigenvalues[0]]
    traces = [*result.traces[0], result.rest_traces[0]]
    widths = [*result.half_widths[0], result.rest_half_widths[0]]
    assert result.kinds == ["conv", "msa"] and [*result.parameters, result.rest_parameters] == [len(b) for b in blocks]
    for block, top, trace, width in zip(exact, tops, traces, widths):
        assert top == pytest.approx(np.linalg.eigvalsh(block)[-1], rel=1e-6)
        # two half-widths: of three 95% intervals, one misses about one time in seven
        assert abs(trace - np.trace(block)) <= 2 * width
    # the blocks partition the parameters: their traces add up to the whole Hessian's
    assert abs(sum(traces) - np.trace(full)) <= np.sqrt(np.sum(np.square(widths)))
    assert result.converged.all() and result.num_hvps > 0
