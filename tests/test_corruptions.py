"""The CIFAR-C corruptions: the table, layout and seeding, harshness by severity, and agreement with the
building blocks the reference uses (scipy's zoom, Pillow's BOX resize and JPEG, scikit-image's HSV)."""

import importlib.util
import io
import json
import os
import sys
from pathlib import Path

import cifar_c_reference
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from alternet_hf.data.cifar_c import corruptions
from alternet_hf.data.cifar_c.corruptions import (
    CORRUPTIONS,
    SEVERITIES,
    SEVERITY_PARAMETERS,
    corrupt,
    frost_textures,
    plasma_fractal,
)

DETERMINISTIC = ("defocus_blur", "zoom_blur", "brightness", "contrast", "pixelate", "jpeg_compression")
RANDOM = tuple(c for c in CORRUPTIONS if c not in DETERMINISTIC)


def seeded(seed=0):
    return torch.Generator().manual_seed(seed)


def _astronaut(tile: int) -> torch.Tensor:
    """The 512×512 photograph cut into tile×tile pieces, each shrunk to 32×32, float in [0, 1] on 8-bit levels."""
    from skimage import data

    photo = torch.from_numpy(data.astronaut()).permute(2, 0, 1)[None].double() / 255
    pieces = [photo[..., r : r + tile, c : c + tile] for r in range(0, 512, tile) for c in range(0, 512, tile)]
    return (F.interpolate(torch.cat(pieces), size=(32, 32), mode="area") * 255).round().float() / 255


@pytest.fixture(scope="module")
def photos():
    return _astronaut(256)  # 4 images


@pytest.fixture(scope="module")
def tiles():
    return _astronaut(128)  # 16 images, for averages over the randomness


def test_the_table_is_cifar_c():
    assert CORRUPTIONS == (
        "gaussian_noise",
        "shot_noise",
        "impulse_noise",
        "defocus_blur",
        "glass_blur",
        "motion_blur",
        "zoom_blur",
        "snow",
        "frost",
        "fog",
        "brightness",
        "contrast",
        "elastic_transform",
        "pixelate",
        "jpeg_compression",
    )
    assert SEVERITIES == (1, 2, 3, 4, 5)
    assert all(len(parameters) == 5 for parameters in SEVERITY_PARAMETERS.values())
    table = SEVERITY_PARAMETERS
    assert table["gaussian_noise"] == (0.04, 0.06, 0.08, 0.09, 0.10)
    assert table["shot_noise"] == (500, 250, 100, 75, 50)
    assert table["glass_blur"] == ((0.05, 1, 1), (0.25, 1, 1), (0.4, 1, 1), (0.25, 1, 2), (0.4, 1, 2))
    assert table["motion_blur"] == ((6, 1), (6, 1.5), (6, 2), (8, 2), (9, 2.5))
    assert table["snow"][1:4] == (
        (0.1, 0.2, 1, 0.5, 10, 4, 0.9),
        (0.15, 0.3, 1.75, 0.55, 10, 4, 0.9),
        (0.25, 0.3, 2.25, 0.6, 12, 6, 0.85),
    )
    expected_elastic = [(0, 0, 2.56), (1.6, 6.4, 2.24), (2.56, 1.92, 1.92), (3.2, 1.28, 1.6), (3.2, 0.96, 0.96)]
    np.testing.assert_allclose(table["elastic_transform"], expected_elastic)
    assert table["jpeg_compression"] == (80, 65, 58, 50, 40)


@pytest.mark.parametrize("severity", SEVERITIES)
@pytest.mark.parametrize("corruption", CORRUPTIONS)
def test_layout_range_and_seeding(photos, corruption, severity):
    noise = torch.rand(4, 3, 32, 32, generator=seeded(7))
    for images in (photos, noise):
        out = corrupt(images, corruption, severity, generator=seeded())
        assert out.shape == images.shape and out.dtype == images.dtype and out.device == images.device
        assert torch.isfinite(out).all() and out.min() >= 0 and out.max() <= 1
        assert not torch.equal(out, images)
        assert torch.equal(out, corrupt(images, corruption, severity, generator=seeded()))
        if corruption in RANDOM:
            assert not torch.equal(out, corrupt(images, corruption, severity, generator=seeded(1)))
        else:
            assert torch.equal(out, corrupt(images, corruption, severity))


