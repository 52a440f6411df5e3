"""Training from a stream (`alternet-train --streaming`): how an epoch is dealt to processes and loader workers, that a
resumed epoch goes on with the batches of the uninterrupted one, that a streamed image is augmented as the prepared
split's, what a stream refuses; and end to end: a run whose stream breaks stops at a checkpoint and resumes to the
weights of a run that did not break; two processes (torchrun, gloo) read disjoint rows whose union is the epoch, and
killed and resumed they end with the weights of two that were not."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
from commands import run_command
from conftest import installed_command
from distributed_harness import RowNumbers
from PIL import Image
from safetensors.torch import load_file
from test_training import TINY_ALTERNET, TORCHRUN_ENV, _distributed_config, _env, _torchrun, _torchrun_command

from alternet_hf.data.augmentation import SeededAugmentation, train_transform
from alternet_hf.data.collate import with_transform
from alternet_hf.data.sources import stream_image_classification
from alternet_hf.data.streaming import EpochPlan, StreamLoader, TrainStream, deal, row_counts, turns
from alternet_hf.training.engine import _check_resumable, train
from alternet_hf.training.recipe import TrainingConfig


def write_parquet_folder(folder: Path, rows_per_file: list[int], *, test_rows: int = 16, size: int = 16) -> str:
    """A parquet dataset as the Hub stores one: `data/train-0000i-of-0000n.parquet` holding `rows_per_file` images
    (random pixels, 4 classes), and a one-file test split; its path."""
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=list("abcd"))})
    rng = np.random.default_rng(0)

    def write(path: Path, n: int) -> None:
        images = [Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)) for _ in range(n)]
        datasets.Dataset.from_dict({"image": images, "label": [i % 4 for i in range(n)]}, features).to_parquet(path)

    (folder / "data").mkdir(parents=True)
    for i, n in enumerate(rows_per_file):
        write(folder / "data" / f"train-{i:05d}-of-{len(rows_per_file):05d}.parquet", n)
    write(folder / "data" / "test-00000-of-00001.parquet", test_rows)
    return str(folder)


def _epoch_rows(folder: str, *, world: int, rank: int, workers: int, epoch: int = 0, first: int = 0) -> list[list]:
    """The rows of each batch one process trains on in an epoch (from `first`), through the real DataLoader."""
    split = stream_image_classification(folder, split="train")
    plan = EpochPlan(row_counts(split, None), batch_size=8, world_size=world, num_workers=workers)
    stream = TrainStream(split, plan, rank=rank, transform=RowNumbers(), seed=0, shuffle_buffer=16, source=folder)
    loader = StreamLoader(stream, num_workers=workers, pin_memory=False, device="cpu", seed=0)
    loader.set_epoch(epoch)
    return [batch["pixel_values"].flatten().int().tolist() for batch in loader.starting_at(first)]


def test_epoch_plans_deal_files_then_rows_and_give_every_process_the_same_batches():
    assert deal([*range(5)], 2, 1) == [1, 3]
    plan = EpochPlan([40, 16, 56, 24], batch_size=8, world_size=2, num_workers=1)
    assert [[p.shard for p in process[0]] for process in plan.readers] == [[0, 2], [1, 3]]
    assert plan.batches == [[12], [5]] and plan.steps == 5 and plan.rows_per_epoch == 80
    assert "136 images in 4 file(s): 5 batches of 8 an epoch on each of 2 processes; 56 left out" in plan.describe()
    one_file = EpochPlan([30], batch_size=4, world_size=2, num_workers=2)  # fewer files than readers: rows dealt
    assert [(p.stride, p.offset) for process in one_file.readers for reader in process for p in reader] == [
        (4, 0),
        (4, 2),
        (4, 1),
        (4, 3),
    ]
    assert one_file.batches == [[2, 1], [2, 1]] and one_file.steps == 3
    assert EpochPlan([9, 9], batch_size=2, world_size=1, num_workers=0, multiple_of=4).steps == 8
    assert turns([3, 1, 2], 5) == [0, 1, 2, 0, 2] and turns([3, 1, 2], 9) == [0, 1, 2, 0, 2, 0]


@pytest.mark.parametrize(("files", "workers"), [([24, 24, 24, 24], 2), ([48], 1)], ids=["by-file", "by-row"])
def test_processes_read_disjoint_rows_whose_union_is_the_epoch(tmp_path, files, workers):
    folder = write_parquet_folder(tmp_path / "data", files)
    seen = [sum(_epoch_rows(folder, world=2, rank=rank, workers=workers), []) for rank in range(2)]
    assert len(seen[0]) == len(seen[1]) == sum(files) // 2
    assert not set(seen[0]) & set(seen[1]) and sorted(seen[0] + seen[1]) == list(range(sum(files)))
    again = sum(_epoch_rows(folder, world=2, rank=0, workers=workers, epoch=1), [])
    assert sorted(again) == sorted(seen[0]) and again != seen[0]  # the same rows, in another order


def test_a_resumed_epoch_goes_on_with_the_batches_of_the_uninterrupted_one(tmp_path):
    """Files of unequal length over two loader workers: one runs out first, and the loader's turns change."""
    folder = write_parquet_folder(tmp_path / "data", [40, 16, 56, 24])
    epoch = _epoch_rows(folder, world=1, rank=0, workers=2, epoch=3)
    assert len(epoch) == 17 and sorted(sum(epoch, [])) == list(range(136))
    for first in (1, 4, 11, 16):
        assert _epoch_rows(folder, world=1, rank=0, workers=2, epoch=3, first=first) == epoch[first:], first


