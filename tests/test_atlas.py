"""`alternet-atlas` as a user runs it, over the local Hub server (`tests/hub_server.py`): tiny models of each kind
(transformers ViT, Swin, ResNet and ConvNeXt, the zoo's AlterNet, timm's ResNet and ViT in timm's Hub format) and a
refused repo, measured by the installed command, killed and resumed, a repo's new commit measured again, the folder
loaded back with `datasets.load_dataset`, its claims computed again from its rows, `--check` catching a row changed by
hand, `--top` over the server's models listing, and a second run on the folder refused; then the Space's *Atlas* tab
on such an atlas, through gradio_client and in a headless Chromium. The claims' tests are checked against scipy's
permutation test and bootstrap."""

import json
import os
import signal
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import hub_server
import numpy as np
import pytest
import torch
from commands import kill_once_written, run_command, start_command, warm_environment
from conftest import TINY, installed_command
from test_any_model import _tiny_vit

import alternet_hf
from alternet_hf.apps import atlas
from alternet_hf.hub.door import limits
from analysis import population

LIMIT = 1_000_000  # parameters: above the tiny models', below `org/big-vit`'s
KINDS = {
    "org/tiny-vit": "attention",
    "org/tiny-swin": "attention",
    "timm/test-vit": "attention",
    "org/tiny-resnet": "convolution",
    "org/tiny-convnext": "convolution",
    "timm/test-resnet": "convolution",
    "zoo/tiny-alternet": "hybrid",
}
REFUSED = {"org/big-vit": "the limit here is 1.0 M", "org/nowhere": "There is no public model"}


def _transformers_model(folder: Path, config, *, size: int = 32) -> None:
    from transformers import AutoModelForImageClassification, ViTImageProcessor

    torch.manual_seed(0)
    AutoModelForImageClassification.from_config(config).save_pretrained(folder)
    ViTImageProcessor(size={"height": size, "width": size}).save_pretrained(folder)


def _timm_model(folder: Path, name: str, size: int) -> None:
    import timm
    from timm.models._hub import save_for_hf

    torch.manual_seed(0)
    model = timm.create_model(name)
    model.pretrained_cfg = {**model.pretrained_cfg, "input_size": (3, size, size)}
    folder.mkdir(parents=True)
    save_for_hf(model, str(folder), safe_serialization=True)


def _build_repos(models: Path) -> dict[str, str]:
    from transformers import ConvNextConfig, ResNetConfig, SwinConfig

    _tiny_vit(models / "org" / "tiny-vit")
    _tiny_vit(models / "org" / "big-vit", hidden=192, layers=6)
    swin = SwinConfig(
        image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4, num_labels=5
    )
    _transformers_model(models / "org" / "tiny-swin", swin)
    resnet = ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], num_labels=5)
    _transformers_model(models / "org" / "tiny-resnet", resnet)
    convnext = ConvNextConfig(num_stages=2, hidden_sizes=[8, 16], depths=[1, 1], num_labels=5)
    _transformers_model(models / "org" / "tiny-convnext", convnext)
    _timm_model(models / "timm" / "test-resnet", "test_resnet", 64)
    _timm_model(models / "timm" / "test-vit", "test_vit", 160)
    torch.manual_seed(0)
    zoo = alternet_hf.create_model("alternet-50-cifar100", **TINY["alternet-50-cifar100"])
    zoo.save_pretrained(models / "zoo" / "tiny-alternet")
    from transformers import ViTImageProcessor

    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(models / "zoo" / "tiny-alternet")
    commits = {f"{path.parent.name}/{path.name}": hub_server.commit(path) for path in models.glob("*/*")}
    for rank, repo in enumerate(("timm/test-resnet", "timm/test-vit", "org/tiny-vit")):
        (models / repo / ".downloads").write_text(str(1000 - rank))  # what --top lists first
    return commits


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    root = tmp_path_factory.mktemp("atlas")
    commits = _build_repos(root / "mirrors" / "models")
    log = root / "fetched.log"
    server, endpoint = hub_server.serve(root / "mirrors", log, "api/models/org/tiny-vit")
    env = {**os.environ, "HF_ENDPOINT": endpoint, "HF_HUB_OFFLINE": "0", "HF_HOME": str(root / "hf-home")}
    env |= {"ALTERNET_SPACE_CACHE": str(root / "answers"), limits.PARAMETERS.variable: str(LIMIT)}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    warm_environment(env)
    yield SimpleNamespace(root=root, env=env, log=log, commits=commits, models=root / "mirrors" / "models")
    server.terminate()
    server.wait(30)


