"""CIFAR-C's three sources behind one interface, and what writes them.

A source gives each corruption and severity's set as `batches(corruption, severity, batch_size=, rows=)`, uint8
(B, 3, H, W) images and int64 (B,) labels, in order or only the positions `rows`, with `set_labels` its labels in that
order: the released arrays (`ZenodoArrays`), a dataset in the parquet schema that
`alternet_hf.hub.cifar100c.write_hub_dataset` publishes (`ParquetCorruptions`: the Hub's copies are loading scripts
that current `datasets` refuses), or clean images corrupted on the fly (`GeneratedCorruptions`).
`analysis.robustness.evaluate_corruptions` reads any of them.
"""

import tempfile
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

from ...utils import quiet_progress_bars
from . import CORRUPTIONS, SEVERITIES, ZENODO_URL
from .corruptions import corrupt, load_frost_photos, resolve_frost_dir

Batches = Iterator[tuple[torch.Tensor, torch.Tensor]]


def _check(corruption: str, severity: int) -> None:
    if corruption not in CORRUPTIONS:
        raise ValueError(f"unknown corruption {corruption!r}; the CIFAR-C ones are {', '.join(CORRUPTIONS)}")
    if severity not in SEVERITIES:
        raise ValueError(f"severity must be one of {SEVERITIES}, not {severity!r}")


def severity_split(severity: int) -> str:
    """The split of a corruption's config that holds `severity` (`write_hub_dataset`'s layout)."""
    return f"severity_{severity}"


def _positions(count: int, rows: Sequence[int] | None) -> np.ndarray:
    """The positions within a set of `count` images to read: all, or `rows` (checked)."""
    if rows is None:
        return np.arange(count)
    rows = np.asarray(rows, dtype=np.int64)
    if len(rows) and (rows.min() < 0 or rows.max() >= count):
        raise IndexError(f"rows must lie within 0…{count - 1}: a set holds {count} images")
    return rows


def _images_to_tensor(images: np.ndarray) -> torch.Tensor:
    """(B, H, W, 3) uint8 array -> (B, 3, H, W) uint8 tensor, a copy (memory maps are read-only)."""
    return torch.from_numpy(np.array(images, dtype=np.uint8)).permute(0, 3, 1, 2).contiguous()


