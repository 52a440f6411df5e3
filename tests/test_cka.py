"""Minibatch CKA against Song et al.'s formula written out in numpy, CKA's invariances (and one it must
not have), unbiasedness in expectation, float64 where float32 overflows, and a tiny zoo model."""

import copy

import matplotlib
import numpy as np
import pytest
import torch
from conftest import TINY
from torch import nn

import alternet_hf
from analysis.blocks import BlockAdapter, block_kinds
from analysis.cka import CKAResult, MinibatchCKA, cka, linear_gram, plot_cka, u_centre, unbiased_hsic


def hsic_by_formula(k: np.ndarray, l: np.ndarray) -> float:  # noqa: E741
    """HSIC₁ = [tr(K̃L̃) + 1ᵀK̃1·1ᵀL̃1/((n−1)(n−2)) − 2/(n−2)·1ᵀK̃L̃1] / (n(n−3)), K̃ = K with zero diagonal."""
    n = len(k)
    k, l = k.copy(), l.copy()  # noqa: E741
    np.fill_diagonal(k, 0)
    np.fill_diagonal(l, 0)
    ones = np.ones(n)
    trace = np.trace(k @ l)
    sums = (ones @ k @ ones) * (ones @ l @ ones) / ((n - 1) * (n - 2))
    cross = 2 / (n - 2) * (ones @ k @ l @ ones)
    return (trace + sums - cross) / (n * (n - 3))


def gram(x: np.ndarray) -> np.ndarray:
    flat = x.reshape(len(x), -1)
    return flat @ flat.T


def cka_of(x, y) -> float:
    accumulator = MinibatchCKA()
    accumulator.update([torch.as_tensor(x)], [torch.as_tensor(y)])
    return accumulator.compute()[0, 0]


@pytest.fixture
def features() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((32, 12))


def test_unbiased_hsic_matches_the_written_out_formula(features):
    other = np.tanh(features @ np.random.default_rng(1).standard_normal((12, 5)))
    value = unbiased_hsic(torch.tensor(gram(features)), torch.tensor(gram(other)))
    assert value.dtype == torch.float64
    assert value.item() == pytest.approx(hsic_by_formula(gram(features), gram(other)), rel=1e-12)
    # Any kernel, not only linear: an RBF Gram matrix against a linear one.
    squared = ((features[:, None] - features[None]) ** 2).sum(-1)
    rbf = np.exp(-squared / squared.mean())
    assert unbiased_hsic(torch.tensor(rbf), torch.tensor(gram(other))).item() == pytest.approx(
        hsic_by_formula(rbf, gram(other)), rel=1e-12
    )


def test_u_centred_inner_product_is_hsic(features):
    k, l = linear_gram(torch.tensor(features)), linear_gram(torch.tensor(features[:, :4] ** 2))  # noqa: E741
    assert (u_centre(k) * u_centre(l)).sum().item() == pytest.approx(unbiased_hsic(k, l).item(), rel=1e-12)


@pytest.mark.parametrize("shapes", [((3, 3), (3, 3)), ((5, 5), (6, 6)), ((5, 4), (5, 4)), ((5,), (5,))])
def test_unbiased_hsic_rejects_bad_grams(shapes):
    with pytest.raises(ValueError, match="n ≥ 4"):
        unbiased_hsic(torch.ones(shapes[0]), torch.ones(shapes[1]))


def test_unbiased_in_expectation():
    """Linear-kernel HSIC of y = Ax + noise is ‖Cov(x, y)‖²_F = ‖A‖²_F; the mean of HSIC₁ over many batches
    of 6 samples finds it, while the plain (biased) estimator tr(KHLH)/(n−1)² is far off."""
    rng = np.random.default_rng(0)
    mixing = rng.standard_normal((2, 3))
    truth = (mixing**2).sum()
    n, trials = 6, 2000
    centring = np.eye(n) - 1 / n
    unbiased, biased = np.empty(trials), np.empty(trials)
    for trial in range(trials):
        x = rng.standard_normal((n, 3))
        y = x @ mixing.T + rng.standard_normal((n, 2))
        k, l = gram(x), gram(y)  # noqa: E741
        unbiased[trial] = unbiased_hsic(torch.tensor(k), torch.tensor(l)).item()
        biased[trial] = np.trace(k @ centring @ l @ centring) / (n - 1) ** 2
    standard_error = unbiased.std() / np.sqrt(trials)
    assert abs(unbiased.mean() - truth) < 4 * standard_error
    assert abs(biased.mean() - truth) > 10 * standard_error  # the test can tell the two apart


