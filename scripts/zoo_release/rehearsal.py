"""The release rehearsal's stand-ins, built offline in the real schemas and file formats (`scripts/release.py
--rehearsal`; what they are and why: docs/release.md)."""

import colorsys
from pathlib import Path

from alternet_hf.utils import write_json

from .checks import COLUMN_NAMES

STAND_IN_NAME = "the rehearsal's stand-in for CIFAR-100 (digits on ten hues)"  # as cards name it
IMAGES_PER_CLASS = {"train": 20, "test": 4}
HUES = ("red", "orange", "lime", "green", "spring", "cyan", "azure", "blue", "violet", "rose")

# The tiny members of each family the rehearsal trains.
REHEARSAL_MODELS = {
    "resnet-50": dict(hidden_sizes=[8, 16, 16, 32], embedding_size=8, depths=[1, 1, 1, 1]),
    "vit-ti": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, patch_size=4),
    "pit-ti": dict(base_dims=[16, 16], depth=[1, 1], heads=[1, 2], patch_size=4, stride=2),
    "swin-ti": dict(embed_dim=16, depths=[1, 2], num_heads=[1, 2], window_size=4, patch_size=2),
    "alternet-50": dict(
        hidden_sizes=[8, 16, 16, 32],
        embedding_size=8,
        depths=[1, 2, 2, 2],
        num_attention_blocks=[0, 1, 1, 1],
        num_attention_heads=[1, 1, 1, 1],
        attention_head_dim=8,
    ),
}
# The paper's recipe at a small model's scale, without flips (digits are not symmetric): far above chance within
# these few epochs, so that a number gone wrong anywhere shows.
REHEARSAL_TRAINING = dict(
    epochs=6,
    warmup_epochs=1,
    batch_size=32,
    eval_batch_size=100,
    learning_rate=5e-3,
    random_crop_padding=2,
    horizontal_flip=0.0,
    num_workers=0,
    eval_every_epochs=2,
    save_every_epochs=1,
    save_every_minutes=None,
    log_every_steps=10,
)

# The reference's four released models' stand-ins, and how they are trained (plain AdamW, crops, no mixing).
REFERENCE_STAND_INS = {
    "resnet-50-cifar100": dict(hidden_sizes=[16, 32, 64, 128], embedding_size=16, depths=[1, 1, 1, 1]),
    "vit-ti-cifar100": dict(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128, patch_size=8
    ),
    "pit-ti-cifar100": dict(base_dims=[16, 16], depth=[1, 2], heads=[2, 4], patch_size=4, stride=4),
    "swin-ti-cifar100": dict(embed_dim=32, depths=[1, 2], num_heads=[2, 4], window_size=4, patch_size=4),
}
STAND_IN_TRAINING = dict(
    epochs=10,
    warmup_epochs=1,
    batch_size=64,
    random_crop_padding=2,
    horizontal_flip=0.0,
    mixed_precision="no",
    compile=False,
    num_workers=0,
    eval_every_epochs=10,
    save_every_epochs=10,
    log_every_steps=1000,
)
STAND_IN_LEARNING_RATES = {"resnet": 5e-3, "vit": 2e-3, "pit": 2e-3, "swin": 2e-3}
REPORTED = "reported"  # a folder: <preset>.json, each stand-in's top-1 as the paper reports its models'
# The public classifiers of the atlas, stood in for by tiny untrained transformers models of each kind (the Hub's are
# out of reach offline): {name: (transformers config class, its arguments)}.
PUBLIC_STAND_INS = {
    "tiny-convnext": ("ConvNextConfig", dict(num_stages=2, hidden_sizes=[8, 16], depths=[1, 1])),
    "tiny-resnet": ("ResNetConfig", dict(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1])),
    "tiny-swin": ("SwinConfig", dict(embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4, patch_size=4)),
    "tiny-vit": ("ViTConfig", dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)),
}


