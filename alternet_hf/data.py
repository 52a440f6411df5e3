"""Image-classification data for the zoo: Hub datasets, local folders and files, and the embedded digits.

Every source comes back as a `datasets.Dataset` with two columns, `image` (PIL) and `label`
(`ClassLabel`), whatever the source calls them. The embedded default, scikit-learn's 1,797
handwritten digits (real 8×8 scans shipped inside scikit-learn), upscaled to 32×32 RGB, needs no
network, so a first run works anywhere.
"""

import io
from dataclasses import dataclass
from pathlib import Path

import datasets
import numpy as np
import torch
from PIL import Image

DIGITS = "digits"


@dataclass(frozen=True)
class Columns:
    image: str
    label: str


# Column names of the Hub datasets the zoo is trained on; any other dataset names its own.
KNOWN_COLUMNS = {
    "uoft-cs/cifar10": Columns("img", "label"),
    "uoft-cs/cifar100": Columns("img", "fine_label"),
}
DEFAULT_COLUMNS = Columns("image", "label")


def load_digits_dataset(split: str, *, image_size: int = 32, test_fraction: float = 0.2) -> datasets.Dataset:
    """scikit-learn's digits as 32×32 RGB images, with a fixed stratified train/test split."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    indices = np.arange(len(digits.target))
    train, test = train_test_split(indices, test_size=test_fraction, random_state=0, stratify=digits.target)
    chosen = {"train": train, "test": test}.get(split)
    if chosen is None:
        raise ValueError(f"the digits dataset has splits 'train' and 'test', not {split!r}")
    images = [
        Image.fromarray((digits.images[i] * (255 / 16)).astype(np.uint8))
        .resize((image_size, image_size), Image.Resampling.BILINEAR)
        .convert("RGB")
        for i in np.sort(chosen)
    ]
    features = datasets.Features(
        {"image": datasets.Image(), "label": datasets.ClassLabel(names=[str(d) for d in range(10)])}
    )
    return datasets.Dataset.from_dict(
        {"image": images, "label": digits.target[np.sort(chosen)].tolist()}, features=features
    )


def _load_local(path: Path, split: str) -> datasets.Dataset:
    if path.is_file():
        if path.suffix != ".parquet":
            raise ValueError(f"{path}: a dataset file must be .parquet (or give a folder)")
        return datasets.load_dataset("parquet", data_files={split: str(path)}, split=split)
    if (path / "dataset_dict.json").exists() or (path / "state.json").exists():
        loaded = datasets.load_from_disk(str(path))
        if isinstance(loaded, datasets.DatasetDict):
            if split not in loaded:
                raise ValueError(f"{path} has splits {sorted(loaded)}, not {split!r}")
            return loaded[split]
        return loaded
    parquet = sorted(path.rglob("*.parquet"))
    if parquet:
        split_files = [str(f) for f in parquet if split in f.name or split in f.parent.name]
        return datasets.load_dataset(
            "parquet", data_files={split: split_files or [str(f) for f in parquet]}, split=split
        )
    return datasets.load_dataset("imagefolder", data_dir=str(path), split=split)


def _load_hub(name: str, split: str) -> datasets.Dataset:
    try:
        return datasets.load_dataset(name, split=split)
    except (ConnectionError, OSError, FileNotFoundError, ValueError) as error:
        raise RuntimeError(
            f"could not load the dataset {name!r} from the Hugging Face Hub ({type(error).__name__}: {error}). "
            f"Offline, use a local copy instead: a folder written by `Dataset.save_to_disk`, a folder or file "
            f"of parquet, an image folder (one sub-folder per class), or the embedded {DIGITS!r} dataset."
        ) from error


def load_raw_dataset(source: str, *, split: str = "train") -> datasets.Dataset:
    """A split of a local folder or parquet file, else of a Hub dataset, with its own columns."""
    path = Path(source)
    return _load_local(path, split) if path.exists() else _load_hub(source, split)


def load_image_classification(
    source: str = DIGITS,
    *,
    split: str = "train",
    image_column: str | None = None,
    label_column: str | None = None,
    class_names: list[str] | None = None,
) -> datasets.Dataset:
    """A split of `source` (the embedded `"digits"`, a Hub id, or a local folder or parquet file) as
    columns `image` and `label`. Column names default to the known ones of the source, else image/label.

    `class_names` (e.g. the training split's) fixes which index each class gets, so that every split of
    a dataset whose labels are strings or plain integers is encoded alike; see `encode_labels`.
    """
    if source == DIGITS:
        return encode_labels(load_digits_dataset(split), class_names)
    known = KNOWN_COLUMNS.get(source, DEFAULT_COLUMNS)
    columns = Columns(image_column or known.image, label_column or known.label)
    dataset = load_raw_dataset(source, split=split)
    missing = [name for name in (columns.image, columns.label) if name not in dataset.column_names]
    if missing:
        raise ValueError(
            f"{source} has no column(s) {missing}; its columns are {dataset.column_names}. "
            "Name them with image_column= / label_column= (--image-column / --label-column)."
        )
    dataset = dataset.select_columns([columns.image, columns.label])
    if columns.image != "image":
        dataset = dataset.rename_column(columns.image, "image")
    if columns.label != "label":
        dataset = dataset.rename_column(columns.label, "label")
    return encode_labels(dataset, class_names).cast_column("image", datasets.Image())


def encode_labels(dataset: datasets.Dataset, class_names: list[str] | None = None) -> datasets.Dataset:
    """The `label` column as a `ClassLabel` whose names are `class_names` (when given).

    Plain integers keep their values (class i is named "i"); strings are looked up by name (sorted, when
    no names are given). A `ClassLabel` column with other names is re-indexed by name. Labels outside
    `class_names` are an error naming them: a silently renumbered class would score against the wrong one.
    """
    feature = dataset.features["label"]
    if isinstance(feature, datasets.ClassLabel):
        if class_names is None or list(feature.names) == list(class_names):
            return dataset
        return _reindex_by_name(dataset, feature.names, class_names)
    values = dataset.unique("label")
    if isinstance(feature, datasets.Value) and feature.dtype.startswith(("int", "uint")):
        count = len(class_names) if class_names is not None else max(values, default=-1) + 1
        bad = sorted(v for v in values if not 0 <= v < count)
        if bad:
            raise ValueError(f"integer labels {bad[:10]} are outside 0…{count - 1} ({count} classes)")
        return dataset.cast_column("label", datasets.ClassLabel(names=class_names or [str(i) for i in range(count)]))
    values = [str(v) for v in values]
    names = list(class_names) if class_names is not None else sorted(values)
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise ValueError(f"labels {unknown[:10]} are not among the {len(names)} classes {names[:10]}…")
    if feature.dtype != "string":
        dataset = dataset.cast_column("label", datasets.Value("string"))
    return dataset.cast_column("label", datasets.ClassLabel(names=names))


def class_names_of(config) -> list[str] | None:
    """A model config's class names in index order, or None where they say nothing but the index
    (transformers' "LABEL_i" defaults, or "i" from integer labels): then indices are matched as they are."""
    id2label = getattr(config, "id2label", None) or {}
    names = [id2label[i] for i in range(len(id2label))] if set(id2label) == set(range(len(id2label))) else []
    if not names or names in ([f"LABEL_{i}" for i in range(len(names))], [str(i) for i in range(len(names))]):
        return None
    return names


def _reindex_by_name(dataset: datasets.Dataset, names: list[str], class_names: list[str]) -> datasets.Dataset:
    unknown = sorted(set(names) - set(class_names))
    if unknown:
        raise ValueError(f"classes {unknown[:10]} of this split are not among the {len(class_names)} expected")
    index = {i: class_names.index(name) for i, name in enumerate(names)}
    features = dataset.features.copy()
    features["label"] = datasets.ClassLabel(names=list(class_names))
    return dataset.map(lambda batch: {"label": [index[i] for i in batch["label"]]}, batched=True, features=features)


class DataRowError(ValueError):
    """A row that cannot be used (an image missing or unreadable, a label outside the classes), named by row.

    Raised in a data-loader worker, it reaches the main process as its own message: the DataLoader re-raises it
    with the worker's traceback as the message, from which only the original message is kept.
    """

    def __init__(self, message: str):
        marker = f"{type(self).__name__}: "
        if message.startswith("Caught ") and marker in message:
            message = message.rsplit(marker, 1)[1].rstrip()
        super().__init__(message)


def to_rgb(image: Image.Image) -> Image.Image:
    """Any PIL image as 8-bit RGB. 16-bit greyscale (PIL modes I;16…, and I, as which PIL opens 16-bit PNG and TIFF
    files) is scaled from 0…65535 to 0…255; PIL's own `convert("RGB")` clips it, so most of such an image turns white.
    """
    if image.mode == "RGB":
        return image
    if image.mode == "I" or image.mode.startswith("I;16"):
        values = np.asarray(image).astype(np.float64)
        grey = np.clip(np.rint(values * (255 / 65535)), 0, 255).astype(np.uint8)
        return Image.fromarray(grey, "L").convert("RGB")
    return image.convert("RGB")


def decode_image(value, *, source: str, row: int) -> Image.Image:
    """A row's stored image (`datasets.Image(decode=False)`: bytes and/or path; or a PIL image) as 8-bit RGB, or a
    `DataRowError` that names the dataset, the row and the file."""
    if isinstance(value, Image.Image):
        return to_rgb(value)
    data, path = (value.get("bytes"), value.get("path")) if isinstance(value, dict) else (None, None)
    if data is None and path is None:
        raise DataRowError(f"{source}, row {row}: the image is missing (null); remove the row or fill in its image")
    try:
        with Image.open(io.BytesIO(data) if data is not None else path) as image:
            image.load()
            return to_rgb(image)
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as error:
        where = f" (file {path})" if path else ""
        raise DataRowError(
            f"{source}, row {row}{where}: the image cannot be read ({type(error).__name__}: {error}); "
            "replace or remove it"
        ) from None


def collate_images(examples: list[dict]) -> dict[str, torch.Tensor]:
    """Examples of `with_transform` datasets -> the batch a zoo model's `forward` takes (float images), or the
    training engine's (uint8 images, normalised on the device).

    uint8 images come from the workers as views of HWC pixels: stacked as such, they make a (B, 3, H, W) tensor in
    channels-last memory with a single copy, ready for pinned memory and the device's channels-last convolutions.
    """
    images = [e["pixel_values"] for e in examples]
    if images[0].dtype == torch.uint8:
        pixel_values = torch.stack([image.permute(1, 2, 0) for image in images]).permute(0, 3, 1, 2)
    else:
        pixel_values = torch.stack(images)
    return {"pixel_values": pixel_values, "labels": torch.tensor([e["labels"] for e in examples])}


class SeededAugmentation:
    """Applies `transform(image, rng)` with a NumPy `RandomState` seeded from (seed, epoch, row index).

    A row's augmentation then depends neither on which process or worker loads it nor on what was loaded
    before: loaders read ahead, so a run resumed in the middle of an epoch could otherwise not replay the
    interrupted one. Seeding one generator costs microseconds; no global RNG is touched. The epoch lives in
    shared memory, so setting it before an epoch's loader iterator is made reaches persistent workers too.
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


def with_transform(dataset: datasets.Dataset, transform, *, source: str = "the dataset") -> datasets.Dataset:
    """Rows -> `pixel_values` (the transform of the decoded RGB image) and `labels`, on the fly as rows are read.

    Each row is checked as it is read, at no cost to the training step: an image that is missing or cannot be
    decoded, or a label outside the `ClassLabel` classes, is a `DataRowError` naming `source` (the dataset and
    split), the row and the file. A `SeededAugmentation` is called with the row's index.
    """
    num_classes = getattr(dataset.features.get("label"), "num_classes", None)
    if isinstance(dataset.features.get("image"), datasets.Image):
        dataset = dataset.cast_column("image", datasets.Image(decode=False))  # decoded below, errors named
    dataset = dataset.add_column("index", list(range(len(dataset))))
    seeded = isinstance(transform, SeededAugmentation)

    def apply(batch):
        pixel_values = []
        for value, label, row in zip(batch["image"], batch["label"], batch["index"]):
            if label is None:
                raise DataRowError(f"{source}, row {row}: the label is missing (null); remove the row or label it")
            if num_classes is not None and not 0 <= label < num_classes:
                raise DataRowError(f"{source}, row {row}: label {label} is outside the classes 0…{num_classes - 1}")
            image = decode_image(value, source=source, row=row)
            pixel_values.append(transform(image, row) if seeded else transform(image))
        return {"pixel_values": pixel_values, "labels": batch["label"]}

    return dataset.with_transform(apply)  # a new view: the caller's dataset keeps returning PIL images
