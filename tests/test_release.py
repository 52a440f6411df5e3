"""`scripts/release.py --from-reference --rehearsal`: the whole release rehearsed offline on stand-ins of the
reference's four released files (small models trained on the stand-in data, written in the reference's formats),
first with AlterNet-50 pending, then run again to train it, killed in the middle and resumed; and every repository it
writes checked the way its user meets it (transformers, pipeline, timm, remote code without the package; the dataset
through `datasets` and `analysis.robustness`; the Space started as Spaces start it, through gradio_client); the
refusals that come before anything is trained, and the ones that stop a release before anything is published.

The release without --from-reference runs the same steps with `train/<preset>` in place of `fetch` and `convert`:
the rehearsal's AlterNet-50 takes that path here."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from commands import run_command, start_command, warm_environment
from conftest import tool_command
from package_index import package_index
from PIL import Image
from test_space import free_port
from upstream import GRADIO, gradio_confidences, gradio_page, gradio_plot, versions

import alternet_hf
import zoo_release as release
from alternet_hf.data.cifar_c import CORRUPTIONS
from alternet_hf.hub.reference import REFERENCE_FILES
from alternet_hf.models.presets import PAPER_MODELS, display_name
from analysis.runner import read_result
from zoo_release import package as release_package
from zoo_release import rehearsal
from zoo_release.checks import COLUMN_NAMES

pytestmark = pytest.mark.commands

ORG = "rehearsal-org"
CONVERTED = tuple(REFERENCE_FILES)
TRAINED = "alternet-50-cifar100"
PRESETS = (*CONVERTED, TRAINED)
# The README's command, with a CIFAR-100-C budget that the stand-ins' evaluation exceeds: the subset path runs.
README_ARGUMENTS = ["--org", ORG, "--from-reference", "--rehearsal", "--dry-run", "rehearsal"]
ARGV = [*tool_command("release"), *README_ARGUMENTS, "--cifar100c-budget", "1s"]


# A release compiles its graphs with inductor, and so does a rehearsal run by hand (docs/release.md). Here torch's
# per-graph backend override sends them through aot_eager: the same graph breaks, recompiles and autograd graphs,
# without the C++ that inductor would generate and compile (minutes of gcc in a new venv, whose kernel cache is empty).
AOT_EAGER = {"TORCH_COMPILE_OVERRIDE_BACKENDS": ">=0:aot_eager"}


def offline_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")}
    return env | {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", **AOT_EAGER, **extra}


# The override is read when torch is imported: the release's commands get a warm interpreter of their own.
warm_environment(offline_env())


@pytest.fixture(autouse=True)
def aot_eager_here():
    """The releases run in this process (`release.Release(...).run()`) compile through aot_eager too."""
    with torch._dynamo.config.patch(debug_backend_override=AOT_EAGER["TORCH_COMPILE_OVERRIDE_BACKENDS"]):
        yield


def wait_for(condition, process, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None:
            raise AssertionError(f"the release ended before {what}:\n{process.output()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout} s")
        time.sleep(0.2)


def manifest(out: Path) -> dict:
    path = out / release.MANIFEST
    return json.loads(path.read_text()) if path.is_file() else {"steps": {}}


def output_mtimes(out: Path, steps: dict) -> dict:
    return {path: (out / path).stat().st_mtime_ns for step in steps.values() for path in step["outputs"]}


@pytest.fixture(scope="module")
def rehearsal_run(tmp_path_factory):
    """The rehearsal as a user runs it: first with no time to train (--training-budget 0: the four converted,
    AlterNet-50 pending), started from `/` (the release imports nothing by the accident of its working folder), then
    with the default budget (AlterNet-50 trains) killed (SIGKILL) while it trains, started again to its end, then
    once more (nothing left to do). Returns the folder and what each run left."""
    cwd = tmp_path_factory.mktemp("release")
    out = cwd / "rehearsal"
    quick = [*ARGV, "--no-estimate"]
    from_root = [str(out) if argument == "rehearsal" else argument for argument in quick]
    pending = run_command([*from_root, "--training-budget", "0"], cwd=Path("/"), env=offline_env(), timeout=1200)
    assert pending.returncode == 0, pending.stdout + pending.stderr
    first = {
        "steps": manifest(out)["steps"],
        "summary": manifest(out)["summary"],
        "space": json.loads((out / "spaces" / "how-do-vits-work" / "space.json").read_text()),
        "comparison": json.loads((out / "work" / "comparison" / "comparison.json").read_text()),
        "repos": sorted(p.name for p in (out / "models").iterdir()),
    }
    first["mtimes"] = output_mtimes(out, first["steps"])
    first["space_dir"] = shutil.copytree(out / "spaces" / "how-do-vits-work", cwd / "space-while-pending")
    training = start_command(quick, cwd=cwd, env=offline_env(), merge=True)
    checkpoints = out / "work" / "train" / TRAINED / "checkpoints"
    # `latest` names a checkpoint once it is complete (a `.partial` folder alone would leave nothing to resume from)
    wait_for(lambda: (checkpoints / "latest").is_file(), training, 900, "a checkpoint of AlterNet-50")
    training.send_signal(signal.SIGKILL)
    training.wait(30)
    resumed = run_command(quick, cwd=cwd, env=offline_env(), timeout=900)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    again = run_command(ARGV, cwd=cwd, env=offline_env(), timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    return dict(out=out, cwd=cwd, pending=pending, first=first, resumed=resumed, again=again)


def test_the_four_released_models_go_out_and_alternet_waits(rehearsal_run):
    first, log = rehearsal_run["first"], rehearsal_run["pending"].stdout
    assert first["repos"] == sorted(CONVERTED)
    assert f"[{TRAINED}] pending: training it here (cpu) would take about" in log and "--training-budget 0 s" in log
    assert set(first["summary"]["models"]) == set(CONVERTED) and list(first["summary"]["pending"]) == [TRAINED]
    assert f"{ORG}/{TRAINED}: pending:" in log
    assert first["space"]["ALTERNET_SPACE_PENDING"] == "AlterNet-50"
    assert "AlterNet" not in first["space"]["ALTERNET_SPACE_MODELS"]
    assert first["comparison"]["meta"]["pending"] == ["AlterNet-50"]
    assert f"train/{TRAINED}" not in first["steps"]
    for preset in CONVERTED:  # converted from the file, checked against what the stand-in reported
        assert {f"stand-in/{preset}", f"fetch/{preset}", f"convert/{preset}", f"evaluate/{preset}"} <= set(
            first["steps"]
        )
        assert f"{preset}: top-1 " in log and " points apart (at most 5)" in log
    lines = log.splitlines()  # the release's first lines: what CIFAR-100-C is evaluated in here, before any step
    opening = next(index for index, line in enumerate(lines) if line.startswith("release of "))
    precision = release.evaluation_rules("cpu").split("; ")[0]  # then the library, measured once per process
    assert lines[opening + 1].startswith(f"CIFAR-100-C is evaluated in {precision}; float32 linear layers through ")


def test_the_same_release_run_again_elsewhere_gives_the_same_files_and_numbers(rehearsal_run):
    """Same seed, same numbers: the rehearsal run again from scratch in a fresh interpreter and another folder, for
    one model, writes the stand-ins (data, CIFAR-100-C, that model's trained stand-in file and nothing of the
    others') byte for byte as the fixture's first run did, and that model's weights, evaluation, CIFAR-100-C subset
    and analyses with the same numbers (wall-clock fields aside)."""
    from test_same_seed import without_wall_clock

    cwd, preset = rehearsal_run["cwd"], "swin-ti-cifar100"  # the quickest to train and evaluate
    argv = [*tool_command("release"), *README_ARGUMENTS[:-1], "again", "--cifar100c-budget", "1s", "--no-estimate"]
    argv += ["--models", preset]
    completed = run_command(argv, cwd=cwd, env=offline_env(), timeout=900, warm=False)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    first, again = rehearsal_run["first"]["steps"], manifest(cwd / "again")["steps"]
    for step in ("stand-in", "dataset", *(f"{k}/{preset}" for k in ("stand-in", "fetch", "convert"))):
        assert again[step]["outputs"] == first[step]["outputs"], step
    assert not [step for step in again if step.startswith("stand-in/") and not step.endswith(preset)]
    for step in (f"evaluate/{preset}", f"analyze/{preset}"):
        assert again[step]["outputs"].keys() == first[step]["outputs"].keys()
        for path in again[step]["outputs"]:
            if path.endswith(".json"):
                ours, theirs = (_as_left(root, path) for root in (cwd / "again", rehearsal_run["out"]))
                assert without_wall_clock(ours) == without_wall_clock(theirs), path


def _as_left(out: Path, path: str):
    """The JSON file `out/path`, its mentions of `out` (absolute or relative) written as <out>."""
    text = (out / path).read_text().replace(str(out), "<out>").replace(f"{out.name}/", "<out>/")
    return json.loads(text)


def test_a_second_run_adds_alternet_and_redoes_only_what_depends_on_it(rehearsal_run):
    out, first = rehearsal_run["out"], rehearsal_run["first"]
    log = rehearsal_run["resumed"].stdout
    assert f"resumed from {Path('rehearsal') / 'work' / 'train' / TRAINED}" in log  # from its last checkpoint
    steps = manifest(out)["steps"]
    for preset in CONVERTED:
        for kind in ("fetch", "convert", "evaluate", "analyze", "card"):
            assert f"[{kind}/{preset}] complete, skipped" in log
            assert steps[f"{kind}/{preset}"] == first["steps"][f"{kind}/{preset}"]
    changed = {name for name in steps if steps[name] != first["steps"].get(name)}
    assert changed == {
        "compare",
        "atlas",  # the converted models' cards stay: their places among the public models did not move
        "space",
        "collection",
        *(f"{kind}/{TRAINED}" for kind in ("train", "evaluate", "analyze", "card", "verify")),
    }
    unchanged = {
        path: mtime
        for path, mtime in first["mtimes"].items()
        if not path.startswith(
            ("spaces/", "work/comparison", "collection.json", "datasets/frequency-atlas", "work/public")
        )
    }
    for path, mtime in unchanged.items():
        assert (out / path).stat().st_mtime_ns == mtime, f"{path} was written again"
    space = json.loads((out / "spaces" / "how-do-vits-work" / "space.json").read_text())
    assert "ALTERNET_SPACE_PENDING" not in space and f"AlterNet-50={ORG}/{TRAINED}" in space["ALTERNET_SPACE_MODELS"]
    config = json.loads((out / "work" / "train" / TRAINED / "training_config.json").read_text())
    # the GPU branches ran on the CPU: compiled (where a C++ compiler is; aot_eager here), bf16, channels-last
    assert (config["compile"], config["mixed_precision"], config["channels_last"]) == (
        release.inductor_available(),
        "bf16",
        True,
    )
    # The last run finds everything complete and changes nothing.
    again = rehearsal_run["again"].stdout
    assert "0 steps run, 40 already complete" in again
    assert manifest(out)["steps"] == steps
    assert "release summary (rehearsal)" in again and f"{ORG}/{TRAINED}: top-1" in again
    assert "(converted from the reference's release)" in again and "(trained)" in again
    assert "h of training on one H100: an ESTIMATE" in again
    for step in steps.values():  # every output is there, as the manifest hashed it
        for path, digest in step["outputs"].items():
            assert release.file_hash(out / path) == digest


def test_every_repository_is_laid_out_as_uploaded(rehearsal_run):
    out = rehearsal_run["out"]
    assert sorted(p.name for p in (out / "models").iterdir()) == sorted(PRESETS)
    dataset = out / "datasets" / "cifar100-c"
    assert (dataset / "README.md").is_file()
    assert len(list((dataset / "data").glob("*/severity_*.parquet"))) == 5 * len(CORRUPTIONS)
    atlas = out / "datasets" / "frequency-atlas"
    assert (atlas / "README.md").is_file() and (atlas / "data" / "train-00000-of-00001.parquet").is_file()
    space = out / "spaces" / "how-do-vits-work"
    # the package comes from the index, pinned in requirements.txt: no copy of it beside the app
    assert {p.name for p in space.iterdir()} == {"app.py", "README.md", "requirements.txt", "space.json", "results"}
    assert not list(space.rglob("__pycache__"))


def test_every_card_links_the_paper_and_the_collection_is_recorded_in_the_paper_s_order(rehearsal_run):
    """The Hub lists a repo on the paper's page when its card links the paper on arXiv: every card does, the
    models', the dataset's and the Space's; the dry run records the Collection it would create."""
    out = rehearsal_run["out"]
    cards = [out / "models" / p / "README.md" for p in PRESETS]
    cards += [out / "datasets" / name / "README.md" for name in ("cifar100-c", "frequency-atlas")]
    cards += [out / "spaces" / "how-do-vits-work" / "README.md"]
    for card in cards:
        assert "https://arxiv.org/abs/2202.06709" in card.read_text(), card
    collection = json.loads((out / "collection.json").read_text())
    assert collection["title"] == "How Do Vision Transformers Work?" and collection["namespace"] == ORG
    assert collection["items"] == [
        {"type": "paper", "id": "2202.06709"},
        *({"type": "model", "id": f"{ORG}/{p}"} for p in PAPER_MODELS),
        {"type": "dataset", "id": f"{ORG}/cifar100-c"},
        {"type": "dataset", "id": f"{ORG}/frequency-atlas"},
        {"type": "space", "id": f"{ORG}/how-do-vits-work"},
    ]


def test_each_repo_carries_the_tensorboard_events_of_its_metrics_tab(rehearsal_run):
    """Read with TensorBoard's own reader: the trained model's repo holds its training run (losses, learning rate,
    every evaluation, the last one the card's); a converted model's, its evaluation as scalars at step 0."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = rehearsal_run["out"]

    def scalars(folder: Path) -> dict:
        found = {}
        for events in sorted(folder.rglob("*tfevents*")):
            reader = EventAccumulator(str(events))
            reader.Reload()
            for tag in reader.Tags()["scalars"]:
                found.setdefault(tag, []).extend((event.step, event.value) for event in reader.Scalars(tag))
        return found

    for preset in PRESETS:
        repo = out / "models" / preset
        numbers = card_numbers(repo)
        logged = scalars(repo / "runs")
        if preset == TRAINED:
            assert not (repo / "runs" / "evaluation").exists() and {"train/loss", "train/lr"} <= set(logged)
            assert logged["eval/accuracy"][-1][1] == pytest.approx(
                json.loads((out / "work" / "train" / preset / "metrics.json").read_text())["accuracy"], abs=1e-6
            )
            continue
        for metric in ("accuracy", "nll", "ece"):
            assert logged[f"eval/{metric}"] == [(0, pytest.approx(numbers[(rehearsal.STAND_IN_NAME, metric)]))]
        assert logged["eval/cifar100c_mean_accuracy"] == [(0, pytest.approx(numbers[("CIFAR-100-C", "accuracy")]))]


def test_the_converted_models_score_what_the_stand_ins_reported(rehearsal_run):
    """The stand-ins' own test accuracies, measured before their files were written, are what the converted models
    score in the release: conversion, label order and preprocessing all agree, far above chance (1%)."""
    out = rehearsal_run["out"]
    folder = out / "work" / "stand-in" / "reference" / rehearsal.REPORTED
    reported = {preset: json.loads((folder / f"{preset}.json").read_text()) for preset in CONVERTED}
    for preset in CONVERTED:
        evaluation = json.loads(next((out / "work" / "converted" / preset).glob("eval_*_test.json")).read_text())
        assert 100 * evaluation["metrics"]["accuracy"] == pytest.approx(reported[preset]["top1"], abs=1e-6)
        assert reported[preset]["top1"] > 8  # far above chance
    assert reported["resnet-50-cifar100"]["top1"] > 25


def card_numbers(folder: Path) -> dict:
    from huggingface_hub import ModelCard

    card = ModelCard.load(folder / "README.md")
    return {(r.dataset_name, r.metric_type): r.metric_value for r in card.data.eval_results}


@pytest.mark.parametrize("preset", PRESETS)
def test_each_card_reports_the_evaluation_files(rehearsal_run, preset):
    out = rehearsal_run["out"]
    folder = out / "work" / ("converted" if preset in CONVERTED else "train") / preset
    clean = json.loads(next(folder.glob("eval_*_test.json")).read_text())
    evaluated = json.loads((folder / "robustness_cifar100-c.json").read_text())
    robustness, plan = evaluated["result"], evaluated["plan"]  # written as the robustness analysis writes it
    numbers = card_numbers(out / "models" / preset)
    for metric in ("accuracy", "nll", "ece"):
        assert numbers[(rehearsal.STAND_IN_NAME, metric)] == pytest.approx(clean["metrics"][metric], rel=1e-12)
    assert numbers[("CIFAR-100-C", "accuracy")] == pytest.approx(robustness["mean_accuracy"], rel=1e-12)
    assert robustness["mean_accuracy"] == pytest.approx(np.mean(robustness["accuracy"]))
    assert len(robustness["corruptions"]) == 15 and robustness["severities"] == [1, 2, 3, 4, 5]
    # The analyses and the comparison read that one evaluation: CIFAR-100-C is evaluated once per model.
    analysed = (out / "work" / "results" / display_name(preset) / "robustness.json").read_text()
    assert json.loads(analysed) == evaluated and read_result(folder / "robustness_cifar100-c.json").mean_accuracy > 0
    # The budget was exceeded: the same stratified subset of every set, with its standard error, said on the card.
    assert robustness["images_per_set"] == 100 * plan["per_class"] < robustness["set_size"] == 400
    text = (out / "models" / preset / "README.md").read_text()
    assert f"± {100 * robustness['mean_accuracy_standard_error']:.2f}" in text
    assert f"({robustness['images_per_set']:,} of its 400 images, {plan['per_class']} of each class, seed 0)" in text
    figures = ["_reliability.png", "fourier.png", "robustness_cifar100-c.png"]
    figures += ["training_curves.png"] if preset == TRAINED else []
    for figure in figures:
        assert f"{figure})" in text
    for link in [line.split("](")[1].rstrip(")") for line in text.splitlines() if line.startswith("![")]:
        assert (out / "models" / preset / link).is_file()
    assert "timm.create_model(" in text and (
        "trust_remote_code=True" in text or preset.startswith(("vit", "pit", "swin"))
    )
    if preset in CONVERTED:  # provenance: the file, its SHA-256 as hashed here, the converter; reported beside ours
        stand_in = out / "work" / "stand-in" / "reference" / REFERENCE_FILES[preset]
        assert f"file [`{stand_in.name}`](" in text and f"SHA-256\n`{release.file_hash(stand_in)}`" in text
        assert f"converted by alternet-hf {alternet_hf.__version__}" in text and "evaluated here on a CPU" in text
        reported = json.loads((stand_in.parent / rehearsal.REPORTED / f"{preset}.json").read_text())["top1"]
        assert f"| reported by the stand-in (its own test, before its file was written) | {reported:g} | — |" in text
        assert "Trained by the reference's authors with the paper's recipe" in text
    else:
        assert "Trained with `alternet-train` of alternet-hf" in text and "reported by" not in text


@pytest.mark.parametrize("preset", PRESETS)
def test_each_model_loads_with_transformers_pipeline_and_timm(rehearsal_run, preset):
    import timm
    from transformers import AutoModelForImageClassification, pipeline

    folder = rehearsal_run["out"] / "models" / preset
    model = AutoModelForImageClassification.from_pretrained(folder).eval()
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8))
    predictions = pipeline("image-classification", model=str(folder))(image, top_k=3)
    assert len(predictions) == 3 and all(p["label"] in model.config.id2label.values() for p in predictions)
    if preset in ("pit-ti-cifar100", "swin-ti-cifar100"):  # timm's own modules: a timm repo
        in_timm = timm.create_model(f"local-dir:{folder}", pretrained=True).eval()
    else:
        if preset in CONVERTED:
            fields = rehearsal.REFERENCE_STAND_INS[preset]
        else:
            training = json.loads(
                (rehearsal_run["out"] / "work" / "train" / preset / "training_config.json").read_text()
            )
            fields = {k: v for k, v in training["model_overrides"].items() if k != "drop_path_rate"}
        architecture, dataset = preset.rsplit("-", 1)
        in_timm = timm.create_model(
            alternet_hf.models.timm_models.timm_name(architecture, dataset),
            pretrained=True,
            pretrained_cfg_overlay=dict(file=str(folder / "model.safetensors")),
            **fields,
        ).eval()
    pixels = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(in_timm(pixels), model(pixel_values=pixels).logits)


def test_each_model_loads_with_remote_code_where_alternet_hf_cannot_be_imported(rehearsal_run):
    folders = [str(rehearsal_run["out"] / "models" / preset) for preset in PRESETS]
    script = f"""
import sys
sys.modules["alternet_hf"] = None  # the package is not installed for this user
import torch
from transformers import AutoModelForImageClassification
for folder in {folders!r}:
    model = AutoModelForImageClassification.from_pretrained(folder, trust_remote_code=True).eval()
    assert type(model).__module__.startswith(("transformers_modules", "transformers.models.")), type(model)
    print(type(model).__name__, model(pixel_values=torch.zeros(1, 3, 32, 32)).logits.shape[-1])
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=offline_env())
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "CifarResNetForImageClassification",
        "100",
        "ViTForImageClassification",
        "100",
        "TimmWrapperForImageClassification",
        "100",
        "TimmWrapperForImageClassification",
        "100",
        "AlterNetForImageClassification",
        "100",
    ]