@pytest.mark.parametrize("corruption", CORRUPTIONS)
def test_dtypes_and_sizes(photos, corruption):
    as_bytes = (photos * 255).round().to(torch.uint8)
    out_bytes = corrupt(as_bytes, corruption, 3, generator=seeded())
    assert out_bytes.dtype == torch.uint8 and out_bytes.shape == as_bytes.shape
    # photos hold exact 8-bit levels, so the uint8 path computes the same floats and truncates them as the
    # reference's np.uint8 does; JPEG is 8-bit already, and glass blur, snow and pixelate also take the
    # reference's inner 8-bit steps (a level or two apart from the float path)
    floats = corrupt(photos, corruption, 3, generator=seeded()) * 255
    if corruption == "jpeg_compression":
        assert torch.equal(out_bytes, floats.round().to(torch.uint8))
    elif corruption in ("glass_blur", "snow", "pixelate"):
        assert (out_bytes.float() - floats).abs().max() <= 3
    else:
        assert torch.equal(out_bytes, (floats + 1e-5).floor().to(torch.uint8))
    for dtype in (torch.float64, torch.float16, torch.bfloat16):
        out = corrupt(photos.to(dtype), corruption, 3, generator=seeded())
        assert out.dtype == dtype and out.min() >= 0 and out.max() <= 1
    if corruption in DETERMINISTIC:
        torch.testing.assert_close(corrupt(photos.double(), corruption, 3).float(), corrupt(photos, corruption, 3))
    for shape in ((2, 3, 8, 8), (2, 3, 20, 24), (1, 3, 45, 33)):
        images = torch.rand(shape, generator=seeded())
        out = corrupt(images, corruption, 5, generator=seeded())
        assert out.shape == shape and out.min() >= 0 and out.max() <= 1
    assert corrupt(photos.contiguous(memory_format=torch.channels_last), corruption, 2, generator=seeded()).shape == (
        photos.shape
    )
    assert corrupt(photos[:0], corruption, 1).shape == (0, 3, 32, 32)


def test_no_generator_draws_from_torchs_global_rng(photos):
    torch.manual_seed(3)
    first = corrupt(photos, "snow", 4)
    torch.manual_seed(3)
    assert torch.equal(first, corrupt(photos, "snow", 4))
    assert not torch.equal(first, corrupt(photos, "snow", 4))


def _mean_abs_change(images, corruption, seeds=(0, 1)):
    """Mean |corrupted − clean| per severity, averaged over seeds (one for a deterministic corruption)."""
    seeds = seeds if corruption in RANDOM else seeds[:1]
    return np.array(
        [
            np.mean([(corrupt(images, corruption, s, generator=seeded(k)) - images).abs().mean().item() for k in seeds])
            for s in SEVERITIES
        ]
    )


@pytest.mark.parametrize(
    "corruption", [c for c in CORRUPTIONS if c not in ("glass_blur", "frost", "elastic_transform")]
)
def test_harsher_with_severity(tiles, corruption):
    change = _mean_abs_change(tiles, corruption)
    # ≥, not >: motion_blur's (6, 2) and (8, 2) are the same kernel — with σ = 2 the taps past the 11th
    # weigh < 1e-6 whatever the radius (in ImageMagick too) — and the same seed draws the same angles.
    assert np.all(np.diff(change) >= 0), change
    assert change[-1] > 1.5 * change[0], change


def test_harshness_where_the_cifar_c_parameters_are_not_monotone(tiles):
    # Glass blur: at δ = 1 the pixel shuffle dominates and σ (0.05 … 0.4) smooths it about as much as it
    # blurs, so the one-iteration severities are alike and so are the two-iteration ones. Running the
    # reference's glass_blur (make_cifar_c.py) on these tiles gives the same: .040 .040 .040 | .066 .062.
    glass = _mean_abs_change(tiles, "glass_blur")
    assert max(glass[:3]) < min(glass[3:])
    assert np.ptp(glass[:3]) < 0.1 * glass[0] and np.ptp(glass[3:]) < 0.1 * glass[3]

    # Frost darkens the image as it adds texture, so the change partly cancels (severity 3 changes the
    # pixels less than 2); what grows is the frost's share, so the image decorrelates.
    def decorrelation(severity):
        out = corrupt(tiles, "frost", severity, generator=seeded()).flatten(1)
        clean = tiles.flatten(1)
        a, b = out - out.mean(1, keepdim=True), clean - clean.mean(1, keepdim=True)
        return 1 - ((a * b).sum(1) / (a.norm(dim=1) * b.norm(dim=1))).mean().item()

    assert np.all(np.diff([decorrelation(s) for s in SEVERITIES]) > 0)

    # Elastic transform: CIFAR-C's random affine shift shrinks (2.56 → 0.96 px) faster than its elastic
    # field grows (α·blurred noise, at most 0.5 px rms), so the pixel change falls with severity. This
    # is the reference's behaviour: see test_elastic_transform_is_the_references_warp_then_remap.
    elastic = _mean_abs_change(tiles, "elastic_transform")
    assert np.all(np.diff(elastic) < 0), elastic


