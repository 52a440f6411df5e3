"""The Space's *Any model* tab as visitors use it, against a Hub-compatible server (`tests/hub_server.py`): a tiny
transformers classifier, a tiny timm model in timm's Hub format, and the repos a public page must refuse (remote
code, gated, missing, over the parameter limit, pickled weights only), one of which gets a new commit. The Space runs
as `alternet-space` does, with `HF_ENDPOINT` at the server; visitors come through gradio_client and a headless
Chromium; the command line takes the same ids. The server's log says which files each step fetched."""

import json
import os
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import hub_server
import numpy as np
import pytest
import torch
from commands import run_command, start_command, warm_environment
from conftest import TINY, installed_command
from test_space import CHROMIUM, free_port

import alternet_hf
from alternet_hf.apps import any_model
from alternet_hf.hub import vetting
from analysis.probe import ProbeResult, photo_inputs, probe

LIMIT = 1_000_000  # parameters: above the tiny models', below `org/too-big`'s
REMOTE_CODE = """import pathlib
pathlib.Path({marker!r}).write_text("imported")  # the test fails if this ever runs
"""


def _tiny_vit(folder: Path, *, seed: int = 0, hidden: int = 32, layers: int = 2) -> None:
    from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessor

    torch.manual_seed(seed)
    config = ViTConfig(
        image_size=32,
        patch_size=8,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=2 * hidden,
        num_labels=5,
    )
    ViTForImageClassification(config).save_pretrained(folder)
    ViTImageProcessor(
        size={"height": 32, "width": 32}, image_mean=[0.4, 0.5, 0.6], image_std=[0.2, 0.25, 0.3]
    ).save_pretrained(folder)


def _build_repos(models: Path, marker: Path) -> dict[str, str]:
    """The repos under `models/<org>/<name>`, committed; {repo id: its commit}."""
    import timm
    from timm.models._hub import save_for_hf

    _tiny_vit(models / "org" / "tiny-vit")
    torch.manual_seed(0)
    (models / "timm" / "test-resnet").mkdir(parents=True)
    resnet = timm.create_model("test_resnet")
    resnet.pretrained_cfg = {**resnet.pretrained_cfg, "input_size": (3, 64, 64)}  # its config's input size: small
    save_for_hf(resnet, str(models / "timm" / "test-resnet"), safe_serialization=True)
    _tiny_vit(models / "org" / "changing", seed=1)
    _tiny_vit(models / "org" / "gated")
    _tiny_vit(models / "org" / "too-big", hidden=192, layers=6)  # 1.8 M parameters
    remote = models / "org" / "remote-code"
    _tiny_vit(remote)
    config = json.loads((remote / "config.json").read_text())
    config |= {"model_type": "marker-net", "architectures": ["MarkerForImageClassification"]}
    config["auto_map"] = {
        "AutoConfig": "configuration_marker.MarkerConfig",
        "AutoModelForImageClassification": "modeling_marker.MarkerForImageClassification",
    }
    (remote / "config.json").write_text(json.dumps(config))
    for name in ("configuration_marker.py", "modeling_marker.py"):
        (remote / name).write_text(REMOTE_CODE.format(marker=str(marker)))
    pickled = models / "org" / "pickled"
    _tiny_vit(pickled)
    from safetensors.torch import load_file

    torch.save(load_file(pickled / "model.safetensors"), pickled / "pytorch_model.bin")
    (pickled / "model.safetensors").unlink()
    commits = {f"{path.parent.name}/{path.name}": hub_server.commit(path) for path in models.glob("*/*")}
    (models / "org" / "gated" / ".status").write_text("401 GatedRepo")  # the server answers as for a gated repo
    return commits


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """The server with the repos, and the Space on it (the zoo's AlterNet, tiny, beside the visitors' models)."""
    root = tmp_path_factory.mktemp("any-model")
    marker = root / "remote-code-ran"
    commits = _build_repos(root / "mirrors" / "models", marker)
    log = root / "fetched.log"
    server, endpoint = hub_server.serve(root / "mirrors", log, "api/models/org/tiny-vit")
    zoo = root / "zoo-alternet"
    alternet_hf.create_model("alternet-50-cifar100", **TINY["alternet-50-cifar100"]).save_pretrained(zoo)
    env = {**os.environ, "HF_ENDPOINT": endpoint, "HF_HUB_OFFLINE": "0", "HF_HOME": str(root / "hf-home")}
    env |= {"ALTERNET_SPACE_CACHE": str(root / "answers"), vetting.MAX_PARAMETERS_VARIABLE: str(LIMIT)}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    warm_environment(env)
    port = free_port()
    space = start_command(
        [installed_command("alternet-space"), "--models", f"AlterNet={zoo}", "--port", str(port)],
        cwd=root,
        env=env,
        merge=True,
    )
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 300  # a bound for a Space that hangs, far above the seconds it takes
    while True:  # the page answers once the models are loaded and the server listens
        assert space.poll() is None, space.output()[0][-3000:]
        try:
            urllib.request.urlopen(f"{url}config", timeout=5).read()
            break
        except OSError:
            assert time.monotonic() < deadline, "the Space did not come up within 300 s"
            time.sleep(0.5)
    yield SimpleNamespace(
        root=root,
        url=url,
        env=env,
        log=log,
        marker=marker,
        commits=commits,
        zoo=zoo,
        models=root / "mirrors" / "models",
    )
    space.terminate()
    output = space.communicate(timeout=60)[0]
    server.terminate()
    server.wait(30)
    assert "Traceback" not in output, output[-3000:]


