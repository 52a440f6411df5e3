"""Hub datasets over HTTP, as the commands read the Hub: a Hub-compatible server (`tests/hub_server.py`, olah on local
git repos) serves a dataset repo in the Hub's layout (parquet shards per split, a card naming them), the commands
run with `HF_ENDPOINT` pointing at it and a fresh cache, and the server's log says which files each fetched."""

import json
import os
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import hub_server
import numpy as np
import pytest
from commands import run_command, warm_environment
from conftest import TINY
from test_space import free_port
from upstream import versions

pytestmark = pytest.mark.commands

REPO = "org/digits"
CARD = """---
configs:
- config_name: default
  data_files:
  - split: train
    path: data/train-*.parquet
  - split: validation
    path: data/validation-*.parquet
---
# digits, in the Hub's layout
"""


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """The server, serving `org/digits`: the embedded digits' training split in three shards, its test split as
    `validation`; and a tiny model that classifies them."""
    import alternet_hf
    from alternet_hf.data.sources import load_image_classification

    root = tmp_path_factory.mktemp("hub")
    repo = root / "mirrors" / "datasets" / REPO
    (repo / "data").mkdir(parents=True)
    train = load_image_classification("digits", split="train")
    for shard, rows in enumerate(np.array_split(np.arange(len(train)), 3)):
        train.select(rows).to_parquet(str(repo / "data" / f"train-{shard:05d}-of-00003.parquet"))
    load_image_classification("digits", split="test").to_parquet(
        str(repo / "data" / "validation-00000-of-00001.parquet")
    )
    (repo / "README.md").write_text(CARD)
    hub_server.commit(repo, "digits")

    overrides = {**TINY["alternet-18-cifar10"], "num_labels": 10}
    overrides |= {"id2label": {i: str(i) for i in range(10)}, "label2id": {str(i): i for i in range(10)}}
    model = root / "model"
    alternet_hf.create_model("alternet-18-cifar10", **overrides).save_pretrained(model)

    log = root / "fetched.log"
    server, endpoint = hub_server.serve(root / "mirrors", log, f"api/datasets/{REPO}")
    yield SimpleNamespace(endpoint=endpoint, log=log, repo=repo, model=model, root=root, home=root / "hf-home")
    server.terminate()
    server.wait(30)


def fetch(hub, argv: list[str], cwd: Path):
    """Run a command against the server with an empty cache (`hub.home`, emptied first: one environment for all,
    whose commands are forked from one warm interpreter); (its result, the files it fetched)."""
    before = hub.log.read_text().splitlines() if hub.log.exists() else []
    shutil.rmtree(hub.home, ignore_errors=True)
    env = {**os.environ, "HF_ENDPOINT": hub.endpoint, "HF_HUB_OFFLINE": "0", "HF_DATASETS_OFFLINE": "0"}
    env["HF_HOME"] = str(hub.home)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"  # the installed commands
    warm_environment(env)
    result = run_command(argv, cwd=cwd, env=env, timeout=600)
    after = hub.log.read_text().splitlines() if hub.log.exists() else []
    return result, [line.removeprefix(f"datasets/{REPO}/") for line in after[len(before) :]]


