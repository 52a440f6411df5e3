"""alternet-push --dry-run: the folder loads with Auto classes and pipeline, with and without
alternet_hf, and its card's model-index is the evaluation JSON."""

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from commands import run_command
from conftest import TINY, installed_command
from huggingface_hub import ModelCard
from readme_data import TIMM_VALIDATE_STAND_IN
from transformers import AutoModelForImageClassification, pipeline

import alternet_hf

pytestmark = pytest.mark.commands  # runs installed commands (see CONTRIBUTING.md)

ROOT = Path(__file__).resolve().parents[1]


def run(*args, cwd, env=None):
    completed = run_command(list(args), cwd=cwd, env=env, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed


@pytest.mark.parametrize("preset", ["alternet-50-cifar100", "vit-ti-cifar100"])
def test_dry_run_release(preset, tmp_path, photo):
    model = alternet_hf.create_model(preset, **{**TINY[preset], "num_labels": 10}).eval()
    model.save_pretrained(tmp_path / "model")
    run(installed_command("alternet-evaluate"), "--model", tmp_path / "model", "--dataset", "digits", cwd=tmp_path)
    evaluation = json.loads((tmp_path / "model" / "eval_digits_test.json").read_text())["metrics"]
    release = tmp_path / "release"
    push = [installed_command("alternet-push"), "--model", tmp_path / "model", "--repo-id", "me/tiny", "--dry-run"]
    run(*push, release, cwd=tmp_path)

    card = ModelCard.load(release / "README.md")
    assert card.data.library_name == "transformers" and "how-do-vits-work" in card.data.tags
    reported = {result.metric_type: result.metric_value for result in card.data.eval_results}
    assert reported == {k: v for k, v in evaluation.items() if v is not None}
    assert 'from_pretrained("me/tiny")' in card.text and "@inproceedings{park2022how" in card.text

    loaded = AutoModelForImageClassification.from_pretrained(release).eval()
    pixel_values = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        expected = model(pixel_values).logits
        torch.testing.assert_close(loaded(pixel_values).logits, expected)
    assert len(pipeline("image-classification", model=str(release))(photo)) == 5

    torch.save(pixel_values, tmp_path / "input.pt")
    torch.save(expected, tmp_path / "expected.pt")
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["alternet_hf"] = None  # the package is not installed for this user
        import torch
        from PIL import Image
        from transformers import AutoModelForImageClassification, pipeline
        model = AutoModelForImageClassification.from_pretrained({str(release)!r}, trust_remote_code=True).eval()
        with torch.no_grad():
            logits = model(torch.load({str(tmp_path / "input.pt")!r}, weights_only=True)).logits
        torch.testing.assert_close(logits, torch.load({str(tmp_path / "expected.pt")!r}, weights_only=True))
        classify = pipeline("image-classification", model={str(release)!r}, trust_remote_code=True)
        print(len(classify(Image.new("RGB", (40, 30)))), "predictions without alternet_hf")
        """
    )
    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules"), "PYTHONPATH": ""}
    assert "5 predictions without alternet_hf" in run(sys.executable, "-c", script, env=env, cwd=tmp_path).stdout


def test_a_model_without_evaluation_is_refused(tmp_path):
    alternet_hf.create_model("resnet-50-cifar100", **TINY["resnet-50-cifar100"]).save_pretrained(tmp_path / "m")
    command = [
        installed_command("alternet-push"),
        "--model",
        tmp_path / "m",
        "--repo-id",
        "a/b",
        "--dry-run",
        tmp_path / "out",
    ]
    completed = run_command(command, cwd=tmp_path, timeout=300)
    assert completed.returncode != 0 and "alternet-evaluate --model" in completed.stderr


def test_the_card_reports_the_evaluation_on_the_training_dataset(tmp_path):
    from alternet_hf.hub.repos import find_evaluation

    (tmp_path / "training_config.json").write_text(json.dumps({"dataset": "uoft-cs/cifar100", "eval_split": "test"}))
    (tmp_path / "metrics.json").write_text(json.dumps({"accuracy": 0.5}))
    assert find_evaluation(tmp_path) == ({"accuracy": 0.5}, "uoft-cs/cifar100", "test", "training")  # training's own
    for name, dataset, split, accuracy, sample in (
        ("eval_cifar100_test_sample-200-seed-0.json", "uoft-cs/cifar100", "test", 0.7, {"num_images": 200}),
        ("eval_cifar100_test.json", "uoft-cs/cifar100", "test", 0.8, None),
        ("eval_cifar100_test_sample-500-seed-0.json", "uoft-cs/cifar100", "test", 0.9, {"num_images": 500}),
        ("eval_cifar100_train.json", "uoft-cs/cifar100", "train", 0.99, None),  # not the headline result
    ):
        payload = {"metrics": {"accuracy": accuracy}, "dataset": dataset, "split": split}
        payload |= {"num_images": sample["num_images"], "sample": sample} if sample else {"num_images": 10_000}
        (tmp_path / name).write_text(json.dumps(payload))
    with pytest.warns(UserWarning, match=r"not \['eval_cifar100_train.json'\]"):
        assert find_evaluation(tmp_path)[0] == {"accuracy": 0.8}  # the whole split, not a sample written after it
    (tmp_path / "eval_cifar100_test.json").unlink()
    with pytest.warns(UserWarning):
        assert find_evaluation(tmp_path)[0] == {"accuracy": 0.9}  # the larger sample
    assert find_evaluation(tmp_path, tmp_path / "eval_cifar100_train.json")[2] == "train"  # asked for by name


def test_a_fine_tune_reports_its_own_evaluation_until_alternet_evaluate_has_run(tmp_path):
    """A fine-tune's `eval_results.json` (transformers' names) is its card's evaluation, of the fine-tune's dataset and
    evaluation split; alternet-evaluate's result on that split comes first, as for a trained model."""
    from alternet_hf.hub.repos import find_evaluation

    with pytest.raises(FileNotFoundError, match="alternet-train and alternet-finetune leave their own evaluation"):
        find_evaluation(tmp_path)  # nothing yet: the message names what writes one
    settings = {"dataset": "faces", "eval_split": "holdout:0.2", "model": "m", "model_source": "folder"}
    (tmp_path / "finetune_config.json").write_text(json.dumps(settings))
    (tmp_path / "eval_results.json").write_text(json.dumps({"eval_accuracy": 0.75, "eval_nll": 0.5, "epoch": 3.0}))
    found = find_evaluation(tmp_path)
    assert found == ({"accuracy": 0.75, "nll": 0.5}, "faces", "holdout:0.2", "fine-tune")
    payload = {"metrics": {"accuracy": 0.7}, "dataset": "faces", "split": "holdout:0.2", "num_images": 40}
    (tmp_path / "eval_faces_holdout.json").write_text(json.dumps(payload))
    assert find_evaluation(tmp_path) == ({"accuracy": 0.7}, "faces", "holdout:0.2", "alternet-evaluate")