def test_the_dataset_loads_with_datasets_and_the_analyses(rehearsal_run):
    import datasets

    from alternet_hf.data.cifar_c.sources import ParquetCorruptions, load_corruption_source

    folder = rehearsal_run["out"] / "datasets" / "cifar100-c"
    per_set = rehearsal.IMAGES_PER_CLASS["test"] * 100
    fog = datasets.load_dataset(str(folder), "fog", split="severity_5")  # the card's short form
    assert fog.num_rows == per_set and set(fog.column_names) == {"image", "label", "corruption", "severity"}
    assert datasets.load_dataset(str(folder), split="test").num_rows == len(CORRUPTIONS) * 5 * per_set
    source = load_corruption_source(str(folder))
    assert isinstance(source, ParquetCorruptions) and sorted(source.available()) == sorted(CORRUPTIONS)
    images, labels = next(source.batches("fog", 5, batch_size=64))
    assert images.dtype == torch.uint8 and images.shape == (64, 3, 32, 32) and int(labels.max()) < 100
    arrays = np.load(rehearsal_run["out"] / "work" / "stand-in" / "CIFAR-100-C" / "fog.npy", mmap_mode="r")
    np.testing.assert_array_equal(images.permute(0, 2, 3, 1).numpy(), arrays[4 * per_set : 4 * per_set + 64])
    np.testing.assert_array_equal(np.asarray(fog[:64]["image"][0]), arrays[4 * per_set])


