"""Image-classification data for the zoo: Hub datasets, local folders and files, and the embedded digits (their labels
are `labels`'s, their unusable rows `rows`'s, their batches `collate`'s).

Every source comes back with two columns, `image` (PIL) and `label` (`ClassLabel`), whatever the source calls them
(docs/data.md). The embedded default, scikit-learn's handwritten digits, needs no network: a first run works anywhere.
"""

import hashlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import datasets
import numpy as np
from PIL import Image

from ..utils import FORBIDDEN, GATED, NOT_FOUND, UNAUTHENTICATED, hub_failure, quiet_progress_bars, write_json
from .labels import encode_labels

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


def _schema_of(column_names: list[str]) -> Columns:
    """The known schema whose columns `column_names` has (image/label first), else image/label."""
    for columns in (DEFAULT_COLUMNS, *KNOWN_COLUMNS.values()):
        if columns.image in column_names and columns.label in column_names:
            return columns
    return DEFAULT_COLUMNS


def load_digits_dataset(split: str, *, image_size: int = 32, test_fraction: float = 0.2) -> datasets.Dataset:
    """scikit-learn's digits as 32×32 RGB images, with a fixed stratified train/test split."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    indices = np.arange(len(digits.target))
    train, test = train_test_split(indices, test_size=test_fraction, random_state=0, stratify=digits.target)
    chosen = {"train": train, "test": test}.get(split)
    if chosen is None:
        raise ValueError(_missing_split_message(DIGITS, split, ["test", "train"], "the embedded digits"))
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


HOLDOUT = "holdout"
DEFAULT_HOLDOUT_FRACTION = 0.1


def _load_local(path: Path, split: str | None) -> datasets.Dataset:
    """A named split of a local source. A source with one unnamed split has the split "train" only: serving its rows
    under any other name would evaluate on the training data."""
    if path.is_file():
        if path.suffix != ".parquet":
            raise ValueError(f"{path}: a dataset file must be .parquet (or give a folder)")
        _choose_split(str(path), split, ["train"], "one parquet file")
        return datasets.load_dataset("parquet", data_files=str(path), split="train", cache_dir=_local_cache_dir(path))
    if _read_whole(path):
        loaded = datasets.load_from_disk(str(path))
        if isinstance(loaded, datasets.DatasetDict):
            splits, kind = loaded, "a saved DatasetDict"
        else:
            splits, kind = {"train": loaded}, "one saved Dataset (not a DatasetDict)"
    else:
        # datasets infers the format (parquet, images) and the splits from the file and folder names:
        # train/ and test/ folders, data/train-*.parquet, test.parquet, ...; anything else is "train".
        cache = _local_cache_dir(path)
        only = _load_split_only(str(path), split, "a folder", cache_dir=cache)
        if only is not None:
            return only
        splits, kind = datasets.load_dataset(str(path), cache_dir=cache), "a folder"
    return splits[_choose_split(str(path), split, sorted(splits), kind)]


def _read_whole(path: Path) -> bool:
    """Whether a local `path` is read whole, never a split's files alone: one file, or a folder `save_to_disk` wrote."""
    return path.is_file() or (path / "dataset_dict.json").exists() or (path / "state.json").exists()


def _load_split_only(
    source: str, split: str | None, kind: str, *, cache_dir: str | None = None, streaming: bool = False
):
    """One split of a parquet dataset (a folder or Hub repo), fetching and preparing that split's files only, where
    `load_dataset` prepares every split first. None for other formats: an image folder names its classes after the
    folders of every split, so it is read whole. `streaming`: the split as a stream; an image folder's too."""
    builder = datasets.load_dataset_builder(source, cache_dir=cache_dir)
    data_files = _files_by_split(builder)
    if not data_files or (builder.name != "parquet" and not streaming):
        return None
    chosen = _choose_split(source, split, sorted(data_files), kind)
    if builder.name != "parquet":
        return datasets.load_dataset(source, split=chosen, streaming=True)
    return datasets.load_dataset(
        "parquet",
        data_files={chosen: data_files[chosen]},
        split=chosen,
        features=builder.info.features,  # the card's, where it declares them (class names)
        cache_dir=cache_dir,
        streaming=streaming,
    )


