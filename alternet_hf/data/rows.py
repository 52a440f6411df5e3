"""Rows that cannot be used, found and named: an image file missing, cut short or not an image, a label outside the
classes. The files of a split are checked before a run starts (`check_image_files`); with `--skip-unreadable` such rows
are left out and listed in the run's folder (`UnreadableRows`), otherwise the first stops the run, named by row."""

import io
import json
import os
from pathlib import Path

import datasets
from PIL import Image, UnidentifiedImageError

from ..utils import to_rgb


class DataRowError(ValueError):
    """A row that cannot be used (an image missing or unreadable, a label outside the classes), named by row."""

    def __init__(self, message: str):
        super().__init__(raised_message(message, type(self)))


def raised_message(message: str, error_type: type) -> str:
    """The message an error of `error_type` was raised with, where a DataLoader worker raised it: the loader re-raises
    it with the worker's traceback as the message."""
    marker = f"{error_type.__name__}: "
    if message.startswith("Caught ") and marker in message:
        return message.rsplit(marker, 1)[1].rstrip()
    return message


def decode_image(value, *, source: str, row: int) -> Image.Image:
    """A row's stored image (bytes and/or path, or a PIL image) as 8-bit RGB, or a `DataRowError` naming the row."""
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
            f"replace or remove it, or pass {SKIP_HINT} to leave out such rows"
        ) from None


SKIP_UNREADABLE = "--skip-unreadable"  # of alternet-train, -finetune and -evaluate
SKIP_HINT = f"{SKIP_UNREADABLE} (alternet-train, -finetune, -evaluate)"
UNREADABLE_FILE = "unreadable.jsonl"  # in a run's output folder
# What a file of each format ends with, among its last bytes: a file cut short lacks it.
IMAGE_ENDINGS = {"PNG": b"IEND\xaeB`\x82", "JPEG": b"\xff\xd9", "GIF": b";"}


class UnreadableRows:
    """The rows left out for an image that cannot be read (`--skip-unreadable`): a JSON-lines file that the check
    before the run and every loader worker append to, so that the run's summary counts them all, each row once."""

    def __init__(self, path: str | Path, *, fresh: bool = False):
        self.path = Path(path)
        if fresh:  # an earlier run's list would be counted as this one's
            self.path.unlink(missing_ok=True)

    def add(self, source: str, row: int, message: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as log:  # one short write a line: the lines of several processes never mix
            log.write(json.dumps({"source": source, "row": row, "message": message}) + "\n")

    def rows(self) -> list[dict]:
        lines = self.path.read_text().splitlines() if self.path.is_file() else []
        found = {}
        for entry in map(json.loads, lines):
            found.setdefault((entry["source"], entry["row"]), entry)
        return list(found.values())

    def summary(self, shown: int = 3) -> str | None:
        """One line: how many rows were left out, the first few, and where all are listed; None where none was."""
        rows = self.rows()
        if not rows:
            return None
        first = _first_few([entry["message"] for entry in rows], shown)
        return f"{len(rows)} unreadable image(s) left out ({SKIP_UNREADABLE}): {first}. All in {self.path}"


def _first_few(messages: list[str], shown: int = 3) -> str:
    """The first `shown` of `messages`, and how many more there are."""
    more = f"; and {len(messages) - shown} more" if len(messages) > shown else ""
    return "; ".join(messages[:shown]) + more


def image_file_problem(path: str) -> str | None:
    """Why the image file `path` cannot be read, from its header and last bytes, no pixel decoded: missing, empty,
    not an image, no pixels, or (PNG, JPEG, GIF) cut short; None where it looks whole."""
    try:
        size = os.path.getsize(path)
        if size == 0:
            return "the file is empty (0 bytes)"
        with Image.open(path) as image:
            ending, pixels = IMAGE_ENDINGS.get(image.format), image.width * image.height
        if not pixels:
            return "the image has no pixels"
        if ending:
            with open(path, "rb") as file:
                file.seek(max(size - 64, 0))
                if ending not in file.read():
                    return f"the {image.format} file is cut short (it lacks the end of its data)"
    except UnidentifiedImageError:
        return "the file is no image (of any format PIL reads)"
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as error:
        return f"the file cannot be read as an image ({type(error).__name__}: {error})"
    return None


def check_image_files(dataset: datasets.Dataset, source: str, unreadable: UnreadableRows | None) -> list[int]:
    """The rows (positions of `dataset`, whose images are undecoded) whose image file is sound, checked before the
    first step (`image_file_problem`, files read side by side) rather than met hours in. Rows with a damaged file are
    left out and logged where `unreadable` is given, else stop the run here, naming the first few. A dataset whose
    images are stored in it (parquet, a saved dataset) has no files to check."""
    rows = list(range(len(dataset)))
    if not rows or not isinstance(dataset[0]["image"], dict) or dataset[0]["image"].get("bytes") is not None:
        return rows
    from concurrent.futures import ThreadPoolExecutor

    from tqdm.auto import tqdm

    paths = [image["path"] for image in dataset["image"]]
    with ThreadPoolExecutor(max_workers=16) as pool:
        checked = pool.map(image_file_problem, paths)
        problems = list(tqdm(checked, total=len(paths), desc="checking image files", unit="file", leave=False))
    damaged = [(row, f"{source}, row {row} (file {paths[row]}): {why}") for row, why in enumerate(problems) if why]
    if damaged and unreadable is None:
        raise DataRowError(
            f"{len(damaged)} of {len(rows)} image files cannot be read: {_first_few([m for _, m in damaged])}. "
            f"Replace or remove them, or pass {SKIP_HINT} to leave them out (counted and listed)"
        )
    for row, message in damaged:
        unreadable.add(source, row, message)
    return [row for row, why in enumerate(problems) if not why]
