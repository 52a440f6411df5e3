"""CKA's invariances and the lesion study's hand-computed answers."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import TINY
from torch import nn

import alternet_hf
from analysis.blocks import BlockAdapter
from analysis.cka import MinibatchCKA, cka, linear_gram, unbiased_hsic
from analysis.lesion import lesion_study


def hsic_by_formula(x: np.ndarray, y: np.ndarray) -> float:
    """Song et al. (2012), written out term by term in numpy."""
    n = len(x)
    k, l = x @ x.T, y @ y.T  # noqa: E741
    np.fill_diagonal(k, 0)
    np.fill_diagonal(l, 0)
    ones = np.ones(n)
    return (
        np.trace(k @ l) + ones @ k @ ones * (ones @ l @ ones) / ((n - 1) * (n - 2)) - 2 / (n - 2) * ones @ k @ l @ ones
    ) / (n * (n - 3))


def cka_of(x, y) -> float:
    accumulator = MinibatchCKA()
    accumulator.update([torch.as_tensor(x)], [torch.as_tensor(y)])
    return accumulator.compute()[0, 0]


@pytest.fixture
def features():
    return np.random.default_rng(0).standard_normal((32, 12))


def test_unbiased_hsic_matches_the_formula(features):
    other = np.tanh(features @ np.random.default_rng(1).standard_normal((12, 5)))
    value = unbiased_hsic(linear_gram(torch.tensor(features)), linear_gram(torch.tensor(other))).item()
    assert value == pytest.approx(hsic_by_formula(features, other), rel=1e-10)
    with pytest.raises(ValueError, match="n ≥ 4"):
        unbiased_hsic(torch.eye(3), torch.eye(3))


def test_cka_invariances(features):
    rotation, _ = np.linalg.qr(np.random.default_rng(2).standard_normal((12, 12)))
    assert cka_of(features, features) == pytest.approx(1.0, abs=1e-12)
    assert cka_of(features, features @ rotation) == pytest.approx(1.0, abs=1e-10)
    assert cka_of(features, 7.5 * features) == pytest.approx(1.0, abs=1e-12)
    stretch = np.diag(np.linspace(0.1, 10, 12))  # invertible but not orthogonal: CKA must notice
    assert cka_of(features, features @ stretch) < 0.95


def test_float64_survives_huge_activations(features):
    assert cka_of(np.float32(features * 1e20), np.float32(features * 1e20)) == pytest.approx(1.0, abs=1e-9)


def test_minibatches_accumulate_hsic(features):
    other = features[:, :6] ** 2
    accumulator = MinibatchCKA()
    for rows in (slice(0, 16), slice(16, 32)):
        accumulator.update([torch.tensor(features[rows])], [torch.tensor(other[rows])])
    halves = [(features[r], other[r]) for r in (slice(0, 16), slice(16, 32))]
    cross = sum(hsic_by_formula(a, b) for a, b in halves)
    norm = np.sqrt(sum(hsic_by_formula(a, a) for a, _ in halves) * sum(hsic_by_formula(b, b) for _, b in halves))
    assert accumulator.compute()[0, 0] == pytest.approx(cross / norm, rel=1e-10)
    assert accumulator.num_samples == 32


def test_cka_of_a_zoo_model_with_itself():
    model = alternet_hf.create_model("alternet-50-cifar100", **TINY["alternet-50-cifar100"])
    model.train()
    loader = [(torch.randn(8, 3, 16, 16), torch.zeros(8, dtype=torch.long)) for _ in range(2)]
    result = cka(model, loader)
    n = len(alternet_hf.block_kinds(model))
    assert result.similarity.shape == (n, n) and result.num_samples == 16
    np.testing.assert_allclose(result.similarity, result.similarity.T, atol=1e-12)
    np.testing.assert_allclose(np.diag(result.similarity), 1.0, atol=1e-12)
    assert np.all(result.similarity > -0.2) and np.all(result.similarity < 1 + 1e-9)
    assert model.training
    other = alternet_hf.create_model("vit-ti-cifar100", **TINY["vit-ti-cifar100"])
    cross = cka(model, loader, other=other)
    assert cross.similarity.shape == (n, len(alternet_hf.block_kinds(other)))


class TwoResiduals(nn.Module):
    def __init__(self):
        super().__init__()
        self.branch1, self.branch2, self.head = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 3)

    def forward(self, x):
        x = x + self.branch1(x)
        x = x + self.branch2(x)
        return self.head(x)


def test_lesion_equals_the_model_without_that_branch():
    model = TwoResiduals()
    adapter = BlockAdapter(
        [("conv", model.branch1), ("mlp", model.branch2), ("head", model.head)],
        residual_branches=[model.branch1, model.branch2, None],
    )
    inputs, targets = torch.randn(50, 4), torch.randint(0, 3, (50,))
    result = lesion_study(model, (inputs, targets), adapter=adapter)
    with torch.no_grad():
        without_first = model.head(inputs + model.branch2(inputs))
        hidden = inputs + model.branch1(inputs)
        without_second = model.head(hidden)
    for index, logits in ((0, without_first), (1, without_second)):
        assert result.accuracy[index] == pytest.approx((logits.argmax(-1) == targets).float().mean().item())
        assert result.nll[index] == pytest.approx(F.cross_entropy(logits, targets).item(), rel=1e-6)
    assert np.isnan(result.accuracy[2])
    baseline = (model(inputs).argmax(-1) == targets).float().mean().item()
    assert result.baseline_accuracy == pytest.approx(baseline)


@pytest.mark.parametrize("name", ["alternet-50-cifar100", "vit-ti-cifar100"])
def test_lesion_of_zoo_models(name):
    model = alternet_hf.create_model(name, **TINY[name]).eval()
    inputs, targets = torch.randn(12, 3, 16, 16), torch.randint(0, 5, (12,))
    with torch.no_grad():
        before = model(inputs).logits
    whole = lesion_study(model, (inputs, targets))
    split = lesion_study(model, [(inputs[:5], targets[:5]), (inputs[5:], targets[5:])])
    kinds = alternet_hf.block_kinds(model)
    assert whole.kinds == kinds and len(whole.accuracy) == len(kinds)
    assert [np.isnan(a) for a in whole.accuracy] == [k in ("stem", "head") for k in kinds]
    np.testing.assert_allclose(whole.nll, split.nll, rtol=1e-5)
    assert np.all(whole.nll[1:-1] != whole.baseline_nll)  # every lesion changes the model
    with torch.no_grad():
        torch.testing.assert_close(model(inputs).logits, before)  # hooks removed
