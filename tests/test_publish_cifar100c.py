"""alternet-publish-cifar100c --dry-run: Zenodo arrays in, a parquet dataset with a card out, read back equal."""

from pathlib import Path

import datasets
import pytest
import torch
from commands import run_command
from conftest import installed_command
from huggingface_hub import DatasetCard

from analysis import robustness

pytestmark = pytest.mark.commands  # runs installed commands (see CONTRIBUTING.md)

ROOT = Path(__file__).resolve().parents[1]
SOME = ["fog", "pixelate"]


def test_dry_run_round_trip(tmp_path):
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (6, 3, 32, 32), dtype=torch.uint8, generator=generator)
    generated = robustness.GeneratedCorruptions(images, torch.arange(6) % 3)
    zenodo = robustness.save_as_arrays(generated, tmp_path / "CIFAR-100-C", corruptions=SOME)
    out = tmp_path / "upload"
    command = [
        installed_command("alternet-publish-cifar100c"), "--zenodo-dir", str(zenodo),
        "--repo-id", "someone/cifar100-c", "--dry-run", str(out), "--corruptions", ",".join(SOME),
    ]  # fmt: skip
    completed = run_command(command, cwd=tmp_path, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert sorted(p.name for p in (out / "data").iterdir()) == ["test-fog.parquet", "test-pixelate.parquet"]

    card = DatasetCard.load(out / "README.md")
    assert card.data.license == "cc-by-4.0" and card.data.configs[0]["data_files"][0]["split"] == "test"
    as_hub_repo = datasets.load_dataset(str(out), split="test")  # resolves files through the card's configs
    assert len(as_hub_repo) == 2 * 5 * 6 and set(as_hub_repo.column_names) == {
        "image",
        "label",
        "corruption",
        "severity",
    }

    arrays, parquet = robustness.ZenodoArrays(zenodo), robustness.ParquetCorruptions(out)
    for corruption in SOME:
        for severity in (1, 5):
            ((expected, expected_labels),) = arrays.batches(corruption, severity)
            ((read, labels),) = parquet.batches(corruption, severity)
            assert torch.equal(read, expected) and torch.equal(labels, expected_labels)


def test_missing_arrays_are_named(tmp_path):
    generated = robustness.GeneratedCorruptions(torch.zeros(4, 3, 32, 32, dtype=torch.uint8), torch.zeros(4))
    zenodo = robustness.save_as_arrays(generated, tmp_path / "c", corruptions=["fog"])
    command = [
        installed_command("alternet-publish-cifar100c"), "--zenodo-dir", str(zenodo),
        "--repo-id", "someone/c", "--dry-run", str(tmp_path / "out"), "--corruptions", "fog,frost",
    ]  # fmt: skip
    completed = run_command(command, cwd=tmp_path, timeout=300)
    assert completed.returncode == 2 and "lacks frost.npy" in completed.stderr and "zenodo.org" in completed.stderr