def _files_by_split(builder) -> dict[str, list[str]]:
    """A dataset builder's files per split, as the card's `configs` or the file names assign them."""
    return {str(split): [str(file) for file in files] for split, files in (builder.config.data_files or {}).items()}


def _local_cache_dir(path: Path) -> str:
    """A datasets cache folder for a local source, named after its files' paths, sizes and modification times:
    datasets' own key would serve two folders called `upload` (or one rewritten in place) the first one's rows."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    digest = hashlib.sha256(str(path.resolve()).encode())
    for file in files:
        stat = file.stat()
        digest.update(f"{file.relative_to(path.parent)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return str(Path(datasets.config.HF_DATASETS_CACHE) / "local" / digest.hexdigest()[:16])


def _choose_split(source: str, split: str | None, available: list[str], kind: str) -> str:
    """`split` if the source has it; None means the source's only split."""
    if split is None and len(available) == 1:
        return available[0]
    if split is None:
        raise ValueError(f"{source} ({kind}) has the splits {available}: name one")
    if split not in available:
        raise ValueError(_missing_split_message(source, split, available, kind))
    return split


def _missing_split_message(source: str, split: str, available: list[str], kind: str = "this dataset") -> str:
    hint = (
        "Name one of those splits (alternet-train's --train-split / --eval-split, alternet-evaluate's --split, "
        "alternet-analyze's --train-split / --test-split), put the images or files in train/ and test/ sub-folders "
        "(or name parquet files train-*.parquet and test-*.parquet), or, to train, ask for a seeded, stratified "
        f"hold-out of the training split with --eval-split {HOLDOUT} (10%) or {HOLDOUT}:0.2"
    )
    return f"{source} ({kind}) has no split {split!r}: its splits are {available}. {hint}."


def parse_holdout(split: str) -> float | None:
    """The fraction of `holdout` / `holdout:0.2`, or None for an ordinary split name."""
    name, _, fraction = split.partition(":")
    if name != HOLDOUT:
        return None
    try:
        value = float(fraction) if fraction else DEFAULT_HOLDOUT_FRACTION
    except ValueError:
        value = float("nan")
    if not 0 < value < 1:
        raise ValueError(f"{split!r}: a hold-out fraction is a number between 0 and 1, e.g. {HOLDOUT}:0.2")
    return value


def holdout_indices(labels: list[int], fraction: float, seed: int) -> list[int]:
    """Rows of a seeded hold-out: stratified by label where every class has at least two rows, sorted."""
    from sklearn.model_selection import train_test_split

    counts = np.bincount(np.asarray(labels)) if labels else np.array([])
    stratify = labels if len(counts) and counts[counts > 0].min() >= 2 else None
    _, held_out = train_test_split(np.arange(len(labels)), test_size=fraction, random_state=seed, stratify=stratify)
    return sorted(int(i) for i in held_out)


class DatasetUnavailableError(OSError):
    """A Hub dataset that could not be loaded, and why (`alternet_hf.utils.hub_failure`), with what to do."""

    def __init__(self, message: str, failure: str | None = None):
        super().__init__(message)
        self.hub_failure = failure


def _load_hub(name: str, split: str | None) -> datasets.Dataset:
    try:
        with _from_hub(name):
            only = _load_split_only(name, split, "a Hub dataset")
            if only is not None:
                return only
            if split is None:
                loaded = datasets.load_dataset(name)
                return loaded[_choose_split(name, None, sorted(loaded), "a Hub dataset")]
            return datasets.load_dataset(name, split=split)
    except ValueError as error:
        if "Unknown split" not in str(error):
            raise
        available = list(datasets.get_dataset_split_names(name))
        raise ValueError(_missing_split_message(name, split, available, "a Hub dataset")) from None


@contextmanager
def _from_hub(source: str, what: str | None = None, *, local: bool = False):
    """Connection and file errors as a `DatasetUnavailableError` about `what` that says what to do (not `local`)."""
    try:
        yield
    except DatasetUnavailableError:
        raise
    except (ConnectionError, OSError) as error:
        if local:
            raise
        raise _unavailable(source, what or f"the dataset {source!r}", error) from error


