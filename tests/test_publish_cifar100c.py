"""alternet-publish-cifar100c --dry-run: Zenodo arrays in, a parquet dataset with a card out, read back equal."""

from pathlib import Path

import datasets
import pytest
import torch
from commands import run_command
from conftest import installed_command
from huggingface_hub import DatasetCard

from alternet_hf.data.cifar_c import sources as corruption_sources
from alternet_hf.hub import cifar100c

pytestmark = pytest.mark.commands  # runs installed commands (see CONTRIBUTING.md)

ROOT = Path(__file__).resolve().parents[1]
SOME = ["fog", "pixelate"]


def test_dry_run_round_trip(tmp_path):
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (6, 3, 32, 32), dtype=torch.uint8, generator=generator)
    generated = corruption_sources.GeneratedCorruptions(images, torch.arange(6) % 3)
    zenodo = corruption_sources.save_as_arrays(generated, tmp_path / "CIFAR-100-C", corruptions=SOME)
    out = tmp_path / "upload"
    command = [
        installed_command("alternet-publish-cifar100c"),
        "--zenodo-dir",
        str(zenodo),
        "--repo-id",
        "someone/cifar100-c",
        "--dry-run",
        str(out),
        "--corruptions",
        ",".join(SOME),
    ]
    completed = run_command(command, cwd=tmp_path, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    files = sorted(str(p.relative_to(out)) for p in (out / "data").rglob("*.parquet"))
    assert files == [cifar100c.set_file(c, s) for c in SOME for s in range(1, 6)]  # one file per set

    card = DatasetCard.load(out / "README.md")
    assert card.data.license == "cc-by-4.0"
    assert [c["config_name"] for c in card.data.configs] == ["default", *SOME]
    assert 'load_dataset("someone/cifar100-c", "fog", split="severity_3")' in card.text
    as_hub_repo = datasets.load_dataset(str(out), split="test")  # the all-in-one config, as before
    assert len(as_hub_repo) == 2 * 5 * 6 and set(as_hub_repo.column_names) == {
        "image",
        "label",
        "corruption",
        "severity",
    }
    # The card's short form: one corruption, one severity, as the Hub resolves a repo's configs.
    fog_3 = datasets.load_dataset(str(out), "fog", split="severity_3")
    streamed = list(datasets.load_dataset(str(out), "fog", split="severity_3", streaming=True))
    assert (
        fog_3.num_rows == len(streamed) == 6 and set(fog_3["severity"]) == {3} and set(fog_3["corruption"]) == {"fog"}
    )

    arrays, parquet = corruption_sources.ZenodoArrays(zenodo), corruption_sources.ParquetCorruptions(out)
    assert parquet.available() == SOME and parquet.dataset is None  # nothing read yet
    for corruption in SOME:
        for severity in (1, 5):
            ((expected, expected_labels),) = arrays.batches(corruption, severity)
            ((read, labels),) = parquet.batches(corruption, severity)
            assert torch.equal(read, expected) and torch.equal(labels, expected_labels)
            ((read, labels),) = parquet.batches(corruption, severity, rows=[4, 1])
            assert torch.equal(read, expected[[4, 1]]) and torch.equal(labels, expected_labels[[4, 1]])


def test_a_set_is_read_from_its_own_file(tmp_path, monkeypatch):
    """ParquetCorruptions opens the one file of the set it evaluates (a Hub repo: fetches that file alone)."""
    generated = corruption_sources.GeneratedCorruptions(torch.zeros(4, 3, 32, 32, dtype=torch.uint8), torch.arange(4))
    zenodo = corruption_sources.save_as_arrays(generated, tmp_path / "c", corruptions=SOME)
    out = cifar100c.write_hub_dataset(zenodo, tmp_path / "repo", "someone/c", corruptions=SOME)
    opened, load_dataset = [], datasets.load_dataset

    def recording(path, *args, data_files=None, **kwargs):
        opened.append(data_files)
        return load_dataset(path, *args, data_files=data_files, **kwargs)

    monkeypatch.setattr(datasets, "load_dataset", recording)
    source = corruption_sources.ParquetCorruptions(out)
    assert list(source.set_labels("pixelate", 2)) == [0, 1, 2, 3]
    assert opened == [[str(out / cifar100c.set_file("pixelate", 2))]]


def test_missing_arrays_are_named(tmp_path):
    generated = corruption_sources.GeneratedCorruptions(torch.zeros(4, 3, 32, 32, dtype=torch.uint8), torch.zeros(4))
    zenodo = corruption_sources.save_as_arrays(generated, tmp_path / "c", corruptions=["fog"])
    command = [
        installed_command("alternet-publish-cifar100c"),
        "--zenodo-dir",
        str(zenodo),
        "--repo-id",
        "someone/c",
        "--dry-run",
        str(tmp_path / "out"),
        "--corruptions",
        "fog,frost",
    ]
    completed = run_command(command, cwd=tmp_path, timeout=300)
    assert completed.returncode == 2 and "lacks frost.npy" in completed.stderr and "zenodo.org" in completed.stderr
