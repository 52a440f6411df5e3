"""The Space's *Any model* tab as visitors use it, against a Hub-compatible server (`tests/hub_server.py`): a tiny
transformers classifier, a tiny timm model in timm's Hub format, the repos a public page must refuse (remote code,
gated, missing, over the parameter limit, pickled weights only), one of which gets a new commit, and repos shaped by
an attacker (config fields naming a local file or a kernel repo, a config bigger than its weights, damaged and
padded weight files, an unlisted file, an oversized input). The Space runs as `alternet-space` does, with
`HF_ENDPOINT` at the server; visitors come through gradio_client and a headless Chromium; the command line takes the
same ids. The server's logs say which files each step fetched and what was asked for."""

import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import hub_server
import numpy as np
import pytest
import torch
from commands import run_command, start_command, warm_environment
from conftest import TINY, installed_command
from test_space import CHROMIUM, free_port, wait_for_page

import alternet_hf
from alternet_hf.apps import any_model
from alternet_hf.hub.door import ids, limits, worker
from alternet_hf.hub.door.refusals import RefusedModel
from analysis.probe import ProbeResult, photo_inputs, probe

LIMIT = 1_000_000  # parameters: above the tiny models', below `org/too-big`'s
PADDING = 3 << 20  # bytes appended to a checked file, or in a file no index lists
REMOTE_CODE = """import pathlib
pathlib.Path({marker!r}).write_text("imported")  # the test fails if this ever runs
"""


def _tiny_vit(folder: Path, *, seed: int = 0, hidden: int = 32, layers: int = 2, shard: str | None = None) -> None:
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
    ViTForImageClassification(config).save_pretrained(folder, **({"max_shard_size": shard} if shard else {}))
    ViTImageProcessor(
        size={"height": 32, "width": 32}, image_mean=[0.4, 0.5, 0.6], image_std=[0.2, 0.25, 0.3]
    ).save_pretrained(folder)


def _raw_safetensors(path: Path, header: dict, data: bytes) -> None:
    """A file in safetensors' layout with whatever header and data an attacker writes."""
    encoded = json.dumps(header).encode()
    path.write_bytes(len(encoded).to_bytes(8, "little") + encoded + data)


def _hostile_repos(models: Path, secret: Path) -> None:
    """Repos shaped by an attacker, most of them an honest repo with one thing changed (see HOSTILE)."""
    import shutil

    import timm
    from timm.models._hub import save_for_hf

    def copy(source: str, name: str) -> Path:
        target = models / "evil" / name
        shutil.copytree(models / source, target, ignore=shutil.ignore_patterns(".git"))
        return target

    def edit(folder: Path, file: str, **fields) -> None:
        values = json.loads((folder / file).read_text())
        values.update(fields)
        (folder / file).write_text(json.dumps(values))

    edit(copy("timm/test-resnet", "local-file"), "config.json", model_args={"checkpoint_path": str(secret)})
    folder = copy("timm/test-resnet", "timm-wrapper")
    config = json.loads((folder / "config.json").read_text())
    config |= {"model_type": "timm_wrapper", "architectures": ["TimmWrapperForImageClassification"]}
    config["model_args"] = {"checkpoint_path": str(secret)}
    (folder / "config.json").write_text(json.dumps(config))
    edit(copy("org/tiny-vit", "kernel"), "config.json", attn_implementation="kernels-community/evil-kernel")
    edit(copy("org/tiny-vit", "bigger-config"), "config.json", hidden_size=2048, num_hidden_layers=8)
    for name, shape in (("negative-shape", [-1, 5]), ("overflowing-shape", [2**62, 2**62])):
        header = {"w": {"dtype": "F32", "shape": shape, "data_offsets": [0, 20]}}
        _raw_safetensors(copy("org/tiny-vit", name) / "model.safetensors", header, bytes(20))
    with (copy("org/tiny-vit", "padded") / "model.safetensors").open("ab") as file:
        file.write(bytes(PADDING))
    header = {"x": {"dtype": "U8", "shape": [PADDING], "data_offsets": [0, PADDING]}}
    _raw_safetensors(copy("org/tiny-vit", "unlisted") / "extra.safetensors", header, bytes(PADDING))
    for name, shard in (("index-outside", "../../../secret.safetensors"), ("index-folder", "sub/model.safetensors")):
        folder = copy("org/sharded", name)
        index = json.loads((folder / "model.safetensors.index.json").read_text())
        index["weight_map"] = {key: shard for key in index["weight_map"]}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    torch.manual_seed(0)
    resnet = timm.create_model("test_resnet")
    resnet.pretrained_cfg = {**resnet.pretrained_cfg, "input_size": (3, 3000, 3000)}
    save_for_hf(resnet, str(models / "evil" / "huge-input"), safe_serialization=True)