def _atlas(hub, *args, cwd: Path):
    done = run_command([installed_command("alternet-atlas"), *args, "--no-progress"], cwd=cwd, env=hub.env)
    return done


@pytest.mark.commands
def test_an_atlas_is_built_killed_resumed_kept_current_and_loaded_back(hub, tmp_path):
    ids = [*KINDS, *REFUSED]
    out = tmp_path / "atlas"
    command = [installed_command("alternet-atlas"), *ids, "--output-dir", out, "--no-progress"]
    first = start_command(command, cwd=tmp_path, env=hub.env, merge=True)
    kill_once_written(first, out / atlas.DATA_FILE)  # the first model's row is written: killed in the next
    assert first.returncode == -signal.SIGKILL, first.output()[0][-3000:]
    kept = atlas.Atlas(out).rows
    assert 1 <= len(kept) < len(ids)

    (tmp_path / "models.txt").write_text("# the atlas' models\n" + "\n".join(ids[2:]) + "\n\n")
    done = _atlas(hub, *ids[:2], "--from-file", "models.txt", "--output-dir", out, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{len(kept)} unchanged" in done.stdout, done.stdout
    rows = atlas.Atlas(out).rows
    assert set(rows) == set(ids)
    for repo, kind in KINDS.items():
        assert rows[repo]["status"] == "measured" and rows[repo]["kind"] == kind, rows[repo]
        assert rows[repo]["sha"] == hub.commits[repo]
    for repo, reason in REFUSED.items():
        assert rows[repo]["status"] == "refused" and reason in rows[repo]["reason"], rows[repo]
    card = (out / "README.md").read_text()
    assert f"**{len(KINDS)} models measured**" in card and "2 refused" in card and "`org/big-vit`" in card
    assert all(
        (out / figure).is_file() for figure in ("figures/claims.png", "figures/delta_log_amplitude_by_depth.png")
    )

    # loaded back as a Hub dataset is, with the declared features; the claims again from its rows, same seed
    from datasets import load_dataset

    loaded = load_dataset(str(out), split="train")
    assert loaded.features == atlas.features() and len(loaded) == len(ids)
    measured = [row for row in loaded if row["status"] == "measured"]
    again = population.population_claims([atlas.probe_result(row) for row in measured], seed=0)
    written = json.loads((out / atlas.CLAIMS_FILE).read_text())["claims"]
    assert json.loads(json.dumps([claim.to_dict() for claim in again])) == written
    assert {claim["key"] for claim in written} == {
        "msa-low-pass",
        "conv-high-pass",
        "msa-below-conv-same-depth",
        "variance-by-kind",
        "attention-robust-high-frequency",
    }
    assert all(claim["models"] for claim in written)

    # a new commit of one repo: only it is measured again, when the atlas is refreshed without naming any
    _tiny_vit(hub.models / "org" / "tiny-vit", seed=1)
    new = hub_server.commit(hub.models / "org" / "tiny-vit", "new weights")
    before = len(hub.log.read_text().splitlines())
    done = _atlas(hub, "--output-dir", out, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"measured org/tiny-vit at {new[:10]}" in done.stdout and "1 measured" in done.stdout, done.stdout
    assert f"{len(KINDS)} unchanged" in done.stdout  # the other measured ones and the refused org/big-vit
    weights = [line for line in hub.log.read_text().splitlines()[before:] if ".safetensors" in line]
    assert weights and all(line.startswith("models/org/tiny-vit/") for line in weights), weights
    assert atlas.Atlas(out).rows["org/tiny-vit"]["sha"] == new


@pytest.mark.commands
def test_check_catches_a_row_changed_by_hand(hub, tmp_path):
    out = tmp_path / "atlas"
    done = _atlas(hub, "org/tiny-resnet", "timm/test-vit", "--output-dir", out, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    done = _atlas(hub, "--output-dir", out, "--check", "2", cwd=tmp_path)
    assert done.returncode == 0 and "all 2 rows checked agree" in done.stdout, done.stdout + done.stderr[-2000:]

    found = atlas.Atlas(out)
    row = found.rows["timm/test-vit"]
    row["delta_log_amplitude"] = [v + 0.01 if v is not None else v for v in row["delta_log_amplitude"]]
    found.save()
    done = _atlas(hub, "--output-dir", out, "--check", "2", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr[-2000:]
    assert "1 of 2 rows differ" in done.stdout and "timm/test-vit" in done.stdout
    assert "delta_log_amplitude differ" in done.stdout and "org/tiny-resnet" not in done.stdout.split("differ:")[1]


@pytest.mark.commands
def test_top_lists_the_most_downloaded_and_a_second_run_is_refused(hub, tmp_path):
    out = tmp_path / "atlas"
    done = _atlas(hub, "--top", "2", "--library", "timm", "--output-dir", out, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert set(atlas.Atlas(out).rows) == {"timm/test-resnet", "timm/test-vit"}
    requests = Path(f"{hub.log}.requests").read_text()
    assert "GET /api/models" in requests

    from alternet_hf.utils.run_lock import hold_folder

    with hold_folder(out):
        done = _atlas(hub, "org/tiny-vit", "--output-dir", out, cwd=tmp_path)
    assert done.returncode == 2 and "is in use by another run" in done.stderr, done.stderr
    assert set(atlas.Atlas(out).rows) == {"timm/test-resnet", "timm/test-vit"}  # nothing written meanwhile

    rows, claims = (out / atlas.DATA_FILE).read_bytes(), (out / atlas.CLAIMS_FILE).read_bytes()
    done = _atlas(hub, "timm/test-vit", "--output-dir", out, "--push-to", "me/atlas", cwd=tmp_path)
    assert done.returncode == 2 and "error: could not upload the atlas to the Hub" in done.stderr, done.stderr
    assert f"--output-dir {out} --push-to me/atlas` again" in done.stderr.replace("\n", " ")
    assert "1 unchanged" in done.stdout and (out / atlas.DATA_FILE).read_bytes() == rows  # the folder as it was
    assert (out / atlas.CLAIMS_FILE).read_bytes() == claims  # same rows, same seed: the same tests, bit for bit

    done = _atlas(hub, "--library", "keras", "--top", "1", "--output-dir", out, cwd=tmp_path)
    assert done.returncode == 2 and "--library takes transformers and/or timm, not keras" in done.stderr


def test_the_tests_agree_with_scipys():
    from scipy import stats

    rng = np.random.default_rng(1)
    values = rng.normal(-0.3, 0.5, size=9)
    mean, interval, p_value = population.sign_flip_test(values, np.random.default_rng(0))
    expected = stats.permutation_test(
        (values,), np.mean, permutation_type="samples", n_resamples=np.inf, alternative="two-sided"
    )
    assert mean == pytest.approx(values.mean()) and p_value == pytest.approx(expected.pvalue, abs=1e-9)
    bootstrap = stats.bootstrap((values,), np.mean, method="percentile", n_resamples=20000, random_state=0)
    assert interval == pytest.approx(tuple(bootstrap.confidence_interval), abs=0.03)

    a, b = rng.normal(0.2, 0.3, size=12), rng.normal(0.0, 0.3, size=10)
    units = [(i, 0, v, 1) for i, v in enumerate(a)] + [(len(a) + i, 0, v, 0) for i, v in enumerate(b)]
    effect, _, p_value = population.label_shuffle_test(units, population._difference_of_means, rng)
    expected = stats.permutation_test(
        (a, b), lambda x, y: x.mean() - y.mean(), n_resamples=20000, random_state=0, alternative="two-sided"
    )
    assert effect == pytest.approx(a.mean() - b.mean()) and p_value == pytest.approx(expected.pvalue, abs=0.02)


def test_claims_hold_fail_or_stay_undecided_as_the_numbers_say():
    from analysis.probe import ProbeResult

    def result(kinds, amplitude, variance, high_kept):
        frequencies = np.array(population_frequencies)
        kept = np.where(frequencies >= 0.7, high_kept, 1.0)
        return ProbeResult(
            kinds=kinds,
            depth=np.linspace(0, 1, len(kinds)),
            delta_log_amplitude=np.array(amplitude, dtype=float),
            variance=np.array(variance, dtype=float),
            noise_frequencies=frequencies,
            prediction_kept=kept,
            probability_drop=np.zeros(len(frequencies)),
            num_images=8,
            noise_draws=2,
            eps=0.7,
            bandwidth=0.2,
        )

    population_frequencies = [0.1, 0.3, 0.5, 0.7, 0.9]
    rng = np.random.default_rng(0)
    vits = [
        result(
            ["stem", "msa", "mlp", "msa", "mlp"],
            [0, -1, -0.9, -2, -1.8] + rng.normal(0, 0.05, 5),
            [1, 0.5, 1, 0.5, 1],
            0.9,
        )
        for _ in range(8)
    ]
    cnns = [
        result(
            ["stem", "conv", "conv", "conv", "conv"],
            [0, 0.5, 1, 1.5, 2] + rng.normal(0, 0.05, 5),
            [1, 2, 4, 8, 16],
            0.4,
        )
        for _ in range(8)
    ]
    verdicts = {claim.key: claim.verdict for claim in population.population_claims(vits + cnns, seed=0)}
    assert set(verdicts.values()) == {"holds"}, verdicts
    flipped = {claim.key: claim.verdict for claim in population.population_claims(cnns, seed=0)}
    assert flipped["conv-high-pass"] == "holds" and flipped["msa-low-pass"] == "not decidable"
    assert flipped["attention-robust-high-frequency"] == "not decidable"
    noise = [
        result(["stem", "msa", "conv"], [0, v, 0], [1, 1, 1], 0.5) for v in np.random.default_rng(2).normal(0, 1, 6)
    ]
    assert population.population_claims(noise, seed=0)[0].verdict == "undecided — the difference is within the noise"
    same = population.population_claims(vits + cnns, seed=3)
    assert [c.to_dict() for c in same] == [c.to_dict() for c in population.population_claims(vits + cnns, seed=3)]


ATLAS_IDS = [
    "org/tiny-resnet",
    "timm/test-resnet",
    "org/tiny-swin",
    "timm/test-vit",
    "zoo/tiny-alternet",
    "org/big-vit",
]


@pytest.fixture(scope="module")
def space(hub):
    """The Space as `alternet-space --atlas` starts it, on an atlas of some of the models (the others are for a
    visitor to place)."""
    from test_space import free_port, wait_for_page

    folder = hub.root / "space-atlas"
    done = _atlas(hub, *ATLAS_IDS, "--output-dir", folder, cwd=hub.root)
    assert done.returncode == 0, done.stderr[-3000:]
    zoo = hub.root / "zoo-alternet"
    alternet_hf.create_model("alternet-50-cifar100", **TINY["alternet-50-cifar100"]).save_pretrained(zoo)
    port = free_port()
    command = [installed_command("alternet-space"), "--models", f"AlterNet={zoo}", "--port", str(port)]
    process = start_command([*command, "--atlas", folder], cwd=hub.root, env=hub.env, merge=True)
    wait_for_page(process, port, timeout=300)
    yield SimpleNamespace(url=f"http://127.0.0.1:{port}/", folder=folder, process=process)
    process.terminate()
    output = process.communicate(timeout=60)[0]
    assert "Traceback" not in output, output[-3000:]


@pytest.mark.commands
def test_the_atlas_tab_through_the_api(hub, space):
    from gradio_client import Client

    client = Client(space.url, verbose=False)
    plot = client.predict("parameters", "attention_share", api_name="/atlas_scatter")
    data = json.loads(plot["plot"]) if isinstance(plot.get("plot"), str) else plot
    assert "org/tiny-resnet" in json.dumps(data) and "hybrid" in json.dumps(data)

    table = client.predict("VIT", ["attention", "hybrid"], api_name="/atlas_table")
    assert [row[0] for row in table["data"]] == ["timm/test-vit"]
    table = client.predict("", ["not measured"], api_name="/atlas_table")
    assert [row[0] for row in table["data"]] == ["org/big-vit"]

    reading, figure = client.predict("zoo/tiny-alternet", api_name="/atlas_model")
    assert "zoo/tiny-alternet" in reading and "hybrid" in reading and "MSA" in reading
    assert figure["type"] == "matplotlib" and figure["plot"].startswith("data:image")

    reading, figure, plot = client.predict(
        "org/tiny-convnext", "parameters", "high_frequency_kept", api_name="/atlas_place"
    )
    assert "org/tiny-convnext" in reading and "convolution" in reading, reading
    assert figure["type"] == "matplotlib" and figure["plot"].startswith("data:image")
    assert "your model" in json.dumps(plot) and "org/tiny-convnext" in json.dumps(plot)
    reading, figure, _ = client.predict("org/big-vit", "parameters", "high_frequency_kept", api_name="/atlas_place")
    assert reading.startswith("**Not placed.**") and "the limit here is 1.0 M" in reading and figure is None


PLACED_RGB = (0xD6, 0x27, 0x28)  # atlas.PLACED_COLOUR: the scatter's colour for a visitor's model


def _colour_pixels(png: bytes, rgb: tuple[int, int, int], tolerance: int = 80) -> int:
    """How many pixels of a screenshot are of about the colour `rgb` (the points drawn in it, and its legend's)."""
    import io

    from PIL import Image

    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=int)
    return int((np.abs(pixels - np.array(rgb)).max(-1) < tolerance).sum())


@pytest.mark.commands
def test_a_browser_uses_the_atlas_tab(space, tmp_path):
    from test_space import CHROMIUM

    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (apt-get install chromium); .ci/run installs it")
    from playwright.sync_api import expect, sync_playwright

    flags = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=flags)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(space.url)
        page.get_by_role("tab", name="Atlas").click()
        expect(page.get_by_text("5 models", exact=False).first).to_be_visible(timeout=30_000)
        expect(page.locator(".vega-embed").first).to_be_visible(timeout=30_000)  # the scatter, drawn
        expect(page.get_by_text("timm/test-vit").first).to_be_visible()  # the table
        expect(page.get_by_text("The paper's claims across the atlas")).to_be_visible()

        page.get_by_label("Filter by id or architecture").fill("swin")
        expect(page.get_by_text("timm/test-vit").locator("visible=true")).to_have_count(0, timeout=30_000)
        page.get_by_text("org/tiny-swin").locator("visible=true").first.click()  # a row: its curves beside the zoo's
        expect(page.locator(".atlas-figure img[src^='data:image']")).to_have_count(1, timeout=60_000)
        expect(page.get_by_text("ranks", exact=False).first).to_be_visible()

        legend_only = _colour_pixels(page.locator(".vega-embed").first.screenshot(), PLACED_RGB)
        page.get_by_label("Where would my model sit").fill("org/tiny-vit")
        page.get_by_role("button", name="Measure and place").click()
        expect(page.get_by_text("org/tiny-vit has 2 MSA blocks", exact=False)).to_be_visible(timeout=60_000)
        deadline = time.monotonic() + 30  # a bound: the scatter is drawn again, its new point in the placed colour
        while _colour_pixels(page.locator(".vega-embed").first.screenshot(), PLACED_RGB) <= legend_only:
            assert time.monotonic() < deadline, "no point of the placed model's colour in the scatter"
            page.wait_for_timeout(250)
        expect(page.get_by_text("Error", exact=True)).to_have_count(0)
        page.screenshot(path=str(tmp_path / "atlas-tab.png"), full_page=True)
        browser.close()
