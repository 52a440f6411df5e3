"""The recipe's augmentation: per image on the CPU (crop, flip, RandAugment), per batch on the device (Mixup/CutMix,
normalisation), every random draw from a generator the caller hands in.

The paper's recipe (docs/paper.md §4) is torchvision's RandomCrop and flip, timm's RandAugment and timm's
Mixup/CutMix, which draw from the global RNGs. Here the same operations and draws (tests compare them with timm,
pixel by pixel) come from a NumPy `RandomState` that the caller seeds, so that an image's augmentation is a function
of (seed, epoch, image) without saving and restoring the global RNGs per image.
"""

import math
import re

import numpy as np
import torch
from PIL import Image

from ..utils import to_rgb

_LEVEL_DENOMINATOR = 10.0  # timm's: magnitudes run 0…10


def _scaled(maximum: float):
    return lambda level: (level / _LEVEL_DENOMINATOR) * maximum


def _between(low: float, high: float):
    return lambda level: max(low, min(high, low + (high - low) * (level / _LEVEL_DENOMINATOR)))


def _enhance(level: float) -> float:
    return (level / _LEVEL_DENOMINATOR) * 1.8 + 0.1


# timm.data.auto_augment.LEVEL_TO_ARG's arithmetic (its functions draw the sign from the global `random`): magnitude
# → the operation's argument, and how a drawn sign applies ("negate": ±argument; "around_one": max(0.1, 1 ± it)).
LEVELS = {
    "AutoContrast": (None, None),
    "Equalize": (None, None),
    "Invert": (None, None),
    "Rotate": (_scaled(30.0), "negate"),
    "Posterize": (lambda level: int((level / _LEVEL_DENOMINATOR) * 4), None),
    "PosterizeIncreasing": (lambda level: 4 - int((level / _LEVEL_DENOMINATOR) * 4), None),
    "PosterizeOriginal": (lambda level: int((level / _LEVEL_DENOMINATOR) * 4) + 4, None),
    "Solarize": (lambda level: min(256, int((level / _LEVEL_DENOMINATOR) * 256)), None),
    "SolarizeIncreasing": (lambda level: 256 - min(256, int((level / _LEVEL_DENOMINATOR) * 256)), None),
    "SolarizeAdd": (lambda level: min(128, int((level / _LEVEL_DENOMINATOR) * 110)), None),
    "Color": (_enhance, None),
    "Contrast": (_enhance, None),
    "Brightness": (_enhance, None),
    "Sharpness": (_enhance, None),
    "ColorIncreasing": (_scaled(0.9), "around_one"),
    "ContrastIncreasing": (_scaled(0.9), "around_one"),
    "BrightnessIncreasing": (_scaled(0.9), "around_one"),
    "SharpnessIncreasing": (_scaled(0.9), "around_one"),
    "ShearX": (_scaled(0.3), "negate"),
    "ShearY": (_scaled(0.3), "negate"),
    "TranslateXRel": (_scaled(0.45), "negate"),
    "TranslateYRel": (_scaled(0.45), "negate"),
    "Desaturate": (_between(0.5, 1.0), None),
    "GaussianBlur": (_between(0.1, 2.0), None),
}


def level_arguments(name: str, magnitude: float, negate: bool) -> tuple:
    """The arguments timm's operation `name` takes at `magnitude` (0…10), with the sign drawn as `negate`."""
    to_argument, signed = LEVELS[name]
    if to_argument is None:
        return ()
    value = to_argument(magnitude)
    if signed == "negate":
        value = -value if negate else value
    elif signed == "around_one":
        value = max(0.1, 1.0 + (-value if negate else value))
    return (value,)


