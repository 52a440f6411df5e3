"""The training engine end to end on the embedded digits: outputs, resume after SIGKILL, two processes, the
compiled step."""

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from commands import kill_once_written, run_command, start_command
from conftest import TINY, installed_command
from safetensors.torch import load_file
from transformers import AutoModelForImageClassification

import alternet_hf  # noqa: F401  (registers the classes for AutoModel)
from alternet_hf.training.engine import train
from alternet_hf.training.recipe import TrainingConfig, recipe_config

REPO = Path(__file__).resolve().parent.parent
TINY_ALTERNET = dict(
    hidden_sizes=[8, 16, 32, 64],
    embedding_size=8,
    num_attention_heads=[1, 1, 2, 2],
    attention_head_dim=8,
    drop_path_rate=0.1,
)
TINY_VIT = dict(hidden_size=24, num_hidden_layers=2, num_attention_heads=2, intermediate_size=48, patch_size=4)


def _train_command(output_dir, *extra):
    return [
        installed_command("alternet-train"),
        "--output-dir",
        str(output_dir),
        "--model-overrides",
        json.dumps(TINY_ALTERNET),
        "--epochs",
        "2",
        "--batch-size",
        "16",
        "--save-every-steps",
        "10",
        "--deterministic",
        "--eval-batch-size",
        "512",
        *extra,
    ]


def _env():
    return {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def uninterrupted_run(tmp_path_factory):
    """One training run as typed (two epochs, checkpoints every 10 steps): its folder and what it printed."""
    folder = tmp_path_factory.mktemp("uninterrupted")
    result = run_command(_train_command(folder / "run"), cwd=folder, env=_env())
    assert result.returncode == 0, result.stderr[-3000:]
    return folder / "run", result


@pytest.mark.commands
def test_training_writes_a_usable_model_and_learns(uninterrupted_run, tmp_path):
    finished_run, result = uninterrupted_run
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)  # this test changes the run; the resume test compares with the original
    for name in (
        "model.safetensors",
        "preprocessor_config.json",
        "metrics.json",
        "history.json",
        "training_curves.png",
        "reliability_diagram.png",
        "training_config.json",
        "best/model.safetensors",
    ):
        assert (run / name).exists(), name
    history = json.loads((run / "history.json").read_text())
    assert len(history) == 2 and history[-1]["eval_accuracy"] > 0.5  # chance is 0.1
    model = AutoModelForImageClassification.from_pretrained(run)
    assert model.config.id2label[3] == "3"
    assert "final test accuracy" in result.stdout
    assert list((run / "logs").rglob("events.out.tfevents*")), "no TensorBoard log"

    again = run_command(_train_command(run), cwd=tmp_path, env=_env())
    assert again.returncode != 0 and "--resume" in again.stderr  # never silently overwrites a run
    metrics = (run / "metrics.json").read_text()
    (run / "model.safetensors").unlink()  # as if killed between the last checkpoint and the final outputs
    finished = run_command(_train_command(run, "--resume"), cwd=tmp_path, env=_env())
    assert finished.returncode == 0 and "nothing left to train" in finished.stdout, finished.stderr[-3000:]
    assert (run / "metrics.json").read_text() == metrics and (run / "model.safetensors").exists()
    changed = run_command(_train_command(run, "--resume", "--epochs", "3"), cwd=tmp_path, env=_env())
    assert changed.returncode != 0 and "epochs 2 -> 3" in changed.stderr


@pytest.mark.commands
def test_resume_after_sigkill_equals_an_uninterrupted_run(uninterrupted_run, tmp_path):
    interrupted = tmp_path / "interrupted"
    process = start_command(_train_command(interrupted), cwd=tmp_path, env=_env())
    pointer = interrupted / "checkpoints" / "latest"
    kill_once_written(process, pointer)
    assert process.returncode == -signal.SIGKILL, "training ended before it could be killed"
    state = json.loads((interrupted / "checkpoints" / pointer.read_text().strip() / "train_state.json").read_text())
    assert state["epoch"] == 0 and state["step_in_epoch"] > 0  # killed in the middle of the first epoch
    assert not (interrupted / "model.safetensors").exists()

    resumed = run_command(_train_command(interrupted, "--resume"), cwd=tmp_path, env=_env())
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stdout
    expected, actual = (
        load_file(uninterrupted_run[0] / "model.safetensors"),
        load_file(interrupted / "model.safetensors"),
    )
    assert expected.keys() == actual.keys()
    for key in expected:
        assert torch.equal(expected[key], actual[key]), key
    assert json.loads((interrupted / "history.json").read_text())[-1]["eval_accuracy"] == pytest.approx(
        json.loads((uninterrupted_run[0] / "history.json").read_text())[-1]["eval_accuracy"]
    )