def _fetched(hub, since: int = 0) -> list[str]:
    return hub.log.read_text().splitlines()[since:] if hub.log.exists() else []


def _ask(hub, model_id: str, revision: str = "") -> tuple[str, list, dict]:
    from gradio_client import Client

    reading, *figures, answer = Client(hub.url, verbose=False).predict(model_id, revision, api_name="/analyse_model")
    return reading, figures, answer


def _library_probe(hub, repo: str) -> ProbeResult:
    """The library's own probe of the repo's files, loaded here without the Hub or the Space."""
    folder = hub.models / repo
    if (folder / "config.json").exists() and "architecture" in json.loads((folder / "config.json").read_text()):
        import timm

        model = timm.create_model("test_resnet", pretrained=False)
        timm.models.load_checkpoint(model, str(folder / "model.safetensors"))
        data = json.loads((folder / "config.json").read_text())["pretrained_cfg"]
        size, mean, std = data["input_size"][-1], data["mean"], data["std"]
    else:
        from transformers import AutoModelForImageClassification

        model = AutoModelForImageClassification.from_pretrained(folder)
        processor = json.loads((folder / "preprocessor_config.json").read_text())
        size, mean, std = processor["size"]["height"], processor["image_mean"], processor["image_std"]
    return probe(model.eval(), photo_inputs(size, mean, std))


def _same_numbers(answer: dict, result: ProbeResult) -> None:
    for field in ("delta_log_amplitude", "variance", "prediction_kept", "probability_drop", "depth"):
        np.testing.assert_allclose(answer[field], getattr(result, field), rtol=1e-5, atol=1e-6, err_msg=field)
    assert answer["kinds"] == result.kinds


@pytest.mark.commands
@pytest.mark.parametrize("repo", ["org/tiny-vit", "timm/test-resnet"])
def test_a_model_is_answered_as_the_library_computes_it_then_from_the_cache(hub, repo):
    before = len(_fetched(hub))
    reading, figures, answer = _ask(hub, repo)
    assert "refused" not in answer, answer
    assert answer["model_id"] == repo and answer["revision"] == hub.commits[repo] and answer["cached"] is False
    assert hub.commits[repo] in reading and "MSA" in reading
    assert all(figure["type"] == "matplotlib" and figure["plot"].startswith("data:image") for figure in figures)
    _same_numbers(answer, _library_probe(hub, repo))
    fetched = {line.split()[0].rsplit("/", 1)[-1] for line in _fetched(hub, before)}
    assert fetched <= {"config.json", "preprocessor_config.json", "model.safetensors"}, fetched

    before = len(_fetched(hub))
    _, _, again = _ask(hub, repo)
    assert again["cached"] is True
    assert {k: v for k, v in again.items() if k not in ("cached", "seconds")} == {
        k: v for k, v in answer.items() if k not in ("cached", "seconds")
    }
    assert not [line for line in _fetched(hub, before) if "model.safetensors" in line]  # no weight byte again