# The `rand-…` grammar of timm's `rand_augment_transform`: option letters and the type of their value. timm
# asserts on an unknown option and silently ignores one without a number (`rand-garbage`), so it is checked here.
RAND_AUGMENT_OPTIONS = {"m": int, "n": int, "p": float, "mstd": float, "mmax": int, "inc": int}
RAND_AUGMENT_SETS = ("weights", "3a", "3aw")  # `t<name>`; without one, timm's default set
RAND_AUGMENT_GRAMMAR = (
    "a RandAugment string is 'rand' followed by dash-separated options: m<magnitude, integer>, n<operations per "
    "image>, mstd<magnitude noise>, p<probability of each operation, 0…1>, mmax<magnitude cap>, inc<0 or 1>, "
    f"t<operation set: {', '.join(RAND_AUGMENT_SETS)}>; the paper's is 'rand-m9-n2-mstd1.0'"
)


def check_rand_augment(text: str) -> None:
    """Raise a ValueError that says what is wrong with a timm RandAugment string, and what the grammar is."""
    sections = text.split("-")
    if sections[0] != "rand":
        raise ValueError(f"{text!r} does not start with 'rand': {RAND_AUGMENT_GRAMMAR}")
    for section in sections[1:]:
        if section.startswith("t"):
            if section[1:] not in RAND_AUGMENT_SETS:
                raise ValueError(f"{text!r}: unknown operation set {section!r}: {RAND_AUGMENT_GRAMMAR}")
            continue
        match = re.fullmatch(r"([a-z]+)(\d.*)", section)
        if match is None or match.group(1) not in RAND_AUGMENT_OPTIONS:
            raise ValueError(f"{text!r}: unknown option {section!r}: {RAND_AUGMENT_GRAMMAR}")
        name, value = match.groups()
        try:
            number = RAND_AUGMENT_OPTIONS[name](value)
        except ValueError:
            kind = "an integer" if RAND_AUGMENT_OPTIONS[name] is int else "a number"
            raise ValueError(f"{text!r}: option {name} needs {kind}, got {value!r}: {RAND_AUGMENT_GRAMMAR}") from None
        if not math.isfinite(number) or number < 0 or (name == "p" and number > 1) or (name == "inc" and number > 1):
            raise ValueError(f"{text!r}: option {section!r} is out of range: {RAND_AUGMENT_GRAMMAR}")


class RandAugment:
    """timm's `rand_augment_transform(text)`, drawing from the `RandomState` it is handed, not the global RNGs."""

    def __init__(self, text: str, fill: tuple[int, int, int]):
        from timm.data.auto_augment import rand_augment_transform

        check_rand_augment(text)  # a clear error for a malformed string (timm asserts, or ignores a section)
        timm_transform = rand_augment_transform(text, {"img_mean": fill})
        self.text = text
        self.operations = timm_transform.ops
        unknown = sorted({op.name for op in self.operations} - set(LEVELS))
        if unknown:
            raise ValueError(f"RandAugment {text!r}: operations {unknown} are not supported")
        self.num_layers = timm_transform.num_layers
        self.choice_weights = timm_transform.choice_weights

    def __call__(self, image: Image.Image, rng: np.random.RandomState) -> Image.Image:
        count = len(self.operations)
        if self.choice_weights is None:
            chosen = (rng.random_sample(self.num_layers) * count).astype(int)
        else:
            chosen = rng.choice(count, self.num_layers, replace=False, p=self.choice_weights)
        # Four uniforms per layer (apply?, sign, interpolation, uniform magnitude) and one normal, drawn whether
        # used or not, so the stream does not depend on which operations were chosen.
        uniforms = rng.random_sample((self.num_layers, 4))
        normals = rng.standard_normal(self.num_layers)
        for index, (apply, sign, interpolation, fraction), normal in zip(chosen, uniforms, normals):
            op = self.operations[index]
            if op.prob < 1.0 and apply > op.prob:
                continue
            magnitude = op.magnitude
            if op.magnitude_std == math.inf:
                magnitude = fraction * magnitude
            elif op.magnitude_std > 0:
                magnitude = magnitude + op.magnitude_std * normal
            magnitude = max(0.0, min(magnitude, op.magnitude_max or _LEVEL_DENOMINATOR))
            resample = op.kwargs["resample"]
            if isinstance(resample, list | tuple):
                resample = resample[int(interpolation * len(resample))]
            arguments = level_arguments(op.name, magnitude, negate=sign > 0.5)
            image = op.aug_fn(image, *arguments, fillcolor=op.kwargs["fillcolor"], resample=resample)
        return image

    def __repr__(self) -> str:
        return f"RandAugment({self.text!r})"


