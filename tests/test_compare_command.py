"""alternet-compare as a user types it: a timm model with local weights next to a zoo model, offline, and
the mistakes a user makes answered with one clear message."""

import json

import pytest
import timm
import torch
import transformers
from commands import run_command
from conftest import TINY, installed_command
from safetensors.torch import save_file

import alternet_hf

TEST_RESNET_KINDS = ["stem", "conv", "pool", "pool", "pool"]  # timm's test_resnet: one block per stage


def run(*arguments, cwd):
    return run_command([installed_command("alternet-compare"), *arguments], cwd=cwd, timeout=600)


@pytest.fixture(scope="module")
def zoo_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("zoo") / "alternet"
    alternet_hf.create_model(
        "alternet-50-cifar100", **{**TINY["alternet-50-cifar100"], "num_labels": 10}
    ).save_pretrained(folder)
    return folder


@pytest.mark.commands
def test_a_timm_model_with_local_weights_beside_a_zoo_model(tmp_path, zoo_model):
    resnet = timm.create_model("test_resnet", num_classes=10)  # timm's own tiny ResNet for tests
    (tmp_path / "r18").mkdir()
    save_file(resnet.state_dict(), tmp_path / "r18" / "model.safetensors")
    out = tmp_path / "cmp"
    completed = run(
        "--models",
        f"alternet={zoo_model},resnet18=timm:test_resnet",
        "--weights",
        tmp_path / "r18",
        "--analyses",
        "fourier,variance,lesion",
        "--max-batches",
        "1",
        "--batch-size",
        "16",
        "--image-size",
        "32",
        "--out",
        out,
        "--competence",
        "5",
        cwd=tmp_path,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "all analyses about" in completed.stdout and "on a CPU, scaled down" in completed.stdout
    payload = json.loads((out / "comparison.json").read_text())
    resnet18 = payload["models"]["resnet18"]
    assert resnet18["source"] == "timm:test_resnet" and resnet18["role"] == "cnn" and resnet18["image_size"] == 32
    assert resnet18["kinds"] == TEST_RESNET_KINDS
    assert payload["models"]["alternet"]["role"] == "hybrid"
    for name in ("alternet", "resnet18"):  # each model's results as alternet-analyze writes them
        lesion = json.loads((out / name / "lesion.json").read_text())
        assert lesion["analysis"] == "lesion" and lesion["dataset"] == "digits" and "result" in lesion
    assert (out / "report.md").read_text().startswith("# Comparison of alternet, resnet18")
    # untrained, both are near chance on the digits' 10 classes: named in the report with the verdicts they sway
    assert payload["meta"]["competence"] == 5 and set(payload["meta"]["below_competence"]) == {"alternet", "resnet18"}
    assert "**Near chance**: alternet" in (out / "report.md").read_text()
    assert "(rests on alternet, resnet18, near chance)" in completed.stdout
    assert {"fourier_by_depth.png", "variance_by_depth.png", "lesion.png"} <= {p.name for p in out.iterdir()}


def test_a_checkpoint_dict_with_its_own_label_count(tmp_path):
    from analysis.models import load_model

    resnet = timm.create_model("test_resnet", num_classes=7)
    torch.save({"state_dict": resnet.state_dict(), "epoch": 3}, tmp_path / "r.pth.tar")
    loaded = load_model("timm:test_resnet", weights=tmp_path / "r.pth.tar")  # created with 1000 classes, then 7
    assert loaded.num_labels == 7 and loaded.image_size == 160 and loaded.name == "test_resnet"
    for key, value in resnet.state_dict().items():
        torch.testing.assert_close(loaded.model.state_dict()[key], value)
    with pytest.raises(ValueError, match="does not hold the weights of timm:test_vit"):
        load_model("timm:test_vit", weights=tmp_path / "r.pth.tar")


@pytest.mark.commands
@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--models", "a=alternet-18-cifar10,a=resnet-18-cifar10"], "model names ['a'] are used twice"),
        (["--models", "no/such/folder"], "there is no folder no/such/folder"),
        (["--models", "alternet-18-cifar1"], "Did you mean 'alternet-18-cifar10'"),
        (["--models", "timm:resnet18", "--weights", "missing.safetensors"], "no weights file or folder missing"),
        (["--models", "alternet-18-cifar10", "--weights", "."], "unnamed --weights for 0 timm models"),
        (["--models", "alternet-18-cifar10", "--analyses", "fourier,hesian"], "unknown analyses ['hesian']"),
    ],
)
def test_mistakes_get_one_clear_message(tmp_path, monkeypatch, capsys, arguments, message):
    """The same `main` the installed command runs (in this process: these fail before any model is built)."""
    from alternet_hf.cli import compare

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_status:
        compare.main([*arguments, "--out", "cmp"])
    assert exit_status.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "cmp").exists()


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--models", "timm:resnett18"], "timm has no model 'resnett18'. Did you mean resnet18"),
        (["--models", "timm:resnet18"], "Offline, give them as a local file or folder: --weights resnet18="),
    ],
)
def test_timm_mistakes_from_the_command_line(tmp_path, arguments, message):
    completed = run(*arguments, "--out", tmp_path / "cmp", cwd=tmp_path)
    assert completed.returncode == 2, completed.stderr
    assert message in completed.stderr and "Traceback" not in completed.stderr
    assert not (tmp_path / "cmp").exists()