def test_noise_has_the_table_strength():
    grey = torch.full((64, 3, 32, 32), 0.5)
    noise = corrupt(grey, "gaussian_noise", 4, generator=seeded()) - grey
    assert noise.std().item() == pytest.approx(0.09, rel=0.02) and abs(noise.mean().item()) < 0.002
    shot = corrupt(grey, "shot_noise", 5, generator=seeded())
    assert shot.mean().item() == pytest.approx(0.5, abs=0.002)
    assert shot.var().item() == pytest.approx(0.5 / 50, rel=0.05)  # Poisson(x·λ)/λ has variance x/λ
    assert torch.allclose(shot * 50, (shot * 50).round(), atol=1e-4)  # photon counts
    impulse = corrupt(grey, "impulse_noise", 5, generator=seeded())
    assert (impulse == 1).float().mean().item() == pytest.approx(0.035, rel=0.1)
    assert (impulse == 0).float().mean().item() == pytest.approx(0.035, rel=0.1)
    assert ((impulse == 0) | (impulse == 1) | (impulse == 0.5)).all()


def _clipped_zoom_with_scipy(image: np.ndarray, zoom: float) -> np.ndarray:
    """make_cifar_c.py's clipped_zoom, restated with scipy: centre crop of ⌈h/zoom⌉, order-1 zoom, centre h."""
    from scipy.ndimage import zoom as scipy_zoom

    h = image.shape[0]
    crop = int(np.ceil(h / zoom))
    top = (h - crop) // 2
    zoomed = scipy_zoom(image[top : top + crop, top : top + crop], (zoom, zoom, 1), order=1)
    trim = (zoomed.shape[0] - h) // 2
    return zoomed[trim : trim + h, trim : trim + h]


def test_zooms_are_the_references_clipped_zoom(photos):
    for size in (8, 17, 32):
        image = torch.rand(1, 3, size, size, generator=seeded(), dtype=torch.float64)
        array = image[0].permute(1, 2, 0).numpy()
        for zoom in [*np.arange(1, 1.26, 0.01), 1.25, 1.75, 2.25]:
            ours = corruptions._clipped_zoom(image, float(zoom))[0].permute(1, 2, 0).numpy()
            np.testing.assert_allclose(ours, _clipped_zoom_with_scipy(array, zoom), atol=1e-12)
    array = photos[0].permute(1, 2, 0).double().numpy()
    for severity, max_zoom in zip(SEVERITIES, SEVERITY_PARAMETERS["zoom_blur"]):
        zooms = np.arange(1, max_zoom, 0.01)
        expected = (array + sum(_clipped_zoom_with_scipy(array, z) for z in zooms)) / (len(zooms) + 1)
        ours = corrupt(photos[:1].double(), "zoom_blur", severity)[0].permute(1, 2, 0).numpy()
        np.testing.assert_allclose(ours, expected, atol=1e-12)


def test_pixelate_is_pillows_box_resize(photos):
    from PIL import Image

    for severity, factor in zip(SEVERITIES, SEVERITY_PARAMETERS["pixelate"]):
        small = int(32 * factor)
        out = corrupt(photos, "pixelate", severity)
        for image, result in zip(photos, out):
            for channel, got in zip(image.numpy(), result.numpy()):  # mode "F": Pillow's weights in float
                plane = Image.fromarray(channel, mode="F").resize((small, small), Image.Resampling.BOX)
                expected = np.asarray(plane.resize((32, 32), Image.Resampling.BOX))
                np.testing.assert_allclose(got, expected, atol=1e-6)
        # 8-bit images: Pillow's integer arithmetic (fixed-point weights, rounding between its two passes)
        as_bytes = (photos * 255).round().to(torch.uint8)
        ours = corrupt(as_bytes, "pixelate", severity).permute(0, 2, 3, 1).numpy()
        for image, got in zip(as_bytes.permute(0, 2, 3, 1).numpy(), ours):
            box = Image.Resampling.BOX
            pillow = Image.fromarray(image).resize((small, small), box).resize((32, 32), box)
            np.testing.assert_array_equal(np.asarray(pillow), got)
    # and at other sizes
    odd = torch.randint(0, 256, (2, 3, 45, 33), dtype=torch.uint8, generator=seeded())
    for severity, factor in zip(SEVERITIES, SEVERITY_PARAMETERS["pixelate"]):
        ours = corrupt(odd, "pixelate", severity).permute(0, 2, 3, 1).numpy()
        for image, got in zip(odd.permute(0, 2, 3, 1).numpy(), ours):
            box, size = Image.Resampling.BOX, (int(33 * factor), int(45 * factor))
            np.testing.assert_array_equal(
                np.asarray(Image.fromarray(image).resize(size, box).resize((33, 45), box)), got
            )


def _pillow_jpeg(image: np.ndarray, quality: int) -> np.ndarray:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=quality)
    return np.asarray(Image.open(buffer))


