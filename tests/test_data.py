"""Data sources on small datasets built in the schemas of the real ones (no network)."""

import numpy as np
import pytest
from datasets import ClassLabel, Dataset, DatasetDict, Features, Image, Value
from PIL import Image as PILImage

from alternet_hf.data.sources import load_image_classification


def _cifar100_like(n=12):
    """uoft-cs/cifar100's schema: img, fine_label, coarse_label."""
    rng = np.random.default_rng(0)
    features = Features(
        {
            "img": Image(),
            "fine_label": ClassLabel(names=[f"fine{i}" for i in range(4)]),
            "coarse_label": ClassLabel(names=["a", "b"]),
        }
    )
    return Dataset.from_dict(
        {
            "img": [PILImage.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)) for _ in range(n)],
            "fine_label": [i % 4 for i in range(n)],
            "coarse_label": [i % 2 for i in range(n)],
        },
        features=features,
    )


def test_embedded_digits():
    train, test = load_image_classification("digits", split="train"), load_image_classification("digits", split="test")
    assert len(train) + len(test) == 1797 and len(test) == 360
    image = train[0]["image"]
    assert image.size == (32, 32) and image.mode == "RGB"
    assert train.features["label"].num_classes == 10
    assert sorted(set(test["label"])) == list(range(10))  # stratified
    assert load_image_classification("digits", split="test")["label"] == test["label"]  # fixed split
    with pytest.raises(ValueError, match=r"no split 'validation': its splits are \['test', 'train'\]"):
        load_image_classification("digits", split="validation")


def test_save_to_disk_folder_with_cifar100_columns(tmp_path):
    DatasetDict({"train": _cifar100_like(), "test": _cifar100_like(4)}).save_to_disk(str(tmp_path / "c100"))
    data = load_image_classification(
        str(tmp_path / "c100"), split="test", image_column="img", label_column="fine_label"
    )
    assert data.column_names == ["image", "label"] and len(data) == 4
    assert data.features["label"].names == [f"fine{i}" for i in range(4)]
    # without column names, a local copy in uoft-cs/cifar100's schema reads as that dataset (img, fine_label)
    assert load_image_classification(str(tmp_path / "c100"), split="test")["label"] == data["label"]
    renamed = _cifar100_like(4).rename_column("img", "picture")
    renamed.to_parquet(str(tmp_path / "other.parquet"))
    with pytest.raises(ValueError, match="no column"):
        load_image_classification(str(tmp_path / "other.parquet"), split="train")  # no known schema fits


def test_parquet_file_and_folder(tmp_path):
    _cifar100_like().to_parquet(str(tmp_path / "train.parquet"))
    data = load_image_classification(str(tmp_path / "train.parquet"), image_column="img", label_column="fine_label")
    assert len(data) == 12 and isinstance(data[0]["image"], PILImage.Image)
    folder = load_image_classification(str(tmp_path), image_column="img", label_column="coarse_label")
    assert len(folder) == 12
    _cifar100_like(4).to_parquet(str(tmp_path / "test.parquet"))
    test = load_image_classification(str(tmp_path), split="test", image_column="img", label_column="coarse_label")
    assert len(test) == 4  # the folder's files name its splits


def test_folders_of_the_same_name_and_card_never_share_cached_rows(tmp_path):
    """datasets alone caches a folder with a card by its name and the card's patterns: the second folder (or the
    first, rewritten) would read the first one's rows."""
    card = "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: test\n    path: data/test-*.parquet\n---\n"
    for n in (4, 6):
        folder = tmp_path / f"run{n}" / "upload"
        (folder / "data").mkdir(parents=True)
        (folder / "README.md").write_text(card)
        _cifar100_like(n).to_parquet(str(folder / "data" / "test-a.parquet"))
        data = load_image_classification(str(folder), split="test", image_column="img", label_column="fine_label")
        assert len(data) == n
    _cifar100_like(8).to_parquet(str(folder / "data" / "test-a.parquet"))  # rewritten in place
    assert len(load_image_classification(str(folder), split="test", image_column="img", label_column="fine_label")) == 8


