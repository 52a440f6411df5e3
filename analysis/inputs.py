"""Where the analyses' images come from: the test and training splits of a dataset, batched, the training batches
augmented as the model was trained, and CIFAR-C; what `analysis.runner` hands each analysis of one model (`Inputs`).
"""

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from alternet_hf.data.augmentation import BatchMixer, SeededAugmentation, eval_transform, mix_batch, train_transform
from alternet_hf.data.cifar_c import sources as corruption_sources
from alternet_hf.data.collate import collate_images, with_transform
from alternet_hf.data.labels import class_names_of
from alternet_hf.data.sources import SAMPLE_SHUFFLE_BUFFER, load_image_classification, load_image_sample

from .blocks import BlockAdapter
from .registry import ANALYSES, AUGMENTATIONS

# The fields of a training config that say how its batches were augmented (`alternet_hf.training.TrainingConfig`).
AUGMENTATION_FIELDS = (
    "random_crop_padding",
    "horizontal_flip",
    "rand_augment",
    "mixup_alpha",
    "cutmix_alpha",
    "label_smoothing",
)


@dataclass
class DataOptions:
    """Where the analyses' images come from and how they are batched.

    `augmentation` of the Hessian and landscape batches: "model" (the model's `training_config.json`; the
    paper's recipe where there is none), "paper", "none", or the path of a `training_config.json`. `cifar_c`:
    a CIFAR-C source (Zenodo arrays folder, parquet dataset or Hub id); without one the corruptions are
    generated from the test split.

    A split of which the analyses read N images (`max_images`, else what their settings read: `images_used`) is a
    seeded sample of N, streamed, so that the rest of a large split is never fetched; a split read whole is prepared
    on disk.
    """

    dataset: str = "digits"
    image_column: str | None = None
    label_column: str | None = None
    train_split: str = "train"
    test_split: str = "test"
    batch_size: int = 256
    augmentation: str = "model"
    cifar_c: str | None = None
    seed: int = 0
    max_images: int | None = None


def choose_device(name: str | None = None) -> torch.device:
    """`name`, else CUDA where there is one, else the CPU."""
    return torch.device(name or ("cuda" if torch.cuda.is_available() else "cpu"))


def augmentation_of(choice: str, loaded) -> dict:
    """The augmentation of the Hessian and landscape batches, with where it came from (`source`)."""
    from alternet_hf.training.recipe import PAPER_RECIPE

    if choice == "model" and loaded.training_config is not None:
        fields, source = loaded.training_config, str(loaded.training_config_path)
    elif choice == "model":
        fields, source = PAPER_RECIPE, "the paper's recipe (the model has no training_config.json)"
    elif choice == "paper":
        fields, source = PAPER_RECIPE, "the paper's recipe"
    elif choice == "none":
        fields, source = {}, "none"
    elif Path(choice).is_file():
        fields, source = json.loads(Path(choice).read_text()), choice
    else:
        raise ValueError(
            f"augmentation takes {', '.join(AUGMENTATIONS)} or a training_config.json file, not {choice!r}"
        )
    values = {name: fields.get(name) for name in AUGMENTATION_FIELDS}
    return {"source": source} | {k: v if v or k == "rand_augment" else 0 for k, v in values.items()}


class MixedBatches:
    """The batches of `loader` mixed (Mixup/CutMix) and label-smoothed as in training (the engine's draws, seeded
    per batch so every pass gives the same), as `(inputs, targets)`; targets stay class indices where the
    training recipe had neither."""

    def __init__(self, loader, augmentation: dict, num_labels: int, image_size: int, seed: int):
        self.loader, self.num_labels = loader, num_labels
        self.smoothing = augmentation["label_smoothing"] or 0.0
        mixing = {key: augmentation[key] for key in ("mixup_alpha", "cutmix_alpha")}
        self.mixer = BatchMixer(**mixing, image_size=image_size, seed=seed) if any(mixing.values()) else None

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        for index, batch in enumerate(self.loader):
            inputs, targets = batch["pixel_values"], batch["labels"]
            if self.mixer is not None:
                inputs, targets = mix_batch(inputs, targets, self.mixer.parameters(0, index), self.num_labels)
            if self.smoothing:
                if not targets.is_floating_point():
                    targets = torch.nn.functional.one_hot(targets, self.num_labels).float()
                targets = targets * (1 - self.smoothing) + self.smoothing / self.num_labels
            yield inputs, targets


class DataCache:
    """Each split of the dataset is read once, whatever the number of models."""

    def __init__(self, options: DataOptions):
        self.options, self.splits = options, {}

    def split(self, name: str, class_names, num_images: int | None = None):
        """The split `name`, or a seeded sample of `num_images` of it (`DataOptions`)."""
        options, key = self.options, (name, tuple(class_names) if class_names else None, num_images)
        if key not in self.splits:
            load = load_image_classification if num_images is None else load_image_sample
            sample = {} if num_images is None else dict(num_images=num_images, seed=options.seed)
            columns = dict(image_column=options.image_column, label_column=options.label_column)
            self.splits[key] = load(options.dataset, split=name, **sample, **columns, class_names=class_names)
        return self.splits[key]