def test_evaluating_the_validation_split_fetches_no_training_file(hub, tmp_path):
    """The validation split alone is fetched (the card and its one file), and it scores what the same files score
    read from a local folder."""
    argv = ["alternet-evaluate", "--model", str(hub.model), "--split", "validation"]
    result, fetched = fetch(hub, [*argv, "--dataset", REPO, "--output", "from-hub"], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "data/validation-00000-of-00001.parquet" in fetched
    assert not [name for name in fetched if "train-" in name], fetched
    local = run_command([*argv, "--dataset", str(hub.repo), "--output", "local"], cwd=tmp_path)
    assert local.returncode == 0, local.stderr[-3000:]
    (from_hub,), (from_folder,) = (list((tmp_path / out).glob("eval_*.json")) for out in ("from-hub", "local"))
    hub_metrics, local_metrics = (json.loads(path.read_text()) for path in (from_hub, from_folder))
    assert hub_metrics["num_images"] == local_metrics["num_images"] == 360
    assert hub_metrics["metrics"] == local_metrics["metrics"]

    # The same split streamed (never prepared on disk) scores the same.
    (tmp_path / "streaming").mkdir()
    result, fetched = fetch(hub, [*argv, "--dataset", REPO, "--streaming", "--output", "out"], tmp_path / "streaming")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "360 images, streamed" in result.stdout
    assert not [name for name in fetched if "train-" in name], fetched
    streamed = json.loads((tmp_path / "streaming" / "out" / from_hub.name).read_text())
    assert streamed["num_images"] == 360 and streamed["metrics"] == hub_metrics["metrics"]
    assert not list((tmp_path / "streaming").rglob("*.arrow")), "a streamed split was prepared on disk"


def test_a_seeded_sample_reads_a_few_files_of_a_large_split_and_its_seed_draws_it_again(hub, tmp_path):
    """`--max-images 16` of a split in 20 files of 300 images: the stream reads files until its shuffle buffer
    (1,000 rows) has filled twice, about 7 files, and never fetches the rest (at least half the split); the same seed,
    in a fresh cache, draws the same images."""
    from alternet_hf.data.sources import load_image_classification

    repo = hub.root / "mirrors" / "datasets" / "org" / "digits-20"
    (repo / "data").mkdir(parents=True)
    train = load_image_classification("digits", split="train")
    for shard in range(20):
        rows = [(shard * 300 + row) % len(train) for row in range(300)]
        train.select(rows).to_parquet(str(repo / "data" / f"train-{shard:05d}-of-00020.parquet"))
    shutil.copy(hub.repo / "data" / "validation-00000-of-00001.parquet", repo / "data")
    (repo / "README.md").write_text(CARD)
    hub_server.commit(repo, "digits in 20 files")

    argv = ["alternet-evaluate", "--model", str(hub.model), "--dataset", "org/digits-20", "--split", "train"]
    runs = []
    for attempt in ("first", "again"):
        (tmp_path / attempt).mkdir()
        result, fetched = fetch(hub, [*argv, "--max-images", "16", "--output", "out"], tmp_path / attempt)
        assert result.returncode == 0, result.stderr[-3000:]
        assert "16 images: a sample, seed 0" in result.stdout
        files = {name.split()[0] for name in fetched if ".parquet" in name}
        assert len(files) <= 10 and all("/data/train-" in name for name in files), fetched
        runs.append(json.loads((tmp_path / attempt / "out" / "eval_digits-20_train_sample-16-seed-0.json").read_text()))
    assert runs[0]["sample"] == {"num_images": 16, "seed": 0, "shuffle_buffer": 1000}
    assert runs[0]["num_images"] == 16 and runs[0]["metrics"] == runs[1]["metrics"]


def test_training_from_the_hub_as_a_stream_counts_rows_from_footers_and_prepares_no_training_file(hub, tmp_path):
    """`alternet-train --streaming` on the Hub repo: the training files' rows are counted from their parquet footers
    (ranged reads of their ends) before the epoch reads them; only the validation split is prepared on disk."""
    from test_training import TINY_ALTERNET

    argv = ["alternet-train", "--dataset", REPO, "--eval-split", "validation", "--streaming", "--epochs", "1"]
    argv += ["--model-overrides", json.dumps(TINY_ALTERNET), "--output-dir", "run"]
    result, fetched = fetch(hub, argv, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "streaming 1,437 images in 3 file(s): 22 batches of 64 an epoch" in result.stdout
    footers = {file for file, span in (line.split() for line in fetched if " " in line) if _reaches_the_end(span)}
    assert {f"data/train-{shard:05d}-of-00003.parquet" for shard in range(3)} <= footers, fetched
    prepared = {path.name for path in hub.home.rglob("*.arrow")}
    assert prepared and all("validation" in name for name in prepared), prepared


def _reaches_the_end(span: str) -> bool:
    """A ranged read ("first-last/size", as the server logs it) of a file's end, not the whole file."""
    first, last, size = (int(n) for n in span.replace("/", "-").split("-"))
    return first > 0 and last == size - 1


def test_a_split_the_repo_lacks_is_named_with_the_ones_it_has_before_any_data_is_fetched(hub, tmp_path):
    argv = ["alternet-evaluate", "--model", str(hub.model), "--dataset", REPO, "--split", "test"]
    result, fetched = fetch(hub, argv, tmp_path)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "has no split 'test': its splits are ['train', 'validation']" in result.stderr
    assert not [name for name in fetched if name.endswith(".parquet")], fetched


def test_the_robustness_analysis_fetches_only_the_cifar_c_sets_it_evaluates(hub, tmp_path):
    """CIFAR-C as the release publishes it (a config per corruption, a split per severity): two corruptions at two
    severities fetch those four sets' files, and the clean images come from the validation split alone."""
    from readme_data import zenodo_arrays

    from alternet_hf.hub.cifar100c import set_file, write_hub_dataset

    repo = hub.root / "mirrors" / "datasets" / "org" / "digits-c"
    arrays = zenodo_arrays(tmp_path / "arrays", images=40)  # CIFAR-C of the first 40 test digits
    write_hub_dataset(arrays, repo, "org/digits-c")
    hub_server.commit(repo, "digits-c")
    argv = ["alternet-analyze", "--model", str(hub.model), "--dataset", REPO, "--test-split", "validation"]
    argv += ["--analyses", "robustness", "--cifar-c", "org/digits-c", "--corruptions", "fog,snow"]
    result, fetched = fetch(hub, [*argv, "--severities", "1,3", "--out", "results"], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    data = sorted({name.split()[0].removeprefix("datasets/org/digits-c/") for name in fetched if ".parquet" in name})
    sets = [set_file(c, s) for c in ("fog", "snow") for s in (1, 3)]
    assert data == sorted([*sets, "data/validation-00000-of-00001.parquet"]), fetched
    analysed = json.loads((tmp_path / "results" / "robustness.json").read_text())
    assert analysed["result"]["corruptions"] == ["fog", "snow"] and analysed["result"]["severities"] == [1, 3]
    # on a CPU the analyses read 2 test batches: a sample of 512 (the split's 360), drawn by the analyses' seed
    assert analysed["images"] == {"test": 360, "sample": {"splits": ["test"], "seed": 0, "shuffle_buffer": 1000}}


# How the Hub answers a repo it will not serve (`hub_server.py`'s `.status`), by what the repo is called here.
HUB_ANSWERS = {"gated": "401 GatedRepo", "wrong-token": "401", "forbidden": "403", "missing": "404 RepoNotFound"}


@pytest.fixture(scope="module")
def refusing_repos(hub):
    """A model and a dataset repo answering each of `HUB_ANSWERS`."""
    for name, answer in HUB_ANSWERS.items():
        for kind in ("models", "datasets"):
            folder = hub.root / "mirrors" / kind / "org" / name
            folder.mkdir(parents=True, exist_ok=True)
            (folder / ".status").write_text(answer)


FAILURES_OF = """
import json, sys
import alternet_hf
from alternet_hf.data.sources import load_raw_dataset
from alternet_hf.utils import hub_failure
from huggingface_hub import HfApi, hf_hub_download
calls = {"file": lambda repo: hf_hub_download(repo, "config.json"), "model": alternet_hf.create_model}
calls |= {"dataset": lambda repo: load_raw_dataset(repo, split="test")}
if sys.argv[1] == "refused":  # the API's calls: files are retried for half a minute first
    calls = {"model info": HfApi().model_info, "whoami": lambda repo: HfApi(token="hf_x").whoami()}
found = {}
for name in sys.argv[2].split(","):
    for what, call in calls.items():
        try:
            call(f"org/{name}")
        except Exception as error:
            found[f"{name} {what}"] = hub_failure(error)
print(json.dumps(found))
"""


def test_hub_failures_are_told_apart_by_the_hubs_answer(hub, refusing_repos, tmp_path):
    """`utils.hub_failure` reads huggingface_hub's exception types and the HTTP status the Hub answered, for a file,
    a model (transformers) and a dataset (datasets, which keeps no cause: the zoo asks the Hub), whatever wraps them;
    a refused connection is the Hub out of reach."""
    expected = {"gated": "gated", "wrong-token": "unauthenticated", "forbidden": "forbidden", "missing": "not found"}
    result, _ = fetch(hub, [sys.executable, "-c", FAILURES_OF, "served", ",".join(HUB_ANSWERS)], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.splitlines()[-1])
    libraries = versions("huggingface_hub", "transformers", "datasets")  # whose exceptions hub_failure reads
    wanted = {f"{name} {what}": expected[name] for name in HUB_ANSWERS for what in ("file", "model", "dataset")}
    assert found == wanted, f"with {libraries}: {found}"
    closed = {**os.environ, "HF_ENDPOINT": f"http://127.0.0.1:{free_port()}", "HF_HUB_OFFLINE": "0"}
    refused = run_command([sys.executable, "-c", FAILURES_OF, "refused", "x"], cwd=tmp_path, env=closed)
    found = json.loads(refused.stdout.splitlines()[-1])
    assert found == {"x model info": "unreachable", "x whoami": "unreachable"}, f"with {libraries}: {found}"


def test_a_dataset_the_hub_will_not_serve_is_one_line_saying_what_to_do(hub, refusing_repos, tmp_path):
    """Gated: ask for access and log in; refused or not found: the Hub's answer, then what to check."""
    wanted = {
        "gated": ("'org/gated' is a gated dataset", f"{hub.endpoint}/datasets/org/gated", "hf auth login"),
        "wrong-token": ("refused the token (401)", "hf auth login"),
        "forbidden": ("refused access (403)", "hf auth login"),
        "missing": ("has no such dataset, or it is private (404)", "Check the name"),
    }
    for name, fragments in wanted.items():
        argv = ["alternet-evaluate", "--model", str(hub.model), "--dataset", f"org/{name}", "--split", "validation"]
        result, fetched = fetch(hub, argv, tmp_path)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
        (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert all(fragment in line for fragment in fragments) and "Offline" not in line, line
        assert not fetched


def test_a_mirror_that_ignores_range_is_one_line_before_any_data_file_and_whole_files_still_load(hub, tmp_path):
    """A server that answers a ranged read with the whole file (`.ignores-range`) cannot serve a stream, whose parquet
    reader would take the file for a damaged one: one line names the endpoint, HF_ENDPOINT and the way that works,
    before any data file is fetched; that way (the split's files downloaded whole) scores as usual."""
    repo = hub.root / "mirrors" / "datasets" / "org" / "digits-whole-files"
    shutil.copytree(hub.repo, repo)
    (repo / ".ignores-range").write_text("")
    argv = ["alternet-evaluate", "--model", str(hub.model), "--dataset", "org/digits-whole-files"]
    argv += ["--split", "validation"]
    for asked in (["--streaming"], ["--max-images", "16"]):
        result, fetched = fetch(hub, [*argv, *asked], tmp_path)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
        (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert f"the Hub at {hub.endpoint} ignores HTTP Range" in line and "HF_ENDPOINT" in line, line
        assert "without --streaming or --max-images" in line
        assert not [name for name in fetched if name.endswith(".parquet")], fetched
    result, _ = fetch(hub, [*argv, "--output", "whole"], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(next((tmp_path / "whole").glob("eval_*.json")).read_text())["num_images"] == 360