REFUSED = {
    "org/remote-code": "needs code of its own",
    "org/gated": "is gated",
    "org/nowhere": "There is no public model “org/nowhere”",
    "org/too-big": "has 1.8 M parameters; the limit here is 1.0 M",
    "org/pickled": "only as a pickled checkpoint (pytorch_model.bin)",
    "/etc/passwd": "is not a Hub model id",
    "../../etc": "is not a Hub model id",
    "~/.ssh/id_rsa": "is not a Hub model id",
}


@pytest.mark.commands
def test_each_refusal_is_one_sentence_before_any_weight_is_fetched(hub):
    before = len(_fetched(hub))
    for model_id, expected in REFUSED.items():
        reading, figures, answer = _ask(hub, model_id)
        assert expected in answer["refused"] and reading.startswith("**Not analysed.**"), (model_id, answer)
        assert figures == [None, None, None] and "\n" not in answer["refused"] and "Traceback" not in reading
    fetched = _fetched(hub, before)
    whole_weights = [line for line in fetched if line.endswith((".safetensors", ".bin")) or ".py" in line]
    assert not whole_weights, whole_weights  # the over-the-limit repo's header alone was read, as a range
    assert any(line.startswith("models/org/too-big/model.safetensors 0-") for line in fetched), fetched
    assert not hub.marker.exists()  # the remote code never ran
    _, _, answer = _ask(hub, "org/tiny-vit", "no-such-branch")
    assert "has no revision “no-such-branch”" in answer["refused"]


@pytest.mark.commands
def test_a_new_commit_is_analysed_afresh_and_the_old_one_stays_answered(hub):
    _, _, first = _ask(hub, "org/changing")
    folder = hub.models / "org" / "changing"
    _tiny_vit(folder, seed=2)
    second_commit = hub_server.commit(folder, "new weights")
    _, _, second = _ask(hub, "org/changing")
    assert second["revision"] == second_commit != first["revision"] and second["cached"] is False
    assert second["delta_log_amplitude"] != first["delta_log_amplitude"]
    _, _, old = _ask(hub, "org/changing", first["revision"])
    assert old["cached"] is True and old["revision"] == first["revision"]
    assert old["delta_log_amplitude"] == first["delta_log_amplitude"]


@pytest.mark.commands
def test_sixteen_visitors_at_once_each_get_a_whole_answer_or_a_refusal(hub):
    from gradio_client import Client

    ids = ["org/tiny-vit", "timm/test-resnet", "org/remote-code", "org/nowhere"] * 4
    client = Client(hub.url, verbose=False)

    def visit(model_id):
        return model_id, client.predict(model_id, "", api_name="/analyse_model")

    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = list(pool.map(visit, ids))
    for model_id, (reading, *figures, answer) in answers:
        if model_id in REFUSED:
            assert REFUSED[model_id] in answer["refused"] and figures == [None, None, None], reading
        else:
            assert answer["model_id"] == model_id and answer["revision"] == hub.commits[model_id]
            assert len(answer["delta_log_amplitude"]) == len(answer["kinds"]) and len(answer["prediction_kept"]) == 9
            assert all(figure["plot"].startswith("data:image") for figure in figures)


