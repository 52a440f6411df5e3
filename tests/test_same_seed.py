"""Same seed, same numbers: each command that draws random numbers, run twice on a tiny case in fresh folders,
writes the same results bit for bit (weights byte for byte; JSON equal once wall-clock fields are set aside).

What draws: training (initial weights, data order, crops, RandAugment, Mixup/CutMix), fine-tuning (the new head,
data order, crops), the analyses (Hessian and landscape directions, augmented Hessian batches, corruptions, noise),
the comparison (its analyses). Evaluation draws nothing and is checked too. `alternet-reproduce` is checked in
`test_reproduce_command`, the release in `test_release`."""

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from commands import run_command
from conftest import installed_command
from test_training import TINY_ALTERNET

pytestmark = pytest.mark.commands  # runs installed commands (see CONTRIBUTING.md)

OFFLINE = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
# Keys of JSON outputs that record when or how fast, not what.
WALL_CLOCK = re.compile(r"seconds|time|elapsed|finished|started|per_second|throughput|date")


def without_wall_clock(value):
    if isinstance(value, dict):
        return {k: without_wall_clock(v) for k, v in value.items() if not WALL_CLOCK.search(k)}
    if isinstance(value, list):
        return [without_wall_clock(v) for v in value]
    return value


def results(folder: Path) -> dict:
    """Every weights file (bytes) and JSON file (content, wall clock aside) under `folder`, by relative path."""
    found = {}
    for path in sorted(folder.rglob("*")):
        name = str(path.relative_to(folder))
        if path.suffix == ".safetensors":
            found[name] = path.read_bytes()
        elif path.suffix == ".json" and "checkpoints" not in path.parts:
            found[name] = without_wall_clock(json.loads(path.read_text()))
    return found


def twice(argv: list[str], cwd: Path, out_flag: str) -> tuple[dict, dict]:
    """Run `argv` twice from its own folder each (`cwd/first`, `cwd/second`) into `out` there (named by `out_flag`:
    the runs differ only in where they are); the results of both. The first run starts in a fresh interpreter, the
    second is forked from the warm one of `commands`: their hash seeds and the unseeded states of torch's, NumPy's
    and Python's generators differ, as two cold starts' do (two forks would share their parent's), so a draw the
    command leaves unseeded shows."""
    runs = []
    for name, warm in (("first", False), ("second", True)):
        (cwd / name).mkdir()
        completed = run_command([*argv, out_flag, "out"], cwd=cwd / name, env=OFFLINE, timeout=600, warm=warm)
        assert completed.returncode == 0, completed.stderr[-3000:]
        runs.append(results(cwd / name / "out"))
    return runs[0], runs[1]


def assert_same(first: dict, second: dict, must_hold: set[str]) -> None:
    assert must_hold <= set(first), sorted(first)
    assert first.keys() == second.keys()
    for name in first:
        assert first[name] == second[name], f"{name} differs between two runs with the same seed"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny AlterNet trained twice with the same seed under the paper's augmentation (the first run's folder)."""
    from conftest import write_tiny_dataset

    cwd = tmp_path_factory.mktemp("same-seed")
    dataset = write_tiny_dataset(cwd / "tiny")
    argv = [
        installed_command("alternet-train"),
        "--model-overrides",
        json.dumps(TINY_ALTERNET),
        "--batch-size",
        "8",
        "--dataset",
        dataset,
        "--epochs",
        "2",
        "--rand-augment",
        "rand-m9-n2-mstd1.0",
        "--mixup-alpha",
        "1",
        "--cutmix-alpha",
        "0.8",
        "--seed",
        "3",
    ]
    first, second = twice(argv, cwd, "--output-dir")
    return dict(cwd=cwd, dataset=dataset, model=cwd / "first" / "out", runs=(first, second))


def test_training(trained):
    assert_same(*trained["runs"], {"model.safetensors", "history.json", "metrics.json"})


def test_fine_tuning_a_preset_from_scratch(trained, tmp_path):
    argv = [
        installed_command("alternet-finetune"),
        "--model",
        "alternet-50-cifar100",
        "--model-overrides",
        json.dumps(TINY_ALTERNET),
        "--dataset",
        trained["dataset"],
        "--epochs",
        "2",
        "--batch-size",
        "8",
        "--seed",
        "5",
    ]
    first, second = twice(argv, tmp_path, "--output-dir")
    assert_same(first, second, {"model.safetensors"})


def test_evaluation(trained, tmp_path):
    argv = [installed_command("alternet-evaluate"), "--model", str(trained["model"]), "--dataset", trained["dataset"]]
    first, second = twice(argv, tmp_path, "--output")
    assert len(first) == 1
    assert_same(first, second, set(first))


def test_analyses_that_draw(trained, tmp_path):
    argv = [
        installed_command("alternet-analyze"),
        "--model",
        str(trained["model"]),
        "--dataset",
        trained["dataset"],
        "--analyses",
        "hessian,landscape,robustness,frequency-noise",
        "--train-batch-size",
        "8",
        "--hessian-batches",
        "1",
        "--top-k",
        "1",
        "--bottom-k",
        "0",
        "--density-vectors",
        "1",
        "--density-steps",
        "4",
        "--landscape-points",
        "3",
        "--landscape-batches",
        "1",
        "--corruptions",
        "gaussian_noise,fog",
        "--severities",
        "3",
        "--corruption-images",
        "8",
        "--max-batches",
        "1",
        "--batch-size",
        "8",
        "--seed",
        "2",
    ]
    first, second = twice(argv, tmp_path, "--out")
    assert_same(first, second, {f"{a}.json" for a in ("hessian", "landscape", "robustness", "frequency-noise")})


def test_comparison(trained, tmp_path):
    shutil.copytree(trained["model"], tmp_path / "other")
    argv = [
        installed_command("alternet-compare"),
        "--models",
        f"a={trained['model']},b={tmp_path / 'other'}",
        "--dataset",
        trained["dataset"],
        "--analyses",
        "fourier,robustness",
        "--corruptions",
        "contrast",
        "--severities",
        "2",
        "--corruption-images",
        "8",
        "--max-batches",
        "1",
        "--batch-size",
        "8",
    ]
    first, second = twice(argv, tmp_path, "--out")
    assert_same(first, second, {"comparison.json", "a/robustness.json", "b/fourier.json"})
