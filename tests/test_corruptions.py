"""The CIFAR-C corruptions: layout kept, seeded, harsher with severity, and a few exact properties."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from analysis.corruptions import CORRUPTIONS, SEVERITIES, SEVERITY_PARAMETERS, corrupt, frost_textures, plasma_fractal

DETERMINISTIC = {"defocus_blur", "zoom_blur", "brightness", "contrast", "pixelate", "jpeg_compression"}


@pytest.fixture(scope="module")
def photos():
    """Four 32×32 crops of a real photograph, float in [0, 1]."""
    from skimage import data

    photo = torch.from_numpy(data.astronaut()).permute(2, 0, 1)[None].float() / 255
    crops = [photo[..., r : r + 256, c : c + 256] for r, c in ((0, 0), (0, 256), (256, 0), (256, 256))]
    return F.interpolate(torch.cat(crops), size=(32, 32), mode="area")


def seeded(seed=0):
    return torch.Generator().manual_seed(seed)


def test_the_table_has_fifteen_corruptions_of_five_severities():
    assert len(CORRUPTIONS) == 15 and CORRUPTIONS[0] == "gaussian_noise" and CORRUPTIONS[-1] == "jpeg_compression"
    assert all(len(parameters) == len(SEVERITIES) for parameters in SEVERITY_PARAMETERS.values())


@pytest.mark.parametrize("corruption", CORRUPTIONS)
def test_layout_range_and_reproducibility(photos, corruption):
    for severity in SEVERITIES:
        out = corrupt(photos, corruption, severity, generator=seeded())
        assert out.shape == photos.shape and out.dtype == photos.dtype
        assert out.min() >= 0 and out.max() <= 1 and torch.isfinite(out).all()
        assert not torch.equal(out, photos)
        assert torch.equal(out, corrupt(photos, corruption, severity, generator=seeded()))
    if corruption not in DETERMINISTIC:
        assert not torch.equal(out, corrupt(photos, corruption, 5, generator=seeded(1)))
    as_bytes = (photos * 255).round().to(torch.uint8)
    out_bytes = corrupt(as_bytes, corruption, 3, generator=seeded())
    assert out_bytes.dtype == torch.uint8 and out_bytes.shape == as_bytes.shape
    assert corrupt(photos.double(), corruption, 3, generator=seeded()).dtype == torch.float64
    assert corrupt(torch.rand(2, 3, 20, 24), corruption, 2, generator=seeded()).shape == (2, 3, 20, 24)


def _mean_abs_change(photos, corruption):
    return [(corrupt(photos, corruption, s, generator=seeded()) - photos).abs().mean().item() for s in SEVERITIES]


@pytest.mark.parametrize(
    "corruption", [c for c in CORRUPTIONS if c not in ("glass_blur", "frost", "elastic_transform", "pixelate")]
)
def test_harsher_with_severity(photos, corruption):
    assert np.all(np.diff(_mean_abs_change(photos, corruption)) >= 0)


def test_harshness_of_the_exceptions(photos):
    # Glass blur's σ at δ = 1 mostly smooths the displacement noise away; the second iteration is what hurts.
    glass = _mean_abs_change(photos, "glass_blur")
    assert max(glass[:3]) < min(glass[3:])

    # Frost darkens the image and adds texture: the change partly cancels, but the image's share falls.
    def decorrelation(severity):
        out = corrupt(photos, "frost", severity, generator=seeded()).flatten(1)
        clean = photos.flatten(1)
        a, b = out - out.mean(1, keepdim=True), clean - clean.mean(1, keepdim=True)
        return 1 - ((a * b).sum(1) / (a.norm(dim=1) * b.norm(dim=1))).mean().item()

    assert np.all(np.diff([decorrelation(s) for s in SEVERITIES]) > 0)
    # Pixelation at non-integer factors aliases differently at each size; its resolution is what falls.
    for severity, factor in zip(SEVERITIES, SEVERITY_PARAMETERS["pixelate"]):
        out = corrupt(photos, "pixelate", severity)
        column_changes = (out[..., 1:] != out[..., :-1]).any(dim=(1, 2)).sum(dim=-1)
        assert column_changes.max().item() + 1 <= int(32 * factor)
    # elastic_transform: CIFAR-C trades a shrinking random affine map (2.6 → 1 pixel) for a growing
    # elastic field, so its pixel change is not monotone; the parameters are checked instead.
    alphas, _, shifts = zip(*SEVERITY_PARAMETERS["elastic_transform"])
    assert np.all(np.diff(alphas) >= 0) and np.all(np.diff(shifts) <= 0)


def test_brightness_keeps_hue_and_saturation(photos):
    from skimage.color import rgb2hsv

    out = corrupt(photos, "brightness", 2)
    before = rgb2hsv(photos.permute(0, 2, 3, 1).numpy())
    after = rgb2hsv(out.permute(0, 2, 3, 1).numpy())
    unclipped = before[..., 2] + 0.1 <= 1
    np.testing.assert_allclose(after[..., 2][unclipped], before[..., 2][unclipped] + 0.1, atol=1e-5)
    saturated = unclipped & (before[..., 1] > 0.05)
    np.testing.assert_allclose(after[..., :2][saturated], before[..., :2][saturated], atol=1e-4)


def test_contrast_keeps_channel_means(photos):
    grey = 0.25 + 0.5 * photos  # stays inside [0, 1] after the contrast change: no clipping
    out = corrupt(grey, "contrast", 3)
    torch.testing.assert_close(out.mean(dim=(2, 3)), grey.mean(dim=(2, 3)))
    torch.testing.assert_close(out.std(dim=(2, 3)), 0.4 * grey.std(dim=(2, 3)))


def test_noise_has_the_table_strength(photos):
    middle = torch.full((64, 3, 32, 32), 0.5)
    noise = corrupt(middle, "gaussian_noise", 4, generator=seeded()) - middle
    assert noise.std().item() == pytest.approx(0.09, rel=0.02)
    impulse = corrupt(middle, "impulse_noise", 5, generator=seeded())
    assert ((impulse == 0) | (impulse == 1)).float().mean().item() == pytest.approx(0.07, rel=0.05)


def test_jpeg_quality_order(photos):
    errors = [(corrupt(photos, "jpeg_compression", s) - photos).pow(2).mean().item() for s in SEVERITIES]
    assert errors[0] > 0 and errors == sorted(errors)


def test_textures_and_plasma_are_seeded_and_in_range():
    texture = frost_textures(2, 32, 32, generator=seeded())
    assert texture.shape == (2, 3, 32, 32) and texture.min() >= 0 and texture.max() <= 1
    assert torch.equal(texture, frost_textures(2, 32, 32, generator=seeded()))
    plasma = plasma_fractal(3, 32, 2.0, generator=seeded())
    assert plasma.shape == (3, 32, 32) and plasma.min() == 0 and plasma.max() == 1
    assert not torch.equal(plasma[0], plasma[1])


def test_bad_input_says_what_is_wrong(photos):
    with pytest.raises(ValueError, match="did you mean 'gaussian_noise'"):
        corrupt(photos, "gausian_noise", 1)
    with pytest.raises(ValueError, match="severity"):
        corrupt(photos, "fog", 0)
    with pytest.raises(ValueError, match=r"\(batch, 3, height, width\)"):
        corrupt(photos[0], "fog", 1)
    with pytest.raises(ValueError, match=r"\(batch, 3, height, width\)"):
        corrupt(photos[:, :1], "fog", 1)
