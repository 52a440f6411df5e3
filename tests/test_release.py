"""`alternet-release`: the whole release rehearsed offline, killed in the middle and resumed, and every repository
it writes checked the way its user meets it (transformers, pipeline, timm, remote code without the package; the
dataset through `datasets` and `analysis.robustness`; the Space started as Spaces start it, through gradio_client);
and the refusals that come before anything is trained."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from commands import run_command, start_command
from conftest import installed_command
from PIL import Image
from test_space import free_port

import alternet_hf
from alternet_hf import release
from analysis.corruptions import CORRUPTIONS

pytestmark = pytest.mark.commands

ORG = "rehearsal-org"
PRESETS = release.RELEASE_MODELS


def offline_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")}
    return env | {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", **extra}


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


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    """The rehearsal as a user runs it, killed (SIGKILL) while the second model trains, started again to its end,
    then once more (nothing left to do). Returns the folder and the outputs of the three runs."""
    cwd = tmp_path_factory.mktemp("release")
    argv = ["alternet-release", "--org", ORG, "--rehearsal", "--dry-run", "rehearsal"]  # the README's command
    quick = [*argv, "--no-estimate"]
    out = cwd / "rehearsal"
    first = start_command(quick, cwd=cwd, env=offline_env(), merge=True)
    second_model = out / "work" / "train" / PRESETS[1] / "checkpoints"
    wait_for(lambda: second_model.is_dir() and any(second_model.iterdir()), first, 600, "a checkpoint of the 2nd model")
    first.send_signal(signal.SIGKILL)
    first.wait(30)
    killed = manifest(out)["steps"]
    before = {path: (out / path).stat().st_mtime_ns for step in killed.values() for path in step["outputs"]}
    resumed = run_command(quick, cwd=cwd, env=offline_env(), timeout=900)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    again = run_command(argv, cwd=cwd, env=offline_env(), timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    return dict(out=out, cwd=cwd, killed=killed, mtimes=before, resumed=resumed, again=again)


def test_a_killed_release_resumes_at_its_step_and_ends_with_the_same_files(rehearsal):
    out, killed = rehearsal["out"], rehearsal["killed"]
    assert {"stand-in", "dataset", f"train/{PRESETS[0]}"} <= set(killed)  # what was done before the kill
    assert f"train/{PRESETS[1]}" not in killed
    log = rehearsal["resumed"].stdout
    for step in killed:
        assert f"[{step}] complete, skipped" in log
    for path, mtime in rehearsal["mtimes"].items():
        assert (out / path).stat().st_mtime_ns == mtime, f"{path} was written again"
    assert f"resumed from {Path('rehearsal') / 'work' / 'train' / PRESETS[1]}" in log  # from its last checkpoint
    for preset in PRESETS:  # the GPU branches ran on the CPU: inductor (where a C++ compiler is), bf16, channels-last
        config = json.loads((out / "work" / "train" / preset / "training_config.json").read_text())
        assert (config["compile"], config["mixed_precision"], config["channels_last"]) == (
            release.inductor_available(),
            "bf16",
            True,
        )
    assert f"torch.compile {'on' if release.inductor_available() else 'off'}" in log
    steps = manifest(out)["steps"]
    expected = {"stand-in", "dataset", "compare", "space"}
    expected |= {f"{kind}/{p}" for p in PRESETS for kind in ("train", "evaluate", "analyze", "card")}
    assert set(steps) == expected  # a dry run uploads nothing
    for step in steps.values():  # every output is there, as the manifest hashed it
        for path, digest in step["outputs"].items():
            assert release.file_hash(out / path) == digest
    # The third run finds everything complete and changes nothing.
    again = rehearsal["again"].stdout
    assert "0 steps run, 16 already complete" in again
    assert manifest(out)["steps"] == steps
    assert "release summary (rehearsal)" in again and f"{ORG}/alternet-50-cifar100: top-1" in again
    assert "h of training on one H100: an ESTIMATE" in again


def test_every_repository_is_laid_out_as_uploaded(rehearsal):
    out = rehearsal["out"]
    assert sorted(p.name for p in (out / "models").iterdir()) == sorted(PRESETS)
    assert (out / "datasets" / "cifar100-c" / "README.md").is_file()
    assert len(list((out / "datasets" / "cifar100-c" / "data").glob("test-*.parquet"))) == len(CORRUPTIONS)
    space = out / "spaces" / "how-do-vits-work"
    assert {"app.py", "README.md", "requirements.txt", "space.json", "alternet_hf", "analysis", "results"} <= {
        p.name for p in space.iterdir()
    }
    assert not list(space.rglob("__pycache__"))


def card_numbers(folder: Path) -> dict:
    from huggingface_hub import ModelCard

    card = ModelCard.load(folder / "README.md")
    return {(r.dataset_name, r.metric_type): r.metric_value for r in card.data.eval_results}


@pytest.mark.parametrize("preset", PRESETS)
def test_each_card_reports_the_evaluation_files(rehearsal, preset):
    out = rehearsal["out"]
    train = out / "work" / "train" / preset
    clean = json.loads(next(train.glob("eval_*_test.json")).read_text())
    robustness = json.loads((train / "robustness_cifar100-c.json").read_text())
    numbers = card_numbers(out / "models" / preset)
    for metric in ("accuracy", "nll", "ece"):
        assert numbers[(clean["dataset"], metric)] == pytest.approx(clean["metrics"][metric], rel=1e-12)
    assert numbers[("CIFAR-100-C", "accuracy")] == pytest.approx(robustness["mean_accuracy"], rel=1e-12)
    assert robustness["mean_accuracy"] == pytest.approx(np.mean(robustness["accuracy"]))
    assert len(robustness["corruptions"]) == 15 and robustness["severities"] == [1, 2, 3, 4, 5]
    text = (out / "models" / preset / "README.md").read_text()
    for figure in ("training_curves.png", "fourier.png", "robustness_cifar100-c.png", "_reliability.png"):
        assert f"{figure})" in text
    for link in [line.split("](")[1].rstrip(")") for line in text.splitlines() if line.startswith("![")]:
        assert (out / "models" / preset / link).is_file()
    assert "timm.create_model(" in text and "trust_remote_code=True" in text or preset.startswith("vit")


@pytest.mark.parametrize("preset", PRESETS)
def test_each_model_loads_with_transformers_pipeline_and_timm(rehearsal, preset):
    import timm
    from transformers import AutoModelForImageClassification, pipeline

    folder = rehearsal["out"] / "models" / preset
    model = AutoModelForImageClassification.from_pretrained(folder).eval()
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8))
    predictions = pipeline("image-classification", model=str(folder))(image, top_k=3)
    assert len(predictions) == 3 and all(p["label"] in model.config.id2label.values() for p in predictions)
    training = json.loads((rehearsal["out"] / "work" / "train" / preset / "training_config.json").read_text())
    fields = {k: v for k, v in training["model_overrides"].items() if k != "drop_path_rate"}
    architecture, dataset = preset.rsplit("-", 1)
    in_timm = timm.create_model(
        alternet_hf.timm_models.timm_name(architecture, dataset), pretrained=True,
        pretrained_cfg_overlay=dict(file=str(folder / "model.safetensors")), **fields,
    ).eval()  # fmt: skip
    pixels = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(in_timm(pixels), model(pixel_values=pixels).logits)


def test_each_model_loads_with_remote_code_where_alternet_hf_cannot_be_imported(rehearsal):
    folders = [str(rehearsal["out"] / "models" / preset) for preset in PRESETS]
    script = f"""