def test_one_split_of_a_parquet_dataset_prepares_that_split_only(tmp_path, monkeypatch):
    """A split of a folder (or Hub repo) of parquet files reads and caches that split's files alone, with the classes
    its card declares; a split it lacks is refused with the ones it has, before any file is read. The training
    file here is not parquet at all: reading it would fail."""
    import datasets

    card = (
        "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n    path: data/train-*.parquet\n"
        "  - split: validation\n    path: data/validation-*.parquet\n---\n"
    )
    folder = tmp_path / "repo"
    (folder / "data").mkdir(parents=True)
    (folder / "README.md").write_text(card)
    (folder / "data" / "train-0.parquet").write_bytes(b"140 GB of training images")
    _cifar100_like(4).to_parquet(str(folder / "data" / "validation-0.parquet"))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "cache"))

    data = load_image_classification(str(folder), split="validation", image_column="img", label_column="fine_label")
    assert len(data) == 4 and data.features["label"].names == [f"fine{i}" for i in range(4)]
    cached = [path.name for path in (tmp_path / "cache").rglob("*.arrow")]
    assert cached and all("validation" in name for name in cached), cached
    with pytest.raises(ValueError, match=r"has no split 'test': its splits are \['train', 'validation'\]"):
        load_image_classification(str(folder), split="test", image_column="img", label_column="fine_label")


@pytest.mark.parametrize("kind", ["parquet file", "saved Dataset", "unnamed parquet files", "flat image folder"])
def test_a_source_with_one_split_serves_no_other(tmp_path, kind):
    """One parquet file, one saved Dataset, or files that name no split hold the split "train" only: any other
    name is an error listing the splits, never the training rows again under another name."""
    if kind == "parquet file":
        _cifar100_like().to_parquet(str(tmp_path / "all.parquet"))
        source = tmp_path / "all.parquet"
    elif kind == "saved Dataset":
        _cifar100_like().save_to_disk(str(tmp_path / "d"))
        source = tmp_path / "d"
    elif kind == "unnamed parquet files":
        (tmp_path / "p").mkdir()
        _cifar100_like().to_parquet(str(tmp_path / "p" / "part-0.parquet"))
        source = tmp_path / "p"
    else:
        for label in ("cat", "dog"):
            (tmp_path / "f" / label).mkdir(parents=True)
            PILImage.new("RGB", (8, 8)).save(tmp_path / "f" / label / "0.png")
        source = tmp_path / "f"
    columns = {} if kind == "flat image folder" else dict(image_column="img", label_column="fine_label")
    assert len(load_image_classification(str(source), split="train", **columns)) > 0
    for split in ("test", "validation", "bogus"):
        with pytest.raises(ValueError, match=rf"has no split '{split}': its splits are \['train'\].*holdout"):
            load_image_classification(str(source), split=split, **columns)


def test_holdout_is_seeded_stratified_and_disjoint(tmp_path):
    from alternet_hf.data.sources import load_train_and_eval

    Dataset.from_dict(
        {"image": [PILImage.new("RGB", (8, 8), (i, 0, 0)) for i in range(40)], "label": [i % 4 for i in range(40)]},
        features=Features({"image": Image(), "label": ClassLabel(names=list("abcd"))}),
    ).to_parquet(str(tmp_path / "one.parquet"))
    splits = load_train_and_eval(str(tmp_path / "one.parquet"), eval_split="holdout:0.2", seed=3)
    assert len(splits.train) == 32 and len(splits.eval) == 8
    assert sorted(splits.eval["label"]) == [0, 0, 1, 1, 2, 2, 3, 3]  # stratified
    train_pixels = {image.getpixel((0, 0)) for image in splits.train["image"]}
    assert not train_pixels & {image.getpixel((0, 0)) for image in splits.eval["image"]}  # no row in both
    again = load_train_and_eval(str(tmp_path / "one.parquet"), eval_split="holdout:0.2", seed=3)
    assert again.holdout["rows"] == splits.holdout["rows"] and len(splits.holdout["rows"]) == 8
    assert load_train_and_eval(str(tmp_path / "one.parquet"), eval_split="holdout", seed=3).holdout["fraction"] == 0.1
    assert "hold-out of 20%" in splits.holdout_note("one.parquet", "train")
    with pytest.raises(ValueError, match="between 0 and 1"):
        load_train_and_eval(str(tmp_path / "one.parquet"), eval_split="holdout:2")


def test_sparse_integer_labels_are_refused():
    """Labels 0, 1 and 1000 would silently build a 1001-class model with 998 classes never seen."""
    from alternet_hf.data.labels import encode_labels

    with pytest.raises(ValueError, match="1001-class model in which 998 classes never occur"):
        encode_labels(_plain_labels([0, 1, 1000, 1], "int64"))
    assert encode_labels(_plain_labels([0, 2, 2, 1], "int64")).features["label"].num_classes == 3