def _torchrun_command(config: dict, out: Path, processes: int, *extra: str) -> list[str]:
    out.mkdir(parents=True)
    harness = str(REPO / "tests" / "distributed_harness.py")
    run = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}", harness]
    return [sys.executable, *run, json.dumps(config), str(out), *extra]


TORCHRUN_ENV = {"ACCELERATE_USE_CPU": "1"}


def _torchrun(config: dict, out: Path, processes: int, *extra: str):
    command = _torchrun_command(config, out, processes, *extra)
    result = subprocess.run(command, capture_output=True, text=True, env={**_env(), **TORCHRUN_ENV})
    assert result.returncode == 0, result.stderr[-4000:]
    return [load_file(out / f"rank{rank}.safetensors") for rank in range(processes)]


def _distributed_config(tmp_path, name, **fields):
    base = dict(
        epochs=1,
        save_every_steps=1000,
        eval_batch_size=512,
        random_crop_padding=0,
        optimizer="sgd",
        learning_rate=0.05,
        weight_decay=0.0,
        clip_grad_norm=None,
        seed=0,
    )
    return {**base, **fields, "output_dir": str(tmp_path / name)}


@pytest.mark.commands
def test_two_processes_end_with_identical_weights(tmp_path):
    config = _distributed_config(tmp_path, "alternet", model_overrides=TINY_ALTERNET, batch_size=16)
    rank0, rank1 = _torchrun(config, tmp_path / "alternet-weights", processes=2)
    for key in rank0:
        assert torch.equal(rank0[key], rank1[key]), key
    # Resumed on one process, the run would have another global batch: refused, the checkpoints left as they are.
    run = tmp_path / "alternet"
    before = {p: p.stat().st_mtime_ns for p in run.rglob("*")}
    command = [installed_command("alternet-train"), "--config", str(run / "training_config.json"), "--resume"]
    resumed = run_command(command, cwd=tmp_path, env=_env())
    assert resumed.returncode == 2 and "written by 2 processes (a global batch of 2 × 16 = 32" in resumed.stderr
    assert "this run has 1 (a global batch of 16)" in resumed.stderr and "--num_processes 2" in resumed.stderr
    assert {p: p.stat().st_mtime_ns for p in run.rglob("*")} == before


@pytest.mark.commands
def test_two_processes_equal_one_process_with_the_same_global_batch(tmp_path):
    """ViT has no batch statistics, so 2 × 8 images per step must train exactly like 1 × 16."""
    common = dict(model="vit-ti-cifar10", model_overrides=TINY_VIT)
    two = _torchrun(_distributed_config(tmp_path, "two", batch_size=8, **common), tmp_path / "w2", processes=2)[0]
    one = _torchrun(_distributed_config(tmp_path, "one", batch_size=16, **common), tmp_path / "w1", processes=1)[0]
    for key in one:
        torch.testing.assert_close(two[key], one[key], rtol=1e-4, atol=1e-5, msg=key)


@pytest.mark.commands
def test_command_line_layers_recipe_file_and_flags(tmp_path):
    config_file = tmp_path / "run.json"
    config_file.write_text(json.dumps({"epochs": 7, "learning_rate": 0.01}))
    command = [
        installed_command("alternet-train"),
        "--recipe",
        "paper",
        "--model",
        "alternet-50-cifar100",
        "--config",
        str(config_file),
        "--learning-rate",
        "0.02",
        "--no-compile",
        "--clip-grad-norm",
        "none",
        "--print-config",
    ]
    result = run_command(command, cwd=tmp_path, env=_env())
    assert result.returncode == 0, result.stderr[-2000:]
    printed = json.loads(result.stdout)
    assert printed["dataset"] == "uoft-cs/cifar100" and printed["rand_augment"] == "rand-m9-n2-mstd1.0"
    assert printed["epochs"] == 7 and printed["learning_rate"] == 0.02 and printed["clip_grad_norm"] is None
    assert printed == TrainingConfig(**printed).to_dict()
    removed = run_command(
        [*command[:-1], "--model-overrides", '{"drop_path_rate": null}', "--print-config"], cwd=tmp_path, env=_env()
    )
    assert "drop_path_rate" not in json.loads(removed.stdout)["model_overrides"]  # null removes a recipe's field


@pytest.mark.commands
def test_bad_config_files_are_named_errors(tmp_path):
    config_file = tmp_path / "bad.json"
    config_file.write_text(json.dumps({"epochs": "5"}))
    command = [installed_command("alternet-train"), "--config", str(config_file), "--print-config"]
    result = run_command(command, cwd=tmp_path, env=_env())
    assert result.returncode != 0 and "TrainingConfig.epochs must be int, got '5'" in result.stderr
    for bad, message in (
        (dict(warmup_epochs=-1), "warmup_epochs must not be negative"),
        (dict(label_smoothing=1.5), "label_smoothing must be within"),
        (dict(clip_grad_norm="x"), "clip_grad_norm must be float or null"),
        (dict(keep_checkpoints=0), "keep_checkpoints must be at least 1"),
    ):
        with pytest.raises(ValueError, match=message):
            TrainingConfig(**bad).validate()