class ImageAugmentation:
    """Random crop (zero padding, as torchvision's RandomCrop), horizontal flip, then RandAugment, on a PIL image."""

    def __init__(self, image_size: int, *, crop_padding: int, horizontal_flip: float, rand_augment: str | None, fill):
        self.image_size, self.crop_padding, self.horizontal_flip = image_size, crop_padding, horizontal_flip
        self.rand_augment = RandAugment(rand_augment, fill) if rand_augment else None

    def __call__(self, image: Image.Image, rng) -> Image.Image:
        size, pad = self.image_size, self.crop_padding
        if pad:
            # PIL fills what lies outside the image with zeros: the padded crop in one operation.
            top, left = (rng.random_sample(2) * (2 * pad + 1)).astype(int) - pad
            image = image.crop((left, top, left + size, top + size))
        if self.horizontal_flip and rng.random_sample() < self.horizontal_flip:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        if self.rand_augment is not None:
            image = self.rand_augment(image, rng)
        return image


class ImageTransform:
    """A PIL image → a (3, size, size) tensor: RGB, resized, augmented (when `augmentation` is given), then uint8
    (`normalize=False`: normalised on the device by `normalize_images`) or normalised float32. Without a seeded
    `rng`, NumPy's global RNG draws."""

    def __init__(self, image_size: int, mean, std, *, augmentation: ImageAugmentation | None, normalize: bool):
        self.image_size, self.augmentation, self.normalize = image_size, augmentation, normalize
        self.mean, self.std = channel_statistics(mean, std)

    def __call__(self, image: Image.Image, rng=None) -> torch.Tensor:
        image = to_rgb(image)
        if image.size != (self.image_size, self.image_size):
            image = image.resize((self.image_size, self.image_size), Image.Resampling.BILINEAR)
        if self.augmentation is not None:
            image = self.augmentation(image, np.random if rng is None else rng)
        pixels = torch.from_numpy(np.array(image)).permute(2, 0, 1)  # (3, H, W) uint8, a view of the HWC copy
        return normalize_images(pixels, self.mean, self.std) if self.normalize else pixels


def train_transform(
    image_size: int,
    mean,
    std,
    *,
    crop_padding: int = 4,
    horizontal_flip: float = 0.5,
    rand_augment: str | None = None,
    normalize: bool = True,
):
    """PIL image -> tensor with random crop, flip and RandAugment: normalised float32, or uint8 (`normalize=False`)."""
    augmentation = ImageAugmentation(
        image_size,
        crop_padding=crop_padding,
        horizontal_flip=horizontal_flip,
        rand_augment=rand_augment,
        fill=tuple(round(255 * m) for m in mean),  # RandAugment's geometric operations fill with the mean colour
    )
    return ImageTransform(image_size, mean, std, augmentation=augmentation, normalize=normalize)


def eval_transform(image_size: int, mean, std, *, normalize: bool = True):
    """PIL image -> tensor, resized only: normalised float32, or uint8 with `normalize=False`."""
    return ImageTransform(image_size, mean, std, augmentation=None, normalize=normalize)