def test_jpeg_is_the_references_pillow_round_trip(photos, monkeypatch):
    as_bytes = (photos * 255).round().to(torch.uint8)
    errors = []
    for severity, quality in zip(SEVERITIES, SEVERITY_PARAMETERS["jpeg_compression"]):
        out = corrupt(as_bytes, "jpeg_compression", severity)
        expected = np.stack([_pillow_jpeg(image, quality) for image in as_bytes.permute(0, 2, 3, 1).numpy()])
        np.testing.assert_array_equal(out.permute(0, 2, 3, 1).numpy(), expected)
        errors.append((out.float() - as_bytes.float()).pow(2).mean().item())
    assert errors[0] > 0 and errors == sorted(errors), errors  # lower quality, larger error
    # without torchvision's codecs (deprecated in 0.29), Pillow gives the same bytes
    monkeypatch.setitem(sys.modules, "torchvision.io", None)
    assert torch.equal(corrupt(as_bytes, "jpeg_compression", 5), out)


def test_brightness_adds_to_hsv_value_and_keeps_hue(photos):
    from skimage.color import rgb2hsv

    images = torch.cat([photos, torch.zeros(1, 3, 32, 32)])  # a black image: V = 0 becomes grey V'
    for severity, shift in zip(SEVERITIES, SEVERITY_PARAMETERS["brightness"]):
        out = corrupt(images.double(), "brightness", severity)
        before = rgb2hsv(images.double().permute(0, 2, 3, 1).numpy())
        after = rgb2hsv(out.permute(0, 2, 3, 1).numpy())
        np.testing.assert_allclose(after[..., 2], np.clip(before[..., 2] + shift, 0, 1), atol=1e-12)
        coloured = before[..., 1] > 0.01
        np.testing.assert_allclose(after[..., 0][coloured], before[..., 0][coloured], atol=1e-9)  # hue
        np.testing.assert_allclose(after[..., 1][coloured], before[..., 1][coloured], atol=1e-9)  # saturation
        assert torch.equal(out[-1], torch.full((3, 32, 32), shift, dtype=torch.float64))


def test_contrast_scales_around_the_channel_means(photos):
    grey = 0.25 + 0.5 * photos  # stays inside [0, 1]: nothing clipped
    for severity, factor in zip(SEVERITIES, SEVERITY_PARAMETERS["contrast"]):
        out = corrupt(grey, "contrast", severity)
        torch.testing.assert_close(out.mean(dim=(2, 3)), grey.mean(dim=(2, 3)))
        torch.testing.assert_close(out.std(dim=(2, 3)), factor * grey.std(dim=(2, 3)))


@pytest.mark.parametrize(
    "corruption", ["defocus_blur", "glass_blur", "motion_blur", "zoom_blur", "elastic_transform", "pixelate"]
)
def test_blurs_and_warps_keep_a_flat_image(corruption):
    flat = torch.full((3, 3, 24, 20), 0.3)
    for severity in SEVERITIES:
        torch.testing.assert_close(corrupt(flat, corruption, severity, generator=seeded()), flat)


def test_defocus_at_radius_one_and_a_half_is_a_mirrored_3x3_box():
    from scipy.ndimage import uniform_filter

    # radius 1.5 on the reference's grid is the 3×3 square; its anti-aliasing σ = 0.1 is a near-identity
    images = torch.rand(2, 3, 16, 16, generator=seeded(), dtype=torch.float64)
    expected = uniform_filter(images.numpy(), size=(1, 1, 3, 3), mode="mirror")
    np.testing.assert_allclose(corrupt(images, "defocus_blur", 5).numpy(), expected, atol=1e-12)


def test_motion_blur_is_a_one_sided_gaussian_streak():
    impulse = torch.zeros(64, 3, 33, 33, dtype=torch.float64)
    impulse[..., 16, 16] = 1  # a point far from the borders
    for radius, sigma in SEVERITY_PARAMETERS["motion_blur"]:
        angles = torch.linspace(-45, 45, 64)
        out = corruptions._motion_blur(impulse, radius, sigma, angles)[:, 0]
        torch.testing.assert_close(out.sum(dim=(1, 2)), torch.ones(64, dtype=torch.float64))  # weights sum to 1
        # out(p) = Σ k_j x(p + o_j) with o_j pointing right (|angle| ≤ 45°): the point smears to its left only
        assert (out[..., 17:] == 0).all()
        # ImageMagick's weights: exp(−j²/2σ²) for j = 0 … 2·radius, normalised; only tap 0 falls on the point
        weights = np.exp(-(np.arange(2 * radius + 1) ** 2) / (2 * sigma**2))
        torch.testing.assert_close(out[:, 16, 16], torch.full((64,), 1 / weights.sum(), dtype=torch.float64))
        lit = out > 1e-9
        assert (lit.any(dim=1).sum(dim=1) >= min(4, 2 * radius)).all()  # a streak, not a spot
        flat_angle = out[32]  # angle 0.7°: all taps on the point's row
        assert (flat_angle[16, :17] > 0).sum() >= 4 and flat_angle[:16].sum() + flat_angle[17:].sum() == 0


