"""Fourier ΔlogA and feature-map variance: known answers on hand-built blocks, shapes on the zoo."""

import numpy as np
import pytest
import torch
from conftest import BOX_BLUR, IDENTITY, LAPLACIAN, TINY, Filter
from torch import nn

import alternet_hf
from analysis.blocks import BlockAdapter, as_feature_map, block_batches, block_kinds, run_blocks
from analysis.fourier import ImageSpread, fourier_log_amplitude, half_diagonal, mean_log_amplitude
from analysis.variance import feature_map_variance


class Chain(nn.Module):
    def __init__(self, *blocks):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x.mean(dim=(2, 3))


def chain_with_adapter(*kernels):
    model = Chain(*[Filter(k) for k in kernels])
    return model, BlockAdapter([("conv", block) for block in model.blocks])


@pytest.fixture
def noise_images():
    return torch.rand(8, 3, 16, 16, generator=torch.Generator().manual_seed(0))


def test_half_diagonal_runs_from_zero_to_pi():
    checkerboard = torch.tensor([[(-1.0) ** (i + j) for j in range(8)] for i in range(8)]).expand(1, 1, 8, 8)
    frequencies, values = half_diagonal(mean_log_amplitude(checkerboard + 1.0))
    np.testing.assert_allclose(frequencies, [0, 0.25, 0.5, 0.75, 1.0])
    # The checkerboard lives at (π, π) only: equal to the constant's amplitude at 0, nothing in between.
    assert values[0] == 0 and abs(values[-1]) < 1e-9 and np.allclose(values[1:-1], np.log(1e-6) - np.log(64))


def test_odd_sides_end_one_half_step_short_of_pi():
    frequencies, values = half_diagonal(mean_log_amplitude(torch.rand(1, 1, 7, 7)))
    np.testing.assert_allclose(frequencies, [0, 2 / 7, 4 / 7, 6 / 7])  # no Nyquist bin on an odd side
    assert values[0] == 0


def test_identity_block_changes_nothing(noise_images):
    model, adapter = chain_with_adapter(IDENTITY)
    result = fourier_log_amplitude(model, noise_images, adapter=adapter)
    assert result.kinds == ["input", "conv"]
    np.testing.assert_array_equal(result.delta_log_amplitude, 0.0)
    np.testing.assert_array_equal(result.relative_log_amplitude[:, 0], 0.0)


def test_box_blur_lowers_and_laplacian_raises_high_frequencies(noise_images):
    model, adapter = chain_with_adapter(BOX_BLUR, LAPLACIAN)
    result = fourier_log_amplitude(model, noise_images, adapter=adapter)
    blur, laplacian = result.delta_log_amplitude[:, -1]
    assert blur < -1.0  # a 3×3 box passes 1/9 of the amplitude at (π, π) relative to 0
    assert laplacian > 1.0
    # Circular convolution multiplies the spectrum: the blur's ΔlogA is its own log frequency response.
    w = np.pi * result.frequencies
    np.testing.assert_allclose(result.delta_log_amplitude[0], 2 * np.log(np.abs(1 + 2 * np.cos(w)) / 3), atol=1e-4)


def test_batches_of_a_loader_average_like_one_batch(noise_images):
    model, adapter = chain_with_adapter(BOX_BLUR)
    whole = fourier_log_amplitude(model, noise_images, adapter=adapter)
    loader = [(noise_images[:3], torch.zeros(3)), (noise_images[3:], torch.zeros(5))]
    split = fourier_log_amplitude(model, loader, adapter=adapter)
    np.testing.assert_allclose(split.relative_log_amplitude, whole.relative_log_amplitude, atol=1e-12)
    for key in ("pixel_values", "inputs"):
        batch = {key: noise_images, "labels": torch.zeros(8)}
        as_dict = fourier_log_amplitude(model, batch, adapter=adapter)
        np.testing.assert_array_equal(as_dict.relative_log_amplitude, whole.relative_log_amplitude)


@pytest.mark.parametrize("name", ["alternet-50-cifar100", "resnet-50-cifar100", "vit-ti-cifar100"])
def test_zoo_models_give_one_curve_per_block(name):
    model = alternet_hf.create_model(name, **TINY[name])
    model.train()
    images = torch.randn(4, 3, 16, 16)
    result = fourier_log_amplitude(model, images, num_frequencies=9)
    kinds = block_kinds(model)
    assert result.kinds == ["input"] + kinds
    # The zoo's kinds, except that the blocks which halve the map (the stride blocks) are tagged `pool`.
    assert [kind.replace("pool", "conv") for kind in kinds] == alternet_hf.block_kinds(model)
    (batch,) = block_batches(model, images)
    sides = [m.shape[-1] for m in batch.maps[1:]]  # from the stem on (a ViT's stem itself shrinks the map)
    assert [kind == "pool" for kind in kinds[1:]] == [after < before for before, after in zip(sides, sides[1:])]
    assert result.relative_log_amplitude.shape == (len(kinds) + 1, 9)
    assert result.delta_log_amplitude.shape == (len(kinds), 9)
    assert np.isfinite(result.relative_log_amplitude).all()
    assert result.frequencies[0] == 0 and result.frequencies[-1] == 1
    assert model.training  # mode restored
    variance = feature_map_variance(model, images)
    assert variance.variance.shape == (len(kinds) + 1,) and np.all(variance.variance > 0)


def test_variance_of_constant_maps_is_zero_and_matches_numpy(noise_images):
    class Constant(nn.Module):
        def forward(self, x):
            return torch.full_like(x, 3.0)

    model = Chain(Constant())
    result = feature_map_variance(model, noise_images, adapter=BlockAdapter([("conv", model.blocks[0])]))
    expected = np.var(noise_images.double().flatten(2).numpy(), axis=-1).mean()
    np.testing.assert_allclose(result.variance, [expected, 0.0], rtol=1e-12)


def test_token_states_drop_the_class_token():
    tokens = torch.arange(2 * 5 * 3, dtype=torch.float32).view(2, 5, 3)  # CLS + 2×2 patches, dim 3
    feature_map = as_feature_map(tokens, num_prefix_tokens=1)
    assert feature_map.shape == (2, 3, 2, 2)
    torch.testing.assert_close(feature_map[0, :, 0, 0], tokens[0, 1])
    with pytest.raises(ValueError, match="square grid"):
        as_feature_map(tokens, num_prefix_tokens=0)


def test_models_without_blocks_need_an_adapter():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten())
    with pytest.raises(TypeError, match="BlockAdapter"):
        block_kinds(model)
    with pytest.raises(ValueError, match="block kind"):
        BlockAdapter([("attention", model[0])])
    run = run_blocks(model, torch.randn(2, 3, 8, 8), BlockAdapter([("stem", model[0])]))
    assert run.kinds == ["stem"] and run.states[0].shape == (2, 4, 6, 6)


@pytest.mark.parametrize("kinds", [["input", "conv", "msa", "conv"], ["input", "msa", "conv", "msa"]])
def test_the_per_kind_errors_come_in_order_of_depth(kinds):
    """Their order is the JSON's: a set's order would change with the interpreter's hash seed."""
    spread = ImageSpread()
    spread.update(kinds, np.random.default_rng(0).normal(size=(len(kinds), 5)))
    assert list(spread.errors()) == list(dict.fromkeys(kinds[1:]))