@pytest.mark.commands
def test_the_command_line_takes_the_same_ids_through_the_same_checks(hub, tmp_path):
    _, _, answer = _ask(hub, "org/tiny-vit")
    before = len(_fetched(hub))
    command = [installed_command("alternet-analyze"), "--model", "org/tiny-vit", "--analyses", "probe"]
    done = run_command([*command, "--out", "probe"], cwd=tmp_path, env=hub.env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    written = json.loads((tmp_path / "probe" / "probe.json").read_text())
    assert written["revision"] == hub.commits["org/tiny-vit"]
    _same_numbers(answer, ProbeResult.from_dict(written["result"]))
    assert not [line for line in _fetched(hub, before) if line.endswith("model.safetensors")]  # the Space's cache
    refused = run_command(
        [installed_command("alternet-analyze"), "--model", "org/remote-code", "--analyses", "probe"],
        cwd=tmp_path,
        env=hub.env,
    )
    assert refused.returncode == 2 and "error: “org/remote-code” needs code of its own" in refused.stderr
    assert "Traceback" not in refused.stderr and not hub.marker.exists()


@pytest.mark.commands
def test_a_browser_shows_the_figures_and_a_refusal_without_an_error(hub):
    from playwright.sync_api import expect, sync_playwright

    flags = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking"]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=flags)
        page = browser.new_page()
        page.goto(hub.url)
        page.get_by_role("tab", name="Any model").click()
        figures = page.locator(".any-model-figure img[src^='data:image']")
        page.get_by_label("Hub model id").fill("org/tiny-vit")
        page.get_by_role("button", name="Analyse", exact=True).click()
        expect(page.get_by_text("MSA blocks", exact=False).first).to_be_visible(timeout=60_000)
        expect(figures).to_have_count(3, timeout=30_000)
        page.get_by_label("Hub model id").fill("org/remote-code")
        page.get_by_role("button", name="Analyse", exact=True).click()
        expect(page.get_by_text("Not analysed.")).to_be_visible(timeout=60_000)
        expect(page.get_by_text("Error", exact=True)).to_have_count(0)
        page.screenshot(path=str(hub.root / "any-model-tab.png"), full_page=True)
        browser.close()


# --- the service's parts, without a server ----------------------------------------------------------


def test_model_ids_never_name_a_path_here():
    assert vetting.hub_model_id(" https://huggingface.co/timm/resnet50.a1_in1k ") == "timm/resnet50.a1_in1k"
    assert vetting.hub_model_id("hf-hub:timm/resnet50.a1_in1k") == "timm/resnet50.a1_in1k"
    for text in ("/etc/passwd", "./model", "~/model", "a/../b", "a\\b", "a/b/c", "", "a b/c", "org/" + "x" * 99):
        with pytest.raises(vetting.RefusedModel, match="Hub model id"):
            vetting.hub_model_id(text)


def test_the_cache_keeps_the_most_recently_used_answers(tmp_path):
    cache = any_model.ResultCache(tmp_path, max_bytes=3 * 1100)
    keys = [cache.key("org/m", str(i), {}) for i in range(4)]
    for i, key in enumerate(keys[:3]):
        cache.put(key, {"padding": "x" * 1000, "i": i})
        os.utime(tmp_path / f"{key}.json", (1000 + i, 1000 + i))  # written in this order, a second apart
    assert cache.get(keys[0])["i"] == 0  # used again: now the newest
    cache.put(keys[3], {"padding": "x" * 1000, "i": 3})
    assert [cache.get(key) is not None for key in keys] == [True, False, True, True]
    assert cache.key("org/m", "a", {}) != cache.key("org/m", "b", {})  # a new commit is a new answer
    assert not list(tmp_path.glob(".*partial"))  # written whole


def test_one_analysis_at_a_time_and_a_bounded_line():
    line = any_model.Line(max_waiting=1)
    holding, release, waited = threading.Event(), threading.Event(), []

    def first():
        with line.turn():
            holding.set()
            release.wait(60)

    def second():
        with line.turn(on_wait=waited.append):
            pass

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    threads[0].start()
    holding.wait(60)
    threads[1].start()
    while not waited:  # the second is in the line, told how many are ahead
        time.sleep(0.05)
    with pytest.raises(any_model.Busy, match="1 analyses are waiting"):
        with line.turn():
            pass
    release.set()
    for thread in threads:
        thread.join(60)
    assert waited[0] == 1 and line.waiting == 0


def test_an_analysis_past_its_time_limit_says_so(tmp_path, monkeypatch):
    _tiny_vit(tmp_path / "vit")
    config = json.loads((tmp_path / "vit" / "config.json").read_text())
    vetted = vetting.VettedModel("org/slow", "0" * 40, "transformers", "ViTForImageClassification", 1, config)
    monkeypatch.setattr(vetting, "fetch_model", lambda vetted: tmp_path / "vit")
    service = any_model.AnyModel({}, cache=any_model.ResultCache(tmp_path / "answers", 2**20), time_limit=1e-9)
    with pytest.raises(any_model.TimeLimit, match="took longer than the 0 s this Space gives one model"):
        service._compute(vetted, lambda fraction, what: None)