def test_the_atlas_places_every_released_model_among_the_public_ones_and_each_card_says_where(rehearsal_run):
    """The release's atlas (`alternet-atlas`'s dataset) holds the public classifiers (the rehearsal's stand-ins) and
    the released models, loads with `datasets`, and each model card links it with the ranks its rows give."""
    import datasets

    from alternet_hf.apps import atlas

    out = rehearsal_run["out"]
    folder = out / "datasets" / "frequency-atlas"
    rows = {row["model_id"]: row for row in datasets.load_dataset(str(folder), split="train")}
    public = [f"stand-in/{name}" for name in rehearsal.PUBLIC_STAND_INS]
    assert set(rows) == {*public, *(f"{ORG}/{p}" for p in PRESETS)}
    assert all(row["status"] == "measured" for row in rows.values())
    assert {rows[f"{ORG}/{p}"]["kind"] for p in PRESETS} == {"convolution", "attention", "hybrid"}
    found = atlas.Atlas(folder)
    for preset in PRESETS:
        card = (out / "models" / preset / "README.md").read_text()
        placed = atlas.placement(found, f"{ORG}/{preset}", among=public)
        assert f"## Where this model sits among {len(public)} public models" in card, preset
        assert f"https://huggingface.co/datasets/{ORG}/frequency-atlas" in card
        assert f"rank {placed['high_frequency_kept_rank']} of {len(public) + 1} from the most kept" in card
    space = json.loads((out / "spaces" / "how-do-vits-work" / "space.json").read_text())
    assert space["ALTERNET_SPACE_ATLAS"] == f"{ORG}/frequency-atlas"