import sys
sys.modules["alternet_hf"] = None  # the package is not installed for this user
import torch
from transformers import AutoModelForImageClassification, pipeline
for folder in {folders!r}:
    model = AutoModelForImageClassification.from_pretrained(folder, trust_remote_code=True).eval()
    assert type(model).__module__.startswith(("transformers_modules", "transformers.models.vit")), type(model)
    print(type(model).__name__, model(pixel_values=torch.zeros(1, 3, 32, 32)).logits.shape[-1])
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=offline_env())
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["CifarResNetForImageClassification", "100", "ViTForImageClassification", "100",
                                     "AlterNetForImageClassification", "100"]  # fmt: skip


def test_the_dataset_loads_with_datasets_and_the_analyses(rehearsal):
    import datasets

    from analysis.robustness import ParquetCorruptions, load_corruption_source

    folder = rehearsal["out"] / "datasets" / "cifar100-c"
    test = datasets.load_dataset(str(folder), split="test")
    per_set = release.STAND_IN_IMAGES_PER_CLASS["test"] * 100
    assert test.num_rows == len(CORRUPTIONS) * 5 * per_set
    assert set(test.column_names) == {"image", "label", "corruption", "severity"}
    source = load_corruption_source(str(folder))
    assert isinstance(source, ParquetCorruptions) and sorted(source.available()) == sorted(CORRUPTIONS)
    images, labels = next(source.batches("fog", 5, batch_size=64))
    assert images.dtype == torch.uint8 and images.shape == (64, 3, 32, 32) and int(labels.max()) < 100
    arrays = np.load(rehearsal["out"] / "work" / "stand-in" / "CIFAR-100-C" / "fog.npy", mmap_mode="r")
    np.testing.assert_array_equal(images.permute(0, 2, 3, 1).numpy(), arrays[4 * per_set : 4 * per_set + 64])


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


def test_the_space_serves_the_release_models_started_as_spaces_start_it(rehearsal, tmp_path):
    from gradio_client import Client, handle_file

    space = shutil.copytree(rehearsal["out"] / "spaces" / "how-do-vits-work", tmp_path / "space")
    cache = hub_cache_with(
        {f"{ORG}/{preset}": rehearsal["out"] / "models" / preset for preset in PRESETS}, tmp_path / "hub"
    )
    port = free_port()
    env = offline_env(HF_HUB_CACHE=str(cache), GRADIO_SERVER_PORT=str(port), GRADIO_SERVER_NAME="127.0.0.1")
    env.pop("PYTHONPATH", None)
    env.pop("ALTERNET_SPACE_MODELS", None)
    env.pop("ALTERNET_SPACE_RESULTS", None)
    process = start_command([sys.executable, "app.py"], cwd=space, env=env, merge=True, warm=False)
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
        top5s = [o for o in outputs if isinstance(o, dict) and "confidences" in o]
        assert len(top5s) == 3, outputs  # the three rehearsal models, by their Hub ids
        for top5 in top5s:
            assert len(top5["confidences"]) == 5
        curves = outputs[-1]
        assert curves["type"] == "matplotlib"
    finally:
        process.kill()
        process.wait(30)


