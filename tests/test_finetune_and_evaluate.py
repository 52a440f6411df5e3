"""HF Trainer fine-tuning, evaluation, and the paper's full recipe, on a small dataset in CIFAR-100's schema."""

import json
from pathlib import Path

import pytest
from commands import run_command
from conftest import installed_command
from datasets import ClassLabel, DatasetDict, Features, Image

from alternet_hf.apps.evaluation import evaluate_model
from alternet_hf.data.sources import load_image_classification
from alternet_hf.training.engine import train
from alternet_hf.training.finetuning import finetune
from alternet_hf.training.recipe import recipe_config

REPO = Path(__file__).resolve().parent.parent
TINY = dict(hidden_sizes=[8, 16, 32, 64], embedding_size=8, num_attention_heads=[1, 1, 2, 2], attention_head_dim=8)


@pytest.fixture(scope="module")
def cifar_schema_digits(tmp_path_factory) -> str:
    """Real digit images saved with uoft-cs/cifar100's column names (img, fine_label)."""
    features = Features({"img": Image(), "fine_label": ClassLabel(names=[str(d) for d in range(10)])})
    splits = {}
    for split, size in (("train", 600), ("test", 200)):
        data = load_image_classification("digits", split=split).select(range(size))
        splits[split] = data.rename_columns({"image": "img", "label": "fine_label"}).cast(features)
    path = tmp_path_factory.mktemp("data") / "cifar-schema"
    DatasetDict(splits).save_to_disk(str(path))
    return str(path)


def test_finetune_with_the_hf_trainer_raises_accuracy(cifar_schema_digits, tmp_path):
    said = []
    result = finetune(
        "alternet-18-cifar100",
        cifar_schema_digits,
        tmp_path / "ft",
        image_column="img",
        label_column="fine_label",
        epochs=4,
        learning_rate=3e-3,
        batch_size=32,
        horizontal_flip=0.0,
        model_overrides=TINY,
        use_cpu=True,
        disable_tqdm=True,
        say=said.append,
    )
    assert said == [
        "alternet-18-cifar100 is a preset without trained weights: training it from scratch (4 epochs, learning rate "
        "0.003, warm-up 0.1 of the steps; --epochs, --learning-rate and --warmup change them)"
    ]
    assert result.from_scratch and (result.epochs, result.learning_rate, result.warmup) == (4, 3e-3, 0.1)
    before, after = result.metrics_before["eval_accuracy"], result.metrics_after["eval_accuracy"]
    assert after > before + 0.3, (before, after)
    assert {"eval_ece", "eval_nll", "eval_brier", "eval_iou"} <= set(result.metrics_after)
    metrics, _, labels = evaluate_model(
        str(tmp_path / "ft"), cifar_schema_digits, image_column="img", label_column="fine_label"
    )
    assert len(labels) == 200 and metrics["accuracy"] == pytest.approx(after)


@pytest.mark.commands
def test_evaluate_script_prints_and_writes_json(cifar_schema_digits, tmp_path):
    finetune(
        "resnet-18-cifar10",
        cifar_schema_digits,
        tmp_path / "m",
        image_column="img",
        label_column="fine_label",
        epochs=1,
        model_overrides=dict(hidden_sizes=[8, 16, 32, 64], embedding_size=8),
        use_cpu=True,
    )
    command = [
        installed_command("alternet-evaluate"),
        "--model",
        str(tmp_path / "m"),
        "--dataset",
        cifar_schema_digits,
        "--image-column",
        "img",
        "--label-column",
        "fine_label",
        "--output",
        str(tmp_path),
    ]
    result = run_command(command, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "accuracy" in result.stdout and "ece" in result.stdout
    written = json.loads((tmp_path / "eval_cifar-schema_test.json").read_text())
    assert written["num_images"] == 200 and 0 <= written["metrics"]["accuracy"] <= 1
    assert (tmp_path / "eval_cifar-schema_test_reliability.png").exists()


@pytest.mark.commands
def test_the_papers_recipe_runs_end_to_end(cifar_schema_digits, tmp_path):
    """RandAugment, Mixup/CutMix, label smoothing, warm-up + cosine, clipping, stochastic depth: one short run."""
    config = recipe_config(
        "alternet-18-cifar100",
        "paper",
        dataset=cifar_schema_digits,
        image_column="img",
        label_column="fine_label",
        epochs=2,
        warmup_epochs=1,
        batch_size=32,
        learning_rate=2e-3,
        output_dir=str(tmp_path / "paper"),
        model_overrides={**TINY, "drop_path_rate": 0.1},
        num_workers=2,  # augmentation in worker processes
    )
    result = train(config)
    assert len(result.history) == 2 and all(h["train_loss"] > 0 for h in result.history)
    assert result.model.config.drop_path_rate == 0.1
    assert result.history[0]["lr"] > result.history[1]["lr"]  # cosine decay after the warm-up
    assert (tmp_path / "paper" / "model.safetensors").exists()