def test_cka_invariances(features):
    rotation, _ = np.linalg.qr(np.random.default_rng(2).standard_normal((12, 12)))
    assert cka_of(features, features) == pytest.approx(1.0, abs=1e-12)
    assert cka_of(features, features @ rotation) == pytest.approx(1.0, abs=1e-12)
    assert cka_of(features, 7.5 * features) == pytest.approx(1.0, abs=1e-12)
    assert cka_of(features, -0.01 * features @ rotation) == pytest.approx(1.0, abs=1e-12)
    stretch = np.diag(np.linspace(0.1, 10, 12))  # invertible but not orthogonal: CKA must notice
    assert cka_of(features, features @ stretch) < 0.9
    assert cka_of(features, np.random.default_rng(3).standard_normal((32, 12))) < 0.3


def test_minibatches_accumulate_hsic(features):
    other = (features[:, :6] ** 2).reshape(32, 2, 3)  # any per-sample shape, flattened
    halves = (slice(0, 16), slice(16, 32))
    accumulator = MinibatchCKA()
    for rows in halves:
        accumulator.update([torch.tensor(features[rows])], [torch.tensor(other[rows]), torch.tensor(features[rows])])
    cross = sum(hsic_by_formula(gram(features[r]), gram(other[r])) for r in halves)
    self_a = sum(hsic_by_formula(gram(features[r]), gram(features[r])) for r in halves)
    self_b = sum(hsic_by_formula(gram(other[r]), gram(other[r])) for r in halves)
    similarity = accumulator.compute()
    assert similarity.shape == (1, 2) and similarity.dtype == np.float64
    assert similarity[0, 0] == pytest.approx(cross / np.sqrt(self_a * self_b), rel=1e-12)
    assert similarity[0, 1] == pytest.approx(1.0, abs=1e-12)
    assert accumulator.num_samples == 32 and accumulator.num_batches == 2


def test_comparing_with_itself_equals_comparing_with_a_copy(features):
    layers = [torch.tensor(features), torch.tensor(np.tanh(features)), torch.tensor(features[:, :3])]
    alone, paired = MinibatchCKA(), MinibatchCKA()
    alone.update(layers)
    paired.update(layers, [layer.clone() for layer in layers])
    np.testing.assert_allclose(alone.compute(), paired.compute(), rtol=1e-12)


def test_minibatch_cka_rejects_mismatched_batches(features):
    accumulator = MinibatchCKA()
    with pytest.raises(ValueError, match="same samples"):
        accumulator.update([torch.tensor(features)], [torch.tensor(features[:16])])
    with pytest.raises(ValueError, match="same samples"):
        accumulator.update([torch.tensor(features), torch.tensor(features[:16])])
    with pytest.raises(ValueError, match="no batches"):
        accumulator.compute()


def test_float64_survives_activations_that_overflow_float32(features):
    huge = torch.tensor(features * 1e20, dtype=torch.float32)
    assert not torch.isfinite(huge @ huge.T).all()  # what a float32 implementation would work with
    assert cka_of(huge, huge) == pytest.approx(1.0, abs=1e-12)
    assert cka_of(huge, huge * 1e-30) == pytest.approx(1.0, abs=1e-12)


def test_large_means_do_not_cancel(features):
    """HSIC₁ ignores a shift of the features, but the formula on raw Gram matrices cancels it away."""
    other = np.tanh(features[:, :5])
    exact = hsic_by_formula(gram(features), gram(other))
    assert hsic_by_formula(gram(features + 3), gram(other + 3)) == pytest.approx(exact, rel=1e-9)
    assert hsic_by_formula(gram(features + 1e4), gram(other + 1e4)) != pytest.approx(exact, rel=1e-2)
    shifted = unbiased_hsic(linear_gram(torch.tensor(features + 1e4)), linear_gram(torch.tensor(other + 1e4)))
    assert shifted.item() == pytest.approx(exact, rel=1e-9)
    assert cka_of(features + 1e4, other - 1e4) == pytest.approx(cka_of(features, other), rel=1e-9)