def _unavailable(source: str, what: str, error: BaseException) -> DatasetUnavailableError:
    from huggingface_hub import HfApi, constants

    failure = hub_failure(error)
    if failure is None:  # datasets raises its own error, without the Hub's answer: ask the Hub itself
        try:
            HfApi().dataset_info(source)
        except Exception as answer:
            failure = hub_failure(answer)
    page = f"{constants.ENDPOINT}/datasets/{source}"
    if failure == GATED:
        return DatasetUnavailableError(
            f"{source!r} is a gated dataset on the Hugging Face Hub: ask for access on its page ({page}), log in "
            "(`hf auth login`, or set HF_TOKEN) with the account that was granted it, and run the command again",
            failure,
        )
    if failure in (UNAUTHENTICATED, FORBIDDEN, NOT_FOUND):
        answer = {UNAUTHENTICATED: "refused the token (401)", FORBIDDEN: "refused access (403)"}.get(failure)
        return DatasetUnavailableError(
            f"could not load {what}: the Hugging Face Hub ({constants.ENDPOINT}) "
            + (answer or "has no such dataset, or it is private (404)")
            + ". Check the name, log in with an account that may read it (`hf auth login`, or set HF_TOKEN), or use "
            f"a local copy: a folder written by `Dataset.save_to_disk`, parquet, an image folder, or {DIGITS!r}.",
            failure,
        )
    return DatasetUnavailableError(
        f"could not load {what} from the Hugging Face Hub ({type(error).__name__}: {error}). Offline, use a local "
        f"copy instead: a folder written by `Dataset.save_to_disk`, a folder or file of parquet, an image folder "
        f"(one sub-folder per class), or the embedded {DIGITS!r} dataset.",
        failure,
    )


def load_raw_dataset(source: str, *, split: str | None = "train") -> datasets.Dataset:
    """A split of a local folder or parquet file, else of a Hub dataset, with its own columns (None: the only one)."""
    path = Path(source)
    return _load_local(path, split) if path.exists() else _load_hub(source, split)


def stream_raw_dataset(source: str, *, split: str | None = "train") -> datasets.IterableDataset:
    """A split of `source` (as `load_raw_dataset` reads it) as a stream: a Hub repo's files are fetched as the stream
    reaches them. The split's name is checked before any data file is read."""
    if source == DIGITS:
        return load_digits_dataset(split).to_iterable_dataset()
    path = Path(source)
    if _read_whole(path):
        return _load_local(path, split).to_iterable_dataset()  # on this disk already
    with _from_hub(source, local=path.exists()):
        if not path.exists():
            check_ranged_reads(source)
        stream = _load_split_only(source, split, "a folder" if path.exists() else "a Hub dataset", streaming=True)
        return stream if stream is not None else datasets.load_dataset(source, split=split, streaming=True)


def check_ranged_reads(repo_id: str) -> None:
    """Stop with one line where the Hub endpoint ignores HTTP Range. A stream reads parts of files (a parquet footer,
    then its row groups); a server may answer such a read with the whole file (HTTP allows it, and mirrors such as
    olah offline do), which the parquet reader takes for a damaged file. Asked of the repo's card, which is read
    before any data file anyway; a repo without one is not asked."""
    from huggingface_hub import constants, hf_hub_url
    from huggingface_hub.utils import build_hf_headers, get_session

    endpoint = constants.ENDPOINT
    url = hf_hub_url(repo_id, "README.md", repo_type="dataset", endpoint=endpoint)
    headers = {**build_hf_headers(), "Range": "bytes=0-0"}
    with get_session().stream("GET", url, headers=headers, follow_redirects=True, timeout=30) as answer:
        ignored = answer.status_code == 200  # a 206 holds the one byte; anything else is for the reads to say
    if ignored:
        raise DatasetUnavailableError(
            f"the Hub at {endpoint} ignores HTTP Range (asked for one byte of the card of {repo_id}, it sent the "
            f"whole file), so {repo_id} cannot be streamed from it: read it without --streaming or --max-images (its "
            "files are then downloaded whole), or set HF_ENDPOINT to a server that serves parts of files"
        )


