"""The 15 CIFAR-C corruptions (Hendrycks & Dietterich, "Benchmarking Neural Network Robustness to Common
Corruptions and Perturbations", ICLR 2019) on batched torch tensors, on any device: `corrupt`.

The parameters are CIFAR-10-C / CIFAR-100-C's (`make_cifar_c.py` in hendrycks/robustness; `SEVERITY_PARAMETERS`),
not ImageNet-C's. Each corruption computes what the reference computes, with its random distributions drawn from one
`torch.Generator` on the images' device, so a seed gives the same result bit for bit; where one departs from the
reference, its function says how and why. uint8 images take the reference's 8-bit steps, float images none.
`tests/cifar_c_reference.py` runs the reference itself for the tests to compare with.
"""

import collections
import difflib
import functools
import io
import math
import numbers
import os
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from . import CORRUPTIONS, SEVERITIES, SEVERITY_PARAMETERS


def _uniform(shape, low, high, generator, device, dtype=torch.float32):
    return torch.rand(shape, generator=generator, device=device, dtype=dtype) * (high - low) + low


# --- padding, filters, resampling --------------------------------------------------------------------


def _pad_index(size: int, before: int, after: int, mode: str, device) -> torch.Tensor:
    """Source index of every position of a padded axis, for any pad width (F.pad's reflect needs pad < size).
    Modes as scipy/scikit-image name them: 'nearest' (a a | a b c), 'mirror' (c b | a b c, cv2's
    REFLECT_101) and 'reflect' (b a | a b c)."""
    index = torch.arange(-before, size + after, device=device)
    if mode == "nearest" or size == 1:
        return index.clamp(0, size - 1)
    if mode == "mirror":
        index = index.remainder(2 * size - 2)
        return torch.where(index >= size, 2 * size - 2 - index, index)
    index = index.remainder(2 * size)  # reflect
    return torch.where(index >= size, 2 * size - 1 - index, index)


def _pad(x: torch.Tensor, top: int, bottom: int, left: int, right: int, mode: str) -> torch.Tensor:
    if mode == "nearest" or (mode == "mirror" and max(top, bottom) < x.shape[-2] and max(left, right) < x.shape[-1]):
        return F.pad(x, (left, right, top, bottom), mode="replicate" if mode == "nearest" else "reflect")
    rows = _pad_index(x.shape[-2], top, bottom, mode, x.device)
    cols = _pad_index(x.shape[-1], left, right, mode, x.device)
    return x[..., rows[:, None], cols[None, :]]


def _gaussian_kernel1d(sigma: float, truncate: float) -> torch.Tensor:
    radius = int(truncate * sigma + 0.5)  # scipy's rule, so the support matches skimage.filters.gaussian
    x = torch.arange(-radius, radius + 1, dtype=torch.float64)
    kernel = torch.exp(-0.5 * (x / sigma) ** 2)
    return kernel / kernel.sum()


@functools.lru_cache(maxsize=256)
def _gaussian_matrix(size: int, sigma: float, truncate: float, mode: str) -> torch.Tensor:
    """(size, size) matrix of a 1-D Gaussian filter with the border rule `mode` folded in: on small images two
    batched matrix products beat CPU convolutions of a handful of taps, and need no padding."""
    kernel = _gaussian_kernel1d(sigma, truncate)
    radius = len(kernel) // 2
    sources = _pad_index(size, radius, radius, mode, "cpu")[torch.arange(size)[:, None] + torch.arange(len(kernel))]
    rows = torch.arange(size)[:, None].expand_as(sources)
    matrix = torch.zeros(size, size, dtype=torch.float64)
    return matrix.index_put_((rows, sources), kernel.expand_as(sources), accumulate=True)