def stand_in_images(split: str) -> tuple[list, list[int]]:
    """`IMAGES_PER_CLASS[split]` images of each of the 100 classes: a digit of the embedded dataset's `split` (8×8,
    scaled to 24×24), white over a background of hue `HUES[class // 10]` at 45% brightness, in a 32×32 RGB image."""
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    rows = np.arange(len(digits.target))
    train, test = train_test_split(rows, test_size=0.2, random_state=0, stratify=digits.target)
    chosen = {"train": train, "test": test}[split]
    by_digit = {d: chosen[digits.target[chosen] == d] for d in range(10)}
    generator = np.random.default_rng({"train": 0, "test": 1}[split])
    backgrounds = [np.array(colorsys.hsv_to_rgb(k / len(HUES), 1.0, 0.45)) for k in range(len(HUES))]
    images, labels = [], []
    for label in range(100):
        hue, digit = divmod(label, 10)
        for _ in range(IMAGES_PER_CLASS[split]):
            strokes = digits.images[generator.choice(by_digit[digit])] / 16
            tile = Image.fromarray((255 * strokes).astype(np.uint8)).resize((24, 24), Image.Resampling.BILINEAR)
            canvas = np.tile(backgrounds[hue], (32, 32, 1))
            canvas[4:28, 4:28] = np.maximum(canvas[4:28, 4:28], np.asarray(tile)[..., None] / 255)
            images.append(Image.fromarray((255 * canvas).round().astype(np.uint8)))
            labels.append(label)
    return images, labels


def write_stand_in_dataset(folder: Path) -> Path:
    """The stand-in in `uoft-cs/cifar100`'s schema (img, fine_label, coarse_label; train and test) as parquet."""
    import datasets

    features = datasets.Features(
        {
            "img": datasets.Image(),
            "fine_label": datasets.ClassLabel(names=[f"{hue}-{digit}" for hue in HUES for digit in range(10)]),
            "coarse_label": datasets.ClassLabel(names=[f"{hue}-{half}" for hue in HUES for half in ("low", "high")]),
        }
    )
    for split in ("train", "test"):
        images, labels = stand_in_images(split)
        rows = {"img": images, "fine_label": labels, "coarse_label": [label // 5 for label in labels]}
        datasets.Dataset.from_dict(rows, features=features).to_parquet(
            str(Path(folder) / "data" / f"{split}-00000-of-00001.parquet")
        )
    return Path(folder)


def write_stand_in_cifar100c(dataset: Path, folder: Path) -> Path:
    """CIFAR-100-C's Zenodo layout (`<corruption>.npy`, `labels.npy`) of the stand-in's test split, made by the zoo's
    corruption generator."""
    from alternet_hf.data.cifar_c.sources import GeneratedCorruptions, save_as_arrays
    from alternet_hf.data.sources import load_image_classification

    test = load_image_classification(str(dataset), split="test", **COLUMN_NAMES)
    return save_as_arrays(GeneratedCorruptions.from_dataset(test), folder)


def write_reference_stand_in(dataset: Path, folder: Path, preset: str, *, say=print) -> list[Path]:
    """Train the stand-in of the reference's `preset` on `dataset` and write it as its released file into `folder`,
    with `reported/<preset>.json`, the top-1 it reached (as the paper reports its models')."""
    from alternet_hf.hub.convert import save_reference_checkpoint
    from alternet_hf.hub.reference import REFERENCE_FILES
    from alternet_hf.training.engine import train
    from alternet_hf.training.recipe import TrainingConfig

    folder, family = Path(folder), preset.split("-", 1)[0]
    config = TrainingConfig(
        model=preset,
        model_overrides=dict(REFERENCE_STAND_INS[preset]),
        dataset=str(dataset),
        **COLUMN_NAMES,
        output_dir=str(folder / "trained" / preset),
        learning_rate=STAND_IN_LEARNING_RATES[family],
        **STAND_IN_TRAINING,
    )
    result = train(config, overwrite=True)
    path = save_reference_checkpoint(result.model, family, folder / REFERENCE_FILES[preset], name=preset)
    reported = {"top1": round(100 * result.metrics["accuracy"], 4), "cifar100c_mean": None}
    say(f"stand-in for {path.name}: top-1 {reported['top1']:.2f}% on the stand-in's test split")
    return [path, write_json(folder / REPORTED / f"{preset}.json", reported)]


def write_public_stand_in(folder: Path, name: str, *, seed: int = 0) -> Path:
    """The public classifier `name` of `PUBLIC_STAND_INS`, untrained (seeded), at 32×32 with CIFAR's 100 labels and
    its image processor, in `folder/name`."""
    import torch
    import transformers

    class_name, arguments = PUBLIC_STAND_INS[name]
    config = getattr(transformers, class_name)(image_size=32, num_labels=100, **arguments)
    torch.manual_seed(seed)
    target = folder / name
    transformers.AutoModelForImageClassification.from_config(config).save_pretrained(target)
    transformers.ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(target)
    return target