def test_image_folder_with_integer_labels_from_names(tmp_path):
    for label in ("cat", "dog"):
        (tmp_path / "train" / label).mkdir(parents=True)
        for i in range(3):
            PILImage.new("RGB", (20, 24), (i * 40, 0, 0)).save(tmp_path / "train" / label / f"{i}.png")
    data = load_image_classification(str(tmp_path), split="train")
    assert len(data) == 6 and data.features["label"].names == ["cat", "dog"]


def test_string_labels_are_encoded(tmp_path):
    Dataset.from_dict(
        {"image": [PILImage.new("RGB", (8, 8)) for _ in range(4)], "label": ["b", "a", "b", "c"]},
        features=Features({"image": Image(), "label": Value("string")}),
    ).save_to_disk(str(tmp_path / "d"))
    data = load_image_classification(str(tmp_path / "d"))
    assert data.features["label"].names == ["a", "b", "c"]


def _plain_labels(labels, dtype):
    return Dataset.from_dict(
        {"image": [PILImage.new("RGB", (8, 8)) for _ in labels], "label": labels},
        features=Features({"image": Image(), "label": Value(dtype)}),
    )


def test_integer_labels_keep_their_values(tmp_path):
    """Plain int64 labels (as in a parquet export) are class indices: never renumbered as sorted strings."""
    splits = {"train": _plain_labels(list(range(12)), "int64"), "test": _plain_labels([2, 10, 11], "int64")}
    DatasetDict(splits).save_to_disk(str(tmp_path / "d"))
    train = load_image_classification(str(tmp_path / "d"), split="train")
    test = load_image_classification(str(tmp_path / "d"), split="test", class_names=train.features["label"].names)
    assert train["label"] == list(range(12)) and test["label"] == [2, 10, 11]
    assert test.features["label"].names == [str(i) for i in range(12)]
    with pytest.raises(ValueError, match=r"integer labels \[10, 11\] are outside 0…9"):
        load_image_classification(str(tmp_path / "d"), split="test", class_names=[str(i) for i in range(10)])


def test_every_split_is_encoded_with_the_training_classes(tmp_path):
    splits = {"train": _plain_labels(["b", "a", "c"], "string"), "test": _plain_labels(["c", "b"], "string")}
    DatasetDict(splits).save_to_disk(str(tmp_path / "s"))
    names = load_image_classification(str(tmp_path / "s"), split="train").features["label"].names
    test = load_image_classification(str(tmp_path / "s"), split="test", class_names=names)
    assert names == ["a", "b", "c"] and test["label"] == [2, 1]  # alone, the test split would say c=1, b=0
    with pytest.raises(ValueError, match=r"labels \['c'\] are not among"):
        load_image_classification(str(tmp_path / "s"), split="test", class_names=["a", "b"])
    # A ClassLabel split with the same classes in another order is re-indexed by name.
    DatasetDict({"test": _cifar100_like(4)}).save_to_disk(str(tmp_path / "c"))
    reordered = [f"fine{i}" for i in (3, 2, 1, 0)]
    data = load_image_classification(
        str(tmp_path / "c"), split="test", image_column="img", label_column="fine_label", class_names=reordered
    )
    assert data["label"] == [3, 2, 1, 0] and data.features["label"].names == reordered


def test_class_names_of_a_model_config():
    from transformers import PretrainedConfig

    from alternet_hf.data.labels import class_names_of

    assert class_names_of(PretrainedConfig(id2label={0: "cat", 1: "dog"})) == ["cat", "dog"]
    assert class_names_of(PretrainedConfig(num_labels=3)) is None  # LABEL_0…: indices only
    assert class_names_of(PretrainedConfig(id2label={0: "0", 1: "1"})) is None  # from integer labels: indices only


def test_unreachable_hub_dataset_names_the_offline_options(monkeypatch):
    from alternet_hf.data.sources import DatasetUnavailableError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(DatasetUnavailableError, match="save_to_disk"):
        load_image_classification("uoft-cs/cifar100", split="test")


def _parquet_repo(folder, train, test):
    """A folder in the Hub's layout: `data/<split>-*.parquet`, the train split in three files."""
    (folder / "data").mkdir(parents=True)
    for shard, rows in enumerate(np.array_split(np.arange(len(train)), 3)):
        train.select(rows).to_parquet(str(folder / "data" / f"train-{shard:05d}-of-00003.parquet"))
    test.to_parquet(str(folder / "data" / "test-00000-of-00001.parquet"))
    return str(folder)