def test_publishing_after_the_dry_run_uploads_each_repo_and_redoes_nothing(rehearsal, tmp_path, monkeypatch):
    """The same release without --dry-run on the dry run's folder: every step is complete, so only the uploads run
    (the Hub replaced by a recorder: this machine cannot reach it)."""
    import huggingface_hub

    calls = []

    class RecordingApi:
        def create_repo(self, repo_id, **kwargs):
            calls.append(("create", repo_id, kwargs["repo_type"], kwargs.get("space_sdk")))

        def upload_folder(self, *, repo_id, repo_type, folder_path, **kwargs):
            calls.append(("upload", repo_id, repo_type, sorted(p.name for p in Path(folder_path).iterdir())))

    monkeypatch.setattr(huggingface_hub, "HfApi", RecordingApi)
    out = shutil.copytree(rehearsal["out"], tmp_path / "release")
    options = release.ReleaseOptions(org=ORG, out=out, rehearsal=True)
    release.check_out_dir(options)
    lines = []
    runner = release.Release(options, say=lines.append)
    summary = runner.run()
    assert runner.ran == [f"upload/{name}" for name in ("cifar100-c", *PRESETS, "how-do-vits-work")]
    assert len(runner.skipped) == 16
    created = [(repo_id, kind, sdk) for what, repo_id, kind, sdk in calls if what == "create"]
    assert created == [(f"{ORG}/cifar100-c", "dataset", None)] + [(f"{ORG}/{p}", "model", None) for p in PRESETS] + [
        (f"{ORG}/how-do-vits-work", "space", "gradio")
    ]
    uploaded = {repo_id: files for what, repo_id, kind, files in calls if what == "upload"}
    assert (
        "model.safetensors" in uploaded[f"{ORG}/alternet-50-cifar100"]
        and "space.json" in uploaded[f"{ORG}/how-do-vits-work"]
    )
    assert summary["models"][PRESETS[2]]["repo_id"] == f"{ORG}/{PRESETS[2]}"
    again = release.Release(options, say=lines.append)
    again.run()
    assert again.ran == []  # uploaded once


# --- refusals before anything runs ---------------------------------------------------------------------------


def assert_refused(result, *fragments):
    assert result.returncode == 2, result.stdout + result.stderr
    message = result.stderr.lower()
    for fragment in fragments:
        assert fragment.lower() in message, result.stderr


def test_refusals_come_before_any_training(tmp_path):
    base = [installed_command("alternet-release"), "--no-estimate"]
    runs = {
        "bad org": [*base, "--org", "my..org", "--rehearsal", "--dry-run", "out"],
        "no arrays": [*base, "--org", ORG, "--dry-run", "out"],
        "wrong arrays": [*base, "--org", ORG, "--dry-run", "out", "--cifar100c-dir", "."],
        "not cifar100": [*base, "--org", ORG, "--rehearsal", "--dry-run", "out", "--models", "alternet-50-cifar10"],
        "offline": [*base, "--org", ORG, "--without-cifar100c"],
        "no training set": [*base, "--org", ORG, "--without-cifar100c", "--dry-run", "out"],
    }
    empty_cache = {"HF_HOME": str(tmp_path / "empty-home"), "HF_DATASETS_CACHE": str(tmp_path / "empty-cache")}
    envs = {
        "offline": {"HF_TOKEN": "hf_x"},  # a token, but no Hub to check it with
        "no training set": empty_cache,  # offline with nothing cached: the dry run stops before writing
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
    no_token = run_command(runs["offline"], cwd=tmp_path, env=offline_env(HF_HOME=str(tmp_path / "empty-home")))
    assert_refused(no_token, "no hugging face token", "hf auth login")
    assert not (tmp_path / "out").exists() and not (tmp_path / "outputs").exists()  # nothing written


def test_a_folder_of_another_release_is_refused_unless_overwrite(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / release.MANIFEST).write_text(json.dumps({"release": {"org": "someone-else"}, "steps": {}}))
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    argv = ["alternet-release", "--no-estimate", "--org", ORG, "--rehearsal", "--dry-run"]
    for folder, what in (("other", "another release"), ("mine", "files that are not a release")):
        result = run_command([*argv, folder], cwd=tmp_path, env=offline_env())
        assert_refused(result, what, "--overwrite")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    assert json.loads((other / release.MANIFEST).read_text())["release"] == {"org": "someone-else"}
    options = release.ReleaseOptions(org=ORG, out=other, rehearsal=True, dry_run=True, overwrite=True)
    release.check_out_dir(options)  # --overwrite: the other release is deleted before this one starts
    assert not other.exists()