def test_the_space_pins_what_the_release_ran_with(rehearsal_run):
    from importlib.metadata import version

    space = rehearsal_run["out"] / "spaces" / "how-do-vits-work"
    lines = (space / "requirements.txt").read_text().splitlines()
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in lines
    assert f"torch=={version('torch').split('+')[0]}+cpu" in lines
    for package in ("transformers", "timm", "gradio", "huggingface-hub", "datasets"):
        assert f"{package}=={version(package)}" in lines
    assert f"alternet-hf[space]=={alternet_hf.__version__}" in lines  # the released package, not a copy of it
    assert not (space / "alternet_hf").exists() and not (space / "analysis").exists()
    pinned = [line for line in lines if line and not line.startswith(("#", "--"))]
    assert all("==" in line for line in pinned) and len(pinned) == 15
    card = (space / "README.md").read_text()
    assert f"sdk_version: {version('gradio')}" in card and f"python_version: '{sys.version_info.major}." in card


def hub_cache_with(models: dict[str, Path], cache: Path) -> Path:
    """A Hugging Face cache holding `models` ({repo id: folder}) as downloaded snapshots: what `from_pretrained` of
    those ids finds offline, so the Space loads the release's models by their Hub ids."""
    for repo_id, folder in models.items():
        repo = cache / f"models--{repo_id.replace('/', '--')}"
        snapshot = repo / "snapshots" / ("0" * 40)
        shutil.copytree(folder, snapshot)
        (repo / "refs").mkdir(parents=True)
        (repo / "refs" / "main").write_text("0" * 40)
    return cache