def test_a_seeded_sample_is_drawn_again_by_its_seed_and_never_prepares_the_split(tmp_path, monkeypatch):
    import datasets

    from alternet_hf.data.sources import load_image_sample

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "cache"))
    source = _parquet_repo(tmp_path / "repo", _cifar100_like(30), _cifar100_like(4))
    columns = dict(image_column="img", label_column="fine_label")
    first, again, other = (
        load_image_sample(source, split="train", num_images=8, seed=seed, **columns) for seed in (0, 0, 1)
    )
    pixels = [[np.asarray(image).tobytes() for image in sample["image"]] for sample in (first, again, other)]
    assert len(first) == 8 and pixels[0] == pixels[1] and pixels[0] != pixels[2]
    assert first.features["label"].names == [f"fine{i}" for i in range(4)] and first.column_names == ["image", "label"]
    assert not list((tmp_path / "cache").rglob("*.arrow")), "a sample prepared the split on disk"
    whole = load_image_sample(source, split="test", num_images=100, **columns)  # more than it has: all of it
    assert sorted(whole["label"]) == sorted(load_image_classification(source, split="test", **columns)["label"])
    with pytest.raises(ValueError, match=r"has no split 'validation': its splits are \['test', 'train'\]"):
        load_image_sample(source, split="validation", num_images=8, **columns)
    digits = load_image_sample("digits", split="test", num_images=5, seed=3)
    assert len(digits) == 5 and digits.features["label"].names == [str(d) for d in range(10)]


def test_a_streamed_split_gives_the_prepared_splits_rows_and_pixels(tmp_path):
    import torch

    from alternet_hf.data.augmentation import eval_transform
    from alternet_hf.data.collate import collate_images, with_transform
    from alternet_hf.data.sources import stream_image_classification

    source = _parquet_repo(tmp_path / "repo", _cifar100_like(30), _cifar100_like(4))
    columns = dict(image_column="img", label_column="fine_label")
    transform = eval_transform(32, [0.5] * 3, [0.5] * 3, normalize=False)
    batches = [
        list(torch.utils.data.DataLoader(with_transform(data, transform), batch_size=7, collate_fn=collate_images))
        for data in (
            load_image_classification(source, split="train", **columns),
            stream_image_classification(source, split="train", **columns),
        )
    ]
    assert len(batches[0]) == len(batches[1]) == 5
    for prepared, streamed in zip(*batches):
        assert torch.equal(prepared["pixel_values"], streamed["pixel_values"])
        assert torch.equal(prepared["labels"], streamed["labels"])


def test_a_stream_is_encoded_by_the_class_names_it_is_given(tmp_path):
    """A stream cannot be scanned for its labels: plain labels need the class names (the model's), and a label
    outside them is named by row as the rows are read."""
    from alternet_hf.data.augmentation import eval_transform
    from alternet_hf.data.collate import with_transform
    from alternet_hf.data.rows import DataRowError
    from alternet_hf.data.sources import stream_image_classification

    DatasetDict({"test": _plain_labels([2, 0, 1], "int64")}).save_to_disk(str(tmp_path / "ints"))
    DatasetDict({"test": _plain_labels(["b", "a"], "string")}).save_to_disk(str(tmp_path / "strings"))
    stream = stream_image_classification(str(tmp_path / "ints"), class_names=["x", "y", "z"])
    assert [row["label"] for row in stream] == [2, 0, 1] and stream.features["label"].names == ["x", "y", "z"]
    stream = stream_image_classification(str(tmp_path / "strings"), class_names=["a", "b"])
    assert [row["label"] for row in stream] == [1, 0]
    with pytest.raises(ValueError, match="a stream's labels must be a ClassLabel, or the class names given"):
        stream_image_classification(str(tmp_path / "ints"))
    with pytest.raises(ValueError, match="a stream's labels must be a ClassLabel, or the class names given"):
        stream_image_classification(str(tmp_path / "strings"), num_classes=2)
    stream = stream_image_classification(str(tmp_path / "ints"), num_classes=4)  # integers: a model's 4 outputs
    assert [row["label"] for row in stream] == [2, 0, 1] and stream.features["label"].names == ["0", "1", "2", "3"]
    too_few = stream_image_classification(str(tmp_path / "ints"), class_names=["x", "y"])
    with pytest.raises(DataRowError, match="row 0: label 2 is outside the classes 0…1"):
        list(with_transform(too_few, eval_transform(8, [0.5] * 3, [0.5] * 3), source="ints"))
