"""The Gradio Space: every control through gradio_client, and both tabs clicked through in headless Chromium."""

import os
import shutil
import socket
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from commands import CommandProcess, run_command, start_command
from conftest import TINY, installed_command
from PIL import Image
from upstream import (
    GRADIO,
    gradio_confidences,
    gradio_describes_a_number,
    gradio_page,
    gradio_parameters,
    gradio_plot,
    naming_versions,
    versions,
)

import alternet_hf
from alternet_hf.apps import space as app
from alternet_hf.data.cifar_c import sources as corruption_sources
from analysis import robustness
from analysis.runner import write_result

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def space_url(tmp_path_factory):
    """The Space on local tiny models (one name points nowhere), with stored robustness results for one."""
    folder = tmp_path_factory.mktemp("space")
    for name in ("alternet-50-cifar100", "vit-ti-cifar100"):
        alternet_hf.create_model(name, **TINY[name]).save_pretrained(folder / name)
    model = alternet_hf.create_model(str(folder / "alternet-50-cifar100"))
    images = torch.randint(0, 256, (8, 3, 16, 16), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    source = corruption_sources.GeneratedCorruptions(images, torch.arange(8) % 5)
    result = robustness.evaluate_corruptions(model, source, corruptions=["fog", "contrast"])
    write_result(folder / "results" / "AlterNet", "robustness", result, {})  # as alternet-analyze writes it

    spec = f"AlterNet={folder / 'alternet-50-cifar100'},ViT={folder / 'vit-ti-cifar100'},Gone={folder / 'missing'}"
    space = app.Space(app.load_models(spec), folder / "results")
    demo = app.build_demo(space)
    port = free_port()
    demo.queue(default_concurrency_limit=2).launch(server_port=port, prevent_thread_lock=True, max_file_size="10mb")
    yield f"http://127.0.0.1:{port}/", folder
    demo.close()


def test_every_control_through_the_api(space_url):
    from gradio_client import Client, handle_file

    url, folder = space_url
    Image.new("RGB", (300, 200), (30, 120, 200)).save(folder / "photo.png")
    client = Client(url, verbose=False)
    gradio_plot(client.predict(handle_file(str(folder / "photo.png")), 0.8, api_name="/frequency"))
    for corruption in ("fog", "jpeg_compression", "frequency noise"):
        image, alternet, vit, curves = client.predict(
            handle_file(str(folder / "photo.png")), corruption, 5, 0.7, api_name="/robustness"
        )
        assert Image.open(image).size == (256, 256)
        for top5 in (alternet, vit):
            confidences = gradio_confidences(top5)
            assert confidences is not None and len(confidences) == 5, f"{versions(*GRADIO)}: {top5}"
            assert sum(confidences) == pytest.approx(1.0, abs=1e-4)
        gradio_plot(curves)
    *_, curves = client.predict(None, "fog", 3, 0.5, api_name="/robustness")  # no image: the stored results alone
    gradio_plot(curves)
    huge = folder / "huge.png"
    Image.new("RGB", (4100, 10)).save(huge)
    with pytest.raises(Exception, match="limit is 4096"):
        client.predict(handle_file(str(huge)), 0.5, api_name="/frequency")


def _resident_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def test_memory_stays_bounded_under_huge_uploads(space_url):
    """A 10000×10000 PNG compresses to a few hundred KB but decodes to 300 MB: it must be refused from its
    header, before any pixel is decoded (the Space runs in this process, so its memory is ours)."""
    from gradio_client import Client, handle_file

    url, folder = space_url
    huge = folder / "bomb.png"
    Image.new("L", (10_000, 10_000)).save(huge, optimize=True)
    assert huge.stat().st_size < 10 * 2**20  # under the upload limit: only the header check stops it
    client = Client(url, verbose=False)
    Image.new("RGB", (300, 200)).save(folder / "small.png")
    client.predict(handle_file(str(folder / "small.png")), 0.5, api_name="/frequency")  # warm up
    before = _resident_mb()
    for _ in range(4):
        with pytest.raises(Exception, match="10000×10000; the limit is 4096"):
            client.predict(handle_file(str(huge)), 0.5, api_name="/frequency")
    assert _resident_mb() - before < 100, f"resident memory grew from {before:.0f} MB to {_resident_mb():.0f} MB"


def test_the_api_takes_the_severity_as_the_documented_integer(space_url):
    from gradio_client import Client, handle_file

    url, folder = space_url
    Image.new("RGB", (64, 64), (90, 160, 30)).save(folder / "leaf.png")
    client = Client(url, verbose=False)
    severity = gradio_parameters(client, "/robustness")["Severity (CIFAR-C, 1-5)"]
    assert gradio_describes_a_number(severity), f"{versions(*GRADIO)} describe the severity otherwise: {severity}"
    client.predict(handle_file(str(folder / "leaf.png")), "fog", 2, 0.5, api_name="/robustness")
    with pytest.raises(Exception, match="integer from 1 to 5, not 2.5"):
        client.predict(handle_file(str(folder / "leaf.png")), "fog", 2.5, 0.5, api_name="/robustness")


def test_the_frequency_marker_slider_and_title_name_one_depth(space_url):
    """Depth 0 is the input image in the slider, the marker and the spectrum's title alike; depth 1 the last block."""
    url, folder = space_url
    Image.new("RGB", (64, 64), (200, 30, 30)).save(folder / "red.png")
    space = app.Space(app.load_models(f"AlterNet={folder / 'alternet-50-cifar100'}"))
    for depth, expected in ((0.0, "(the input image)"), (1.0, "(output of the last block)")):
        figure = space.frequency(str(folder / "red.png"), depth)
        top, bottom = figure.axes[0], figure.axes[1]
        marker = [line for line in top.get_lines() if line.get_color() == "tab:red"][0].get_xdata()[0]
        positions = len(top.get_lines()[0].get_xdata())
        assert marker == round(depth * (positions - 1))
        assert expected in bottom.get_title() and f"at depth {marker}\n" in bottom.get_title()


def test_pit_and_swin_spectra_at_every_depth(tmp_path):
    """The reference's PiT and Swin in the Space: Swin's (B, H, W, C) states are read as maps, and at the last depth
    PiT (whose head is its class token alone) shows its last block with a map, named as the marker names it."""
    Image.new("RGB", (64, 64), (200, 30, 30)).save(tmp_path / "red.png")
    for preset in ("pit-ti-cifar100", "swin-ti-cifar100"):
        alternet_hf.create_model(preset, **TINY[preset]).save_pretrained(tmp_path / preset)
    space = app.Space(app.load_models(f"PiT={tmp_path / 'pit-ti-cifar100'},Swin={tmp_path / 'swin-ti-cifar100'}"))
    assert len(space.ready) == 2
    for depth in (0.0, 0.5, 1.0):
        figure = space.frequency(str(tmp_path / "red.png"), depth)
        spectra = [axes for axes in figure.axes if "log |FFT|" in axes.get_title()]
        for top, bottom in zip(figure.axes[:2], spectra):  # the ΔlogA curves first, one per model
            marker = [line for line in top.get_lines() if line.get_color() == "tab:red"][0].get_xdata()[0]
            assert f"at depth {marker}\n" in bottom.get_title()
            assert bottom.get_images()[0].get_array().ndim == 2


def test_models_that_know_only_digits_get_digit_examples_and_say_so(tmp_path):
    model = alternet_hf.create_model("alternet-18-cifar10", **{**TINY["alternet-18-cifar10"], "num_labels": 10})
    model.config.id2label = {i: str(i) for i in range(10)}
    model.save_pretrained(tmp_path / "digits")
    space = app.Space(app.load_models(f"Digits={tmp_path / 'digits'}"))
    assert app.knows_only_digits(space.ready) and "know only handwritten digits" in space.status()
    examples = app.example_files("digits")
    assert all(Path(p).name.startswith("digit-") for p in examples) and Image.open(examples[0]).size == (32, 32)
    photos = app.Space(app.load_models(f"AlterNet={tmp_path / 'digits'}"))
    photos.ready[0].model.config.id2label = {i: f"class {i}" for i in range(10)}
    assert not app.knows_only_digits(photos.ready) and "handwritten digits" not in photos.status()


def test_the_space_and_training_read_an_image_file_alike(tmp_path):
    """One rule makes any image 8-bit RGB (`alternet_hf.utils.to_rgb`): a 16-bit PNG, a float TIFF and a palette GIF
    read the same to the Space's upload and to the training data's rows, greys scaled over their range, none white."""
    from alternet_hf.data.rows import decode_image

    ramp = np.linspace(0.0, 1.0, 64 * 64).reshape(64, 64)
    palette = Image.fromarray(np.stack([ramp * 255, 255 - ramp * 255, ramp * 128], -1).astype(np.uint8)).quantize(16)
    files = {
        "ramp.png": Image.fromarray((ramp * 65535).astype(np.uint16)),  # I;16
        "ramp.tiff": Image.fromarray(ramp.astype(np.float32), mode="F"),  # floats in 0…1
        "palette.gif": palette,
    }
    for name, image in files.items():
        image.save(tmp_path / name)
        uploaded = np.asarray(app.open_image(str(tmp_path / name)))
        trained = np.asarray(decode_image({"path": str(tmp_path / name), "bytes": None}, source="test", row=0))
        assert uploaded.shape == (64, 64, 3) and np.array_equal(uploaded, trained), name
        expected = np.asarray(palette.convert("RGB")) if name.endswith(".gif") else np.rint(ramp * 255)[..., None]
        assert np.abs(uploaded.astype(int) - expected).max() <= 1, name


def test_the_severity_control_applies_to_corruptions_and_the_frequency_to_noise():
    severity, frequency = app._severity_or_frequency("frequency noise")
    assert severity["interactive"] is False and frequency["interactive"] is True
    severity, frequency = app._severity_or_frequency("fog")
    assert severity["interactive"] is True and frequency["interactive"] is False


def _start_space(cwd: Path, port: int, *args: str, as_on_spaces: bool = False) -> CommandProcess:
    """`alternet-space --port PORT`, or `as_on_spaces`: the Space repo's `python app.py` with Gradio's
    GRADIO_SERVER_PORT, as Hugging Face Spaces starts it."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "ALTERNET_SPACE_MODELS": "", "ALTERNET_SPACE_RESULTS": ""}
    env.pop("ALTERNET_SPACE_MODELS")
    env.pop("ALTERNET_SPACE_RESULTS")
    if as_on_spaces:
        env["GRADIO_SERVER_PORT"] = str(port)
        command = [sys.executable, ROOT / "spaces" / "app.py", *args]
    else:
        command = [installed_command("alternet-space"), "--port", str(port), *args]
    return start_command(command, cwd=cwd, env=env, merge=True)


def wait_for_page(process: CommandProcess, port: int, timeout: float = 240) -> str:
    """The Space's page configuration once it answers at `port` (its models loaded, its server listening); the
    process's output where it exits first, and `timeout` bounds one that hangs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the Space exited with {process.returncode}: {process.output()[0][-3000:]}"
        page = gradio_page(port)
        if page is not None:
            return page
        time.sleep(1)
    raise AssertionError("the Space did not come up")


@pytest.mark.commands
@pytest.mark.parametrize("with_mini_zoo", [False, True], ids=["nothing-local", "mini-zoo"])
def test_the_space_starts_offline_with_no_arguments(tmp_path, with_mini_zoo):
    """`alternet-space` on a fresh machine: the Hub models cannot load, yet the page comes up and says how to
    get models; with the mini-zoo of alternet-reproduce in outputs/mini-zoo/ it shows those instead. Started the
    way Hugging Face Spaces starts it (`python app.py`, GRADIO_SERVER_PORT), it listens where Gradio is told."""
    if with_mini_zoo:
        for family, preset in (("alternet", "alternet-50-cifar100"), ("vit", "vit-ti-cifar100")):
            model = alternet_hf.create_model(preset, **TINY[preset])
            model.save_pretrained(tmp_path / "outputs" / "mini-zoo" / "models" / family)
    port = free_port()
    process = _start_space(tmp_path, port, as_on_spaces=not with_mini_zoo)
    try:
        page = wait_for_page(process, port)
    finally:
        process.terminate()
        output = process.communicate(timeout=60)[0]
    assert "the Hugging Face Hub is unreachable" in page
    if with_mini_zoo:
        assert "Showing the offline mini-zoo" in page and "AlterNetForImageClassification" in page
        assert "alternet top-5" in page and "vit top-5" in page
    else:
        assert "No model could be loaded" in page and "alternet-reproduce" in page and "--models Name=" in page
    assert "Traceback" not in output


@pytest.mark.commands
def test_a_malformed_models_flag_is_a_clear_error(tmp_path):
    completed = run_command(
        [installed_command("alternet-space"), "--models", "just-a-folder"],
        cwd=tmp_path,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert completed.returncode == 2 and "must look like Name=folder_or_hub_id" in completed.stderr
    assert "Traceback" not in completed.stderr
    nowhere = run_command(
        [installed_command("alternet-space"), "--models", "X=nowhere"],
        cwd=tmp_path,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert nowhere.returncode == 2 and "nowhere: neither a folder here nor a Hub id" in nowhere.stderr
    assert "Traceback" not in nowhere.stderr and "Running on" not in nowhere.stdout  # said at once, nothing started


@pytest.mark.commands
def test_a_browser_clicks_through_both_tabs(space_url):
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (apt-get install chromium); .ci/run installs it")
    from playwright.sync_api import expect, sync_playwright

    url, folder = space_url
    flags = [
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ]
    # The page as Gradio builds it (its tabs, gallery items and file URLs), in Debian's Chromium.
    with sync_playwright() as playwright, naming_versions(*GRADIO, "playwright"):
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=flags)
        page = browser.new_page()
        page.goto(url)
        expect(page.get_by_text("AlterNetForImageClassification")).to_be_visible(timeout=30_000)
        expect(page.get_by_text("not loaded from")).to_be_visible()  # the missing model is reported

        # A click before any image is a notice alone: no panel is marked failed, the stored results still show.
        page.get_by_role("button", name="Analyse frequencies").click()
        expect(page.get_by_text(app.NO_IMAGE)).to_be_visible(timeout=30_000)
        page.get_by_role("tab", name="Robustness").click()
        page.get_by_role("button", name="Corrupt and classify").click()
        expect(page.locator("img[src^='data:image']").first).to_be_visible(timeout=30_000)  # the stored curves
        expect(page.get_by_text("Error", exact=True)).to_have_count(0)
        page.get_by_role("tab", name="Frequency").click()
        expect(page.get_by_text("Error", exact=True)).to_have_count(0)

        page.locator(".gallery-item").first.click()  # the astronaut
        page.get_by_role("button", name="Analyse frequencies").click()
        expect(page.locator("img[src^='data:image']").first).to_be_visible(timeout=60_000)

        page.get_by_role("tab", name="Robustness").click()
        page.locator(".gallery-item").nth(len(["astronaut", "coffee", "chelsea", "rocket"]) + 1).click()
        page.wait_for_timeout(2000)  # the example is uploaded to the server before the click may use it
        page.get_by_role("button", name="Corrupt and classify").click()
        expect(page.get_by_text("AlterNet top-5")).to_be_visible()
        expect(page.get_by_text("LABEL_", exact=False).first).to_be_visible(timeout=60_000)
        expect(page.locator("img[src*='gradio_api/file=']").last).to_be_visible(timeout=30_000)
        page.screenshot(path=str(folder / "robustness-tab.png"), full_page=True)
        browser.close()


def test_identical_visitors_at_once_each_get_a_whole_answer(space_url):
    """Many visitors clicking the same example at once is a Space's ordinary day: their outputs are the same image,
    and no reply may be cut short by another request writing that image again while it is being sent."""
    from concurrent.futures import ThreadPoolExecutor

    from gradio_client import Client, handle_file

    url, folder = space_url
    Image.new("RGB", (120, 90), (200, 60, 40)).save(folder / "same.png")
    client = Client(url, verbose=False)

    def visit(_):
        image, *_ = client.predict(handle_file(str(folder / "same.png")), "fog", 3, 0.5, api_name="/robustness")
        with Image.open(image) as opened:
            return np.asarray(opened.convert("RGB"))

    with ThreadPoolExecutor(max_workers=24) as pool:
        answers = list(pool.map(visit, range(48)))
    expected = answers[0]
    assert expected.shape == (256, 256, 3)
    assert all(np.array_equal(answer, expected) for answer in answers)