def test_glass_blur_copies_pixels_from_up_and_left_within_delta():
    images = torch.rand(4, 3, 16, 16, generator=seeded(), dtype=torch.float64)
    out = corrupt(images, "glass_blur", 1, generator=seeded())  # σ = 0.05: the blurs are the identity
    # the reference's loop never writes rows and columns 0 … δ
    torch.testing.assert_close(out[..., :2, :], images[..., :2, :])
    torch.testing.assert_close(out[..., :, :2], images[..., :, :2])
    # every other pixel is a copy of itself or of its neighbour at (dy, dx) ∈ {−1, 0}²
    candidates = torch.stack(
        [images[..., 2 + dy : 16 + dy, 2 + dx : 16 + dx] for dy in (-1, 0) for dx in (-1, 0)], dim=-1
    )
    matches = (candidates - out[..., 2:, 2:, None]).abs().amax(dim=1) < 1e-9  # all three channels agree
    assert matches.any(dim=-1).all()
    moved = ~matches[..., 3]
    assert 0.6 < moved.float().mean() < 0.9  # three offsets of four move the pixel


def test_elastic_transform_is_the_references_warp_then_remap(photos, monkeypatch):
    from scipy.ndimage import affine_transform, map_coordinates
    from skimage.filters import gaussian

    rng = np.random.default_rng(0)
    image = photos[:1].double()
    array = image[0].permute(1, 2, 0).numpy()
    rows, cols = np.meshgrid(np.arange(32), np.arange(32), indexing="ij")
    for severity, (alpha, sigma, shift) in zip(SEVERITIES, SEVERITY_PARAMETERS["elastic_transform"]):
        moves, noise = rng.uniform(-shift, shift, (1, 3, 2)), rng.uniform(-1, 1, (1, 2, 32, 32))
        draws = [torch.from_numpy(moves), torch.from_numpy(noise)]  # what the module draws, in its order
        drawn = lambda shape, low, high, generator, device, dtype=torch.float32, draws=draws: draws.pop(0).to(dtype)
        monkeypatch.setattr(corruptions, "_uniform", drawn)
        ours = corrupt(image, "elastic_transform", severity)[0].permute(1, 2, 0).numpy()
        monkeypatch.undo()
        # cv2.getAffineTransform of the three (x, y) points and warpAffine (bilinear, REFLECT_101 = "mirror")
        points = np.array([[16 + 10, 16 + 10], [16 + 10, 16 - 10], [16 - 10, 16 - 10]], dtype=float)
        forward = np.linalg.solve(np.c_[points, np.ones(3)], points + moves[0]).T  # (2, 3), (x, y) -> (x, y)
        back = np.linalg.inv(np.r_[forward, [[0, 0, 1]]])[:2]
        matrix = back[::-1, 1::-1]  # the same map in (row, column) order
        offset = back[::-1, 2]
        warped = np.stack(
            [affine_transform(array[..., c], matrix, offset, order=1, mode="mirror") for c in range(3)], axis=-1
        )
        # then map_coordinates(order=1, mode="reflect") at (row + dy, column + dx), α·gaussian(noise, σ)
        dx = gaussian(noise[0, 0], sigma, mode="reflect", truncate=3) * alpha
        dy = gaussian(noise[0, 1], sigma, mode="reflect", truncate=3) * alpha
        expected = np.stack(
            [map_coordinates(warped[..., c], [rows + dy, cols + dx], order=1, mode="reflect") for c in range(3)], -1
        )
        np.testing.assert_allclose(ours, np.clip(expected, 0, 1), atol=1e-9)


def test_fog_adds_one_plasma_map_per_image_scaled_by_its_peak(photos):
    images = torch.cat([photos[:2].double(), 0.3 * photos[2:].double()])  # peaks near 1 and near 0.3
    peak = images.amax(dim=(1, 2, 3), keepdim=True)
    for severity, (strength, _) in zip(SEVERITIES, SEVERITY_PARAMETERS["fog"]):
        out = corrupt(images, "fog", severity, generator=seeded())  # never clipped: (x + c·p)·m/(m + c) ≤ m
        plasma = (out * (peak + strength) / peak - images) / strength
        torch.testing.assert_close(plasma, plasma[:, :1].expand_as(plasma))  # the same map on every channel
        torch.testing.assert_close(plasma.amin(dim=(1, 2, 3)), torch.zeros(4, dtype=torch.float64))
        torch.testing.assert_close(plasma.amax(dim=(1, 2, 3)), torch.ones(4, dtype=torch.float64))