def start_space(space: Path, models: dict[str, Path], tmp_path: Path):
    """The Space repo `space` started as Spaces start it (`python app.py`, GRADIO_SERVER_*), offline, with `models`
    ({repo id: folder}) in its Hub cache; (process, port)."""
    cache = hub_cache_with(models, tmp_path / "hub")
    port = free_port()
    env = offline_env(HF_HUB_CACHE=str(cache), GRADIO_SERVER_PORT=str(port), GRADIO_SERVER_NAME="127.0.0.1")
    for variable in ("PYTHONPATH", *(f"ALTERNET_SPACE_{name}" for name in ("MODELS", "RESULTS", "PENDING", "ATLAS"))):
        env.pop(variable, None)
    return start_command([sys.executable, "app.py"], cwd=space, env=env, merge=True, warm=False), port


def test_the_space_serves_the_release_models_started_as_spaces_start_it(rehearsal_run, tmp_path):
    from gradio_client import Client, handle_file

    out = rehearsal_run["out"]
    space = shutil.copytree(out / "spaces" / "how-do-vits-work", tmp_path / "space")
    process, port = start_space(space, {f"{ORG}/{preset}": out / "models" / preset for preset in PRESETS}, tmp_path)
    try:
        url = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 180
        while True:
            try:
                client = Client(url, verbose=False)
                break
            except Exception:
                assert process.poll() is None, process.output()[0]
                assert time.monotonic() < deadline, process.output()[0]
                time.sleep(1)
        Image.new("RGB", (64, 48), (200, 40, 90)).save(tmp_path / "photo.png")
        outputs = client.predict(handle_file(str(tmp_path / "photo.png")), "fog", 3, 0.5, api_name="/robustness")
        top5s = [gradio_confidences(o) for o in outputs if gradio_confidences(o) is not None]
        assert len(top5s) == 5, f"{versions(*GRADIO)}: {outputs}"  # the five rehearsal models, by their Hub ids
        assert all(len(top5) == 5 for top5 in top5s), top5s
        gradio_plot(outputs[-1])
    finally:
        process.kill()
        process.wait(30)


def test_the_space_of_the_first_release_says_alternet_is_pending(rehearsal_run, tmp_path):
    """The Space as the first run (AlterNet-50 pending) pushed it: the four models load, the page says which one is
    still to come."""
    out, first = rehearsal_run["out"], rehearsal_run["first"]
    space = shutil.copytree(first["space_dir"], tmp_path / "space")
    process, port = start_space(space, {f"{ORG}/{p}": out / "models" / p for p in CONVERTED}, tmp_path)
    try:
        deadline = time.monotonic() + 180
        while (page := gradio_page(port)) is None:
            assert process.poll() is None, process.output()[0]
            assert time.monotonic() < deadline, process.output()[0]
            time.sleep(1)
    finally:
        process.kill()
        process.wait(30)
    assert "**AlterNet-50**: pending: its weights are not published yet" in page
    assert all(f"**{name}**: " in page for name in ("ResNet-50", "ViT-Ti", "PiT-Ti", "Swin-Ti"))
    assert "not loaded" not in page


def recording_hub(monkeypatch) -> list:
    """The Hub replaced by a recorder of its calls: this machine cannot reach it."""
    import huggingface_hub

    calls = []

    class RecordingApi:
        def create_repo(self, repo_id, **kwargs):
            calls.append(("create", repo_id, kwargs["repo_type"], kwargs.get("space_sdk")))

        def upload_folder(self, *, repo_id, repo_type, folder_path, **kwargs):
            calls.append(("upload", repo_id, repo_type, sorted(p.name for p in Path(folder_path).iterdir())))

        def create_collection(self, title, *, namespace, exists_ok, **kwargs):
            calls.append(("collection", title, namespace, exists_ok))
            return SimpleNamespace(slug=f"{namespace}/how-do-vision-transformers-work-0123")

        def add_collection_item(self, collection_slug, item_id, item_type, *, exists_ok, **kwargs):
            calls.append(("item", collection_slug, item_id, (item_type, exists_ok)))

    monkeypatch.setattr(huggingface_hub, "HfApi", RecordingApi)
    return calls


def rehearsal_options(out: Path, **fields) -> release.ReleaseOptions:
    """The options of the fixture's release (`ARGV`), for runs in this process on a copy of its folder."""
    return release.ReleaseOptions(org=ORG, out=out, rehearsal=True, from_reference=True, cifar100c_budget=1.0, **fields)


def test_publishing_after_the_dry_run_uploads_each_repo_and_redoes_nothing(rehearsal_run, tmp_path, monkeypatch):
    """The same release without --dry-run on the dry run's folder, copied elsewhere as `cp -r` copies (contents, not
    times): every step is complete by its contents, so only the uploads run, the package's first (to a local index
    here, by the standard twine settings)."""
    calls = recording_hub(monkeypatch)
    out = shutil.copytree(rehearsal_run["out"], tmp_path / "release", copy_function=shutil.copy)
    options = rehearsal_options(out)
    release.check_out_dir(options)
    lines = []
    runner = release.Release(options, say=lines.append)
    with package_index(tmp_path / "index") as url:
        for variable, value in (("TWINE_REPOSITORY_URL", url), ("TWINE_USERNAME", "r"), ("TWINE_PASSWORD", "r")):
            monkeypatch.setenv(variable, value)
        summary = runner.run()
        built = sorted((out / "package").iterdir())
        assert release_package.published_files(url, release_package.version()) == {
            file.name: release_package.sha256(file) for file in built
        }
    uploads = ("package", "cifar100-c", *PRESETS, "frequency-atlas", "how-do-vits-work", "collection")
    assert runner.ran == [f"upload/{name}" for name in uploads]
    assert len(runner.skipped) == 40
    created = [(repo_id, kind, sdk) for what, repo_id, kind, sdk in calls if what == "create"]
    assert created == [(f"{ORG}/cifar100-c", "dataset", None)] + [(f"{ORG}/{p}", "model", None) for p in PRESETS] + [
        (f"{ORG}/frequency-atlas", "dataset", None),
        (f"{ORG}/how-do-vits-work", "space", "gradio"),
    ]
    uploaded = {repo_id: files for what, repo_id, kind, files in calls if what == "upload"}
    assert "model.safetensors" in uploaded[f"{ORG}/{TRAINED}"] and "space.json" in uploaded[f"{ORG}/how-do-vits-work"]
    assert "provenance.json" not in uploaded[f"{ORG}/resnet-50-cifar100"]  # the card states it; the file stays here
    assert summary["models"][TRAINED]["repo_id"] == f"{ORG}/{TRAINED}" and summary["pending"] == {}
    # One Collection, found by its title where it exists, the paper first and the models in the paper's order.
    assert [call for call in calls if call[0] == "collection"] == [
        ("collection", "How Do Vision Transformers Work?", ORG, True)
    ]
    items = [(call[2], call[3][0]) for call in calls if call[0] == "item" and call[3][1]]  # exists_ok: never doubled
    assert items == [("2202.06709", "paper"), *((f"{ORG}/{p}", "model") for p in PAPER_MODELS)] + [
        (f"{ORG}/cifar100-c", "dataset"),
        (f"{ORG}/frequency-atlas", "dataset"),
        (f"{ORG}/how-do-vits-work", "space"),
    ]
    again = release.Release(options, say=lines.append)
    again.run()
    assert again.ran == []  # uploaded once