class ZenodoArrays:
    """The released CIFAR-10-C / CIFAR-100-C `.npy` arrays in `directory`."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self.name = f"{self.directory.name} (the released arrays)"
        labels_file = self.directory / "labels.npy"
        if not labels_file.exists():
            raise FileNotFoundError(
                f"{labels_file} not found: a CIFAR-C directory holds labels.npy and one <corruption>.npy per "
                f"corruption (download CIFAR-100-C.tar from Zenodo record 3555552, {ZENODO_URL}, and unpack it)"
            )
        self.labels_all = np.load(labels_file, mmap_mode="r")
        if len(self.labels_all) % len(SEVERITIES):
            raise ValueError(f"{labels_file} has {len(self.labels_all)} labels, not a multiple of {len(SEVERITIES)}")
        self.per_severity = len(self.labels_all) // len(SEVERITIES)

    def available(self) -> list[str]:
        return [c for c in CORRUPTIONS if (self.directory / f"{c}.npy").exists()]

    def set_labels(self, corruption: str, severity: int) -> np.ndarray:
        _check(corruption, severity)
        start = self.per_severity * (severity - 1)
        return np.array(self.labels_all[start : start + self.per_severity], dtype=np.int64)

    def batches(
        self, corruption: str, severity: int, *, batch_size: int = 256, rows: Sequence[int] | None = None
    ) -> Batches:
        _check(corruption, severity)
        path = self.directory / f"{corruption}.npy"
        if not path.exists():
            raise FileNotFoundError(f"{path} not found; {self.directory} has {self.available()}")
        images = np.load(path, mmap_mode="r")
        if images.ndim != 4 or images.shape[-1] != 3 or len(images) != len(self.labels_all):
            raise ValueError(
                f"{path} has shape {images.shape}; expected ({len(self.labels_all)}, H, W, 3) uint8 like labels.npy"
            )
        positions = self.per_severity * (severity - 1) + _positions(self.per_severity, rows)
        contiguous = rows is None  # slices read the memory map in one sweep
        for offset in range(0, len(positions), batch_size):
            chunk = positions[offset : offset + batch_size]
            index = slice(chunk[0], chunk[-1] + 1) if contiguous else chunk
            labels = torch.from_numpy(np.array(self.labels_all[index], dtype=np.int64))
            yield _images_to_tensor(images[index]), labels


class ParquetCorruptions:
    """A dataset with columns image, label, corruption, severity: a parquet file or folder, a `save_to_disk` folder,
    or a Hub id. Where its card declares a config per corruption with a split per severity (`write_hub_dataset`), each
    set is read (from a Hub repo: fetched) only when asked for; otherwise the whole `split` (default: its only one) is
    loaded once and grouped by corruption and severity."""

    COLUMNS = ("image", "label", "corruption", "severity")

    def __init__(self, source: str | Path, *, split: str | None = None):
        from alternet_hf.data.sources import config_data_files, config_names, load_raw_dataset

        self.source = self.name = str(source)
        self.dataset, self.rows, self.sets, self._open = None, {}, {}, {}
        self._files = {}  # per corruption config: its files per split
        is_file = Path(source).is_file()
        configs = [c for c in CORRUPTIONS if c in config_names(self.source)] if not is_file else []
        if configs:
            self._files = {corruption: config_data_files(self.source, corruption) for corruption in configs}
            for corruption, files in self._files.items():
                self.sets[corruption] = [s for s in SEVERITIES if severity_split(s) in files]
            return
        self.dataset = load_raw_dataset(self.source, split=split)
        self._check_columns(self.dataset)
        keys = self.dataset.select_columns(["corruption", "severity"]).to_pandas()
        self.rows = {key: np.asarray(group) for key, group in keys.groupby(["corruption", "severity"]).indices.items()}
        for corruption, severity in sorted(self.rows):
            self.sets.setdefault(corruption, []).append(int(severity))

    def _check_columns(self, dataset) -> None:
        missing = [c for c in self.COLUMNS if c not in dataset.column_names]
        if missing:
            raise ValueError(f"{self.source} lacks columns {missing}; a CIFAR-C dataset has columns {self.COLUMNS}")

    def available(self) -> list[str]:
        return [c for c in CORRUPTIONS if c in self.sets]

    def _rows_of(self, corruption: str, severity: int):
        """(dataset, its rows that hold the set, in order)."""
        _check(corruption, severity)
        if severity not in self.sets.get(corruption, ()):
            raise KeyError(f"no rows with corruption={corruption!r}, severity={severity}; it has {self.available()}")
        if self.dataset is not None:
            return self.dataset, self.rows[(corruption, severity)]
        if (corruption, severity) not in self._open:
            from alternet_hf.data.sources import load_config_split

            split = severity_split(severity)
            dataset = load_config_split(self.source, corruption, split, data_files=self._files[corruption])
            self._check_columns(dataset)
            self._open = {(corruption, severity): dataset}  # one set open at a time: sets are read one by one
        dataset = self._open[(corruption, severity)]
        return dataset, np.arange(len(dataset))

    def set_labels(self, corruption: str, severity: int) -> np.ndarray:
        dataset, rows = self._rows_of(corruption, severity)
        return np.asarray(dataset.select_columns(["label"])[rows]["label"], dtype=np.int64)

    def batches(
        self, corruption: str, severity: int, *, batch_size: int = 256, rows: Sequence[int] | None = None
    ) -> Batches:
        dataset, set_rows = self._rows_of(corruption, severity)
        chosen = set_rows[_positions(len(set_rows), rows)]
        for offset in range(0, len(chosen), batch_size):
            batch = dataset[chosen[offset : offset + batch_size]]
            images = np.stack([np.asarray(image.convert("RGB")) for image in batch["image"]])
            yield _images_to_tensor(images), torch.tensor(batch["label"], dtype=torch.int64)


def check_uint8_images(images: torch.Tensor) -> None:
    """CIFAR-C images are uint8 RGB (B, 3, H, W) everywhere; float images would be silently mis-scaled."""
    if images.dtype != torch.uint8 or images.ndim != 4 or images.shape[1] != 3:
        raise ValueError(
            f"CIFAR-C images must be uint8 RGB of shape (B, 3, H, W), not {images.dtype} {tuple(images.shape)}; "
            "scale float images in [0, 1] by 255 and convert with .to(torch.uint8)"
        )


class GeneratedCorruptions:
    """Corrupts clean uint8 (N, 3, H, W) `images` on the fly, on `device`, in chunks of `chunk_size`, each with its own
    generator seeded from (seed, corruption, severity, chunk): the result depends neither on the batch size asked for
    nor on the sets generated before. `frost_dir` is resolved here once (`corruptions.resolve_frost_dir`): the
    attribute names the frost photographs used, None for the procedural frost."""

    def __init__(
        self,
        images: torch.Tensor,
        labels: torch.Tensor,
        *,
        seed: int = 0,
        chunk_size: int = 1000,
        device=None,
        frost_dir: str | Path | None = None,
        name: str = "corruptions generated from clean test images",
    ):
        check_uint8_images(images)
        self.name = name
        if len(labels) != len(images):
            raise ValueError(f"{len(images)} images but {len(labels)} labels")
        self.images, self.labels = images, torch.as_tensor(labels, dtype=torch.int64)
        self.seed, self.chunk_size = seed, chunk_size
        self.device = torch.device(device or "cpu")
        self.frost_dir = resolve_frost_dir(frost_dir)
        if self.frost_dir is not None:
            load_frost_photos(self.frost_dir)  # a wrong folder fails here, not after hours of other corruptions

    @classmethod
    def from_dataset(cls, dataset, **kwargs) -> "GeneratedCorruptions":
        """From a `datasets.Dataset` with image and label columns (e.g. `load_image_classification`)."""
        images = np.stack([np.asarray(image.convert("RGB")) for image in dataset["image"]])
        return cls(_images_to_tensor(images), torch.tensor(dataset["label"]), **kwargs)

    def available(self) -> list[str]:
        return list(CORRUPTIONS)

    def set_labels(self, corruption: str, severity: int) -> np.ndarray:
        _check(corruption, severity)
        return self.labels.numpy().copy()

    def batches(
        self, corruption: str, severity: int, *, batch_size: int = 256, rows: Sequence[int] | None = None
    ) -> Batches:
        """The noise of a subset `rows` is drawn for the subset: its images are not the full set's at those rows."""
        _check(corruption, severity)
        positions = torch.from_numpy(_positions(len(self.images), rows))
        for chunk in range(0, len(positions), self.chunk_size):
            key = f"{self.seed}/{corruption}/{severity}/{chunk}".encode()
            generator = torch.Generator(device=self.device).manual_seed(zlib.crc32(key))
            chosen = positions[chunk : chunk + self.chunk_size]
            clean = self.images[chosen].to(self.device, non_blocking=True)
            corrupted = corrupt(clean, corruption, severity, generator=generator, frost_dir=self.frost_dir or "")
            labels = self.labels[chosen]
            for start in range(0, len(corrupted), batch_size):
                yield corrupted[start : start + batch_size], labels[start : start + batch_size]


