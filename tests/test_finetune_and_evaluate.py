"""HF Trainer fine-tuning, evaluation, and the paper's full recipe, on a small dataset in CIFAR-100's schema."""

import json
from pathlib import Path

import pytest
from commands import run_command, start_command
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


@pytest.mark.commands
def test_a_finetune_leaves_its_record_and_goes_to_the_hub_with_it(cifar_schema_digits, tmp_path):
    """As a user types it: `alternet-finetune` twice with one seed (the same model bytes, the same numbers), once
    `--overwrite` over an evaluated model (whose numbers go with it), its record read with `json` and TensorBoard's
    `EventAccumulator`, `alternet-push --dry-run`, the pushed folder loaded with the Auto classes, and the card's
    model-index equal to the fine-tune's own evaluation."""
    import torch
    from huggingface_hub import ModelCard
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from transformers import AutoModelForImageClassification

    import alternet_hf
    from alternet_hf.apps.evaluation import write_evaluation

    alternet_hf.create_model("alternet-18-cifar100", num_labels=10, **TINY).save_pretrained(tmp_path / "digits-base")
    # "again" holds another model, trained and evaluated on the split this fine-tune reports, and a note of the user's
    replaced = tmp_path / "again"
    alternet_hf.create_model("alternet-18-cifar100", num_labels=10, **TINY).save_pretrained(replaced)
    (replaced / "logs").mkdir()
    (replaced / "training_config.json").write_text(json.dumps({"dataset": cifar_schema_digits, "seed": 9}))
    (replaced / "notes.txt").write_text("mine")
    labels = torch.arange(8) % 10
    old = dict(model="again", dataset=cifar_schema_digits, split="holdout:0.25", metrics={"accuracy": 0.1})
    write_evaluation(replaced, **old, logits=torch.zeros(8, 10), labels=labels)
    finetune_command = [
        *(installed_command("alternet-finetune"), "--model", "digits-base", "--dataset", cifar_schema_digits),
        *("--image-column", "img", "--label-column", "fine_label", "--eval-split", "holdout:0.25"),
        *("--epochs", "2", "--learning-rate", "3e-3", "--batch-size", "50", "--seed", "3"),
    ]
    described = ("logs", "training_config.json", "config.json", "model.safetensors", "eval_cifar-schema_holdout:0.25")
    refused = run_command([*finetune_command, "--output-dir", "again"], cwd=tmp_path)
    assert refused.returncode == 2 and "again already holds a model or a training run (" in refused.stderr
    assert all(name in refused.stderr for name in described) and "--overwrite" in refused.stderr
    runs = {
        run: start_command([*finetune_command, "--output-dir", run, *extra], cwd=tmp_path)
        for run, extra in (("ft", ()), ("again", ("--overwrite",)))
    }
    said = {}
    for name, run in runs.items():
        said[name], stderr = run.communicate(600)
        assert run.returncode == 0, stderr[-3000:]
        assert "trainer_state.json" in said[name], said[name]
    removed = next(line for line in said["again"].splitlines() if "--overwrite: removed the earlier model's" in line)
    assert all(name in removed for name in described) and "notes.txt" not in removed, removed
    left = {path.name for path in replaced.iterdir()}
    assert not left & {"logs", "training_config.json", "eval_cifar-schema_holdout:0.25.json"}, left
    assert (replaced / "notes.txt").read_text() == "mine"  # only what described the replaced model goes
    folder = tmp_path / "ft"
    files = {path.name for path in folder.iterdir()}
    assert {"all_results.json", "train_results.json", "eval_results.json", "trainer_state.json"} <= files
    assert {"finetune_config.json", "holdout.json", "model.safetensors", "config.json", "runs"} <= files

    # One seed, one run: the same weights and the same numbers, bar seconds and rates.
    assert (folder / "model.safetensors").read_bytes() == (tmp_path / "again" / "model.safetensors").read_bytes()

    def numbers(run, name):
        record = json.loads((tmp_path / run / name).read_text())
        return _untimed(record["log_history"] if name == "trainer_state.json" else record)

    for name in ("all_results.json", "train_results.json", "eval_results.json", "trainer_state.json"):
        assert numbers("ft", name) == numbers("again", name), name

    # The record, as transformers' examples leave it.
    settings = json.loads((folder / "finetune_config.json").read_text())
    assert settings["model"] == "digits-base" and settings["model_source"] == "folder"
    assert (settings["seed"], settings["epochs"], settings["learning_rate"], settings["batch_size"]) == (3, 2, 3e-3, 50)
    assert settings["holdout"] == {"fraction": 0.25, "seed": 3} and settings["eval_samples"] == 150
    evaluation = json.loads((folder / "eval_results.json").read_text())
    train = json.loads((folder / "train_results.json").read_text())
    assert json.loads((folder / "all_results.json").read_text()) == train | evaluation
    assert evaluation["eval_samples"] == 150 and train["train_samples"] == 450 and train["epoch"] == 2
    history = json.loads((folder / "trainer_state.json").read_text())["log_history"]
    evaluations = [entry for entry in history if "eval_accuracy" in entry]
    assert [entry["epoch"] for entry in evaluations] == [0, 1, 2]  # before, and after every epoch
    assert evaluations[-1]["eval_accuracy"] == evaluation["eval_accuracy"] > evaluations[0]["eval_accuracy"]
    assert sum("loss" in entry for entry in history) >= 10  # the training curve

    # TensorBoard's own reader: every evaluation and the loss, at the steps of the history.
    events = EventAccumulator(str(folder / "runs" / "training")).Reload()
    accuracy = events.Scalars("eval/accuracy")
    assert [s.step for s in accuracy] == [entry["step"] for entry in evaluations]
    assert [s.value for s in accuracy] == pytest.approx([entry["eval_accuracy"] for entry in evaluations])
    assert len(events.Scalars("train/loss")) >= 10

    # From fine-tune to Hub: the card's model-index is the fine-tune's evaluation, with what it started from.
    push = run_command(
        [installed_command("alternet-push"), "--model", "ft", "--repo-id", "me/digits-ft", "--dry-run", "pushed"],
        cwd=tmp_path,
    )
    assert push.returncode == 0, push.stderr[-3000:]
    pushed = tmp_path / "pushed"
    card = ModelCard.load(pushed / "README.md")
    reported = {result.metric_type: result.metric_value for result in card.data.eval_results}
    assert reported["accuracy"] == evaluation["eval_accuracy"] and reported["nll"] == evaluation["eval_nll"]
    assert {result.dataset_split for result in card.data.eval_results} == {"holdout:0.25"}
    assert "fine-tuned from a model folder (`digits-base`)" in card.text
    assert "The fine-tune's own evaluation" in card.text and "hold-out of 25% of the `train` split" in card.text
    assert "digits-base" in card.text and str(tmp_path) not in card.text  # a folder by its name, not its path
    assert EventAccumulator(str(pushed / "runs" / "training")).Reload().Scalars("eval/accuracy")  # the metrics tab

    model = AutoModelForImageClassification.from_pretrained(pushed).eval()
    fine_tuned = AutoModelForImageClassification.from_pretrained(folder).eval()
    images = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(model(pixel_values=images).logits, fine_tuned(pixel_values=images).logits)


def _untimed(record):
    """`record` as JSON without seconds and rates, which differ between two runs of one seed."""
    if isinstance(record, list):
        return json.dumps([json.loads(_untimed(entry)) for entry in record], sort_keys=True)
    kept = {key: value for key, value in record.items() if not key.endswith(("runtime", "per_second"))}
    return json.dumps(kept, sort_keys=True)