def images_used(options: DataOptions, analyses, settings) -> dict[str, int | None]:
    """How many images of the test and the training split `analyses` read (None: all of it)."""
    if options.max_images is not None:
        return {"test": options.max_images, "train": options.max_images}
    test = [settings.max_batches * options.batch_size if settings.max_batches is not None else None]
    if reads_corruptions(analyses) and not options.cifar_c:  # the generated CIFAR-C corrupts test images
        test.append(settings.corruption_images)
    train = max((getattr(settings, entry.training_batches) for entry in _training(analyses)), default=0)
    return {"test": None if None in test else max(test), "train": settings.train_batch_size * train or None}


def _training(analyses) -> list:
    return [ANALYSES[name] for name in analyses if ANALYSES[name].training_batches]


def reads_corruptions(analyses) -> bool:
    return any(ANALYSES[name].corruptions for name in analyses)


def _loader(dataset, transform, batch_size: int, *, shuffle: bool, seed: int, drop_last: bool = False):
    return torch.utils.data.DataLoader(
        with_transform(dataset, transform),
        batch_size=batch_size,
        shuffle=shuffle,
        drop_last=drop_last,
        generator=torch.Generator().manual_seed(seed),
        collate_fn=collate_images,
    )


@dataclass
class Inputs:
    """What the analyses of one model read (`analysis.registry.Analysis.run`): clean, normalised `test` batches (a
    DataLoader); `train()`, a fresh iterable of augmented training batches, so that the Hessian and the landscape see
    the same batches whatever ran before; the CIFAR-C source `corruptions`, whose uint8 images are resized to
    `image_size` and normalised with `image_mean` and `image_std`; and the model's blocks (`adapter`). `augmentation`
    and `images` say how the training batches were augmented and how many images of each split were read, for the
    results to record."""

    test: object
    train: Callable[[], object] | None = None
    corruptions: object = None
    image_size: int | None = None
    image_mean: tuple[float, ...] | None = None
    image_std: tuple[float, ...] | None = None
    adapter: BlockAdapter | None = None
    augmentation: dict | None = None
    images: dict = field(default_factory=dict)


def prepare_data(loaded, options: DataOptions, analyses, settings, cache: DataCache, *, device) -> Inputs:
    """The `Inputs` of `analyses` for one loaded model (`analysis.models.LoadedModel`), its blocks aside."""
    size, mean, std = loaded.image_size, loaded.image_mean, loaded.image_std
    if not any(ANALYSES[name].dataset for name in analyses):  # the probe alone: its own photos, no dataset
        from .probe import PHOTOS, photo_inputs

        photos = photo_inputs(size, mean, std)
        test = (photos, torch.full((len(photos),), -1))  # one batch; the photos have no labels
        return Inputs(test, image_size=size, image_mean=mean, image_std=std, images={"photos": len(PHOTOS)})
    names = class_names_of(getattr(loaded.model, "config", None))
    used = images_used(options, analyses, settings)
    test_set = cache.split(options.test_split, names, used["test"])
    test = _loader(test_set, eval_transform(size, mean, std), options.batch_size, shuffle=False, seed=options.seed)
    data = Inputs(test, image_size=size, image_mean=mean, image_std=std, images={"test": len(test_set)})
    if _training(analyses):
        augmentation = augmentation_of(options.augmentation, loaded)
        batch_size = settings.train_batch_size
        if (augmentation["mixup_alpha"] or augmentation["cutmix_alpha"]) and batch_size % 2:
            raise ValueError(
                f"Mixup/CutMix pair images: the training batch size (--train-batch-size) must be even, not {batch_size}"
            )
        train_set = cache.split(options.train_split, names, used["train"])
        data.images["train"] = len(train_set)
        if len(train_set) < batch_size:
            raise ValueError(
                f"{len(train_set)} training images are fewer than the training batch size (--train-batch-size) "
                f"{batch_size}"
            )
        transform = SeededAugmentation(
            train_transform(
                size,
                mean,
                std,
                crop_padding=augmentation["random_crop_padding"],
                horizontal_flip=augmentation["horizontal_flip"],
                rand_augment=augmentation["rand_augment"] or None,
            ),
            options.seed,
        )

        def train():
            # A fresh loader per analysis: each sees the same shuffled, augmented batches whatever ran before.
            loader = _loader(train_set, transform, batch_size, shuffle=True, seed=options.seed, drop_last=True)
            return MixedBatches(loader, augmentation, loaded.num_labels, size, options.seed)

        data.train, data.augmentation = train, augmentation
    sampled = [split for split, count in used.items() if count is not None and split in data.images]
    if sampled:  # what a result needs to say to be drawn again
        data.images["sample"] = {"splits": sampled, "seed": options.seed, "shuffle_buffer": SAMPLE_SHUFFLE_BUFFER}
    if reads_corruptions(analyses):
        if options.cifar_c:
            data.corruptions = corruption_sources.load_corruption_source(options.cifar_c)
        else:
            clean = test_set
            if settings.corruption_images is not None:
                clean = test_set.select(range(min(len(test_set), settings.corruption_images)))
            data.corruptions = corruption_sources.GeneratedCorruptions.from_dataset(
                clean,
                seed=options.seed,
                device=device,
                name=(
                    f"the {options.test_split} split of {options.dataset}, "
                    "corrupted by alternet_hf.data.cifar_c.corruptions"
                ),
            )
    return data