def _plasma_with_numpy(size, decay, uniform):
    """make_cifar_c.py's plasma_fractal (diamond-square on one map), drawing from `uniform(shape) in [−1, 1)`."""
    heights, step, wibble = np.zeros((size, size)), size, 100.0
    while step >= 2:
        half = step // 2
        corners = heights[::step, ::step]
        squares = corners + np.roll(corners, -1, axis=0)
        squares = squares + np.roll(squares, -1, axis=1)
        heights[half::step, half::step] = squares / 4 + wibble * wibble * uniform(squares.shape)
        centres, corners = heights[half::step, half::step], heights[::step, ::step]
        left = centres + np.roll(centres, 1, axis=0) + corners + np.roll(corners, -1, axis=1)
        heights[::step, half::step] = left / 4 + wibble * wibble * uniform(left.shape)
        top = centres + np.roll(centres, 1, axis=1) + corners + np.roll(corners, -1, axis=0)
        heights[half::step, ::step] = top / 4 + wibble * wibble * uniform(top.shape)
        step, wibble = half, wibble / decay
    heights -= heights.min()
    return heights / heights.max()


def test_plasma_is_the_references_diamond_square_for_every_map_of_the_batch(monkeypatch):
    rng = np.random.default_rng(0)
    draws = []  # every call of the batched version draws for all maps at once: (batch, …)

    def uniform(shape, low, high, generator, device, dtype=torch.float32):
        draws.append(rng.uniform(-1, 1, shape))
        return torch.from_numpy(draws[-1] * high).to(dtype)

    monkeypatch.setattr(corruptions, "_uniform", uniform)
    maps = plasma_fractal(3, 32, 2.5).numpy()
    for index, plasma in enumerate(maps):
        replay = iter(draw[index] for draw in draws)
        np.testing.assert_allclose(
            plasma, _plasma_with_numpy(32, 2.5, lambda shape, replay=replay: next(replay)), atol=1e-12
        )


def test_snow_streaks_and_their_half_turn(photos):
    black = torch.zeros(8, 3, 32, 32, dtype=torch.float64)
    for severity, parameters in zip(SEVERITIES, SEVERITY_PARAMETERS["snow"]):
        out = corrupt(black, "snow", severity, generator=seeded())
        # black lifts to (1 − blend)·0.5 grey, plus the snow layer and the layer turned by 180°
        torch.testing.assert_close(out, out.flip(-1, -2))
        assert torch.equal(out, out[:, :1].expand_as(out))
        assert out.min().item() == pytest.approx((1 - parameters[-1]) * 0.5)
        assert (out > out.min() + 0.01).float().mean() > 0.01  # there is snow


def test_textures_and_plasma_are_seeded_and_in_range():
    texture = frost_textures(2, 32, 32, generator=seeded())
    assert texture.shape == (2, 3, 32, 32) and texture.min() >= 0 and texture.max() <= 1
    assert torch.equal(texture, frost_textures(2, 32, 32, generator=seeded()))
    assert not torch.equal(texture[0], texture[1]) and texture.std() > 0.05
    plasma = plasma_fractal(3, 32, 2.0, generator=seeded())
    assert plasma.shape == (3, 32, 32) and plasma.min() == 0 and plasma.max() == 1
    assert not torch.equal(plasma[0], plasma[1])
    rough = plasma_fractal(64, 32, 1.5, generator=seeded()).diff(dim=-1).abs().mean()
    smooth = plasma_fractal(64, 32, 3.0, generator=seeded()).diff(dim=-1).abs().mean()
    assert rough > smooth  # a smaller wibble decay keeps more fine detail


GOLDEN = json.loads(Path(cifar_c_reference.GOLDEN).read_text())


@pytest.fixture(scope="module")
def cifar_like():
    return cifar_c_reference.photographs()  # 150 CIFAR-like 32×32 photographs, uint8


def _frost_photographs() -> str | None:
    """The reference's frost photographs if this machine has them: $ALTERNET_FROST_DIR, or the copies that
    `pip install imagecorruptions` puts in imagecorruptions/frost (found without importing the package)."""
    if os.environ.get(corruptions.FROST_DIR_VARIABLE):
        return os.environ[corruptions.FROST_DIR_VARIABLE]
    spec = importlib.util.find_spec("imagecorruptions")
    folder = spec and spec.submodule_search_locations and Path(spec.submodule_search_locations[0]) / "frost"
    return str(folder) if folder and (folder / "frost1.png").exists() else None


