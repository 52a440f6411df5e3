"""`alternet-train` on bad input, as a user types it (a subprocess in a fresh folder, offline): the message they
read, and that nothing was lost or overwritten."""

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from commands import kill_once_written, run_command, start_command
from conftest import installed_command
from datasets import ClassLabel, Dataset, DatasetDict, Features, Image
from PIL import Image as PILImage
from safetensors.torch import load_file
from test_training import TINY_ALTERNET

pytestmark = pytest.mark.commands  # runs installed commands (see CONTRIBUTING.md)


COMMAND = ["alternet-train", "--model-overrides", json.dumps(TINY_ALTERNET), "--batch-size", "8"]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def _train(cwd: Path, *arguments: str) -> subprocess.CompletedProcess:
    return run_command([installed_command(COMMAND[0]), *COMMAND[1:], *arguments], cwd=cwd, env=ENV)


def _error(result: subprocess.CompletedProcess) -> str:
    """The one `error:` message the command printed (progress bars aside), after checking it failed cleanly."""
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return next(line for line in result.stderr.replace("\r", "\n").splitlines() if "error: " in line)


def _random_images(n: int, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    return [PILImage.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)) for _ in range(n)]


def _digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()
    }


def test_a_diverging_run_stops_naming_the_step_and_keeps_the_last_good_checkpoint(tmp_path, tiny_dataset):
    common = ("--dataset", tiny_dataset, "--epochs", "3", "--warmup-epochs", "0", "--eval-every-epochs", "3")
    # Losses are read (and checked) every --log-every-steps batches, before a checkpoint and at an epoch's end.
    sgd = ("--optimizer", "sgd", "--clip-grad-norm", "none", "--learning-rate", "1e6")
    message = _error(_train(tmp_path, *common, *sgd, "--output-dir", "run"))
    assert re.search(
        r"training stopped: the loss is (nan|inf) at optimizer step \d \(epoch 1, batch \d of 4\)", message
    )
    assert "--learning-rate (this run: 1e+06) or gradient clipping (--clip-grad-norm 5)" in message
    # Weights (BatchNorm statistics included) are checked before a checkpoint is written: a bad one never is.
    message = _error(_train(tmp_path, *common, "--output-dir", "run2", "--learning-rate", "300"))
    assert re.search(
        r"training stopped: the (loss is \S+ at|weights are no longer finite after) optimizer step", message
    )
    kept = re.search(r"the last good checkpoint, (run2/checkpoints/checkpoint-\S+), is kept", message)
    assert all(torch.isfinite(w).all() for w in load_file(tmp_path / kept[1] / "model.safetensors").values())
    for run in ("run", "run2"):
        assert not (tmp_path / run / "model.safetensors").exists() and not (tmp_path / run / "history.json").exists()
    # A learning rate that is not a number is refused before anything is written.
    message = _error(_train(tmp_path, "--dataset", tiny_dataset, "--output-dir", "nan-run", "--learning-rate", "nan"))
    assert "learning_rate must be a finite number, got nan" in message and not (tmp_path / "nan-run").exists()


def test_a_malformed_rand_augment_string_is_refused_up_front(tmp_path, tiny_dataset):
    message = _error(_train(tmp_path, "--dataset", tiny_dataset, "--output-dir", "run", "--rand-augment", "rand-m9-x3"))
    assert "unknown option 'x3'" in message and "rand-m9-n2-mstd1.0" in message  # what is wrong, and the grammar
    assert not (tmp_path / "run").exists()


def test_a_corrupt_or_missing_image_is_named_by_dataset_split_and_row(tmp_path):
    folder = tmp_path / "photos"
    for split, n in (("train", 8), ("test", 2)):
        for label in ("cat", "dog"):
            (folder / split / label).mkdir(parents=True)
            for i, image in enumerate(_random_images(n, seed=len(label))):
                image.save(folder / split / label / f"{i}.png")
    broken = folder / "train" / "dog" / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n not an image")
    before = _digest(folder)
    message = _error(_train(tmp_path, "--dataset", "photos", "--output-dir", "run", "--num-workers", "2"))
    assert "photos (split 'train'), row " in message and str(broken) in message and "cannot be read" in message
    assert _digest(folder) == before

    features = Features({"image": Image(), "label": ClassLabel(names=["a", "b"])})
    splits = {
        split: {"image": _random_images(n), "label": [i % 2 for i in range(n)]}
        for split, n in (("train", 16), ("test", 4))
    }
    splits["train"]["image"][5] = None
    DatasetDict({k: Dataset.from_dict(v, features) for k, v in splits.items()}).save_to_disk(str(tmp_path / "holes"))
    message = _error(_train(tmp_path, "--dataset", "holes", "--output-dir", "run2"))
    assert "holes (split 'train'), row 5: the image is missing (null)" in message


def test_16_bit_images_train_on_their_grey_levels(tmp_path):
    """Two classes that differ only in 16-bit brightness: PIL's convert("RGB") makes both white (50% accuracy)."""
    rng = np.random.default_rng(0)
    for split, n in (("train", 24), ("test", 8)):
        for label, (low, high) in (("dark", (3000, 20000)), ("light", (25000, 60000))):
            (tmp_path / "scans" / split / label).mkdir(parents=True)
            for i in range(n):
                levels = rng.integers(low, high, (32, 32), dtype=np.uint16)
                PILImage.fromarray(levels).save(tmp_path / "scans" / split / label / f"{i}.png")
    result = _train(tmp_path, "--dataset", "scans", "--output-dir", "run", "--epochs", "3")
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["accuracy"] == 1.0