def test_a_model_far_from_its_reported_accuracy_stops_the_release_before_anything_is_published(
    rehearsal_run, tmp_path, monkeypatch
):
    calls = recording_hub(monkeypatch)
    out = shutil.copytree(rehearsal_run["out"], tmp_path / "release")
    cards = {p: (out / "models" / p / "README.md").read_bytes() for p in PRESETS}
    reported = release.Release.reported

    def inflated(self, preset):  # as if the paper had reported 30 points more for PiT
        numbers = reported(self, preset)
        return numbers and {**numbers, "top1": numbers["top1"] + 30} if preset == "pit-ti-cifar100" else numbers

    monkeypatch.setattr(release.Release, "reported", inflated)
    lines = []
    with pytest.raises(release.ReleaseError) as stopped:
        release.Release(rehearsal_options(out), say=lines.append).run()
    message = str(stopped.value)
    assert "nothing was published" in message and message.count("\n  ") == 1
    line = next(line for line in message.splitlines() if line.startswith("  pit-ti-cifar100:"))
    measured = json.loads(next((out / "work" / "converted" / "pit-ti-cifar100").glob("eval_*_test.json")).read_text())
    top1 = 100 * measured["metrics"]["accuracy"]
    assert f"{REFERENCE_FILES['pit-ti-cifar100']} converted as pit-ti-cifar100 scores {top1:.2f}% top-1" in line
    assert "30.0 points from the" in line and "the wrong preset" in line and "--max-accuracy-gap 5" in line
    assert calls == [] and all((out / "models" / p / "README.md").read_bytes() == cards[p] for p in PRESETS)
    assert "[evaluate/resnet-50-cifar100] complete, skipped" in lines


def test_each_card_states_what_its_repo_scores_as_a_user_loads_it_and_the_space_agrees(rehearsal_run):
    """The verify step: each repo loaded from its folder with the Auto classes (remote code, no alternet_hf) in a new
    process scores its card's top-1, far above chance; the Space predicts what it predicts; no card names a path."""
    out = rehearsal_run["out"]
    for preset in PRESETS:
        checked = json.loads((out / "work" / "verify" / f"{preset}.json").read_text())
        assert checked["images"] == 100 * rehearsal.IMAGES_PER_CLASS["test"]
        assert abs(checked["card_top1"] - checked["user_top1"]) <= 2 / checked["images"]
        assert checked["user_top1"] > 0.08, preset  # chance is 1%
        assert checked["space_images"] == 8 and checked["space_max_probability_gap"] < 1e-4
        card = (out / "models" / preset / "README.md").read_text()
        assert "stand-in/cifar100" not in card and rehearsal.STAND_IN_NAME in card
    assert f"{TRAINED}: the card's top-1 " in rehearsal_run["resumed"].stdout


def _stopped(out: Path, calls: list, **fields) -> str:
    """The error of the release run again on `out` (in this process), after checking nothing was uploaded."""
    with pytest.raises(release.ReleaseError) as stopped:
        release.Release(rehearsal_options(out, **fields), say=lambda line: None).run()
    assert calls == []
    return str(stopped.value)


def test_cifar100c_labels_out_of_step_with_the_test_split_stop_the_release(rehearsal_run, tmp_path, monkeypatch):
    """CIFAR-100-C arrays whose labels were shuffled, and a test split whose class order was permuted: each
    refused by name before any model is evaluated on them."""
    calls = recording_hub(monkeypatch)
    out = shutil.copytree(rehearsal_run["out"], tmp_path / "release")
    arrays = shutil.copytree(out / "work" / "stand-in" / "CIFAR-100-C", tmp_path / "shuffled")
    labels = np.load(arrays / "labels.npy")
    np.save(arrays / "labels.npy", np.random.default_rng(0).permutation(labels))
    monkeypatch.setattr(release.Release, "cifar100c_arrays", property(lambda self: arrays))
    message = _stopped(out, calls)
    assert f"{arrays}/labels.npy is out of step with the test split of {rehearsal.STAND_IN_NAME}: at severity 1, " in (
        message
    )
    monkeypatch.undo()
    calls = recording_hub(monkeypatch)

    import datasets

    permuted = shutil.copytree(out / "work" / "stand-in" / "cifar100", tmp_path / "permuted")
    test = datasets.Dataset.from_parquet(str(permuted / "data" / "test-00000-of-00001.parquet"))
    order = np.random.default_rng(1).permutation(100)
    test = test.map(lambda row: {"fine_label": int(order[row["fine_label"]])}, features=test.features)
    test.to_parquet(str(permuted / "data" / "test-00000-of-00001.parquet"))
    monkeypatch.setattr(release.Release, "source", property(lambda self: str(permuted)))
    message = _stopped(out, calls)
    assert "labels.npy is out of step with the test split of" in message and "severity 1, " in message


def test_a_card_written_from_another_model_s_evaluation_stops_the_release(rehearsal_run, tmp_path, monkeypatch):
    calls = recording_hub(monkeypatch)
    out = shutil.copytree(rehearsal_run["out"], tmp_path / "release")
    (out / "models" / "resnet-50-cifar100" / "README.md").unlink()  # the card is written again
    write_release = release.run.write_release

    def from_vit(model_dir, *args, **kwargs):
        if Path(model_dir).name == "resnet-50-cifar100":
            kwargs["evaluation"] = next((Path(model_dir).parent / "vit-ti-cifar100").glob("eval_*_test.json"))
        return write_release(model_dir, *args, **kwargs)

    monkeypatch.setattr(release.run, "write_release", from_vit)
    message = _stopped(out, calls)
    vit = json.loads(next((out / "work" / "converted" / "vit-ti-cifar100").glob("eval_*_test.json")).read_text())
    resnet = json.loads(next((out / "work" / "converted" / "resnet-50-cifar100").glob("eval_*_test.json")).read_text())
    assert message.startswith(
        f"the card of resnet-50-cifar100 states top-1 {100 * vit['metrics']['accuracy']:.2f}%, but the repo as a user "
        f"loads it scores {100 * resnet['metrics']['accuracy']:.2f}%"
    )


