"""alternet-reproduce end to end at reduced size: three families trained on digits with one recipe, analysed,
compared, in the layout the Space reads; a finished model is reused and a different one never overwritten."""

import json

import pytest
from commands import run_command
from conftest import installed_command

from alternet_hf.apps.minizoo import FAMILIES
from alternet_hf.cli import reproduce

pytestmark = pytest.mark.commands  # runs installed commands (see CONTRIBUTING.md)


def run(*arguments, cwd):
    return run_command([installed_command("alternet-reproduce"), *arguments], cwd=cwd, timeout=900)


def test_the_command_names_the_families_of_the_library():
    assert reproduce.FAMILIES == FAMILIES


def test_the_mini_zoo_at_reduced_size(tmp_path):
    out = tmp_path / "mini-zoo"
    completed = run("--quick", "--out", out, cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr[-3000:]
    for family in FAMILIES:
        model = out / "models" / family
        assert (model / "config.json").is_file() and (model / "training_config.json").is_file()
        recipe = json.loads((model / "training_config.json").read_text())
        assert recipe["epochs"] == 1 and recipe["learning_rate"] == 2e-3 and recipe["dataset"] == "digits"
        for analysis in (
            "fourier",
            "variance",
            "hessian",
            "landscape",
            "robustness",
            "frequency-noise",
            "lesion",
            "cka",
        ):
            payload = json.loads((out / "results" / family / f"{analysis}.json").read_text())
            assert payload["analysis"] == analysis and "result" in payload and not payload["partial"]
            assert (out / "results" / family / f"{analysis}.png").is_file()
        hessian = json.loads((out / "results" / family / "hessian.json").read_text())
        assert hessian["augmentation"]["source"].endswith(f"models/{family}/training_config.json")
        assert hessian["augmentation"]["random_crop_padding"] == 2  # the digits recipe, not CIFAR's RandAugment
        landscape = json.loads((out / "results" / family / "landscape.json").read_text())
        assert landscape["result"]["protocol"] == "reference" and landscape["result"]["batchnorm"] == "eval"
    comparison = json.loads((out / "comparison" / "comparison.json").read_text())
    roles = {name: model["role"] for name, model in comparison["models"].items()}
    assert roles == {"resnet": "cnn", "vit": "transformer", "alternet": "hybrid"}
    verdicts = {claim["key"]: claim["verdict"] for claim in comparison["claims"]}
    assert verdicts["msa-low-pass"] != "not decidable" and verdicts["accuracy-order"] != "not decidable"
    report = (out / "comparison" / "report.md").read_text()
    assert "## Claims of the paper on these models" in report and "the metric" in report
    assert "mini-zoo in" in completed.stdout and "training" in completed.stdout

    # Same seed, same numbers: one family again, from scratch in a fresh interpreter and another folder.
    cold = run_command(
        [
            installed_command("alternet-reproduce"),
            "--quick",
            "--out",
            tmp_path / "again",
            "--families",
            "resnet",
            "--analyses",
            "hessian,landscape,robustness",
        ],
        cwd=tmp_path,
        timeout=900,
        warm=False,
    )
    assert cold.returncode == 0, cold.stderr[-3000:]
    weights = [root / "models" / "resnet" / "model.safetensors" for root in (out, tmp_path / "again")]
    assert weights[0].read_bytes() == weights[1].read_bytes()
    for analysis in ("hessian", "landscape", "robustness"):
        results = [
            json.loads((root / "results" / "resnet" / f"{analysis}.json").read_text())["result"]
            for root in (out, tmp_path / "again")
        ]
        assert results[0] == results[1], analysis

    # A finished model with the same settings is reused (no training), and a second run only analyses; its
    # one-model comparison goes beside the zoo's, which stays as it was.
    whole_report = (out / "comparison" / "report.md").read_bytes()
    again = run("--quick", "--out", out, "--families", "resnet", "--analyses", "fourier", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "already trained with these settings, reused" in again.stdout
    assert (out / "comparison" / "report.md").read_bytes() == whole_report
    narrower = json.loads((out / "comparison-resnet-fourier" / "comparison.json").read_text())
    assert list(narrower["models"]) == ["resnet"] and "comparison-resnet-fourier/report.md" in again.stdout
    # Other training settings for the same folder: refused, the model left as it was.
    before = (out / "models" / "vit" / "model.safetensors").read_bytes()
    refused = run("--quick", "--epochs", "2", "--out", out, "--families", "vit", cwd=tmp_path)
    assert refused.returncode == 2 and "holds a model trained with other settings (epochs 1 -> 2)" in refused.stderr
    assert (out / "models" / "vit" / "model.safetensors").read_bytes() == before


def test_the_mini_zoo_compares_models_of_comparable_size(tmp_path):
    """Parameters within 2x of each other (the paper compares like with like), and each family's own epochs unless
    --epochs sets one number for all."""
    import alternet_hf
    from alternet_hf.apps import minizoo

    sizes = {}
    for family in FAMILIES:
        config = minizoo.training_config(family, tmp_path, epochs=None, quick=False)
        assert config.epochs == minizoo.EPOCHS[family]
        model = alternet_hf.create_model(config.model, **config.model_overrides, num_labels=10)
        sizes[family] = sum(p.numel() for p in model.parameters())
        assert minizoo.training_config(family, tmp_path, epochs=3, quick=False).epochs == 3
        assert minizoo.training_config(family, tmp_path, epochs=None, quick=True).epochs == 1
    assert max(sizes.values()) <= 2 * min(sizes.values()), sizes
