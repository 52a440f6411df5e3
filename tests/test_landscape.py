"""Loss landscapes: the centre is the model's own loss, weights come back, directions are filter-normalised."""

import pytest
import torch
import torch.nn.functional as F
from conftest import TINY

import alternet_hf
from analysis.landscape import (
    filter_normalized_direction,
    is_perturbed,
    loss_landscape,
    normalized_direction,
    symmetric_grid,
)
from analysis.shared import analysis_mode


@pytest.fixture
def tiny_alternet():
    return alternet_hf.create_model("alternet-50-cifar100", **TINY["alternet-50-cifar100"])


@pytest.fixture
def batch():
    generator = torch.Generator().manual_seed(1)
    return torch.randn(6, 3, 16, 16, generator=generator), torch.randint(0, 5, (6,), generator=generator)


def test_centre_is_the_models_own_loss(tiny_alternet, batch):
    result = loss_landscape(tiny_alternet, batch, num_points=5, span=0.5, weight_decay=0.05, batchnorm="train")
    assert result.loss.shape == (5, 5) and result.coordinates[2] == 0.0
    with analysis_mode(tiny_alternet, batchnorm="train"), torch.no_grad():
        nll = F.cross_entropy(tiny_alternet(batch[0]).logits, batch[1]).item()
    norms = [p.double().norm().item() for p in tiny_alternet.parameters()]
    assert result.nll[2, 2] == nll
    assert result.loss[2, 2] == pytest.approx(nll + 0.05 * sum(norms), rel=1e-12)  # the reference's L2 term
    assert result.loss.max() > result.loss[2, 2]
    squared = loss_landscape(tiny_alternet, batch, num_points=1, weight_decay=0.05, penalty="squared")
    assert squared.loss[0, 0] == pytest.approx(nll + 0.025 * sum(n**2 for n in norms), rel=1e-12)
    with pytest.raises(ValueError, match="penalty"):
        loss_landscape(tiny_alternet, batch, num_points=1, penalty="l1")


def test_weights_and_mode_are_restored(tiny_alternet, batch):
    tiny_alternet.train()
    before = {k: v.clone() for k, v in tiny_alternet.state_dict().items()}
    result = loss_landscape(tiny_alternet, [batch, batch], num_directions=1, num_points=3)
    assert result.loss.shape == (3,) and result.accuracy.shape == (3,)
    assert tiny_alternet.training
    for key, value in tiny_alternet.state_dict().items():
        assert torch.equal(value, before[key]), key


def test_directions_are_filter_normalised_and_skip_biases_norms_and_positions():
    model = alternet_hf.create_model("vit-ti-cifar100", **TINY["vit-ti-cifar100"])
    direction = filter_normalized_direction(model, torch.Generator().manual_seed(0))
    parameters = dict(model.named_parameters())
    skipped = set(parameters) - set(direction)
    assert any("position_embeddings" in name for name in skipped) and any("cls_token" in name for name in skipped)
    assert all(parameters[name].ndim == 1 or not is_perturbed(name, parameters[name]) for name in skipped)
    for name, d in direction.items():
        torch.testing.assert_close(d.flatten(1).norm(dim=1), parameters[name].detach().flatten(1).norm(dim=1))


def test_grid_contains_the_trained_weights_exactly():
    grid = symmetric_grid(21, 1.0)
    assert grid[10] == 0.0 and grid[0] == -1.0 and grid[-1] == 1.0 and len(grid) == 21
    with pytest.raises(ValueError, match="odd"):
        symmetric_grid(20, 1.0)


def test_reference_protocol_normalises_over_dim_0_and_evaluates_batchnorm_in_eval_mode(tiny_alternet, batch):
    vit = alternet_hf.create_model("vit-ti-cifar100", **TINY["vit-ti-cifar100"])
    direction = normalized_direction(vit, torch.Generator().manual_seed(0), protocol="reference")
    parameters = dict(vit.named_parameters())
    assert any("cls_token" in name for name in direction)  # the reference perturbs every tensor of ≥ 2 dims …
    assert not any("position_embeddings" in name for name in direction)  # … but its position tables
    assert set(direction) == {name for name, p in parameters.items() if p.ndim > 1 and "position" not in name}
    for name, d in direction.items():
        torch.testing.assert_close(d.norm(dim=0), parameters[name].detach().norm(dim=0), rtol=1e-5, atol=1e-6)

    result = loss_landscape(tiny_alternet, batch, num_points=3, protocol="reference")
    assert result.protocol == "reference" and result.batchnorm == "eval"
    with analysis_mode(tiny_alternet, batchnorm="eval"), torch.no_grad():
        nll = F.cross_entropy(tiny_alternet(batch[0]).logits, batch[1]).item()
    assert result.nll[1, 1] == nll
    assert (
        loss_landscape(tiny_alternet, batch, num_points=1, protocol="reference", batchnorm="train").batchnorm == "train"
    )
    with pytest.raises(ValueError, match="protocol"):
        loss_landscape(tiny_alternet, batch, num_points=1, protocol="li")