def test_the_card_s_script_commands_name_the_repo_the_columns_and_timm_s_wrapper_runs_them(tmp_path):
    """The card's commands for transformers' and timm's scripts: the repo, remote code, CIFAR-100's columns; and its
    timm line, typed into a shell as the card gives it, builds the zoo's model with the repo's weights in a script
    that never imports alternet_hf (a stand-in for validate.py that builds its model as validate.py does)."""
    from alternet_hf.hub.repos import TIMM_SCRIPT_WRAPPER, write_release

    preset, repo_id = "alternet-50-cifar100", "me/alternet-50-cifar100"
    overrides = TINY[preset]
    model = tmp_path / "model"
    alternet_hf.create_model(preset, **overrides).save_pretrained(model)
    training = {"model": preset, "model_overrides": overrides, "dataset": "uoft-cs/cifar100"}
    (model / "training_config.json").write_text(json.dumps(training))
    evaluation = {"dataset": "uoft-cs/cifar100", "split": "test", "metrics": {"accuracy": 0.5, "nll": 2.0, "ece": 0.1}}
    (model / "eval_cifar100_test.json").write_text(json.dumps(evaluation))
    text = (write_release(model, tmp_path / "repo", repo_id) / "README.md").read_text()
    assert "https://arxiv.org/abs/2202.06709" in text
    assert f"--model_name_or_path {repo_id} --trust_remote_code True" in text
    assert "--dataset_name uoft-cs/cifar100 --image_column_name img --label_column_name fine_label" in text
    assert "--dataset hfds/uoft-cs/cifar100 --split test --input-key img --target-key fine_label" in text

    work = tmp_path / "user"
    (work / "alternet-50-cifar100-weights").mkdir(parents=True)  # what the card's `hf download` line fetches
    weights = (model / "model.safetensors").read_bytes()
    (work / "alternet-50-cifar100-weights" / "model.safetensors").write_bytes(weights)
    (work / "alternet-50-cifar100").mkdir()  # a folder named as the preset (not a saved model) leaves it the preset
    (work / "validate.py").write_text(TIMM_VALIDATE_STAND_IN)
    pixel_values = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    torch.save(pixel_values, work / "input.pt")
    start = text.index(f"{TIMM_SCRIPT_WRAPPER} validate.py")
    command = text[start : text.index("\n", text.index("--dataset hfds", start))]  # as the card gives it
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # `python` is this environment's
    completed = run_command(["bash", "-c", command], cwd=work, env={**os.environ, "PATH": path})
    assert completed.returncode == 0, command + "\n" + completed.stderr[-3000:]
    loaded = AutoModelForImageClassification.from_pretrained(model).eval()  # the repo's weights, as transformers reads
    with torch.no_grad():
        expected = loaded(pixel_values).logits
    torch.testing.assert_close(torch.tensor(json.loads(completed.stdout.splitlines()[-1])), expected)
