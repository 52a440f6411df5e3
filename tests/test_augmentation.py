"""The recipe's augmentation against the code it replaces (timm's RandAugment and Mixup, torchvision's crop, flip,
ToTensor and Normalize), and its determinism per (epoch, image) whatever the loader workers."""

import random

import numpy as np
import pytest
import torch
from datasets import ClassLabel, Dataset, Features, Image
from PIL import Image as PILImage
from torch.utils.data import DataLoader

from alternet_hf.data.augmentation import (
    LEVELS,
    BatchMixer,
    ImageAugmentation,
    SeededAugmentation,
    check_rand_augment,
    eval_transform,
    level_arguments,
    mix_batch,
    train_transform,
)
from alternet_hf.data.collate import collate_images, with_transform
from alternet_hf.training.engine import training_loss
from alternet_hf.utils import to_rgb

MEAN, STD = (0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761)
FILL = tuple(round(255 * m) for m in MEAN)


@pytest.fixture(scope="module")
def small_photo(photo):
    return photo.resize((32, 32), PILImage.Resampling.BILINEAR)


def test_every_rand_augment_operation_equals_timms_pixel_for_pixel(small_photo):
    from timm.data.auto_augment import AugmentOp

    bicubic = PILImage.Resampling.BICUBIC
    for name in LEVELS:
        for magnitude in (0.0, 4.5, 9.0, 10.0):
            for seed in range(3):  # timm draws the sign from the global `random`: replay its draw
                op = AugmentOp(
                    name, prob=1.0, magnitude=magnitude, hparams={"img_mean": FILL, "interpolation": bicubic}
                )
                random.seed(seed)
                expected = np.array(op(small_photo))
                random.seed(seed)
                negate = random.random() > 0.5
                arguments = level_arguments(name, magnitude, negate=negate)
                ours = np.array(op.aug_fn(small_photo, *arguments, fillcolor=FILL, resample=bicubic))
                assert np.array_equal(expected, ours), (name, magnitude, seed)


def test_rand_augment_strings_are_checked():
    for good in ("rand-m9-n2-mstd1.0", "rand-m7-n3-mstd0.5-inc1", "rand-mstd1-tweights", "rand-m9-mstd101", "rand"):
        check_rand_augment(good)
    for bad, message in (
        ("garbage", "does not start with 'rand'"),
        ("rand-garbage", "unknown option 'garbage'"),  # timm silently ignores it
        ("rand-m9-x3", "unknown option 'x3'"),  # timm fails with an AssertionError
        ("rand-m9.5", "option m needs an integer"),
        ("rand-p2", "out of range"),
        ("rand-tfoo", "unknown operation set 'tfoo'"),
    ):
        with pytest.raises(ValueError, match=message) as error:
            check_rand_augment(bad)
        assert "rand-m9-n2-mstd1.0" in str(error.value)  # the grammar, with the paper's string


def test_the_image_transform_is_torchvisions_to_tensor_and_normalize_to_the_bit(photo):
    from torchvision import transforms as T

    reference = T.Compose([T.Resize((32, 32)), T.ToTensor(), T.Normalize(MEAN, STD)])(photo)
    assert torch.equal(eval_transform(32, MEAN, STD)(photo), reference)
    pixels = eval_transform(32, MEAN, STD, normalize=False)(photo)  # what the engine's loaders yield
    assert pixels.dtype == torch.uint8 and pixels.shape == (3, 32, 32)
    from alternet_hf.data.augmentation import channel_statistics, normalize_images

    assert torch.equal(normalize_images(pixels, *channel_statistics(MEAN, STD)), reference)


def test_crop_and_flip_are_torchvisions_padded_crop_and_flip(small_photo):
    from torchvision.transforms import functional as TF

    augmentation = ImageAugmentation(32, crop_padding=4, horizontal_flip=1.0, rand_augment=None, fill=FILL)
    for seed in range(5):
        ours = augmentation(small_photo, np.random.RandomState(seed))
        top, left = (np.random.RandomState(seed).random_sample(2) * 9).astype(int)  # the draws, replayed
        expected = TF.hflip(TF.crop(TF.pad(small_photo, 4), int(top), int(left), 32, 32))
        assert np.array_equal(np.array(ours), np.array(expected)), seed