def test_cka_of_a_zoo_model_with_itself_and_with_a_copy():
    name = "alternet-50-cifar100"
    model = alternet_hf.create_model(name, **TINY[name]).train()
    loader = [(torch.randn(16, 3, 16, 16), torch.zeros(16, dtype=torch.long)) for _ in range(2)]
    result = cka(model, loader)
    n = len(alternet_hf.block_kinds(model))
    assert isinstance(result, CKAResult) and result.num_samples == 32
    assert result.similarity.shape == (n, n) and result.kinds_a == result.kinds_b == block_kinds(model)
    np.testing.assert_allclose(result.similarity, result.similarity.T, atol=1e-12)
    np.testing.assert_allclose(np.diag(result.similarity), 1.0, atol=1e-12)
    # Unbiased estimates of unrelated layers scatter around 0 by about 1/batch size, so slightly below is fine.
    assert np.all(result.similarity > -0.05) and np.all(result.similarity < 1 + 1e-12)
    assert model.training and all(module.training for module in model.modules())
    # Both models see the same inputs: a copy of the model gives the self-similarity back.
    paired = cka(model, loader, other=copy.deepcopy(model))
    np.testing.assert_allclose(paired.similarity, result.similarity, atol=1e-10)
    assert cka(model, loader, max_batches=1).num_samples == 16


def test_cka_between_two_zoo_models():
    alternet = alternet_hf.create_model("alternet-50-cifar100", **TINY["alternet-50-cifar100"])
    vit = alternet_hf.create_model("vit-ti-cifar100", **TINY["vit-ti-cifar100"]).train()
    inputs = torch.randn(6, 3, 16, 16)
    result = cka(alternet, inputs, other=vit)
    assert result.similarity.shape == (len(result.kinds_a), len(result.kinds_b))
    assert result.kinds_b == block_kinds(vit) and vit.training
    assert np.all(np.isfinite(result.similarity))
    assert result.to_dict()["similarity"][0][0] == pytest.approx(result.similarity[0, 0])


class TwoLayers(nn.Module):
    def __init__(self):
        super().__init__()
        self.first, self.second = nn.Linear(5, 5), nn.Linear(5, 3)

    def forward(self, x):
        return self.second(torch.relu(self.first(x)))


def test_cka_with_an_adapter():
    model = TwoLayers()
    inputs = torch.randn(10, 5)
    with pytest.raises(TypeError, match="BlockAdapter"):
        cka(model, inputs)
    adapter = BlockAdapter([("mlp", model.first), ("head", model.second)])
    result = cka(model, (inputs, torch.zeros(10)), adapter=adapter)
    with torch.no_grad():
        hidden = model.first(inputs)
        expected = cka_of(hidden, model.second(torch.relu(hidden)))
    assert result.similarity[0, 1] == pytest.approx(expected, rel=1e-12)
    with pytest.raises(ValueError, match="no batches"):
        cka(model, [], adapter=adapter)


def test_a_short_last_batch_is_skipped_with_a_warning():
    model = TwoLayers()
    adapter = BlockAdapter([("mlp", model.first), ("head", model.second)])
    inputs = torch.randn(13, 5)
    loader = [(inputs[:10], torch.zeros(10)), (inputs[10:], torch.zeros(3))]  # the last batch has 3 < 4 samples
    with pytest.warns(UserWarning, match="skipped 3 samples"):
        result = cka(model, loader, adapter=adapter)
    assert result.num_samples == 10
    assert result.similarity == pytest.approx(cka(model, inputs[:10], adapter=adapter).similarity, rel=1e-12)
    with pytest.warns(UserWarning), pytest.raises(ValueError, match="at least 4 samples"):
        cka(model, inputs[:3], adapter=adapter)


def test_plot_cka():
    matplotlib.use("Agg")
    result = CKAResult(np.eye(4), ["stem", "conv", "msa", "head"], ["stem", "conv", "msa", "head"], 8)
    ax = plot_cka(result)
    assert len(ax.images) == 1 and list(ax.xaxis.get_minorticklocs()) == [2]
    assert ax.get_xlabel() == "block"