def _build_repos(models: Path, marker: Path, secret: Path) -> dict[str, str]:
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
    _tiny_vit(models / "org" / "sharded", shard="40KB")  # model.safetensors.index.json and its shards
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
    _hostile_repos(models, secret)
    commits = {f"{path.parent.name}/{path.name}": hub_server.commit(path) for path in models.glob("*/*")}
    (models / "org" / "gated" / ".status").write_text("401 GatedRepo")  # the server answers as for a gated repo
    return commits


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """The server with the repos, and the Space on it (the zoo's AlterNet, tiny, beside the visitors' models)."""
    root = tmp_path_factory.mktemp("any-model")
    marker = root / "remote-code-ran"
    secret = root / "secret.pth"  # a file of this machine that a visitor's config names: it must never be read
    torch.save({"weight": torch.zeros(1)}, secret)
    os.utime(secret, (1_000_000, 2_000_000))  # read once, and its access time would move past its change time
    commits = _build_repos(root / "mirrors" / "models", marker, secret)
    log = root / "fetched.log"
    server, endpoint = hub_server.serve(root / "mirrors", log, "api/models/org/tiny-vit")
    zoo = root / "zoo-alternet"
    alternet_hf.create_model("alternet-50-cifar100", **TINY["alternet-50-cifar100"]).save_pretrained(zoo)
    env = {**os.environ, "HF_ENDPOINT": endpoint, "HF_HUB_OFFLINE": "0", "HF_HOME": str(root / "hf-home")}
    env |= {"ALTERNET_SPACE_CACHE": str(root / "answers"), limits.PARAMETERS.variable: str(LIMIT)}
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
    wait_for_page(space, port, timeout=300)
    yield SimpleNamespace(
        space=space,
        secret=secret,
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


def _requests(hub, since: int = 0) -> list[str]:
    log = Path(f"{hub.log}.requests")
    return log.read_text().splitlines()[since:] if log.exists() else []


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
@pytest.mark.parametrize("repo", ["org/tiny-vit", "timm/test-resnet", "org/sharded"])
def test_a_model_is_answered_as_the_library_computes_it_then_from_the_cache(hub, repo):
    before = len(_fetched(hub))
    reading, figures, answer = _ask(hub, repo)
    assert "refused" not in answer, answer
    assert answer["model_id"] == repo and answer["revision"] == hub.commits[repo] and answer["cached"] is False
    assert hub.commits[repo] in reading and "MSA" in reading
    assert all(figure["type"] == "matplotlib" and figure["plot"].startswith("data:image") for figure in figures)
    _same_numbers(answer, _library_probe(hub, repo))
    fetched = {line.split()[0].rsplit("/", 1)[-1] for line in _fetched(hub, before)}
    index = hub.models / repo / "model.safetensors.index.json"
    weights = set(json.loads(index.read_text())["weight_map"].values()) | {index.name} if index.exists() else set()
    assert fetched <= {"config.json", "preprocessor_config.json", "model.safetensors", *weights}, fetched
    assert len(weights) < 3 or weights <= fetched  # a sharded repo: every shard the index lists, and only those

    before = len(_fetched(hub))
    _, _, again = _ask(hub, repo)
    assert again["cached"] is True
    assert {k: v for k, v in again.items() if k not in ("cached", "seconds")} == {
        k: v for k, v in answer.items() if k not in ("cached", "seconds")
    }
    assert not [line for line in _fetched(hub, before) if ".safetensors" in line]  # no weight byte again
    assert not list((hub.root / "hf-home").rglob(f"models--{repo.replace('/', '--')}/snapshots/*/*.safetensors"))


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


# What an attacker's repo or revision meets: {id or (id, revision): a fragment of its one sentence}.
HOSTILE = {
    "evil/local-file": "has “checkpoint_path” naming a file, a repo or code",
    "evil/timm-wrapper": "has “checkpoint_path” naming a file, a repo or code",
    "evil/kernel": "has “attn_implementation” naming a file, a repo or code",
    "evil/bigger-config": "do not fit the architecture its config describes",
    "evil/negative-shape": "is not a well-formed safetensors file",
    "evil/overflowing-shape": "is not a well-formed safetensors file",
    "evil/padded": "is not a well-formed safetensors file",
    "evil/index-outside": "is not a list of safetensors files inside the repo",
    "evil/index-folder": "is not a list of safetensors files inside the repo",
    ("org/tiny-vit", "/dev/zero"): "is not a revision",
    ("org/tiny-vit", "../../../etc"): "is not a revision",
    ("org/tiny-vit", "main\\..\\x"): "is not a revision",
    ("org/tiny-vit", "main\x00"): "is not a revision",
    ("org/tiny-vit", "b" * 200): "is not a revision",
    ("http://huggingface.co/org/tiny-vit/tree/main", "other"): "names the revision “main” and another was given",
}


def _space_memory(hub) -> int:
    """The Space process's resident bytes (its workers are processes of their own)."""
    status = Path(f"/proc/{hub.space.pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1]) * 1024


@pytest.mark.commands
def test_an_attackers_repo_is_refused_in_a_sentence_reading_nothing_it_names(hub):
    before, asked = len(_fetched(hub)), len(_requests(hub))
    for target, expected in HOSTILE.items():
        model_id, revision = target if isinstance(target, tuple) else (target, "")
        reading, figures, answer = _ask(hub, model_id, revision)
        assert expected in answer.get("refused", ""), (target, answer)
        assert figures == [None, None, None] and "\n" not in answer["refused"] and "Traceback" not in reading
        assert str(hub.root) not in reading and "/tmp" not in reading and ".cache" not in reading, reading
    assert os.stat(hub.secret).st_atime == 1_000_000  # the local file a config named was never opened
    assert not [line for line in _requests(hub, asked) if "evil-kernel" in line]  # nor the kernel repo asked for
    fetched = _fetched(hub, before)
    assert not [line for line in fetched if line.endswith(".safetensors")], fetched  # headers only, as ranges
    padded = [line for line in fetched if line.startswith("models/evil/padded/model.safetensors")]
    assert padded and all(" 0-" in line or " 8-" in line for line in padded), padded
    assert _space_memory(hub) < 3e9
    _, _, answer = _ask(hub, "org/tiny-vit")  # a real model is still answered
    assert "refused" not in answer and answer["revision"] == hub.commits["org/tiny-vit"]


@pytest.mark.commands
def test_only_checked_bytes_are_fetched_and_an_oversized_input_is_capped(hub):
    before = len(_fetched(hub))
    reading, _, answer = _ask(hub, "evil/unlisted")
    assert "refused" not in answer, answer
    assert not [line for line in _fetched(hub, before) if "extra.safetensors" in line]
    assert not list((hub.root / "hf-home").rglob("extra.safetensors"))  # nor kept in the cache
    reading, _, answer = _ask(hub, "evil/huge-input")
    assert answer["image_size"] == 448 and "analysed at 448 px, the cap here (it asks for 3000 px)" in reading
    blobs = [path for path in (hub.root / "hf-home").rglob("blobs/*") if path.is_file()]
    assert max(path.stat().st_size for path in blobs) < PADDING  # no padded or unlisted file was ever stored


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
def test_twenty_visitors_at_once_honest_and_hostile_each_get_a_whole_answer_or_a_refusal(hub):
    from gradio_client import Client

    ids = ["org/tiny-vit", "timm/test-resnet", "org/remote-code", "org/nowhere", "evil/bigger-config", "evil/padded"]
    ids = (ids * 4)[:20]
    client = Client(hub.url, verbose=False)

    def visit(model_id):
        return model_id, client.predict(model_id, "", api_name="/analyse_model")

    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = list(pool.map(visit, ids))
    for model_id, (reading, *figures, answer) in answers:
        if model_id in REFUSED or model_id in HOSTILE:
            expected = REFUSED.get(model_id) or HOSTILE[model_id]
            assert expected in answer["refused"] and figures == [None, None, None], reading
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
    # the Space kept no weights: the command fetched the checked file, once and whole
    assert [line for line in _fetched(hub, before) if line.endswith("model.safetensors")] == [
        "models/org/tiny-vit/model.safetensors"
    ]
    refused = run_command(
        [installed_command("alternet-analyze"), "--model", "org/remote-code", "--analyses", "probe"],
        cwd=tmp_path,
        env=hub.env,
    )
    assert refused.returncode == 2 and "error: “org/remote-code” needs code of its own" in refused.stderr
    assert "Traceback" not in refused.stderr and not hub.marker.exists()
    for model_id, expected in (
        ("evil/bigger-config", HOSTILE["evil/bigger-config"]),
        ("timm:hf-hub:evil/local-file", "naming a file"),
    ):
        refused = run_command(
            [installed_command("alternet-analyze"), "--model", model_id, "--analyses", "probe"],
            cwd=tmp_path,
            env=hub.env,
        )
        assert refused.returncode == 2 and expected in refused.stderr and "Traceback" not in refused.stderr
    assert os.stat(hub.secret).st_atime == 1_000_000
    offline = {**hub.env, "HF_HUB_OFFLINE": "1"}  # the cache's lookup joins a revision into a path: never this one
    for revision in ("/dev/zero", "../../../../etc/passwd"):
        refused = run_command([*command, "--revision", revision], cwd=tmp_path, env=offline, timeout=600)
        assert refused.returncode == 2 and "is not a revision" in refused.stderr, refused.stderr[-2000:]
    done = run_command([*command, "--out", "offline"], cwd=tmp_path, env=offline, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]  # the checked files, from the cache, checked again


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


def test_model_ids_and_revisions_never_name_a_path_here():
    assert ids.hub_model_id(" https://huggingface.co/timm/resnet50.a1_in1k ") == "timm/resnet50.a1_in1k"
    assert ids.hub_model_id("hf-hub:timm/resnet50.a1_in1k") == "timm/resnet50.a1_in1k"
    for text in ("/etc/passwd", "./model", "~/model", "a/../b", "a\\b", "a/b/c", "", "a b/c", "org/" + "x" * 99):
        with pytest.raises(RefusedModel, match="Hub model id"):
            ids.hub_model_id(text)
    sha = "0123456789abcdef" * 2 + "01234567"
    assert ids.model_reference("https://huggingface.co/org/m/tree/v1.0") == ("org/m", "v1.0")
    assert ids.model_reference("org/m/tree/refs%2Fpr%2F3", "refs/pr/3") == ("org/m", "refs/pr/3")
    assert ids.model_reference("org/m", sha) == ("org/m", sha) and ids.hub_revision("  ") is None
    for revision in ("/dev/zero", "..", "a/../b", "a\\b", "main\x00", "a//b", "x/", "x.lock", "-x", "é", "b" * 129):
        with pytest.raises(RefusedModel, match="is not a revision"):
            ids.hub_revision(revision)


def _header(tensors: dict) -> bytes:
    return json.dumps(tensors).encode()


def test_a_safetensors_header_is_accepted_only_when_every_byte_is_accounted_for():
    from alternet_hf.hub.door.weights import compare, parse_header

    good = {
        "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
        "b": {"dtype": "I64", "shape": [], "data_offsets": [24, 32]},
    }
    encoded = _header(good)
    prefix = len(encoded).to_bytes(8, "little")
    header = parse_header("o/m", "model.safetensors", prefix, encoded, 8 + len(encoded) + 32)
    assert header.tensors == {"a": ("F32", (2, 3)), "b": ("I64", ())} and header.parameters == 7
    broken = [
        {**good, "a": {**good["a"], "shape": [-2, -3]}},  # negative: a product that fits
        {**good, "a": {**good["a"], "shape": [2**40, 2**40, 0]}, "b": {**good["b"], "data_offsets": [0, 8]}},
        {**good, "a": {**good["a"], "data_offsets": [8, 32]}},  # a gap, and a wrong size
        {**good, "b": {**good["b"], "data_offsets": [16, 24]}},  # overlapping
        {**good, "a": {**good["a"], "dtype": "F4"}},
        {**good, "a": {**good["a"], "shape": [2, 3.0]}},
        {**good, "a": {**good["a"], "extra": 1}},
    ]
    for tensors in broken:
        encoded = _header(tensors)
        with pytest.raises(RefusedModel, match="not a well-formed safetensors file"):
            parse_header("o/m", "model.safetensors", len(encoded).to_bytes(8, "little"), encoded, 8 + len(encoded) + 32)
    encoded = _header(good)
    for size in (8 + len(encoded) + 31, 8 + len(encoded) + 33):  # truncated, padded
        with pytest.raises(RefusedModel, match="not a well-formed"):
            parse_header("o/m", "model.safetensors", prefix, encoded, size)
    expected = {"a": (True, (2, 3)), "b": (False, ())}
    assert compare("o/m", [header], expected) == 7
    for wrong in ({"a": (True, (3, 2)), "b": (False, ())}, {"a": (True, (2, 3))}, {**expected, "c": (True, (1,))}):
        with pytest.raises(RefusedModel, match="do not fit the architecture"):
            compare("o/m", [header], wrong)


def test_configs_give_only_checked_architecture_fields():
    from alternet_hf.hub.door.configs import timm_config, transformers_config

    vit = {
        "model_type": "vit",
        "architectures": ["ViTForImageClassification"],
        "hidden_size": 32,
        "id2label": {"0": "a", "1": "b"},
    }
    allowed = transformers_config(
        "o/m", {**vit, "attn_implementation": "sdpa", "_name_or_path": "x", "torch_dtype": "float16"}
    )
    assert allowed.arguments == {"hidden_size": 32} and allowed.num_labels == 2
    for field, value in (("attn_implementation", "org/kernel"), ("quantization_config", "/a/b")):
        with pytest.raises(RefusedModel, match=f"has “{field}” naming a file"):
            transformers_config("o/m", {**vit, field: value})
    with pytest.raises(RefusedModel, match="“hidden_act” set to something"):
        transformers_config("o/m", {**vit, "hidden_act": "../../x"})
    allowed = timm_config(
        "o/m", {"architecture": "test_resnet", "num_classes": 3, "model_args": {"drop_path_rate": 0.1}}
    )
    assert allowed.arguments == {"drop_path_rate": 0.1} and allowed.num_labels == 3
    for model_args in (
        {"checkpoint_path": "x"},
        {"pretrained_cfg_overlay": {}},
        {"cache_dir": "x"},
        {"drop_rate": {"a": 1}},
    ):
        with pytest.raises(RefusedModel):
            timm_config("o/m", {"architecture": "test_resnet", "num_classes": 3, "model_args": model_args})


def test_a_worker_past_its_memory_or_time_is_stopped_and_the_next_is_served():
    import worker_jobs

    with pytest.raises(worker.WorkerStopped, match="needed more than the 0.5 GB of memory"):
        worker.run_in_worker(worker_jobs.hoard_memory, what="o/m", seconds=120, memory_bytes=0.5e9)
    with pytest.raises(worker.WorkerStopped, match="needed more than the 2 s"):
        worker.run_in_worker(worker_jobs.run_for_ever, what="o/m", seconds=2, memory_bytes=2e9)
    with pytest.raises(worker.WorkerStopped, match="stopped before it finished"):
        worker.run_in_worker(worker_jobs.die, what="o/m", seconds=60, memory_bytes=2e9)
    with pytest.raises(RefusedModel, match="a sentence of the job's"):
        worker.run_in_worker(worker_jobs.refuse, what="o/m", seconds=60, memory_bytes=2e9)
    with pytest.raises(worker.WorkerStopped, match="passed the checks but could not be analysed") as failed:
        worker.run_in_worker(worker_jobs.fail, what="o/m", seconds=60, memory_bytes=2e9)
    assert "/secret/path" not in str(failed.value)
    steps = []
    assert worker.run_in_worker(
        worker_jobs.answer, what="o/m", seconds=60, memory_bytes=2e9, on_step=lambda *s: steps.append(s)
    ) == {"answer": 42}
    assert steps == [(0.5, "halfway")]


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


def _result(kinds: list[str], amplitude: list[float], variance: list[float], kept: list[float]) -> ProbeResult:
    return ProbeResult(
        kinds=kinds,
        depth=np.linspace(0, 1, len(kinds)),
        delta_log_amplitude=np.array(amplitude),
        variance=np.array(variance),
        noise_frequencies=np.array([0.1, 0.2, 0.3, 0.5, 0.7, 0.8, 0.9]),
        prediction_kept=np.array(kept),
        probability_drop=np.zeros(len(kept)),
        num_images=8,
        noise_draws=2,
        eps=0.7,
        bandwidth=0.2,
    )


def test_a_reading_calls_an_effect_only_where_it_is_clear_of_its_uncertainty():
    """By the comparison report's rule (two standard errors over the blocks, binomial over the noisy images)."""
    import timm

    from analysis.probe import probe_reading

    torch.manual_seed(0)
    untrained = timm.create_model("resnet18").eval()  # residual branches start at zero: its blocks change nothing
    reading = probe_reading("r", probe(untrained, photo_inputs(64, (0.5,) * 3, (0.25,) * 3)))
    assert "changes by +0.00 ± 0.00 on average: they leave them as they are; the paper finds convolutional" in reading
    assert "blocks do not clearly change the feature-map variance" in reading and "as the paper" not in reading
    kinds = ["input", "stem", "msa", "conv", "msa", "conv"]
    clear = _result(kinds, [0, 0, -1.0, -0.5, -1.6, -1.0], [1, 1, 0.5, 1.0, 0.45, 1.0], [1, 1, 1, 1, 0.2, 0.2, 0.2])
    reading = probe_reading("m", clear)
    assert (
        "Across its MSA blocks the high-frequency amplitude (ΔlogA at π) changes by -1.05 ± 0.10 on average" in reading
    )
    assert "they act as a low-pass filter, as the paper finds." in reading
    assert "they act as a high-pass filter, as the paper finds." in reading
    assert (
        "Its MSA blocks lower the feature-map variance" in reading and "high-frequency noise hurts it more." in reading
    )
    against = _result(kinds, [0, 0, 1.0, 0.5, 1.6, 1.0], [1, 1, 2.0, 1.0, 4.2, 2.0], [0.5] * 7)
    reading = probe_reading("m", against)
    assert "act as a high-pass filter, against the paper, which finds MSA blocks to be low-pass filters." in reading
    assert (
        "Its MSA blocks raise the feature-map variance" in reading
        and "no clear difference between the bands" in reading
    )