def _assert_statistics_match_the_reference(clean, corruption, seeds=(0, 1), frost_dir=""):
    """Ours, averaged over `seeds`, against the reference's mean over its seeds (make_cifar_c.py on the same
    photographs, tests/cifar_c_reference.py). Allowed: 4.5 standard errors of the difference, taking the
    reference's seed-to-seed deviation for both sides, plus 0.1 of a level for the one-level disagreements
    where a value lies within float error of a level (see the module docstring)."""
    reference = GOLDEN["statistics"][corruption]
    for severity in SEVERITIES:
        runs = [
            corruptions.corruption_statistics(
                clean, corrupt(clean, corruption, severity, generator=seeded(seed), frost_dir=frost_dir)
            )
            for seed in seeds
        ]
        for key, (expected, deviation) in reference[str(severity)].items():
            ours = np.mean([run[key] for run in runs])
            allowed = 4.5 * deviation * np.sqrt(1 / GOLDEN["seeds"] + 1 / len(seeds)) + 0.1 / 255
            assert abs(ours - expected) <= allowed, (corruption, severity, key, ours * 255, expected * 255)


@pytest.mark.parametrize("corruption", CORRUPTIONS)
def test_statistics_match_the_references_per_severity(cifar_like, corruption):
    # frost with the procedural layers: no photographs needed
    _assert_statistics_match_the_reference(cifar_like, corruption)


def test_statistics_catch_a_wrong_corruption(cifar_like, monkeypatch):
    # the check has teeth: the old 0.5-level rounding (instead of np.uint8's truncation) fails it
    monkeypatch.setattr(corruptions, "_TRUNCATION_EPSILON", 0.5)
    with pytest.raises(AssertionError, match="'contrast', 1, 'mean'"):
        _assert_statistics_match_the_reference(cifar_like, "contrast")


def test_the_procedural_frost_has_the_photographs_statistics():
    layers = frost_textures(6000, 32, 32, generator=seeded()).double() * 255
    profiles = corruptions.FROST_PROFILES
    photo_mean = np.mean([p["mean"] for p in profiles], axis=0)  # each photograph drawn with probability 1/5
    np.testing.assert_allclose(layers.mean(dim=(0, 2, 3)), photo_mean, atol=1.5)
    assert layers.mean().item() == pytest.approx(161.6, abs=1.5)  # the reference's photographs: 161
    within = layers.std(dim=(1, 2, 3), correction=0).mean().item()  # over a crop's pixels and channels
    assert within == pytest.approx(28.8, abs=1.5)  # the photographs' 28.8
    channel_std = np.sqrt(np.mean([np.square(p["std"]) for p in profiles], axis=0))
    np.testing.assert_allclose(
        (layers - layers.mean(dim=(2, 3), keepdim=True)).pow(2).mean(dim=(0, 2, 3)).sqrt(), channel_std, rtol=0.05
    )
    grey = layers.mean(dim=1)
    roughness = grey.diff(dim=2).abs().mean(dim=(1, 2)) / grey.std(dim=(1, 2), correction=0)
    assert roughness.mean().item() == pytest.approx(np.mean([p["roughness"] for p in profiles]), abs=0.03)


def test_frost_photographs_from_a_folder(tmp_path, monkeypatch, photos):
    from PIL import Image

    # five stand-in "photographs" with the reference's names, each a different random field
    rng = np.random.default_rng(0)
    arrays = {
        name: rng.integers(0, 256, (240 + 5 * i, 300, 3), dtype=np.uint8)
        for i, name in enumerate(corruptions.FROST_FILES)
    }
    for name, array in arrays.items():
        Image.fromarray(array).save(tmp_path / name, quality=100)
    shrunk = [np.asarray(Image.open(tmp_path / name).convert("RGB"))[2::5, 2::5] for name in corruptions.FROST_FILES]
    # every 32×32 window the reference can draw (offsets 0 … size − 33) of every shrunk photograph
    windows = [np.lib.stride_tricks.sliding_window_view(photo, (32, 32, 3))[:-1, :-1, 0] for photo in shrunk]
    layers = corruptions.frost_photo_crops(str(tmp_path), 60, 32, 32, generator=seeded())
    found = set()
    for layer in (layers * 255).round().byte().permute(0, 2, 3, 1).numpy():
        matches = [
            (k, *where) for k, w in enumerate(windows) for where in np.argwhere((w == layer).all(axis=(2, 3, 4)))
        ]
        assert len(matches) == 1, matches  # one window of one photograph
        found.add(matches[0][0])
    assert found == set(range(5))  # all five are drawn
    with pytest.raises(
        ValueError, match="48 pixels high at the smallest, too small for 64×64 crops; use the procedural"
    ):
        corruptions.frost_photo_crops(str(tmp_path), 1, 64, 64)
    # the blend, and the folder from the argument or the environment; "" forces the procedural layers
    blended = corrupt(photos, "frost", 3, generator=seeded(), frost_dir=tmp_path)
    torch.testing.assert_close(
        blended,
        (0.9 * photos + 0.4 * corruptions.frost_photo_crops(str(tmp_path), 4, 32, 32, generator=seeded())).clamp(0, 1),
    )
    monkeypatch.setenv(corruptions.FROST_DIR_VARIABLE, str(tmp_path))
    assert torch.equal(corrupt(photos, "frost", 3, generator=seeded()), blended)
    procedural = corrupt(photos, "frost", 3, generator=seeded(), frost_dir="")
    monkeypatch.delenv(corruptions.FROST_DIR_VARIABLE)
    assert torch.equal(procedural, corrupt(photos, "frost", 3, generator=seeded()))
    assert not torch.equal(procedural, blended)
    from alternet_hf.data.cifar_c.sources import GeneratedCorruptions

    source = GeneratedCorruptions((photos * 255).round().byte(), torch.arange(4), frost_dir=tmp_path)
    images, _ = next(source.batches("frost", 5))
    assert source.frost_dir == str(tmp_path) and images.float().mean() > (photos * 255).mean() * 0.75 + 5
    # mistakes: a folder without the photographs
    (tmp_path / "frost4.jpg").unlink()
    corruptions.load_frost_photos.cache_clear()
    with pytest.raises(FileNotFoundError, match=r"lacks the frost photographs \['frost4.jpg'\].*imagecorruptions"):
        corrupt(photos, "frost", 1, frost_dir=tmp_path)
    with pytest.raises(FileNotFoundError, match="lacks the frost photographs"):  # at once, not at frost's turn
        GeneratedCorruptions(torch.zeros(2, 3, 32, 32, dtype=torch.uint8), torch.zeros(2), frost_dir=tmp_path)