def test_resume_skips_damaged_checkpoints_for_the_last_complete_one_and_stays_exact(tmp_path, tiny_dataset):
    run = tmp_path / "run"
    arguments = (
        "--dataset",
        tiny_dataset,
        "--output-dir",
        "run",
        "--epochs",
        "2",
        "--save-every-steps",
        "2",
        "--keep-checkpoints",
        "4",
        "--deterministic",
        "--rand-augment",
        "rand-m9-n2-mstd1.0",
        "--mixup-alpha",
        "1",
        "--cutmix-alpha",
        "0.8",
    )
    assert _train(tmp_path, *arguments).returncode == 0
    expected = load_file(run / "model.safetensors")
    newest_first = sorted((run / "checkpoints").glob("checkpoint-*"), reverse=True)
    assert [p.name[-13:] for p in newest_first] == ["00000008-0002", "00000006-0001", "00000004-0001", "00000002-0000"]
    # Cut short, as by a full disk. Accelerate alone resumes from a truncated RNG state with an INFO log line.
    damage = dict(zip(newest_first, ("random_states_0.pkl", "optimizer.bin", "train_state.json")))
    for checkpoint, part in damage.items():
        data = (checkpoint / part).read_bytes()
        (checkpoint / part).write_bytes(data[: len(data) // 2])
    result = _train(tmp_path, *arguments, "--resume")
    assert result.returncode == 0, result.stderr[-3000:]
    for checkpoint, part in damage.items():
        assert f"checkpoint {checkpoint.name} is damaged: {part} has " in result.stdout
        assert (checkpoint.parent / f"{checkpoint.name}.damaged").is_dir()  # kept for inspection, never tried again
    assert f"resumed from run/checkpoints/{newest_first[3].name} (the previous complete checkpoint)" in result.stdout
    actual = load_file(run / "model.safetensors")
    assert all(torch.equal(expected[key], actual[key]) for key in expected)


def test_a_finished_run_is_not_overwritten_without_overwrite(tmp_path, tiny_dataset):
    arguments = ("--dataset", tiny_dataset, "--output-dir", "run", "--epochs", "1")
    first = _train(tmp_path, *arguments)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "Writing model shards" not in first.stderr  # transformers' bar, once per saved model
    (tmp_path / "run" / "unrelated-notes.txt").write_text("mine")
    (tmp_path / "run" / "eval_tiny_test.json").write_text("{}")  # as alternet-evaluate leaves one: of that model
    (tmp_path / "run" / "runs" / "training").mkdir(parents=True)  # as a fine-tune leaves its events
    shutil.rmtree(tmp_path / "run" / "checkpoints")  # a finished run without checkpoints
    before = _digest(tmp_path / "run")
    for again in (arguments, (*arguments, "--resume")):
        message = _error(_train(tmp_path, *again))
        assert "holds an earlier run (best, logs, training_config.json, history.json" in message
        assert "eval_tiny_test.json" in message and "--overwrite" in message
    assert _digest(tmp_path / "run") == before
    replaced = _train(tmp_path, *arguments, "--overwrite", "--seed", "1")
    assert replaced.returncode == 0, replaced.stderr[-3000:]
    assert "--overwrite: removed the earlier run's" in replaced.stdout
    assert not (tmp_path / "run" / "eval_tiny_test.json").exists()  # it would stand on the new model's card
    assert not (tmp_path / "run" / "runs").exists()  # nor an empty folder where the events were
    assert (tmp_path / "run" / "unrelated-notes.txt").read_text() == "mine"  # only the model's own record goes
    assert json.loads((tmp_path / "run" / "training_config.json").read_text())["seed"] == 1


def test_resume_after_a_kill_before_the_first_checkpoint_starts_again(tmp_path, tiny_dataset):
    """Killed before its first complete checkpoint, a run left its settings, logs and a checkpoint being written:
    nothing to resume, and nothing finished to protect, so --resume starts it again (the release's "run it again")."""
    arguments = ("--dataset", tiny_dataset, "--output-dir", "run", "--epochs", "1")
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    (run / "checkpoints" / "checkpoint-00000004-0000.partial").mkdir(parents=True)
    (run / "training_config.json").write_text("{}")
    result = _train(tmp_path, *arguments, "--resume")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "(the run there stopped before its first): starting from scratch" in result.stdout
    assert json.loads((run / "metrics.json").read_text())["accuracy"] >= 0
    refused = _train(tmp_path, *arguments, "--resume", "--seed", "1")  # finished now: resuming it is another run
    assert refused.returncode == 2


def test_a_run_resumed_after_an_epoch_writes_that_epochs_whole_record(tmp_path, tiny_dataset):
    """An epoch's record is whole in the checkpoint that ends the epoch, its times included, so a run killed after it
    and resumed writes every field of every epoch to history.json, as a run that was not stopped."""
    arguments = ("--dataset", tiny_dataset, "--output-dir", "run", "--epochs", "4")
    process = start_command([installed_command(COMMAND[0]), *COMMAND[1:], *arguments], cwd=tmp_path, env=ENV)
    kill_once_written(process, tmp_path / "run" / "checkpoints" / "latest")  # the end of the first epoch
    assert process.returncode == -signal.SIGKILL, "training ended before it could be killed"
    resumed = _train(tmp_path, *arguments, "--resume")
    assert resumed.returncode == 0 and "resumed from" in resumed.stdout, resumed.stderr[-3000:]
    history = json.loads((tmp_path / "run" / "history.json").read_text())
    assert [record["epoch"] for record in history] == [1, 2, 3, 4]
    assert all(sorted(record) == sorted(history[-1]) for record in history), history[0]  # every one evaluated
    assert all(record["seconds"] > 0 and "checkpoint_seconds" in record for record in history)