@pytest.mark.commands
def test_alternet_analyze_takes_a_timm_model_too(tmp_path):
    weights = tmp_path / "w.safetensors"
    save_file(timm.create_model("test_resnet", num_classes=10).state_dict(), weights)
    completed = run_command(
        [
            installed_command("alternet-analyze"),
            "--model",
            "timm:test_resnet",
            "--weights",
            str(weights),
            "--analyses",
            "variance",
            "--max-batches",
            "1",
            "--batch-size",
            "8",
            "--out",
            str(tmp_path / "out"),
        ],
        cwd=tmp_path,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    result = json.loads((tmp_path / "out" / "variance.json").read_text())["result"]
    assert result["kinds"] == ["input", *TEST_RESNET_KINDS] and len(result["reference_variance"]) == 6


def test_a_transformers_model_takes_its_size_and_normalisation_from_its_image_processor(tmp_path):
    from analysis.blocks import block_kinds
    from analysis.models import load_model

    config = transformers.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], num_labels=3)
    transformers.ResNetForImageClassification(config).save_pretrained(tmp_path / "resnet")
    processor = transformers.ConvNextImageProcessor(
        size={"shortest_edge": 64}, image_mean=[0.1] * 3, image_std=[0.2] * 3
    )
    processor.save_pretrained(tmp_path / "resnet")
    loaded = load_model(str(tmp_path / "resnet"))
    assert (loaded.image_size, loaded.image_mean, loaded.image_std) == (64, (0.1,) * 3, (0.2,) * 3)
    assert loaded.num_labels == 3 and block_kinds(loaded.model) == ["stem", "conv", "pool"]
    with pytest.raises(ValueError, match="--weights applies to timm models"):
        load_model(str(tmp_path / "resnet"), weights=tmp_path)


@pytest.mark.commands
def test_the_papers_lineup_from_a_folder_of_preset_folders(tmp_path):
    """`alternet-compare --paper <folder>`: the five models of the paper (tiny, untrained), found by preset name in
    the layout scripts/release.py writes (<folder>/models/<preset>), on a dataset in uoft-cs/cifar100's schema."""
    from alternet_hf.models.presets import PAPER_MODELS
    from zoo_release.rehearsal import write_stand_in_dataset

    for preset in PAPER_MODELS:
        alternet_hf.create_model(preset, **{**TINY[preset], "num_labels": 100}).save_pretrained(
            tmp_path / "zoo" / "models" / preset
        )
    data = write_stand_in_dataset(tmp_path / "cifar100-stand-in")
    out = tmp_path / "cmp"
    completed = run(
        "--paper",
        tmp_path / "zoo",
        "--dataset",
        data,
        "--analyses",
        "fourier,variance",
        "--max-batches",
        "1",
        "--batch-size",
        "8",
        "--out",
        out,
        cwd=tmp_path,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    models = json.loads((out / "comparison.json").read_text())["models"]
    assert list(models) == ["ResNet-50", "ViT-Ti", "PiT-Ti", "Swin-Ti", "AlterNet-50"]
    roles = {name: model["role"] for name, model in models.items()}
    assert roles == {
        "ResNet-50": "cnn",
        "ViT-Ti": "transformer",
        "PiT-Ti": "transformer",
        "Swin-Ti": "transformer",
        "AlterNet-50": "hybrid",
    }
    assert models["PiT-Ti"]["kinds"].count("pool") == 1 and models["Swin-Ti"]["kinds"].count("pool") == 1
    fourier = json.loads((out / "PiT-Ti" / "fourier.json").read_text())["result"]
    assert len(fourier["kinds"]) == 1 + len(models["PiT-Ti"]["kinds"])  # the input, then every block
    assert {"fourier_by_depth.png", "variance_by_depth.png"} <= {p.name for p in out.iterdir()}

    missing = run("--paper", tmp_path / "cifar100-stand-in", cwd=tmp_path)
    assert missing.returncode != 0 and "lacks the paper's resnet-50-cifar100" in missing.stderr