def channel_statistics(mean, std, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel mean and std as float32 tensors of shape (3, 1, 1), which broadcast over images and batches."""
    return tuple(torch.tensor(v, dtype=torch.float32, device=device).view(-1, 1, 1) for v in (mean, std))


def normalize_images(images: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """uint8 pixels (or floats in 0…1) → `(x / 255 - mean) / std`, torchvision's ToTensor + Normalize to the bit."""
    if images.dtype == torch.uint8:
        images = images.float().div(255)
    return images.sub(mean).div(std)


class BatchMixer:
    """Mixup or CutMix of a batch with its reverse, as timm's `Mixup` in its default "batch" mode, label smoothing
    left to the loss. The parameters are drawn on the host from a generator seeded by (seed, epoch, batch, process),
    so that a resumed run mixes as the uninterrupted one, and applied on the device by `mix_batch`.
    """

    def __init__(self, *, mixup_alpha: float, cutmix_alpha: float, image_size: int, seed: int):
        self.mixup_alpha, self.cutmix_alpha, self.image_size, self.seed = mixup_alpha, cutmix_alpha, image_size, seed
        self.rng = np.random.RandomState()

    def parameters(self, epoch: int, batch: int, process: int = 0) -> torch.Tensor:
        """`(target weight λ, own-pixel weight outside the box, inside it, box top, bottom, left, right)`."""
        self.rng.seed([self.seed % 2**32, epoch, batch, process])
        return torch.tensor(self.draw(self.rng), dtype=torch.float32)

    def draw(self, rng) -> list[float]:
        """The draws of timm's `Mixup._params_per_batch` and `cutmix_bbox_and_lam`, in their order."""
        size = self.image_size
        rng.rand()  # timm's "mix at all?" draw; the probability is 1
        use_cutmix = self.cutmix_alpha > 0 and (self.mixup_alpha == 0 or rng.rand() < 0.5)
        alpha = self.cutmix_alpha if use_cutmix else self.mixup_alpha
        lam = float(rng.beta(alpha, alpha))
        if not use_cutmix:
            return [lam, lam, lam, 0.0, 0.0, 0.0, 0.0]
        cut = int(size * np.sqrt(1 - lam))
        center_y, center_x = rng.randint(0, size), rng.randint(0, size)
        top, bottom = np.clip(center_y - cut // 2, 0, size), np.clip(center_y + (cut + 1) // 2, 0, size)
        left, right = np.clip(center_x - cut // 2, 0, size), np.clip(center_x + (cut + 1) // 2, 0, size)
        lam = 1.0 - (bottom - top) * (right - left) / float(size * size)
        return [lam, 1.0, 0.0, float(top), float(bottom), float(left), float(right)]


def mix_batch(
    images: torch.Tensor, labels: torch.Tensor, parameters: torch.Tensor, num_labels: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Float images and class indices → the mixed images and soft targets (`BatchMixer.parameters`, on the device).
    One formula for both, `w·own + (1 − w)·reversed`, so that no shape depends on the draw (no recompiles)."""
    lam, outside, inside, top, bottom, left, right = parameters.unbind()
    height, width = images.shape[-2:]
    rows = torch.arange(height, device=images.device).view(-1, 1)
    columns = torch.arange(width, device=images.device).view(1, -1)
    in_box = (rows >= top) & (rows < bottom) & (columns >= left) & (columns < right)
    own = torch.where(in_box, inside, outside)  # (H, W)
    mixed = images * own + images.flip(0) * (1 - own)
    one_hot = torch.nn.functional.one_hot(labels, num_labels).float()
    return mixed, one_hot * lam + one_hot.flip(0) * (1 - lam)


class SeededAugmentation:
    """Applies `transform(image, rng)` with a NumPy `RandomState` seeded from (seed, epoch, row index).

    A row's augmentation then depends neither on which process or worker loads it nor on what was loaded before
    (loaders read ahead), so a run resumed mid-epoch replays the interrupted one. The epoch lives in shared memory,
    so that setting it before an epoch's loader iterator is made reaches persistent workers too.
    """

    def __init__(self, transform, seed: int):
        self.transform, self.seed = transform, seed
        self._epoch = torch.zeros((), dtype=torch.int64).share_memory_()
        self._rng = np.random.RandomState()

    @property
    def epoch(self) -> int:
        return int(self._epoch)

    @epoch.setter
    def epoch(self, value: int) -> None:
        self._epoch.fill_(value)

    def __call__(self, image, index: int):
        self._rng.seed([self.seed % 2**32, int(self._epoch), index])
        return self.transform(image, self._rng)