def test_a_user_interpreter_that_dies_is_named_and_the_next_repo_gets_a_new_one(rehearsal_run, tmp_path):
    """The release's one user interpreter (`verify.UserSession`): remote code that ends the process fails that repo
    with the exit status, and the next repo is evaluated in a new interpreter, scoring what the release recorded."""
    from zoo_release.verify import UserSession

    models, source = rehearsal_run["out"] / "models", str(rehearsal_run["out"] / "work" / "stand-in" / "cifar100")
    broken = shutil.copytree(models / "resnet-50-cifar100", tmp_path / "exits-on-import")
    with open(broken / "configuration_cifar_resnet.py", "a") as code:
        code.write("\nimport os\nos._exit(3)\n")
    user = UserSession()
    try:
        with pytest.raises(release.ReleaseError, match=r"(?s)does not load .* ended \(exit status 3\)"):
            user.evaluate(broken, source, **COLUMN_NAMES)
        vit = user.evaluate(models / "vit-ti-cifar100", source, **COLUMN_NAMES)
    finally:
        user.close()
    recorded = json.loads((rehearsal_run["out"] / "work" / "verify" / "vit-ti-cifar100.json").read_text())
    assert vit["top1"] == recorded["user_top1"] and vit["images"] == recorded["images"]


def test_a_space_that_prepares_images_differently_stops_the_release(rehearsal_run, tmp_path, monkeypatch):
    from alternet_hf.apps import space

    calls = recording_hub(monkeypatch)
    out = shutil.copytree(rehearsal_run["out"], tmp_path / "release")
    (out / "work" / "verify" / "resnet-50-cifar100.json").unlink()  # verified again
    monkeypatch.setattr(space, "_normalise", lambda model, pixels: pixels)  # forgets the mean and std
    message = _stopped(out, calls)
    assert message.startswith("the Space's predictions for resnet-50-cifar100 differ from the model's as a user loads")


def test_files_that_are_not_the_reference_s_are_named_and_nothing_is_published(tmp_path, monkeypatch):
    """A pickle that `weights_only` refuses, a cut file, another family's file: one line each, before any
    evaluation, and no repository written."""
    calls = recording_hub(monkeypatch)
    folder = tmp_path / "ckpts"
    folder.mkdir()

    class Code:
        def __reduce__(self):
            return (print, ("a pickle that runs code",))

    torch.save({"state_dict": {"x": torch.zeros(1)}, "code": Code()}, folder / REFERENCE_FILES["resnet-50-cifar100"])
    swin = alternet_hf.create_model("swin-ti-cifar100", **rehearsal.REFERENCE_STAND_INS["swin-ti-cifar100"])
    whole = alternet_hf.hub.convert.save_reference_checkpoint(swin, "swin", tmp_path / "swin.pth.tar", name="swin")
    (folder / REFERENCE_FILES["vit-ti-cifar100"]).write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    shutil.copy(whole, folder / REFERENCE_FILES["pit-ti-cifar100"])
    options = release.ReleaseOptions(
        org=ORG,
        out=tmp_path / "out",
        from_reference=True,
        reference_dir=folder,
        without_cifar100c=True,
        models=("resnet-50-cifar100", "vit-ti-cifar100", "pit-ti-cifar100"),
    )
    release.check_reference_files(options)
    with pytest.raises(release.ReleaseError) as stopped:
        release.Release(options, say=lambda line: None).run()
    lines = str(stopped.value).splitlines()
    assert "nothing was published" in lines[0]
    resnet, vit, pit = (next(line for line in lines if line.startswith(f"  {p}:")) for p in options.models)
    assert REFERENCE_FILES["resnet-50-cifar100"] in resnet and "not a readable PyTorch checkpoint" in resnet
    assert "objects beyond tensors, which a safe load (torch.load with weights_only=True) refuses" in resnet
    assert REFERENCE_FILES["vit-ti-cifar100"] in vit and "not a readable PyTorch checkpoint" in vit
    assert REFERENCE_FILES["pit-ti-cifar100"] in pit and "looks like a reference swin checkpoint" in pit
    assert calls == [] and not (tmp_path / "out" / "models").exists() and not (tmp_path / "out" / "spaces").exists()


def test_a_release_with_nothing_to_train_in_time_stops_before_publishing(tmp_path):
    """Every model trained, none in the time this machine has: each said pending with its estimate, then one error."""
    options = release.ReleaseOptions(org=ORG, out=tmp_path / "out", rehearsal=True, dry_run=True, training_budget=0)
    lines = []
    with pytest.raises(release.ReleaseError, match="every model is pending .* nothing to publish from this machine"):
        release.Release(options, say=lines.append).run()
    pending = [line for line in lines if "pending: training it here (cpu) would take about" in line]
    assert len(pending) == 3 and all("Run this command again on a GPU machine" in line for line in pending)
    assert not (tmp_path / "out" / "models").exists() and not (tmp_path / "out" / "spaces").exists()


