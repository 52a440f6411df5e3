"""The Gradio Space: every control through gradio_client, and both tabs clicked through in headless Chromium."""

import json
import shutil
import socket
from pathlib import Path

import pytest
import torch
from conftest import TINY
from PIL import Image

import alternet_hf
from alternet_hf import space as app
from analysis import robustness

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
    source = robustness.GeneratedCorruptions(images, torch.arange(8) % 5)
    result = robustness.evaluate_corruptions(model, source, corruptions=["fog", "contrast"])
    (folder / "results" / "AlterNet").mkdir(parents=True)
    (folder / "results" / "AlterNet" / "robustness.json").write_text(json.dumps({"result": result.to_dict()}))

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
    plot = client.predict(handle_file(str(folder / "photo.png")), 0.8, api_name="/frequency")
    assert plot["type"] == "matplotlib" and plot["plot"].startswith("data:image")
    for corruption in ("fog", "jpeg_compression", "frequency noise"):
        image, alternet, vit, curves = client.predict(
            handle_file(str(folder / "photo.png")), corruption, 5, 0.7, api_name="/robustness"
        )
        assert Image.open(image).size == (256, 256)
        for top5 in (alternet, vit):
            assert len(top5["confidences"]) == 5
            assert sum(c["confidence"] for c in top5["confidences"]) == pytest.approx(1.0, abs=1e-4)
        assert curves["type"] == "matplotlib"
    huge = folder / "huge.png"
    Image.new("RGB", (4100, 10)).save(huge)
    with pytest.raises(Exception, match="limit is 4096"):
        client.predict(handle_file(str(huge)), 0.5, api_name="/frequency")


def test_a_browser_clicks_through_both_tabs(space_url):
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (apt-get install chromium); .ci/run installs it")
    from playwright.sync_api import expect, sync_playwright

    url, folder = space_url
    flags = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync"]  # fmt: skip
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=flags)
        page = browser.new_page()
        page.goto(url)
        expect(page.get_by_text("AlterNetForImageClassification")).to_be_visible(timeout=30_000)
        expect(page.get_by_text("not loaded from")).to_be_visible()  # the missing model is reported

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