@pytest.mark.skipif(
    _frost_photographs() is None, reason="no frost photographs: set ALTERNET_FROST_DIR or pip install imagecorruptions"
)
def test_with_the_reference_photographs(cifar_like):
    folder = _frost_photographs()
    for measured, table in zip(corruptions.frost_profiles(folder), corruptions.FROST_PROFILES):
        np.testing.assert_allclose(measured["mean"], table["mean"], atol=0.06)
        np.testing.assert_allclose(measured["std"], table["std"], atol=0.06)
        assert measured["spread"] == pytest.approx(table["spread"], abs=0.06)
        assert measured["roughness"] == pytest.approx(table["roughness"], abs=0.006)
    _assert_statistics_match_the_reference(cifar_like, "frost", frost_dir=folder)


def test_bad_input_says_what_is_wrong(photos):
    with pytest.raises(ValueError, match=r"did you mean 'gaussian_noise'\?.*jpeg_compression"):
        corrupt(photos, "gausian_noise", 1)
    with pytest.raises(ValueError, match="unknown corruption 'speckle'.*gaussian_noise, shot_noise"):
        corrupt(photos, "speckle", 1)
    for severity in (0, 6, 2.0, True, "3"):
        with pytest.raises(ValueError, match=r"severity must be an integer in \(1, 2, 3, 4, 5\)"):
            corrupt(photos, "fog", severity)
    for images in (photos[0], photos[:, :1], torch.rand(2, 4, 32, 32), torch.rand(2, 3, 7, 32)):
        with pytest.raises(ValueError, match=r"\(batch, 3, height, width\) with height, width ≥ 8"):
            corrupt(images, "fog", 1)
    with pytest.raises(ValueError, match="float in \\[0, 1\\] or uint8"):
        corrupt(photos.to(torch.int32), "fog", 1)
    with pytest.raises(TypeError, match="torch.Tensor"):
        corrupt(photos.numpy(), "fog", 1)


def test_corruption_speed_reports_both_sides_or_says_why_not(monkeypatch):
    from zoo_benchmark import corruption_speed

    threads = torch.get_num_threads()
    rows = corruption_speed(3, 2, ("contrast", "glass_blur"), repeats=1, num_threads=1)
    assert [r["corruption"] for r in rows] == ["contrast", "glass_blur"] and torch.get_num_threads() == threads
    assert all(r["ours_images_per_s"] > 0 and r["torch_threads"] == 1 and r["severity"] == 2 for r in rows)
    try:
        import imagecorruptions.corruptions  # optional, for the comparison only
    except ImportError:
        assert all(r["numpy_images_per_s"] is None and "pip install" in r["note"] for r in rows)
    else:
        assert all(r["numpy_images_per_s"] > 0 and r["speedup"] > 0 and r["note"] is None for r in rows)
        from skimage.filters import gaussian

        assert imagecorruptions.corruptions.gaussian is gaussian  # the compatibility shim is undone
        assert int(np.__version__.split(".")[0]) < 2 or "float_" not in np.__dict__
    monkeypatch.setitem(sys.modules, "imagecorruptions", None)  # as if not installed
    (row,) = corruption_speed(2, 1, ("fog",), repeats=1)
    assert row["ours_images_per_s"] > 0 and row["numpy_images_per_s"] is None and row["speedup"] is None
    assert "pip install imagecorruptions" in row["note"]