def split_files(source: str, split: str) -> list[str] | None:
    """The parquet files of one split of a folder or Hub repo, in the order its stream reads them, else None."""
    if source == DIGITS or _read_whole(Path(source)):
        return None
    with _from_hub(source, local=Path(source).exists()):
        builder = datasets.load_dataset_builder(source)
    files = _files_by_split(builder).get(split)
    return files if builder.name == "parquet" and files else None


def config_names(source: str) -> list[str]:
    """The configs a local folder's or a Hub dataset's card declares (`["default"]` where it declares none)."""
    with _from_hub(source, f"the configs of {source!r}"):
        return list(datasets.get_dataset_config_names(source))


def config_data_files(source: str, config: str) -> dict[str, list[str]]:
    """The files of each split of one config of a local folder or Hub dataset, as its card gives them (reading the
    card is the costly part: ask once per config)."""
    with _from_hub(source, f"the config {config!r} of {source!r}"):
        return _files_by_split(datasets.load_dataset_builder(source, config))


def load_config_split(
    source: str, config: str, split: str, *, data_files: dict[str, list[str]] | None = None
) -> datasets.Dataset:
    """One split of one config of a local folder or Hub dataset, reading that split's files only (`data_files`)."""
    data_files = data_files or config_data_files(source, config)
    if split not in data_files:
        raise ValueError(_missing_split_message(source, split, sorted(data_files), f"config {config!r}"))
    files = data_files[split]
    local = Path(source).exists()
    cache = _local_cache_dir(Path(files[0])) if local and len(files) == 1 else None
    with quiet_progress_bars(), _from_hub(source, f"split {split!r} of the config {config!r} of {source!r}"):
        return datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=cache)  # one of many


def load_image_classification(
    source: str = DIGITS,
    *,
    split: str = "train",
    image_column: str | None = None,
    label_column: str | None = None,
    class_names: list[str] | None = None,
) -> datasets.Dataset:
    """A split of `source` (the embedded `"digits"`, a Hub id, or a local folder or parquet file) as
    columns `image` and `label`, named as the source or a known schema its columns match (`KNOWN_COLUMNS`).
    `class_names` (e.g. the training split's) fixes which index each class gets, so that every split is encoded alike.
    """
    if source == DIGITS:
        return encode_labels(load_digits_dataset(split), class_names)
    return _image_classification(load_raw_dataset(source, split=split), source, image_column, label_column, class_names)


# Rows a streamed sample is drawn from at a time (datasets' default for `IterableDataset.shuffle`).
SAMPLE_SHUFFLE_BUFFER = 1_000


def load_image_sample(
    source: str = DIGITS,
    *,
    split: str = "test",
    num_images: int,
    seed: int = 0,
    image_column: str | None = None,
    label_column: str | None = None,
    class_names: list[str] | None = None,
) -> datasets.Dataset:
    """A seeded sample of `num_images` rows of a split (all of them where it has fewer), in the columns of
    `load_image_classification`, drawn from the split's stream through a shuffle buffer (docs/data.md, "Samples and
    streams"). One file at a time, where datasets' shuffle fills the buffer from ten at once: the sample then reads
    the files it needs and no more, and starts no reader threads (whose shutdown waits seconds)."""
    if num_images < 1:
        raise ValueError(f"a sample of {num_images} images: ask for at least one")
    from tqdm.auto import tqdm

    stream = stream_raw_dataset(source, split=split)
    for name, feature in (stream.features or {}).items():
        if isinstance(feature, datasets.Image):
            stream = stream.cast_column(name, datasets.Image(decode=False))  # kept encoded until a batch decodes it
    rows = stream.shuffle(seed=seed, buffer_size=SAMPLE_SHUFFLE_BUFFER, max_buffer_input_shards=1).take(num_images)
    read = list(tqdm(rows, total=num_images, desc=f"sample of {split}", unit="image", leave=False))
    sample = datasets.Dataset.from_list(read, features=stream.features)
    return _image_classification(sample, source, image_column, label_column, class_names)