def test_a_streamed_image_is_augmented_as_the_prepared_splits_row(tmp_path):
    folder = write_parquet_folder(tmp_path / "data", [12, 20])
    augmentation = SeededAugmentation(train_transform(16, [0.5] * 3, [0.5] * 3, normalize=False), seed=3)
    augmentation.epoch = 2
    split = stream_image_classification(folder, split="train")
    plan = EpochPlan(row_counts(split, None), batch_size=8, world_size=1, num_workers=0)
    stream = TrainStream(split, plan, rank=0, transform=augmentation, seed=3, shuffle_buffer=1, source=folder)
    stream.position[0] = 2
    # A buffer of one row keeps the file's order; the files come in the epoch's drawn order.
    streamed = torch.cat([batch["pixel_values"] for batch in stream])
    order = np.random.default_rng([3, 2, 0, 0]).permutation(2)
    rows = np.concatenate([[range(12), range(12, 32)][i] for i in order])
    prepared = with_transform(datasets.load_dataset(folder, split="train"), augmentation)
    assert torch.equal(streamed, torch.stack([prepared[int(row)]["pixel_values"] for row in rows]))


def test_a_streamed_run_resumes_only_with_its_loader_workers(tmp_path):
    saved = tmp_path / "training_config.json"
    TrainingConfig(streaming=True, num_workers=2).save(saved)
    with pytest.raises(ValueError, match="num_workers 2 -> 4"):
        _check_resumable(TrainingConfig(streaming=True, num_workers=4), saved)
    TrainingConfig(num_workers=2).save(saved)
    _check_resumable(TrainingConfig(num_workers=4), saved)  # a prepared split's order does not depend on them


def _stream_command(folder: str, output_dir: Path, *extra) -> list[str]:
    return [
        installed_command("alternet-train"),
        *("--dataset", folder, "--streaming", "--num-workers", "2", "--shuffle-buffer", "16"),
        *("--output-dir", str(output_dir), "--model-overrides", json.dumps(TINY_ALTERNET)),
        *("--epochs", "1", "--batch-size", "8", "--deterministic", "--eval-batch-size", "512"),
        *extra,
    ]


def _break(file: Path) -> bytes:
    """Overwrite the data of a parquet file, its footer kept (its rows still count): it breaks when read."""
    data = file.read_bytes()
    footer = int.from_bytes(data[-8:-4], "little") + 8
    file.write_bytes(data[:4] + bytes(len(data) - footer - 4) + data[-footer:])
    return data