def _separable(x: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """Apply (H', H) and (W', W) matrices to the rows and columns of every channel of every image, as two
    matrix products over the whole batch (B·C·H, W) @ (W, W') and (B·C·W', H) @ (H, H')."""
    rows, cols = rows.to(x.device, x.dtype), cols.to(x.device, x.dtype)
    return ((x @ cols.T).transpose(-1, -2) @ rows.T).transpose(-1, -2)


def _gaussian_blur(x: torch.Tensor, sigma: float, *, truncate: float = 4.0, mode: str = "nearest") -> torch.Tensor:
    """skimage.filters.gaussian (scipy's kernel and support; its default border mode 'nearest')."""
    if sigma <= 0:
        return x
    height, width = x.shape[-2:]
    return _separable(
        x, _gaussian_matrix(height, sigma, truncate, mode), _gaussian_matrix(width, sigma, truncate, mode)
    )


def _depthwise(x: torch.Tensor, kernel: torch.Tensor, mode: str) -> torch.Tensor:
    """Correlate every channel of every image with one centred (k, k) kernel: one convolution with a
    group per channel, the fast layout for CPU convolutions of single-channel kernels."""
    batch, channels, height, width = x.shape
    half = kernel.shape[-1] // 2
    padded = _pad(x.reshape(1, batch * channels, height, width), half, half, half, half, mode)
    weight = kernel.to(x)[None, None].expand(batch * channels, 1, -1, -1)
    return F.conv2d(padded, weight, groups=batch * channels).view(batch, channels, height, width)


def _motion_blur(x: torch.Tensor, radius: float, sigma: float, angles: torch.Tensor) -> torch.Tensor:
    """ImageMagick's MotionBlurImage, image b at `angles[b]` degrees: out(p) = Σ_j k_j · x(p + o_j) for
    j = 0 … 2⌈radius⌉, k_j ∝ exp(−j²/2σ²), o_j = j·(cos θ, sin θ) rounded to whole pixels (x to the right,
    y down), edge pixels repeated. One grouped convolution over the bounding box of all images' taps."""
    batch, channels, height, width = x.shape
    taps = torch.arange(2 * math.ceil(radius) + 1, dtype=torch.float64)
    weights = torch.exp(-(taps**2) / (2 * sigma**2))
    keep = weights > 1e-6  # the rest weigh < 1e-6 each: invisible in any 8-bit image, costly as taps
    taps, weights = taps[keep], weights[keep] / weights[keep].sum()
    theta = torch.deg2rad(angles.double().cpu())[:, None]  # the kernels are built on the CPU, deterministically
    dx = torch.ceil(taps * torch.cos(theta) - 0.5).long()  # (B, taps), ImageMagick's rounding
    dy = torch.ceil(taps * torch.sin(theta) - 0.5).long()
    x0, x1 = min(int(dx.min()), 0), max(int(dx.max()), 0)
    y0, y1 = min(int(dy.min()), 0), max(int(dy.max()), 0)
    kh, kw = y1 - y0 + 1, x1 - x0 + 1
    kernels = torch.zeros(batch, kh * kw, dtype=torch.float64)
    kernels.scatter_add_(1, (dy - y0) * kw + (dx - x0), weights.expand(batch, -1).contiguous())
    kernels = kernels.to(x.device, x.dtype).view(batch, 1, kh, kw).repeat_interleave(channels, dim=0)  # (B·C, …)
    padded = _pad(x, -y0, y1, -x0, x1, "nearest").reshape(1, batch * channels, height + kh - 1, width + kw - 1)
    return F.conv2d(padded, kernels, groups=batch * channels).view(batch, channels, height, width)


def _zoom_geometry(size: int, zoom: float) -> tuple[int, int]:
    """The reference's clipped_zoom along one axis: ⌈n/zoom⌉ centre pixels, zoomed to round(⌈n/zoom⌉·zoom)."""
    crop = math.ceil(size / zoom)
    return crop, round(crop * zoom)


@functools.lru_cache(maxsize=256)
def _zoom_matrix(size: int, crop: int, zoomed: int) -> torch.Tensor:
    """(size, size) matrix of clipped_zoom along one axis: the centre `crop` pixels (rounded towards the
    start), resized to `zoomed` by scipy.ndimage.zoom(order=1) — linear, the end pixels aligned — of which
    the centre `size` are kept."""
    start, trim = (size - crop) // 2, (zoomed - size) // 2
    positions = torch.arange(trim, trim + size, dtype=torch.float64) * ((crop - 1) / max(zoomed - 1, 1))
    low = positions.floor().long().clamp(max=crop - 1)
    high = (low + 1).clamp(max=crop - 1)
    share = positions - low
    matrix = torch.zeros(size, size, dtype=torch.float64)
    rows = torch.arange(size)
    matrix.index_put_((rows, start + low), 1 - share, accumulate=True)
    return matrix.index_put_((rows, start + high), share, accumulate=True)


def _clipped_zoom(x: torch.Tensor, zoom: float) -> torch.Tensor:
    height, width = x.shape[-2:]
    return _separable(
        x, _zoom_matrix(height, *_zoom_geometry(height, zoom)), _zoom_matrix(width, *_zoom_geometry(width, zoom))
    )


@functools.lru_cache(maxsize=64)
def _box_resize_matrix(size: int, new_size: int) -> torch.Tensor:
    """(new_size, size) weights of Pillow's BOX resampling along one axis. Pillow evaluates the box filter
    at input pixel centres: a down-scale averages the inputs whose centres fall inside each output pixel's
    footprint, an up-scale picks the input pixel under each output centre (nearest)."""
    scale = size / new_size
    filter_scale = max(scale, 1.0)
    support = 0.5 * filter_scale
    centres = (torch.arange(new_size, dtype=torch.float64) + 0.5) * scale
    pixels = torch.arange(size, dtype=torch.float64)
    first = (centres - support + 0.5).floor().clamp(min=0)  # Pillow's window [xmin, xmax) per output pixel
    last = (centres + support + 0.5).floor().clamp(max=size)
    arg = (pixels[None, :] - centres[:, None] + 0.5) * (1.0 / filter_scale)  # Pillow's operations, in order
    weights = ((arg > -0.5) & (arg <= 0.5) & (pixels >= first[:, None]) & (pixels < last[:, None])).double()
    return weights / weights.sum(dim=1, keepdim=True)


# np.uint8(v) truncates; float32 arithmetic that lands a hair below an integer that float64 would reach
# must not cost a level, hence the epsilon (in levels: far below any real fraction of a level).
_TRUNCATION_EPSILON = 1e-5


def _truncate_to_levels(x: torch.Tensor) -> torch.Tensor:
    """The reference's 8-bit steps, `np.uint8(x * 255)` of x in [0, 1]: truncation to a level, kept in [0, 1]."""
    return x.clamp(0, 1).mul_(255).add_(_TRUNCATION_EPSILON).floor_().div_(255)


def _grayscale(x: torch.Tensor) -> torch.Tensor:
    weights = torch.tensor([0.299, 0.587, 0.114], dtype=x.dtype, device=x.device).view(1, 3, 1, 1)  # cv2 RGB2GRAY
    return (x * weights).sum(dim=1, keepdim=True)


# --- the corruptions: (images in [0, 1], parameters of one severity, generator) -> images ----------------


def gaussian_noise(x, sigma, generator):
    return x + sigma * torch.randn(x.shape, generator=generator, device=x.device, dtype=x.dtype)


def shot_noise(x, photons, generator):
    return torch.poisson(x * photons, generator=generator) / photons


def impulse_noise(x, amount, generator):
    # skimage's 's&p': each value independently flipped with probability `amount`, half to 1, half to 0.
    u = torch.rand(x.shape, generator=generator, device=x.device, dtype=x.dtype)
    return x.masked_fill(u < amount / 2, 1.0).masked_fill_((u >= amount / 2) & (u < amount), 0.0)


def defocus_blur(x, parameters, generator):
    radius, alias_sigma = parameters
    half = max(8, math.ceil(radius))  # the reference's grid, -8 … 8 for every CIFAR radius
    coords = torch.arange(-half, half + 1, dtype=torch.float64)
    disk = ((coords[:, None] ** 2 + coords[None, :] ** 2) <= radius**2).double()
    disk /= disk.sum()
    alias_size = 3 if radius <= 8 else 5  # cv2.GaussianBlur's ksize in the reference
    alias = torch.exp(-0.5 * (torch.arange(alias_size, dtype=torch.float64) - alias_size // 2) ** 2 / alias_sigma**2)
    alias /= alias.sum()
    disk = F.conv2d(disk[None, None], (alias[:, None] * alias[None, :])[None, None], padding=alias_size // 2)[0, 0]
    support = int((disk > 0).nonzero().sub(half).abs().max())  # crop the zeros: the convolution costs ∝ area
    kernel = disk[half - support : half + support + 1, half - support : half + support + 1]
    return _depthwise(x, kernel, "mirror")  # cv2.filter2D's default border, REFLECT_101


def glass_blur(x, parameters, generator, eight_bit=False):
    sigma, delta, iterations = parameters
    x = _gaussian_blur(x, sigma)
    if eight_bit:  # the reference shuffles the blurred image as uint8
        x = _truncate_to_levels(x)
    batch, channels, height, width = x.shape
    # The reference's per-pixel "swap" with a random offset in [−δ, δ)², over rows and columns H − δ … δ + 1, as one
    # gather per iteration: what it computes for δ = 1 (why: docs/analyses.md, "Where it differs").
    rows = torch.arange(height, device=x.device).view(height, 1)
    cols = torch.arange(width, device=x.device).view(1, width)
    inside = (rows > delta) & (rows <= height - delta) & (cols > delta) & (cols <= width - delta)
    for _ in range(iterations):
        offsets = torch.randint(-delta, delta, (2, batch, height, width), generator=generator, device=x.device)
        source = torch.where(inside, (rows + offsets[0]) * width + cols + offsets[1], rows * width + cols)
        x = x.flatten(2).gather(2, source.view(batch, 1, -1).expand(-1, channels, -1)).view_as(x)
    return _gaussian_blur(x, sigma)


def motion_blur(x, parameters, generator):
    radius, sigma = parameters
    angles = _uniform((x.shape[0],), -45.0, 45.0, generator, x.device)
    return _motion_blur(x, radius, sigma, angles)


def zoom_blur(x, max_zoom, generator):
    # The mean of x and its clipped zooms by np.arange(1, max_zoom, 0.01) — the reference's floats, 1.0
    # included, so x counts twice. Zooms that crop and scale alike give the same image (at 32 px the first
    # four are the identity), so each distinct zoom is computed once and counted.
    height, width = x.shape[-2:]
    zooms = np.arange(1, max_zoom, 0.01)
    counts = collections.Counter((_zoom_geometry(height, z), _zoom_geometry(width, z)) for z in zooms.tolist())
    total = x.clone()
    for (row_zoom, col_zoom), count in counts.items():
        total += count * _separable(x, _zoom_matrix(height, *row_zoom), _zoom_matrix(width, *col_zoom))
    return total / (len(zooms) + 1)


def snow(x, parameters, generator, eight_bit=False):
    mean, std, zoom, threshold, blur_radius, blur_sigma, blend = parameters
    batch, _, height, width = x.shape
    layer = mean + std * torch.randn((batch, 1, height, width), generator=generator, device=x.device, dtype=x.dtype)
    layer = _clipped_zoom(layer, zoom)
    layer = torch.where(layer < threshold, 0.0, layer).clamp(0, 1)
    angles = _uniform((batch,), -135.0, -45.0, generator, x.device)  # streaks fall from above
    if eight_bit:  # the reference blurs an 8-bit PNG of the layer, and ImageMagick writes 8 bits back (truncating)
        layer = _truncate_to_levels(_motion_blur(_truncate_to_levels(layer), blur_radius, blur_sigma, angles))
    else:
        layer = _motion_blur(layer, blur_radius, blur_sigma, angles)
    x = blend * x + (1 - blend) * torch.maximum(x, _grayscale(x) * 1.5 + 0.5)
    return x + layer + layer.flip(-1, -2)


# The five photographs the reference draws from: `np.random.randint(5)` over its list of six never picks frost6.jpg.
FROST_FILES = ("frost1.png", "frost2.png", "frost3.png", "frost4.jpg", "frost5.jpg")
FROST_DIR_VARIABLE = "ALTERNET_FROST_DIR"


def resolve_frost_dir(frost_dir: str | os.PathLike | None = None) -> str | None:
    """The folder of frost photographs to use: `frost_dir`, else $ALTERNET_FROST_DIR; None for the procedural
    frost (neither given, or `frost_dir=""`, which also overrides the variable)."""
    folder = os.fspath(frost_dir) if frost_dir is not None else os.environ.get(FROST_DIR_VARIABLE, "")
    return folder or None


@functools.lru_cache(maxsize=4)
def load_frost_photos(folder: str) -> tuple[torch.Tensor, ...]:
    """The reference's frost photographs in `folder` as it blends them: RGB uint8 (3, h, w), shrunk by
    cv2.resize(fx=0.2, fy=0.2), whose bilinear sampling at exactly 1/5 lands on every fifth pixel from
    the third, so that is what is taken (no OpenCV needed)."""
    from PIL import Image

    folder_path = Path(folder)
    missing = [name for name in FROST_FILES if not (folder_path / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{folder} lacks the frost photographs {missing}: it needs {', '.join(FROST_FILES)} from "
            "hendrycks/robustness (ImageNet-C/create_c/), which `pip install imagecorruptions` also installs "
            f"(its imagecorruptions/frost folder); or unset {FROST_DIR_VARIABLE} for the procedural frost"
        )
    photos = []
    for name in FROST_FILES:
        with Image.open(folder_path / name) as image:
            pixels = np.asarray(image.convert("RGB"))[2::5, 2::5]
        photos.append(torch.from_numpy(np.ascontiguousarray(pixels)).permute(2, 0, 1).contiguous())
    return tuple(photos)


def frost_photo_crops(
    folder: str, batch: int, height: int, width: int, *, generator: torch.Generator | None = None, device=None
) -> torch.Tensor:
    """The reference's frost layers (B, 3, H, W) in [0, 1]: per image a photograph drawn uniformly from
    `FROST_FILES` and a uniformly placed crop (offsets 0 … size − H − 1, as its `randint`)."""
    device = torch.device(device or "cpu")
    photos = load_frost_photos(folder)
    small = min(min(photo.shape[1] for photo in photos), min(photo.shape[2] for photo in photos))
    if height >= small or width >= small:
        raise ValueError(
            f"the frost photographs are {small} pixels high at the smallest, too small for {height}×{width} crops; "
            'use the procedural frost (frost_dir="") for images this large'
        )
    choice = torch.randint(len(photos), (batch,), generator=generator, device=device).cpu()
    offsets = torch.rand((batch, 2), generator=generator, device=device, dtype=torch.float64).cpu()
    crops = []
    for index, (row, col) in zip(choice.tolist(), offsets.tolist()):
        photo = photos[index]
        top, left = int(row * (photo.shape[1] - height)), int(col * (photo.shape[2] - width))
        crops.append(photo[:, top : top + height, left : left + width])
    return torch.stack(crops).to(device).float().div_(255)


def frost_profiles(folder: str) -> list[dict[str, tuple[float, ...] | float]]:
    """Statistics of the reference's 32×32 frost layers, one dict per photograph of `FROST_FILES`, exact over
    every crop position it can draw (0–255 scale): `mean` per channel; `spread`, the standard deviation of
    a crop's grey mean across crops; `std`, per channel √(mean within-crop variance); `roughness`, the mean
    |difference| of horizontally adjacent grey pixels over the within-crop grey standard deviation."""

    def crop_means(t: torch.Tensor, height: int = 32, width: int = 32) -> torch.Tensor:
        """Mean of `t` (..., H, W) over each height×width window the reference can draw (summed-area table)."""
        table = F.pad(t.cumsum(-1).cumsum(-2), (1, 0, 1, 0))
        sums = table[..., height:, width:] - table[..., :-height, width:] - table[..., height:, :-width]
        sums = sums + table[..., :-height, :-width]
        return sums[..., :-1, :-1] / (height * width)  # its randint excludes the last offset

    profiles = []
    for photo in load_frost_photos(folder):
        photo = photo.double()
        means, grey = crop_means(photo), photo.mean(dim=0)
        grey_variance = crop_means(grey**2) - crop_means(grey) ** 2
        steps = crop_means(grey.diff(dim=1).abs(), width=31)  # a crop's rows hold 31 steps each
        profiles.append(
            dict(
                mean=tuple(means.mean(dim=(1, 2)).tolist()),
                spread=means.mean(dim=0).std(correction=0).item(),
                std=tuple((crop_means(photo**2) - means**2).mean(dim=(1, 2)).sqrt().tolist()),
                roughness=(steps.mean() / grey_variance.mean().sqrt()).item(),
            )
        )
    return profiles


# `frost_profiles` of the reference's photographs, rounded, and `speckle`: the share of white noise in the procedural
# texture's variance that gives it that roughness (fitted). frost2.png and frost3.png are near-identical copies.
FROST_PROFILES = (
    dict(mean=(76.7, 148.1, 164.7), spread=10.8, std=(21.6, 13.2, 12.7), roughness=0.72, speckle=0.0),
    dict(mean=(198.5, 202.9, 212.2), spread=8.9, std=(17.9, 18.3, 18.9), roughness=0.82, speckle=0.17),
    dict(mean=(198.5, 202.9, 212.2), spread=8.9, std=(17.9, 18.3, 18.9), roughness=0.82, speckle=0.17),
    dict(mean=(143.5, 158.3, 171.1), spread=10.1, std=(25.9, 26.0, 27.0), roughness=0.93, speckle=0.41),
    dict(mean=(102.7, 114.1, 125.9), spread=15.7, std=(35.4, 35.0, 34.2), roughness=0.86, speckle=0.25),
)


def _ice_pattern(batch: int, height: int, width: int, speckle: torch.Tensor, generator, device) -> torch.Tensor:
    """(B, 1, H, W) with zero mean and unit variance per image: ridged multi-scale noise (veins of ice, where
    smooth noise crosses zero) with fine oriented streaks (crystals), and white noise making up `speckle`
    (B,) of the variance."""
    ridges = torch.zeros(batch, 1, height, width, device=device)
    for octave, cells in enumerate((3, 6, 12, 24)):
        noise = torch.randn((batch, 1, cells, cells), generator=generator, device=device)
        smooth = F.interpolate(noise, size=(height, width), mode="bicubic", align_corners=False)
        ridges += (1 - smooth.abs().clamp(max=1)) ** 3 / 2**octave
    streaks = torch.randn((batch, 1, height, width), generator=generator, device=device).clamp(min=0)
    angles = _uniform((batch,), 0.0, 180.0, generator, device)
    streaks = _motion_blur(streaks, 3, 1.5, angles)
    pattern = ridges / ridges.amax(dim=(2, 3), keepdim=True) + 0.6 * streaks
    white = torch.randn((batch, 1, height, width), generator=generator, device=device)

    def standardised(t):
        t = t - t.mean(dim=(2, 3), keepdim=True)
        return t / t.std(dim=(2, 3), keepdim=True, correction=0).clamp_min(1e-12)

    speckle = speckle.view(batch, 1, 1, 1)
    return standardised((1 - speckle).sqrt() * standardised(pattern) + speckle.sqrt() * white)


def frost_textures(
    batch: int, height: int, width: int, *, generator: torch.Generator | None = None, device=None
) -> torch.Tensor:
    """Procedural frost layers (B, 3, H, W) in [0, 1] for when the reference's photographs (not shipped: their licence
    is unclear) are not given: per image a profile of `FROST_PROFILES` drawn uniformly, its channel means shifted by a
    normal crop offset of its spread, plus an ice pattern scaled to its within-crop stds. They match the photographs'
    statistics, not their look."""
    device = torch.device(device or "cpu")
    keys = ("mean", "spread", "std", "speckle")
    table = {key: torch.tensor([p[key] for p in FROST_PROFILES], device=device) for key in keys}
    choice = torch.randint(len(FROST_PROFILES), (batch,), generator=generator, device=device)
    offset = torch.randn((batch, 1, 1, 1), generator=generator, device=device)
    pattern = _ice_pattern(batch, height, width, table["speckle"][choice], generator, device)
    mean = table["mean"][choice].view(batch, 3, 1, 1) + table["spread"][choice].view(batch, 1, 1, 1) * offset
    return ((mean + table["std"][choice].view(batch, 3, 1, 1) * pattern) / 255).clamp(0, 1)


def frost(x, parameters, generator, frost_dir=None):
    image_weight, frost_weight = parameters
    batch, _, height, width = x.shape
    if frost_dir is None:
        layers = frost_textures(batch, height, width, generator=generator, device=x.device)
    else:
        layers = frost_photo_crops(frost_dir, batch, height, width, generator=generator, device=x.device)
    return image_weight * x + frost_weight * layers.to(x.dtype)


def plasma_fractal(
    batch: int, size: int, wibble_decay: float, *, generator: torch.Generator | None = None, device=None
) -> torch.Tensor:
    """Diamond-square plasma maps (B, S, S) in [0, 1] as the reference's plasma_fractal (its quirk of a
    wibble² random scale included), for a batch at once; S a power of two. Smaller decay: rougher fog."""
    device = torch.device(device or "cpu")
    maps = torch.zeros(batch, size, size, dtype=torch.float64, device=device)
    step, wibble = size, 100.0

    def wibbled_mean(total):
        return total / 4 + wibble * _uniform(total.shape, -wibble, wibble, generator, device, torch.float64)

    while step >= 2:
        half = step // 2
        corners = maps[:, 0:size:step, 0:size:step]  # squares: centres from their four corners
        square_sum = corners + corners.roll(-1, dims=1)
        square_sum = square_sum + square_sum.roll(-1, dims=2)
        maps[:, half:size:step, half:size:step] = wibbled_mean(square_sum)
        centres = maps[:, half:size:step, half:size:step]  # diamonds: edge midpoints from their neighbours
        maps[:, 0:size:step, half:size:step] = wibbled_mean(
            centres + centres.roll(1, dims=1) + corners + corners.roll(-1, dims=2)
        )
        maps[:, half:size:step, 0:size:step] = wibbled_mean(
            centres + centres.roll(1, dims=2) + corners + corners.roll(-1, dims=1)
        )
        step, wibble = half, wibble / wibble_decay
    maps -= maps.amin(dim=(1, 2), keepdim=True)
    return maps / maps.amax(dim=(1, 2), keepdim=True)


def fog(x, parameters, generator):
    strength, wibble_decay = parameters
    batch, _, height, width = x.shape
    size = 2 ** math.ceil(math.log2(max(height, width)))  # 32 for CIFAR, as the reference's mapsize
    peak = x.amax(dim=(1, 2, 3), keepdim=True)
    plasma = plasma_fractal(batch, size, wibble_decay, generator=generator, device=x.device)[:, None, :height, :width]
    return (x + strength * plasma.to(x.dtype)) * peak / (peak + strength)


def brightness(x, shift, generator):
    # HSV value + shift with hue and saturation kept is RGB · V'/V; black pixels (V = 0, S = 0) become grey V'.
    value = x.amax(dim=1, keepdim=True)
    new_value = (value + shift).clamp(0, 1)
    return torch.where(value > 0, x * (new_value / value.clamp_min(1e-12)), new_value)


def contrast(x, factor, generator):
    means = x.mean(dim=(2, 3), keepdim=True)
    return (x - means).mul_(factor).add_(means)


def elastic_transform(x, parameters, generator):
    alpha, sigma, shift = parameters
    batch, _, height, width = x.shape
    device = x.device
    # A random affine map (cv2.getAffineTransform of three points around the centre, each moved by up to
    # `shift` pixels), sampled as cv2.warpAffine does: bilinear, borders mirrored (REFLECT_101).
    cx, cy, side = width // 2, height // 2, min(height, width) // 3
    source = torch.tensor(
        [[cx + side, cy + side], [cx + side, cy - side], [cx - side, cy - side]], dtype=torch.float64, device=device
    )
    target = source + _uniform((batch, 3, 2), -shift, shift, generator, device, torch.float64)
    homogeneous = torch.cat([source, torch.ones(3, 1, dtype=torch.float64, device=device)], dim=1)
    forward = torch.linalg.solve(homogeneous, target).mT  # (B, 2, 3): target = forward @ [source; 1]
    last_row = torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64, device=device).expand(batch, 1, 3)
    inverse = torch.linalg.inv(torch.cat([forward, last_row], dim=1))  # output pixel (x, y, 1) -> input pixel
    # The same map between align_corners=True grid coordinates, u = 2·x/(W − 1) − 1: N⁻¹ · inverse · N.
    half_w, half_h = max(width - 1, 1) / 2, max(height - 1, 1) / 2
    to_pixels = torch.tensor([[half_w, 0, half_w], [0, half_h, half_h], [0, 0, 1]], dtype=torch.float64, device=device)
    theta = (torch.linalg.inv(to_pixels) @ inverse @ to_pixels)[:, :2]
    grid = F.affine_grid(theta.to(x.dtype), list(x.shape), align_corners=True)
    x = F.grid_sample(x, grid, mode="bilinear", padding_mode="reflection", align_corners=True)
    if alpha == 0:
        return x  # severity 1: the reference's zero field samples every pixel at its own place
    # A smooth random displacement field, α · gaussian(uniform(−1, 1), σ, mode='reflect', truncate=3), sampled
    # as scipy's map_coordinates(order=1, mode='reflect'): bilinear, borders reflected about the pixel edges.
    field = _uniform((batch, 2, height, width), -1.0, 1.0, generator, device, x.dtype)
    field = alpha * _gaussian_blur(field, sigma, truncate=3.0, mode="reflect")  # channel 0: dx, 1: dy
    identity = torch.eye(2, 3, dtype=x.dtype, device=device)[None]
    centres = F.affine_grid(identity, [1, 1, height, width], align_corners=False)  # −1, 1: the outer edges
    grid = centres + field.permute(0, 2, 3, 1) * torch.tensor([2 / width, 2 / height], dtype=x.dtype, device=device)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="reflection", align_corners=False)


@functools.lru_cache(maxsize=64)
def _pillow_fixed_point(size: int, new_size: int) -> torch.Tensor:
    """Pillow's 8-bit weights of a BOX resize along one axis, transposed: 22-bit fixed point, rounded half up."""
    return torch.floor(_box_resize_matrix(size, new_size) * 2**22 + 0.5).T.contiguous()


def _pillow_8bit_pass(levels: torch.Tensor, size: int, new_size: int) -> torch.Tensor:
    """One pass of Pillow's 8-bit BOX down-scaling along the last axis, bit for bit: out = (Σ level·weight
    + 2²¹) >> 22, clipped, with `_pillow_fixed_point` weights. Exact in float32: shrinking by a factor above
    ½ (every CIFAR-C one) puts one or two input pixels in each output pixel, weights 1 or ½ (2²² or 2²¹), so
    every partial sum is a multiple of 2²¹ with a few significant bits."""
    levels = levels.float() @ _pillow_fixed_point(size, new_size).to(levels.device, torch.float32)
    return levels.add_(2**21).div_(2**22).floor_().clamp_(0, 255)


def pixelate(x, factor, generator, eight_bit=False):
    # Pillow BOX down to int(n·factor) pixels and BOX (nearest) back up: one (n, n) matrix per axis.
    height, width = x.shape[-2:]
    small_h, small_w = int(height * factor), int(width * factor)
    if eight_bit:  # the reference resizes the uint8 image: Pillow's integer passes, columns first, then rows
        levels = (x * 255).round_()
        levels = _pillow_8bit_pass(levels, width, small_w)
        levels = _pillow_8bit_pass(levels.transpose(-1, -2), height, small_h).transpose(-1, -2)
        # BOX up-scaling picks the pixel under each output centre: weights of exactly 1, so exact
        up_rows, up_cols = _box_resize_matrix(small_h, height), _box_resize_matrix(small_w, width)
        return _separable(levels, up_rows, up_cols).to(x.dtype).div_(255)
    rows = _box_resize_matrix(small_h, height) @ _box_resize_matrix(height, small_h)
    cols = _box_resize_matrix(small_w, width) @ _box_resize_matrix(width, small_w)
    return _separable(x, rows, cols)


def _jpeg_round_trip(images: torch.Tensor, quality: int) -> torch.Tensor:
    """Encode and decode uint8 (B, 3, H, W) CPU images with libjpeg's defaults (4:2:0, baseline): through
    torchvision.io where it has its (deprecated) codecs, the faster, else Pillow, as the reference; the same bytes."""
    try:
        from torchvision.io import decode_jpeg, encode_jpeg
    except ImportError:
        encode_jpeg = None
    if encode_jpeg is not None:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=DeprecationWarning, module="torchvision")
            return torch.stack(decode_jpeg(encode_jpeg(list(images), quality=quality)))
    from PIL import Image

    decoded = []
    for image in images.permute(0, 2, 3, 1).numpy():
        buffer = io.BytesIO()
        Image.fromarray(image).save(buffer, format="JPEG", quality=quality)
        decoded.append(np.asarray(Image.open(buffer)))
    return torch.from_numpy(np.stack(decoded)).permute(0, 3, 1, 2)


def jpeg_compression(x, quality, generator):
    # On the CPU whatever the device: libjpeg gives the reference's bytes (its Pillow round trip), a GPU
    # encoder need not. At 32×32 the transfer is small next to the coding.
    images = (x.clamp(0, 1) * 255).round().to(torch.uint8).cpu().contiguous()
    return _jpeg_round_trip(images, quality).to(x.device, x.dtype) / 255


def corruption_statistics(clean: torch.Tensor, corrupted: torch.Tensor) -> dict[str, float]:
    """What a corruption does to a set of images, as five numbers on the [0, 1] scale (uint8 images are
    divided by 255): `mean`, the pixel mean; `contrast`, the mean within-image standard deviation (per
    channel); `change`, the mean |corrupted − clean|; `roughness`, the mean |difference| of horizontally and
    vertically adjacent pixels (blur lowers it, noise raises it); `chroma`, the mean spread max − min over
    the channels (colour)."""
    if clean.shape != corrupted.shape:
        raise ValueError(f"clean {tuple(clean.shape)} and corrupted {tuple(corrupted.shape)} images differ in shape")
    clean, corrupted = (t.double() / 255 if t.dtype == torch.uint8 else t.double() for t in (clean, corrupted))
    roughness = (corrupted.diff(dim=-1).abs().mean() + corrupted.diff(dim=-2).abs().mean()) / 2
    return dict(
        mean=corrupted.mean().item(),
        contrast=corrupted.std(dim=(-2, -1), correction=0).mean().item(),
        change=(corrupted - clean).abs().mean().item(),
        roughness=roughness.item(),
        chroma=(corrupted.amax(dim=-3) - corrupted.amin(dim=-3)).mean().item(),
    )


_FUNCTIONS = {name: globals()[name] for name in CORRUPTIONS}
_EIGHT_BIT_STEPS = ("glass_blur", "snow", "pixelate")  # with uint8 images, the reference's inner 8-bit steps
_EIGHT_BIT_RESULTS = ("pixelate", "jpeg_compression")  # computed on 8-bit levels by the reference: not truncated


def corrupt(
    images: torch.Tensor,
    corruption: str,
    severity: int,
    *,
    generator: torch.Generator | None = None,
    frost_dir: str | os.PathLike | None = None,
) -> torch.Tensor:
    """Apply one CIFAR-C corruption at a severity (1…5) to a batch of (B, 3, H, W) images, H, W ≥ 8: float in [0, 1]
    (float64 computed in float64, other floats in float32) or uint8; the result has their shape, dtype and device.

    `generator`: on the images' device (one elsewhere is refused: drawing there and copying would be slower and give
    other numbers); None draws from torch's global RNG. `frost_dir`: as `resolve_frost_dir` takes it.
    """
    if not isinstance(images, torch.Tensor):
        raise TypeError(f"images must be a torch.Tensor (batch, 3, height, width), got {type(images).__name__}")
    if corruption not in _FUNCTIONS:
        close = difflib.get_close_matches(str(corruption), CORRUPTIONS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else "."
        raise ValueError(f"unknown corruption {corruption!r}{hint} The CIFAR-C corruptions: {', '.join(CORRUPTIONS)}")
    if isinstance(severity, bool) or not isinstance(severity, numbers.Integral) or severity not in SEVERITIES:
        raise ValueError(f"severity must be an integer in {SEVERITIES}, got {severity!r}")
    if images.ndim != 4 or images.shape[1] != 3 or min(images.shape[-2:]) < 8:
        raise ValueError(
            f"images must be a batch laid out (batch, 3, height, width) with height, width ≥ 8; "
            f"got shape {tuple(images.shape)}"
        )
    if images.dtype != torch.uint8 and not images.dtype.is_floating_point:
        raise ValueError(f"images must be float in [0, 1] or uint8 in [0, 255], got dtype {images.dtype}")
    if generator is not None and generator.device.type != images.device.type:
        raise ValueError(
            f"the generator is on {generator.device} but the images are on {images.device}: "
            f"create it with torch.Generator(device=images.device)"
        )
    if images.shape[0] == 0:
        return images.clone()
    x = images.to(torch.float64 if images.dtype == torch.float64 else torch.float32)
    if images.dtype == torch.uint8:
        x.div_(255)  # a fresh tensor: in place saves a pass over the batch
    options = {}
    if corruption == "frost":
        options["frost_dir"] = resolve_frost_dir(frost_dir)
    if corruption in _EIGHT_BIT_STEPS:
        options["eight_bit"] = images.dtype == torch.uint8
    out = _FUNCTIONS[corruption](x, SEVERITY_PARAMETERS[corruption][severity - 1], generator, **options)
    if images.dtype == torch.uint8:
        out = out.clamp(0, 1).mul_(255)
        # the reference ends in np.uint8, which truncates; results already on 8-bit levels only lose the error of /255
        out = out.round_() if corruption in _EIGHT_BIT_RESULTS else out.add_(_TRUNCATION_EPSILON)
        return out.to(torch.uint8, memory_format=torch.contiguous_format)
    return out.clamp(0, 1).to(images.dtype, memory_format=torch.contiguous_format)
