"""From rows to batches: each row's image decoded and transformed as it is read (labels checked first), and the
examples stacked into the batch a zoo model's `forward` (float images) or the training engine (uint8) takes."""

import datasets
import torch

from .augmentation import SeededAugmentation
from .rows import SKIP_UNREADABLE, DataRowError, UnreadableRows, check_image_files, decode_image


def collate_images(examples: list[dict]) -> dict[str, torch.Tensor]:
    """Examples of `with_transform` datasets -> the batch a zoo model's `forward` takes (float images), or the
    training engine's (uint8 images, views of HWC pixels: stacked as such, a channels-last batch in one copy).
    Examples left out for an unreadable image (None) are dropped."""
    examples = [e for e in examples if e["pixel_values"] is not None]
    if not examples:
        raise DataRowError(f"every image of a batch is unreadable ({SKIP_UNREADABLE} left them all out)")
    images = [e["pixel_values"] for e in examples]
    if images[0].dtype == torch.uint8:
        pixel_values = torch.stack([image.permute(1, 2, 0) for image in images]).permute(0, 3, 1, 2)
    else:
        pixel_values = torch.stack(images)
    return {"pixel_values": pixel_values, "labels": torch.tensor([e["labels"] for e in examples])}


def transform_row(
    value, label, row: int, transform, *, source: str, num_classes: int | None, unreadable: UnreadableRows | None = None
):
    """The transform of one row's stored image, its label checked first: a bad label or image is a `DataRowError`
    naming `source`, the row and the file; an unreadable image is None instead where `unreadable` logs it. A
    `SeededAugmentation` is called with the row's index."""
    if label is None:
        raise DataRowError(f"{source}, row {row}: the label is missing (null); remove the row or label it")
    if num_classes is not None and not 0 <= label < num_classes:
        raise DataRowError(f"{source}, row {row}: label {label} is outside the classes 0…{num_classes - 1}")
    try:
        image = decode_image(value, source=source, row=row)
    except DataRowError as error:
        if unreadable is None:
            raise
        unreadable.add(source, row, str(error))
        return None
    return transform(image, row) if isinstance(transform, SeededAugmentation) else transform(image)


def with_transform(dataset, transform, *, source: str = "the dataset", unreadable: UnreadableRows | None = None):
    """Rows of a `Dataset` or a stream -> `pixel_values` and `labels`, on the fly as rows are read (`transform_row`);
    a `Dataset`'s image files are checked first (`check_image_files`). With `unreadable`, rows whose image cannot be
    read are left out and logged there (`--skip-unreadable`); without, the first one stops the run."""
    num_classes = getattr(dataset.features.get("label"), "num_classes", None)
    if isinstance(dataset.features.get("image"), datasets.Image):
        dataset = dataset.cast_column("image", datasets.Image(decode=False))  # decoded below, errors named
    options = dict(source=source, num_classes=num_classes, unreadable=unreadable)

    def apply(batch, rows):
        pixel_values = [
            transform_row(value, label, row, transform, **options)
            for value, label, row in zip(batch["image"], batch["label"], rows)
        ]
        return {"pixel_values": pixel_values, "labels": batch["label"]}

    if isinstance(dataset, datasets.IterableDataset):
        columns = list(dataset.features)
        return dataset.map(apply, with_indices=True, batched=True, batch_size=64, remove_columns=columns)
    sound = check_image_files(dataset, source, unreadable)
    dataset = dataset.add_column("index", list(range(len(dataset))))  # rows as the split numbers them
    if len(sound) < len(dataset):
        dataset = dataset.select(sound)
    # a new view: the caller's dataset keeps returning PIL images
    return dataset.with_transform(lambda batch: apply(batch, batch["index"]))