def test_the_small_default_widths_belong_to_the_default_model_only():
    assert TrainingConfig().model_overrides["hidden_sizes"] == [32, 64, 128, 256]
    assert TrainingConfig(model="resnet-18-cifar10").model_overrides == {}
    # The paper recipe builds every family, stochastic depth 0.1 included (ViT's is added by alternet_hf).
    for name in ("alternet-50-cifar100", "resnet-50-cifar10", "vit-ti-cifar100"):
        config = recipe_config(name)
        config.validate()
        assert alternet_hf.create_config(name, **config.model_overrides).drop_path_rate == 0.1
    # PiT and Swin are timm's modules: the rate is timm's argument, rising over the blocks in timm's own way
    for name in ("pit-ti-cifar100", "swin-ti-cifar100"):
        config = recipe_config(name)
        config.validate()
        model = alternet_hf.create_model(name, **config.model_overrides)
        assert model.config.model_args["drop_path_rate"] == 0.1
        rates = [m.drop_prob for m in model.modules() if type(m).__name__ == "DropPath"]
        assert rates and max(rates) == pytest.approx(0.1)


def test_a_loaded_model_keeps_its_architecture(tmp_path):
    alternet_hf.create_model("alternet-18-cifar10", **TINY_ALTERNET).save_pretrained(tmp_path / "model")
    assert alternet_hf.create_model(str(tmp_path / "model"), num_labels=5).config.num_labels == 5  # new head only
    with pytest.raises(ValueError, match="pretrained weights no longer fit"):
        alternet_hf.create_model(str(tmp_path / "model"), num_labels=5, attention_head_dim=16)
    alternet_hf.create_model("vit-ti-cifar10", **TINY_VIT).save_pretrained(tmp_path / "vit")
    with pytest.raises(ValueError, match="pretrained weights no longer fit"):  # a new, randomly initialised layer
        alternet_hf.create_model(str(tmp_path / "vit"), num_labels=5, num_hidden_layers=3)


def test_a_resumed_run_may_change_only_how_it_runs(tmp_path):
    from alternet_hf.training.engine import _check_resumable

    saved = TrainingConfig(model_overrides={"hidden_sizes": (8, 16, 32, 64)}, output_dir=str(tmp_path))
    saved.save(tmp_path / "training_config.json")
    _check_resumable(saved, tmp_path / "training_config.json")  # tuples come back from JSON as lists
    _check_resumable(
        TrainingConfig(**{**saved.to_dict(), "num_workers": 4, "compile": True}), tmp_path / "training_config.json"
    )
    for changed in (dict(mixup_alpha=0.8), dict(weight_decay=0.1), dict(epochs=7)):
        with pytest.raises(ValueError, match=f"{next(iter(changed))} .* -> "):
            _check_resumable(TrainingConfig(**{**saved.to_dict(), **changed}), tmp_path / "training_config.json")


def test_the_schedule_counts_the_last_incomplete_accumulation_window(tmp_path):
    """22 batches at accumulation 4 are 6 optimizer steps, not 5: the cosine must end at 0, not climb back."""
    config = TrainingConfig(
        output_dir=str(tmp_path / "run"),
        model_overrides=TINY_ALTERNET,
        epochs=1,
        warmup_epochs=0,
        gradient_accumulation_steps=4,
        eval_batch_size=512,
        save_every_steps=1000,
    )
    result = train(config)
    assert result.history[-1]["lr"] == pytest.approx(0.0, abs=1e-12)


def test_paper_recipe_is_the_papers():
    config = recipe_config("alternet-50-cifar100")
    assert (config.epochs, config.warmup_epochs, config.batch_size, config.learning_rate) == (305, 5, 96, 1.25e-4)
    assert (config.mixup_alpha, config.cutmix_alpha, config.label_smoothing) == (1.0, 0.8, 0.1)
    assert (config.weight_decay, config.clip_grad_norm, config.model_overrides["drop_path_rate"]) == (0.05, 5.0, 0.1)
    imagenet = recipe_config("alternet-50-imagenet")  # streamed; its test split has no labels
    assert (imagenet.dataset, imagenet.eval_split, imagenet.streaming) == ("ILSVRC/imagenet-1k", "validation", True)
    with pytest.raises(ValueError, match="unknown recipe"):
        recipe_config("alternet-50-cifar100", "adam")
    with pytest.raises(ValueError, match="batch_size must be even"):
        TrainingConfig(batch_size=15, mixup_alpha=1.0).validate()