def test_mixup_and_cutmix_equal_timms_with_the_same_draws():
    from timm.data.mixup import Mixup
    from timm.loss import SoftTargetCrossEntropy

    num_labels, smoothing = 10, 0.1
    timm_mixup = Mixup(mixup_alpha=1.0, cutmix_alpha=0.8, label_smoothing=smoothing, num_classes=num_labels)
    mixer = BatchMixer(mixup_alpha=1.0, cutmix_alpha=0.8, image_size=32, seed=0)
    images, labels = torch.rand(8, 3, 32, 32), torch.randint(0, num_labels, (8,))
    logits = torch.randn(8, num_labels)
    kinds = set()
    for seed in range(12):
        np.random.seed(seed)  # timm draws from NumPy's global RNG
        expected_images, expected_targets = timm_mixup(images.clone(), labels)
        parameters = torch.tensor(mixer.draw(np.random.RandomState(seed)), dtype=torch.float32)
        mixed, targets = mix_batch(images, labels, parameters, num_labels)
        kinds.add("cutmix" if parameters[1] != parameters[2] else "mixup")
        torch.testing.assert_close(mixed, expected_images, rtol=0, atol=1e-6)
        torch.testing.assert_close(
            training_loss(logits, targets, smoothing), SoftTargetCrossEntropy()(logits, expected_targets)
        )
    assert kinds == {"cutmix", "mixup"}
    # Class indices with label smoothing: the same loss as on timm's smoothed one-hot targets.
    smoothed = Mixup(mixup_alpha=0.0, cutmix_alpha=0.0, prob=0.0, label_smoothing=smoothing, num_classes=num_labels)
    torch.testing.assert_close(
        training_loss(logits, labels, smoothing), SoftTargetCrossEntropy()(logits, smoothed(images, labels)[1])
    )


def _digits_like(n=12):
    rng = np.random.default_rng(0)
    return Dataset.from_dict(
        {
            "image": [PILImage.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)) for _ in range(n)],
            "label": [i % 3 for i in range(n)],
        },
        features=Features({"image": Image(), "label": ClassLabel(num_classes=3)}),
    )


def _augmented(dataset, augmentation, epochs, *, num_workers, indices=None):
    loader = DataLoader(
        with_transform(dataset, augmentation),
        batch_size=4,
        sampler=indices,
        collate_fn=collate_images,
        num_workers=num_workers,
        persistent_workers=num_workers > 0,
        generator=torch.Generator(),  # a loader without one draws its workers' seed from the global RNG
    )
    per_epoch = []
    for epoch in range(epochs):
        augmentation.epoch = epoch  # before the iterator exists, as the engine does
        per_epoch.append(torch.cat([batch["pixel_values"] for batch in loader]))
    return per_epoch


def test_an_image_gets_the_same_augmentation_in_an_epoch_whatever_the_workers_and_processes():
    dataset = _digits_like()
    transform = train_transform(32, MEAN, STD, crop_padding=4, rand_augment="rand-m9-n2-mstd1.0", normalize=False)
    augmentation = SeededAugmentation(transform, seed=3)
    in_process = _augmented(dataset, augmentation, epochs=2, num_workers=0)
    in_workers = _augmented(dataset, augmentation, epochs=2, num_workers=2)  # persistent: the epoch must reach them
    for epoch in range(2):
        assert torch.equal(in_process[epoch], in_workers[epoch]), epoch
    assert not torch.equal(in_process[0], in_process[1])  # a new epoch, new augmentations
    # A second process of a 2-process run reads the odd rows: each gets what it got in one process.
    odd_rows = _augmented(dataset, augmentation, epochs=2, num_workers=0, indices=list(range(1, 12, 2)))
    assert torch.equal(odd_rows[1], in_process[1][1::2])
    # And no global RNG moved.
    state = (random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state())
    _augmented(dataset, augmentation, epochs=1, num_workers=0)
    assert random.getstate() == state[0] and np.array_equal(np.random.get_state()[1], state[1])
    assert torch.equal(torch.get_rng_state(), state[2])


def test_16_bit_images_keep_their_grey_levels():
    levels = np.array([[0, 257, 32896], [65535, 12850, 1000]], dtype=np.uint16)
    image = PILImage.fromarray(levels)
    assert image.mode == "I;16"
    expected = np.rint(levels * (255 / 65535)).astype(np.uint8)
    for sixteen_bit in (image, PILImage.fromarray(levels.astype(np.int32))):  # I;16, and I as older PIL opens PNGs
        rgb = np.array(to_rgb(sixteen_bit))
        assert rgb.shape == (2, 3, 3) and np.array_equal(rgb[..., 0], expected), sixteen_bit.mode
    assert np.array(image.convert("RGB")).max() == 255 and (np.array(image.convert("RGB")) == 255).mean() > 0.5