def test_cifar100c_is_evaluated_whole_without_a_budget_and_on_a_subset_within_one(tmp_path):
    """`write_robustness`: every image of every set where there is no budget (a GPU), else the same seeded,
    class-stratified subset of each set, sized by the measured speed, with its standard error."""
    from alternet_hf.data.cifar_c.sources import GeneratedCorruptions, save_as_arrays
    from alternet_hf.hub.cifar100c import write_hub_dataset

    images = torch.randint(0, 256, (20, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    arrays = save_as_arrays(
        GeneratedCorruptions(images, torch.arange(20) % 5), tmp_path / "arrays", corruptions=["fog", "contrast"]
    )
    repo = write_hub_dataset(arrays, tmp_path / "repo", "someone/c", corruptions=["fog", "contrast"])
    folder = tmp_path / "model"
    tiny = {**rehearsal.REHEARSAL_MODELS["resnet-50"], "num_labels": 5}
    alternet_hf.create_model("resnet-50-cifar100", **tiny).save_pretrained(folder)
    said = []
    paths = release.write_robustness(
        folder, repo, "someone/c", device="cpu", compile=False, budget=None, say=said.append
    )
    whole = json.loads(paths[0].read_text())
    assert whole["plan"]["images_per_set"] == 20 and whole["result"]["images_per_set"] is None  # None: every image
    assert whole["result"]["mean_accuracy_standard_error"] is None and "images_per_second" not in whole["plan"]
    release.write_robustness(folder, repo, "someone/c", device="cpu", compile=False, budget=1e-6, say=said.append)
    subset, plan = json.loads(paths[0].read_text())["result"], json.loads(paths[0].read_text())["plan"]
    assert plan["per_class"] == 1 and subset["images_per_set"] == 5 and subset["set_size"] == 20
    assert subset["mean_accuracy_standard_error"] > 0 and paths[1].is_file()
    assert "evaluating 1 images of each class per set (5 of 20, seed 0)" in said[-2]


@pytest.mark.parametrize("units", [None, "AVX-512 BF16"])
def test_a_cpu_evaluates_cifar100c_in_bf16_only_where_a_fixed_set_s_top1_is_unchanged(tmp_path, monkeypatch, units):
    """Without bf16 matrix instructions, float32 and no check; with them, float32's and bf16's top-1 on the same fixed
    images (two of each class per corruption at severity 3), counted in the plan; bf16 only where they are equal."""
    from alternet_hf.data.cifar_c import sources as corruption_sources
    from alternet_hf.hub.cifar100c import write_hub_dataset
    from analysis import robustness

    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (20, 3, 32, 32), dtype=torch.uint8, generator=generator)
    arrays = corruption_sources.save_as_arrays(
        corruption_sources.GeneratedCorruptions(images, torch.arange(20) % 5),
        tmp_path / "arrays",
        corruptions=["fog", "snow"],
    )
    repo = write_hub_dataset(arrays, tmp_path / "repo", "someone/c", corruptions=["fog", "snow"])
    folder = tmp_path / "model"
    tiny = {**rehearsal.REHEARSAL_MODELS["vit-ti"], "num_labels": 5}
    alternet_hf.create_model("vit-ti-cifar100", **tiny).save_pretrained(folder)
    monkeypatch.setattr(robustness, "bf16_matrix_units", lambda: units)
    built, original = [], robustness._classifier  # the evaluation reuses the check's functions (compiled graphs)
    monkeypatch.setattr(robustness, "_classifier", lambda *args: built.append(args[-1]) or original(*args))
    said = []
    paths = release.write_robustness(
        folder, repo, "someone/c", device="cpu", compile=False, budget=None, say=said.append
    )
    plan = json.loads(paths[0].read_text())["plan"]
    if units is None:
        assert plan["precision"] == "float32" and "bf16_check" not in plan and len(said) == 1 and built == [False]
        return
    assert built == [False, True]
    check = plan["bf16_check"]
    assert check["images"] == 2 * 5 * 2 and check["severity"] == 3  # 2 per class, 5 classes, 2 corruptions
    assert abs(check["correct_bf16"] - check["correct_float32"]) <= check["disagreements"] <= check["images"]
    unchanged = check["correct_bf16"] == check["correct_float32"]
    assert plan["precision"] == ("bf16" if unchanged else "float32")
    assert f"{check['disagreements']:,} predictions differ; evaluating in {plan['precision']}" in said[0]


# --- refusals before anything runs ---------------------------------------------------------------------------


def assert_refused(result, *fragments):
    assert result.returncode == 2, result.stdout + result.stderr
    message = result.stderr.lower()
    for fragment in fragments:
        assert fragment.lower() in message, result.stderr


def test_refusals_come_before_any_training(tmp_path):
    base = [*tool_command("release"), "--no-estimate"]
    runs = {
        "bad org": [*base, "--org", "my..org", "--rehearsal", "--dry-run", "out"],
        "no arrays": [*base, "--org", ORG, "--dry-run", "out"],
        "wrong arrays": [*base, "--org", ORG, "--dry-run", "out", "--cifar100c-dir", "."],
        "not cifar100": [*base, "--org", ORG, "--rehearsal", "--dry-run", "out", "--models", "alternet-50-cifar10"],
        "offline": [*base, "--org", ORG, "--without-cifar100c"],
        "no training set": [*base, "--org", ORG, "--without-cifar100c", "--dry-run", "out"],
        "no reference folder": [
            *base,
            "--org",
            ORG,
            "--from-reference",
            "ckpts",
            "--without-cifar100c",
            "--dry-run",
            "out",
        ],
        "no reference files": [*base, "--org", ORG, "--from-reference", "--without-cifar100c", "--dry-run", "out"],
        "bad budget": [*base, "--org", ORG, "--rehearsal", "--dry-run", "out", "--cifar100c-budget", "soon"],
        "bad gap": [*base, "--org", ORG, "--rehearsal", "--dry-run", "out", "--max-accuracy-gap", "0"],
    }
    empty_cache = {"HF_HOME": str(tmp_path / "empty-home"), "HF_DATASETS_CACHE": str(tmp_path / "empty-cache")}
    envs = {
        "offline": {"HF_TOKEN": "hf_x"},  # a token, but no Hub to check it with
        "no training set": empty_cache,  # offline with nothing cached: the dry run stops before writing
        "no reference files": {"ALTERNET_REFERENCE_URL": "http://127.0.0.1:9/v0.1"},  # nothing listens there
    }
    results = {
        name: run_command(argv, cwd=tmp_path, env=offline_env(**envs.get(name, {}))) for name, argv in runs.items()
    }
    assert_refused(results["bad org"], "'my..org' is not a valid hugging face")
    assert_refused(results["no arrays"], "zenodo", "--cifar100c-dir", "--without-cifar100c")
    assert_refused(results["wrong arrays"], "lacks labels.npy", "gaussian_noise.npy")
    assert_refused(results["not cifar100"], "not a cifar-100 preset")
    assert_refused(results["offline"], "cannot be reached", "nothing was trained", "--dry-run")
    assert_refused(results["no training set"], "cifar100 could not be loaded", "nothing was written", "--rehearsal")
    assert_refused(results["no reference folder"], "there is no folder ckpts", *REFERENCE_FILES.values())
    assert_refused(
        results["no reference files"],
        "cannot be reached",
        "nothing was written",
        "--from-reference dir",
        *REFERENCE_FILES.values(),
    )
    assert_refused(results["bad budget"], "'soon' is not a duration", "30m")
    assert_refused(results["bad gap"], "--max-accuracy-gap must be a positive number")
    no_token = run_command(runs["offline"], cwd=tmp_path, env=offline_env(HF_HOME=str(tmp_path / "empty-home")))
    assert_refused(no_token, "no hugging face token", "hf auth login")
    assert not (tmp_path / "out").exists() and not (tmp_path / "outputs").exists()  # nothing written


def test_a_folder_of_another_release_is_refused_unless_overwrite(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / release.MANIFEST).write_text(json.dumps({"release": {"org": "someone-else"}, "steps": {}}))
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    argv = [*tool_command("release"), "--no-estimate", "--org", ORG, "--rehearsal", "--dry-run"]
    for folder, what in (("other", "another release"), ("mine", "files that are not a release")):
        result = run_command([*argv, folder], cwd=tmp_path, env=offline_env())
        assert_refused(result, what, "--overwrite")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    assert json.loads((other / release.MANIFEST).read_text())["release"] == {"org": "someone-else"}
    options = release.ReleaseOptions(org=ORG, out=other, rehearsal=True, dry_run=True, overwrite=True)
    release.check_out_dir(options)  # --overwrite: the other release is deleted before this one starts
    assert list(other.iterdir()) == []