def stream_image_classification(
    source: str = DIGITS,
    *,
    split: str = "test",
    image_column: str | None = None,
    label_column: str | None = None,
    class_names: list[str] | None = None,
    num_classes: int | None = None,
) -> datasets.IterableDataset:
    """A whole split as a stream of `image` and `label` rows (see `load_image_classification`), in the split's order.
    Its labels must be a `ClassLabel`, or named by `class_names`, or integers below `num_classes`: a stream cannot be
    scanned beforehand."""
    stream = stream_raw_dataset(source, split=split)
    if stream.features is None:
        raise ValueError(f"{source} declares no column types to stream by; read it without streaming")
    return _image_classification(stream, source, image_column, label_column, class_names, num_classes)


def _image_classification(dataset, source: str, image_column, label_column, class_names, num_classes=None):
    """A split's (or stream's) `image` and `label` columns, named as the source or its schema names them."""
    known = KNOWN_COLUMNS.get(source) or _schema_of(dataset.column_names)
    columns = Columns(image_column or known.image, label_column or known.label)
    missing = [name for name in (columns.image, columns.label) if name not in dataset.column_names]
    if missing:
        raise ValueError(
            f"{source} has no column(s) {missing}; its columns are {dataset.column_names}. "
            "Name them with image_column= / label_column= (--image-column / --label-column)."
        )
    dataset = dataset.select_columns([columns.image, columns.label])
    if isinstance(dataset, datasets.IterableDataset) and isinstance(dataset.features[columns.image], datasets.Image):
        # a stream's column operations run row by row: with images kept encoded, none decodes and re-encodes them
        dataset = dataset.cast_column(columns.image, datasets.Image(decode=False))
    renamed = {old: new for old, new in ((columns.image, "image"), (columns.label, "label")) if old != new}
    if renamed:
        dataset = dataset.rename_columns(renamed)
    return encode_labels(dataset, class_names, num_classes=num_classes).cast_column("image", datasets.Image())


@dataclass
class TrainEvalSplits:
    """A training split and an evaluation split, encoded with the training split's classes."""

    train: datasets.Dataset
    eval: datasets.Dataset
    holdout: dict | None = None  # {"fraction", "seed", "rows"} where eval was carved out of the training split

    def write_holdout(self, folder: str | Path, source: str, train_split: str) -> None:
        """`holdout.json` in `folder` where there is a hold-out: which rows were never trained on, for evaluation and
        analyses later."""
        if self.holdout is not None:
            holdout = {"dataset": source, "split": train_split, **self.holdout}
            write_json(Path(folder) / "holdout.json", holdout, indent=None)

    def holdout_note(self, source: str, train_split: str) -> str | None:
        """One line for the user where the evaluation split is a hold-out, else None."""
        if self.holdout is None:
            return None
        return (
            f"evaluating on a seeded, stratified hold-out of {100 * self.holdout['fraction']:g}% of {source}'s "
            f"{train_split!r} split ({len(self.eval):,} images, seed {self.holdout['seed']}); training on the "
            f"other {len(self.train):,}"
        )


def load_train_and_eval(
    source: str,
    *,
    train_split: str = "train",
    eval_split: str = "test",
    image_column: str | None = None,
    label_column: str | None = None,
    seed: int = 0,
    streaming: bool = False,
) -> TrainEvalSplits:
    """Both splits a training run needs. `eval_split="holdout"` (10%) or `"holdout:0.2"` carves the evaluation
    rows out of the training split (seeded, stratified). `streaming=True`: the training split as a stream
    (`stream_image_classification`); the evaluation split is prepared (its files only)."""
    columns = dict(image_column=image_column, label_column=label_column)
    fraction = parse_holdout(eval_split)
    if streaming and fraction is not None:
        raise ValueError(
            f"eval_split {eval_split!r} carves its rows out of a prepared training split; a streamed one cannot be "
            "divided so: name a split of the dataset (--eval-split validation), or train without --streaming"
        )
    load_train = stream_image_classification if streaming else load_image_classification
    train = load_train(source, split=train_split, **columns)
    if fraction is None:
        names = train.features["label"].names
        return TrainEvalSplits(train, load_image_classification(source, split=eval_split, class_names=names, **columns))
    rows = holdout_indices(train["label"], fraction, seed)
    held_out = set(rows)
    kept = [i for i in range(len(train)) if i not in held_out]
    return TrainEvalSplits(train.select(kept), train.select(rows), {"fraction": fraction, "seed": seed, "rows": rows})