@pytest.mark.commands
def test_a_run_whose_stream_breaks_stops_at_a_checkpoint_and_resumes_to_the_same_weights(tmp_path):
    folder = write_parquet_folder(tmp_path / "data", [48, 48, 48, 48])
    whole = run_command(_stream_command(folder, tmp_path / "whole"), cwd=tmp_path, env=_env())
    assert whole.returncode == 0, whole.stderr[-3000:]
    assert "streaming 192 images in 4 file(s): 24 batches of 8 an epoch" in whole.stdout
    assert not list((Path(folder) / "data").rglob("*.arrow"))

    file = Path(folder) / "data" / "train-00002-of-00004.parquet"
    intact = _break(file)
    broken = run_command(_stream_command(folder, tmp_path / "broken"), cwd=tmp_path, env=_env())
    assert broken.returncode == 2, broken.stderr[-3000:]
    assert f"reading {folder} (split 'train') failed at batch" in broken.stderr
    assert "Checkpointed at batch" in broken.stderr and "the same command with --resume continues" in broken.stderr
    assert "Traceback" not in broken.stderr
    state_file = next((tmp_path / "broken" / "checkpoints").glob("checkpoint-*/train_state.json"))
    assert json.loads(state_file.read_text())["step_in_epoch"] > 0

    file.write_bytes(intact)
    resumed = run_command(_stream_command(folder, tmp_path / "broken", "--resume"), cwd=tmp_path, env=_env())
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stdout
    expected, actual = (load_file(tmp_path / name / "model.safetensors") for name in ("whole", "broken"))
    for key in expected:
        assert torch.equal(expected[key], actual[key]), key


@pytest.mark.commands
def test_two_processes_stream_disjoint_rows_and_resume_after_a_kill_to_the_same_weights(tmp_path):
    """Two processes under torchrun (gloo): each reads half the rows of the epoch, none twice; DDP keeps their weights
    equal; a run killed (SIGKILL, its process group) after a checkpoint and resumed ends with the weights of the
    run that was not killed."""
    folder = write_parquet_folder(tmp_path / "data", [32, 32, 32, 32])
    fields = dict(dataset=folder, streaming=True, num_workers=1, shuffle_buffer=8, batch_size=8, epochs=1)
    fields |= dict(save_every_steps=3, deterministic=True, model_overrides=TINY_ALTERNET)
    rank0, rank1 = _torchrun(_distributed_config(tmp_path, "whole", **fields), tmp_path / "whole-weights", 2)
    for key in rank0:
        assert torch.equal(rank0[key], rank1[key]), key
    seen = [json.loads((tmp_path / "whole-weights" / f"rows{rank}.json").read_text()) for rank in range(2)]
    assert len(seen[0]) == len(seen[1]) == 64
    assert not set(seen[0]) & set(seen[1]) and sorted(seen[0] + seen[1]) == list(range(128))

    config = _distributed_config(tmp_path, "killed", **fields)
    command = _torchrun_command(config, tmp_path / "killed-weights", 2)
    launcher = subprocess.Popen(command, env={**_env(), **TORCHRUN_ENV}, start_new_session=True, **QUIET)
    pointer = tmp_path / "killed" / "checkpoints" / "latest"
    while not pointer.exists() and launcher.poll() is None:
        time.sleep(0.01)
    os.killpg(launcher.pid, signal.SIGKILL)
    launcher.wait()
    assert launcher.returncode == -signal.SIGKILL and not (tmp_path / "killed" / "model.safetensors").exists()
    resumed, _ = _torchrun(config, tmp_path / "resumed-weights", 2, "--resume")
    for key in rank0:
        assert torch.equal(rank0[key], resumed[key]), key


QUIET = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_what_a_stream_cannot_do_is_refused_before_anything_is_written(tmp_path):
    folder = write_parquet_folder(tmp_path / "data", [12, 12])
    refusals = {
        "carves its rows out of a prepared training split; a streamed one cannot": dict(eval_split="holdout"),
        "24 images in 2 file\\(s\\), dealt to 2 reader\\(s\\).* make no batch of 16": dict(
            batch_size=16, num_workers=2
        ),
    }
    for message, fields in refusals.items():
        run = tmp_path / "run"
        config = TrainingConfig(dataset=folder, streaming=True, output_dir=str(run), **fields)
        with pytest.raises(ValueError, match=message):
            train(config)
        assert not run.exists() or not any(run.iterdir()), list(run.iterdir())
