"""The lesion study against hand computations: a hand-built residual model, and zoo models whose branches
are swapped by hand for modules that output zeros."""

import matplotlib
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import TINY
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import alternet_hf
from analysis.blocks import BlockAdapter, block_kinds
from analysis.lesion import LesionResult, lesion_study, plot_lesion


class WithWeights(nn.Module):
    """A branch that returns (output, extra), as attention does with its weights."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        return self.linear(x), torch.ones(3)


class TwoResiduals(nn.Module):
    def __init__(self):
        super().__init__()
        self.branch1, self.branch2, self.head = nn.Linear(4, 4), WithWeights(), nn.Linear(4, 3)

    def forward(self, x):
        x = x + self.branch1(x)
        out, weights = self.branch2(x)
        assert torch.equal(weights, torch.ones(3))  # the lesion leaves the rest of a tuple alone
        return self.head(x + out)


def test_lesion_equals_the_model_without_that_branch():
    model = TwoResiduals()
    adapter = BlockAdapter(
        [("conv", model.branch1), ("msa", model.branch2), ("head", model.head)],
        residual_branches=[model.branch1, model.branch2, None],
    )
    inputs, targets = torch.randn(60, 4), torch.randint(0, 3, (60,))
    result = lesion_study(model, (inputs, targets), adapter=adapter)
    with torch.no_grad():
        logits = {
            "baseline": model(inputs),
            0: model.head(inputs + model.branch2.linear(inputs)),
            1: model.head(inputs + model.branch1(inputs)),
        }
    accuracy = {key: (value.argmax(-1) == targets).double().mean().item() for key, value in logits.items()}
    nll = {key: F.cross_entropy(value.double(), targets).item() for key, value in logits.items()}
    assert result.baseline_accuracy == pytest.approx(accuracy["baseline"], abs=1e-12)
    assert result.baseline_nll == pytest.approx(nll["baseline"], rel=1e-6)
    for index in (0, 1):
        assert result.accuracy[index] == pytest.approx(accuracy[index], abs=1e-12)
        assert result.nll[index] == pytest.approx(nll[index], rel=1e-6)
    assert np.isnan(result.accuracy[2]) and np.isnan(result.nll[2]) and np.isnan(result.accuracy_drop[2])
    np.testing.assert_allclose(result.accuracy_drop[:2], [accuracy["baseline"] - accuracy[i] for i in (0, 1)])
    assert result.kinds == ["conv", "msa", "head"] and result.num_samples == 60


class Zeros(nn.Module):
    """Stands in for a residual branch: runs it, then contributes nothing to the residual stream."""

    def __init__(self, branch: nn.Module):
        super().__init__()
        self.branch = branch

    def forward(self, *args, **kwargs):
        output = self.branch(*args, **kwargs)
        if isinstance(output, tuple):
            return (torch.zeros_like(output[0]), *output[1:])
        return torch.zeros_like(output)


def forward_without(model: nn.Module, branch: nn.Module, inputs: torch.Tensor) -> torch.Tensor:
    """Logits with `branch` swapped out of its parent for `Zeros`, no hooks involved."""
    name = next(name for name, module in model.named_modules() if module is branch)
    parent_name, _, attribute = name.rpartition(".")
    parent = model.get_submodule(parent_name)
    setattr(parent, attribute, Zeros(branch))
    try:
        with torch.no_grad():
            return model(inputs).logits
    finally:
        setattr(parent, attribute, branch)


@pytest.mark.parametrize("name", ["alternet-50-cifar100", "vit-ti-cifar100"])
def test_lesion_of_zoo_models(name):
    model = alternet_hf.create_model(name, **TINY[name]).train()
    inputs, targets = torch.randn(12, 3, 16, 16), torch.randint(0, 5, (12,))
    model.eval()
    with torch.no_grad():
        before = model(inputs).logits
    model.train()

    whole = lesion_study(model, (inputs, targets))
    kinds = block_kinds(model)
    assert whole.kinds == kinds and len(whole.accuracy) == len(whole.nll) == len(kinds)
    assert [bool(np.isnan(a)) for a in whole.accuracy] == [kind in ("stem", "head") for kind in kinds]
    assert whole.baseline_nll == pytest.approx(F.cross_entropy(before.double(), targets).item(), rel=1e-6)

    model.eval()
    branches = alternet_hf.residual_branches(model)
    for index, branch in enumerate(branches):
        if branch is None:
            continue
        lesioned = forward_without(model, branch, inputs)
        assert not torch.allclose(lesioned, before, atol=1e-4), f"removing block {index} changed nothing"
        assert whole.nll[index] == pytest.approx(F.cross_entropy(lesioned.double(), targets).item(), rel=1e-6)
        assert whole.accuracy[index] == pytest.approx((lesioned.argmax(-1) == targets).double().mean().item())

    model.train()
    loader = DataLoader(TensorDataset(inputs, targets), batch_size=5)
    split = lesion_study(model, loader)
    np.testing.assert_array_equal(split.accuracy, whole.accuracy)
    np.testing.assert_allclose(split.nll, whole.nll, rtol=1e-6)
    assert split.baseline_accuracy == whole.baseline_accuracy and split.num_samples == 12
    assert lesion_study(model, loader, max_batches=2).num_samples == 10

    assert model.training and all(module.training for module in model.modules())
    assert not any(module._forward_hooks for module in model.modules())
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(inputs).logits, before, rtol=0, atol=0)


def test_lesion_needs_branches_and_data():
    model = TwoResiduals()
    with pytest.raises(TypeError, match="BlockAdapter"):
        lesion_study(model, (torch.randn(4, 4), torch.zeros(4, dtype=torch.long)))
    without_branches = BlockAdapter([("conv", model.branch1), ("head", model.head)])
    with pytest.raises(ValueError, match="residual_branches"):
        lesion_study(model, (torch.randn(4, 4), torch.zeros(4, dtype=torch.long)), adapter=without_branches)
    adapter = BlockAdapter([("conv", model.branch1), ("head", model.head)], residual_branches=[model.branch1, None])
    with pytest.raises(ValueError, match="no batches"):
        lesion_study(model, [], adapter=adapter)


def test_plot_lesion():
    matplotlib.use("Agg")
    result = LesionResult(
        kinds=["stem", "conv", "msa", "mlp", "head"],
        baseline_accuracy=0.9,
        baseline_nll=0.3,
        accuracy=np.array([np.nan, 0.85, 0.5, 0.88, np.nan]),
        nll=np.array([np.nan, 0.4, 1.2, 0.35, np.nan]),
        num_samples=100,
    )
    ax = plot_lesion(result)
    bars = [patch for patch in ax.patches if patch.get_width() == pytest.approx(0.8)]
    np.testing.assert_allclose([bar.get_height() for bar in bars], [5, 40, 2], atol=1e-9)
    # Block i sits at depth i + 1, where its output is in the Fourier and variance plots (0 = input).
    np.testing.assert_allclose([bar.get_x() + bar.get_width() / 2 for bar in bars], [2, 3, 4])
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["Conv", "MLP", "MSA"]

    accuracy = np.array([np.nan, 0.8, 0.7, 0.85, np.nan])
    resnet = LesionResult(["stem", "conv", "pool", "conv", "head"], 0.9, 0.3, accuracy, np.full(5, 0.5), 10)
    legend = [t.get_text() for t in plot_lesion(resnet).get_legend().get_texts()]
    assert legend == ["Conv", "downsampling block"]  # no MSA where there is none