def load_corruption_source(source: str | Path, **kwargs):
    """`ZenodoArrays` for a folder with labels.npy, else `ParquetCorruptions` (folder, file or Hub id)."""
    path = Path(source)
    if path.is_dir() and (path / "labels.npy").exists():
        return ZenodoArrays(path)
    return ParquetCorruptions(source, **kwargs)


def save_as_arrays(source, directory: str | Path, *, corruptions: Sequence[str] = CORRUPTIONS) -> Path:
    """Write `source`'s corruptions in the Zenodo layout (every severity of a type in one array)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    labels = None
    for corruption in corruptions:
        parts = [list(source.batches(corruption, s)) for s in SEVERITIES]
        images = torch.cat([images for part in parts for images, _ in part]).permute(0, 2, 3, 1)
        np.save(directory / f"{corruption}.npy", images.cpu().numpy())
        labels = torch.cat([y for part in parts for _, y in part]).numpy()
    np.save(directory / "labels.npy", labels)
    return directory


def save_as_parquet(
    source, path: str | Path, *, corruptions: Sequence[str] = CORRUPTIONS, severities: Sequence[int] = SEVERITIES
):
    """Write `source` as a parquet dataset with columns image (PNG), label, corruption, severity."""
    import datasets
    from PIL import Image

    def examples():
        for corruption in corruptions:
            for severity in severities:
                for images, labels in source.batches(corruption, severity):
                    for image, label in zip(images.permute(0, 2, 3, 1).cpu().numpy(), labels.tolist()):
                        yield {
                            "image": Image.fromarray(image),
                            "label": label,
                            "corruption": corruption,
                            "severity": severity,
                        }

    features = datasets.Features(
        {
            "image": datasets.Image(),
            "label": datasets.Value("int64"),
            "corruption": datasets.Value("string"),
            "severity": datasets.Value("int8"),
        }
    )
    # two bars per file under the caller's own, per corruption; from_generator caches by arguments, not by the images
    with quiet_progress_bars(), tempfile.TemporaryDirectory() as cache:
        dataset = datasets.Dataset.from_generator(examples, features=features, cache_dir=cache)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        dataset.to_parquet(str(path))
    return path