def test_a_holdout_evaluation_split_is_carved_from_training_and_saved(tmp_path, tiny_dataset):
    """`--eval-split holdout:0.25` for a source with one split: evaluation rows never trained on, saved."""
    overrides = {key: value for key, value in TINY["resnet-50-cifar100"].items() if key != "num_labels"}
    config = TrainingConfig(
        model="resnet-50-cifar100",
        model_overrides=overrides,
        dataset=tiny_dataset,
        eval_split="holdout:0.25",
        output_dir=str(tmp_path / "run"),
        epochs=1,
        batch_size=8,
        eval_batch_size=8,
    )
    train(config)
    holdout = json.loads((tmp_path / "run" / "holdout.json").read_text())
    assert (holdout["split"], holdout["fraction"], len(holdout["rows"])) == ("train", 0.25, 8)
    assert set(holdout["rows"]) < set(range(32))


def test_checkpoints_are_ordered_by_progress_and_survive_a_lost_pointer(tmp_path):
    from alternet_hf.training.engine import CheckpointManager

    manager = CheckpointManager(tmp_path, keep=2)
    # The same optimizer step, mid-epoch and at the epoch's end: by name the end would come first.
    for name, step, epoch in (("checkpoint-00000022-000000", 22, 1), ("checkpoint-00000022-000022", 22, 0)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "train_state.json").write_text(json.dumps({"global_step": step, "epoch": epoch}))
    (tmp_path / "checkpoint-00000030-000008.partial").mkdir()  # a save killed half-way
    assert manager.latest() == tmp_path / "checkpoint-00000022-000000"  # no pointer: the furthest complete one
    (tmp_path / "latest").write_text("checkpoint-00000099-000000")  # dangling
    assert manager.latest() == tmp_path / "checkpoint-00000022-000000"
    manager.keep = 1
    manager._prune(keep=tmp_path / "checkpoint-00000022-000000")
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == ["checkpoint-00000022-000000"]


@pytest.mark.parametrize("name", ["alternet-50-cifar100", "resnet-50-cifar100", "vit-ti-cifar100"])
def test_the_compiled_steps_never_break_the_graph_or_recompile(name, tiny_dataset, tmp_path, monkeypatch):
    """Two epochs with an evaluation between (its last batch smaller), with class indices and with mixed (soft)
    targets: the training step and the evaluation step are one graph each, compiled once."""
    from torch._dynamo.utils import counters

    # Graph breaks and recompiles are dynamo's, decided before any backend: aot_eager (forward and backward graphs,
    # no code generation) keeps this in seconds where inductor takes minutes on two CPU cores.
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    overrides = {key: value for key, value in TINY[name].items() if key != "num_labels"}
    for mixing in ({}, {"mixup_alpha": 1.0, "cutmix_alpha": 0.8}):
        torch._dynamo.reset()
        counters.clear()
        config = TrainingConfig(
            model=name,
            model_overrides=overrides,
            dataset=tiny_dataset,
            output_dir=str(tmp_path / f"run{len(mixing)}"),
            epochs=2,
            batch_size=8,
            eval_batch_size=16,
            compile=True,
            label_smoothing=0.1,
            rand_augment="rand-m9-n2-mstd1.0",
            **mixing,
        )
        with torch._dynamo.config.patch(error_on_recompile=True):
            train(config)
        assert not counters["graph_break"], dict(counters["graph_break"])
        assert counters["stats"]["unique_graphs"] == 2, dict(counters["stats"])


@pytest.mark.parametrize(
    "device, processes, accumulation, chosen, expected",
    [
        ("cuda", 1, 1, "auto", "reduce-overhead"),  # one GPU, a step per batch: CUDA graphs
        ("cuda", 2, 1, "auto", "default"),
        ("cuda", 1, 4, "auto", "default"),
        ("cpu", 1, 1, "auto", "default"),
        ("cuda", 1, 1, "max-autotune", "max-autotune"),  # a mode asked for is kept
        ("cpu", 2, 4, "reduce-overhead", "reduce-overhead"),
    ],
)
def test_auto_compile_mode_uses_cuda_graphs_only_for_one_step_per_batch_on_one_gpu(
    device, processes, accumulation, chosen, expected
):
    from types import SimpleNamespace

    from alternet_hf.training.engine import resolve_compile_mode

    config = TrainingConfig(compile_mode=chosen, gradient_accumulation_steps=accumulation)
    accelerator = SimpleNamespace(device=torch.device(device), num_processes=processes)
    assert resolve_compile_mode(config, accelerator) == expected
