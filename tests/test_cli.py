"""The installed commands as a user types them: in a fresh folder, offline, with the inputs users get wrong.

Each bad input must end in one clear message (exit status 2, no traceback) and leave what was there intact.
Every installed command answers `--help` from a fresh interpreter, without importing torch; the others run as
`commands.py` runs them.
The commands of a test run concurrently, one thread each.
"""

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
from commands import run_command, start_command
from conftest import SCRIPTS, TINY, command_names, installed_command, tool_command, tool_names

import alternet_hf

pytestmark = pytest.mark.commands  # runs installed commands (see CONTRIBUTING.md)

ROOT = Path(__file__).resolve().parents[1]


def _env(**extra) -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1", **extra}


def run_all(
    commands: dict[str, list], cwd: Path, timeout: float = 600, *, warm: bool = True, **env
) -> dict[str, subprocess.CompletedProcess]:
    """Run several commands at once (`warm=False`: each in a fresh interpreter); their results by name."""
    processes = {
        name: start_command([installed_command(args[0]), *args[1:]], cwd=cwd, env=_env(**env), warm=warm)
        for name, args in commands.items()
    }
    results = {}
    for name, process in processes.items():
        stdout, stderr = process.communicate(timeout=timeout)
        results[name] = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    return results


def assert_clear_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    for fragment in fragments:
        assert fragment in result.stderr, (fragment, result.stderr[-3000:])


def _fingerprint(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()
    }


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    """A tiny AlterNet for the digits, saved as alternet-train saves one (with its training recipe)."""
    folder = tmp_path_factory.mktemp("model") / "alternet-digits"
    model = alternet_hf.create_model("alternet-18-cifar10", **{**TINY["alternet-18-cifar10"], "num_labels": 10})
    model.config.image_size = 32
    model.save_pretrained(folder)
    (folder / "training_config.json").write_text(json.dumps({"dataset": "digits", "horizontal_flip": 0.0}))
    return folder


def _image_folder(root: Path, *, splits: bool) -> Path:
    """Digits as an image folder: one sub-folder per class, under train/ and test/ when `splits`."""
    from alternet_hf.data.sources import load_image_classification

    for split in ("train", "test") if splits else ("train",):
        data = load_image_classification("digits", split=split).select(range(60 if split == "train" else 20))
        for i, row in enumerate(data):
            folder = (root / split if splits else root) / str(row["label"])
            folder.mkdir(parents=True, exist_ok=True)
            row["image"].save(folder / f"{i}.png")
    return root


def test_no_script_shadows_an_installed_package():
    """Running scripts/x.py puts scripts/ first on sys.path: a scripts/evaluate.py hid the `evaluate` package."""
    elsewhere = [p for p in sys.path if Path(p or ".").resolve() != SCRIPTS]
    for name in {path.stem for path in SCRIPTS.iterdir() if path.suffix == ".py" or path.is_dir()} - {"__pycache__"}:
        assert importlib.machinery.PathFinder.find_spec(name, elsewhere) is None, f"scripts/{name} shadows a module"


def test_the_zoo_s_warnings_read_as_one_line_and_other_libraries_keep_python_s_format(tmp_path):
    """A command's warnings, in a process of its own (pytest records warnings its own way)."""
    (tmp_path / "warns.py").write_text("""
import sys, warnings
from pathlib import Path
from alternet_hf.cli.common import OWN_CODE, command

@command
def main(argv):
    for folder, text in ((OWN_CODE[1], "ours"), (sys.argv[1], "a tool's")):
        warnings.warn_explicit(f"{text} did not converge", UserWarning, str(Path(folder) / "module.py"), 7)

before = warnings.showwarning
main([])
assert warnings.showwarning is before  # the command leaves Python's as it was
""")
    env = {k: v for k, v in os.environ.items() if k != "ALTERNET_DEBUG"}
    command = [sys.executable, "warns.py", str(SCRIPTS)]
    runs = [run_command(command, cwd=tmp_path, env=env | extra) for extra in ({}, {"ALTERNET_DEBUG": "1"})]
    assert [run.returncode for run in runs] == [0, 0], runs[0].stderr + runs[1].stderr
    ours = Path(alternet_hf.__file__).resolve().parents[1] / "analysis" / "module.py"
    assert runs[0].stderr.splitlines()[0] == "warning: ours did not converge"
    assert f"{SCRIPTS / 'module.py'}:7: UserWarning: a tool's did not converge" in runs[0].stderr
    assert f"{ours}:7: UserWarning: ours did not converge" in runs[1].stderr  # debugging: every warning located


def test_a_command_whose_fork_server_died_fails_at_once(tmp_path):
    """tests/commands.py: when the warm interpreter that forked a command dies (say, killed for memory), nothing is
    left to report the command's status: waiting for it fails at once and says so, rather than at its timeout, and
    the orphaned command is ended. (A stand-in plays the dead server: killing the shared one costs a new import.)"""
    (tmp_path / "sleeps.py").write_text("import time\ntime.sleep(120)\n")
    process = start_command([sys.executable, "sleeps.py"], cwd=tmp_path)
    assert process.warm
    dead = subprocess.Popen([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), 9)"])
    process._server = types.SimpleNamespace(process=dead)
    with pytest.raises(RuntimeError, match=r"fork server of tests/commands.py ended \(killed by signal 9\)"):
        process.wait(60)
    with pytest.raises(ProcessLookupError):  # ended, and reaped by the live server
        for _ in range(500):
            os.kill(process.pid, 0)
            time.sleep(0.01)


def test_a_forked_command_has_the_threads_of_its_cold_start(tmp_path):
    """tests/commands.py: torch reads OMP_NUM_THREADS once, when imported, so a warm interpreter started where it is
    1 would hand one thread to every command; each forked command gets the count its cold start has instead."""
    from commands import warm_environment

    code = "import alternet_hf\nimport torch\nprint(torch.get_num_threads())"
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"} | {"HF_HOME": str(tmp_path / "hf")}
    warm_environment(env | {"OMP_NUM_THREADS": "1"})  # an interpreter of its own, asked for with one thread
    forked, cold = (run_command([sys.executable, "-c", code], cwd=tmp_path, env=env, warm=w) for w in (True, False))
    one = run_command([sys.executable, "-c", code], cwd=tmp_path, env=env | {"OMP_NUM_THREADS": "1"})
    assert forked.stdout.strip() == cold.stdout.strip() and one.stdout.strip() == "1", (forked, cold, one)


# What `--help` and a wrong flag must answer without: the model stack a command imports once its arguments are good.
HEAVY_PACKAGES = ("torch", "transformers", "timm", "accelerate", "datasets", "numpy", "matplotlib", "gradio")


def test_every_command_answers_help_and_a_wrong_flag_without_importing_torch(tmp_path):
    """Each command's own entry point, started cold as a user's shell starts it, answers `--help`, a mistyped flag and
    a value it can check from the arguments alone before importing torch or any other library of the model stack
    (Python's import log, `PYTHONPROFILEIMPORTTIME`, lists what each imported): the package `__init__` is lazy and the
    parsers are built from the standard library."""
    names = command_names()
    assert len(names) >= 9
    runs = {(name, "--help"): [name, "--help"] for name in names} | {
        (name, "--no-such-flag"): [name, "--no-such-flag"] for name in names
    }
    runs |= {  # values checked before anything is built: an unknown preset, amounts at odds with each other
        ("alternet-train", "--model"): ["alternet-train", "--model", "alternet-5-cifar10"],
        ("alternet-analyze", "--landscape-points"): [
            "alternet-analyze",
            "--model",
            "resnet-18-cifar10",
            "--landscape-points",
            "4",
        ],
    }
    results = run_all(runs, tmp_path, warm=False, PYTHONPROFILEIMPORTTIME="1")
    for (name, flag), result in results.items():
        if flag == "--help":
            assert result.returncode == 0 and result.stdout.startswith("usage: " + name), (name, result.stderr[-2000:])
        else:
            assert result.returncode == 2 and "error: " in result.stderr, result.stderr[-2000:]
            assert "Traceback" not in result.stderr, result.stderr[-2000:]
        imported = [line.rsplit("|", 1)[1].strip() for line in result.stderr.splitlines() if line.startswith("import")]
        assert "alternet_hf.cli.common" in imported, (name, imported)  # the log is read
        heavy = sorted({module for module in imported if module.split(".")[0] in HEAVY_PACKAGES})
        assert not heavy, f"{name} {flag} imported {heavy[:5]}"


def test_every_tool_answers_help(tmp_path):
    """The maintainer's tools in scripts/, run from the clone as `python scripts/<tool>.py --help`."""
    names = tool_names()
    assert {"benchmark", "release"} <= set(names)
    results = run_all({name: [*tool_command(name), "--help"] for name in names}, tmp_path)
    for name, result in results.items():
        assert result.returncode == 0 and result.stdout.startswith(f"usage: {name}.py"), (name, result.stderr[-2000:])


def test_finetune_runs_as_the_readme_shows_it(tiny_model, tmp_path):
    """`alternet-finetune --model <trained folder> --dataset <image folder>`: no --output-dir needed, the flip
    comes from the model's recipe (digits are never mirrored), and the source model is left as it was."""
    data = _image_folder(tmp_path / "digits-folder", splits=True)
    before = _fingerprint(tiny_model)
    result = run_all(
        {
            "finetune": [
                "alternet-finetune",
                "--model",
                tiny_model,
                "--dataset",
                data,
                "--epochs",
                "1",
                "--batch-size",
                "16",
            ]
        },
        tmp_path,
    )["finetune"]
    assert result.returncode == 0, result.stderr[-3000:]
    output = tmp_path / "outputs" / "alternet-digits-finetuned-digits-folder"
    assert "accuracy" in result.stdout and str(output.relative_to(tmp_path)) in result.stdout
    assert (output / "model.safetensors").exists() and (output / "preprocessor_config.json").exists()
    assert _fingerprint(tiny_model) == before


def test_finetune_defaults_fit_the_data(tiny_model, tmp_path):
    from alternet_hf.training.finetuning import default_horizontal_flip

    assert default_horizontal_flip(str(tiny_model), "anything") == 0.0  # the model's own recipe
    assert default_horizontal_flip(str(tmp_path), "digits") == 0.0
    assert default_horizontal_flip(str(tmp_path), "uoft-cs/cifar10") == 0.5


def test_bad_inputs_are_clear_errors_and_nothing_is_lost(tiny_model, tmp_path):
    flat = _image_folder(tmp_path / "flat", splits=False)
    finished = tmp_path / "finished"
    alternet_hf.create_model("resnet-50-cifar100", **TINY["resnet-50-cifar100"]).save_pretrained(finished)
    pushable = tmp_path / "pushable"
    alternet_hf.create_model("resnet-50-cifar100", **TINY["resnet-50-cifar100"]).save_pretrained(pushable)
    (pushable / "metrics.json").write_text(json.dumps({"accuracy": 0.5}))
    (pushable / "training_config.json").write_text(json.dumps({"dataset": "digits"}))
    (tmp_path / "empty.json").write_text("")
    (tmp_path / "broken.json").write_text('{"epochs": 3,')
    kept = {folder: _fingerprint(folder) for folder in (tiny_model, finished)}
    missing = tmp_path / "no" / "such" / "folder"
    commands = {
        "evaluate missing folder": ["alternet-evaluate", "--model", missing],
        "finetune missing folder": ["alternet-finetune", "--model", missing, "--dataset", "digits"],
        "analyze missing folder": ["alternet-analyze", "--model", missing],
        "folder without a model": ["alternet-evaluate", "--model", tmp_path],
        "config missing": ["alternet-train", "--config", tmp_path / "nothing.json"],
        "config empty": ["alternet-train", "--config", tmp_path / "empty.json"],
        "config malformed": ["alternet-train", "--config", tmp_path / "broken.json"],
        "finetune over its source": [
            "alternet-finetune",
            "--model",
            tiny_model,
            "--dataset",
            "digits",
            "--output-dir",
            tiny_model,
        ],
        "finetune over a finished model": [
            "alternet-finetune",
            "--model",
            tiny_model,
            "--dataset",
            "digits",
            "--output-dir",
            finished,
        ],
        "flat image folder": [
            "alternet-finetune",
            "--model",
            tiny_model,
            "--dataset",
            flat,
            "--output-dir",
            tmp_path / "ft",
        ],
        "remote code in overrides": [
            "alternet-finetune",
            "--model",
            tiny_model,
            "--dataset",
            "digits",
            "--output-dir",
            tmp_path / "rc",
            "--model-overrides",
            '{"trust_remote_code": true}',
        ],
        "hub model offline": ["alternet-evaluate", "--model", "someone/some-model"],
        "push offline": ["alternet-push", "--model", pushable, "--repo-id", "someone/x"],
    }
    results = run_all(commands, tmp_path)
    for name in ("evaluate missing folder", "finetune missing folder", "analyze missing folder"):
        assert_clear_error(results[name], f"there is no folder {missing}", "a preset name", "Hub id")
    assert_clear_error(results["folder without a model"], "holds no config.json")
    assert_clear_error(results["config missing"], "there is no file")
    assert_clear_error(results["config empty"], "is empty")
    assert_clear_error(results["config malformed"], "is not valid JSON", "line 1")
    assert_clear_error(results["finetune over its source"], "is the model being fine-tuned")
    assert_clear_error(results["finetune over a finished model"], "already holds a model", "--overwrite")
    assert_clear_error(results["flat image folder"], "has no split 'test'", "['train']", "--eval-split holdout")
    assert_clear_error(results["remote code in overrides"], "['trust_remote_code'] are not fields", "refused")
    assert_clear_error(results["hub model offline"], "cannot be reached", "a model folder for --model")
    assert_clear_error(results["push offline"], "cannot be reached", "--dry-run")
    for folder, fingerprint in kept.items():
        assert _fingerprint(folder) == fingerprint, folder
    assert not (tmp_path / "ft").exists() and not (tmp_path / "rc").exists()


def test_a_flat_image_folder_trains_with_a_holdout(tiny_model, tmp_path):
    """The fix the error above proposes works: a seeded hold-out of the one split, saved and reported."""
    flat = _image_folder(tmp_path / "flat", splits=False)
    command = [
        "alternet-finetune",
        "--model",
        tiny_model,
        "--dataset",
        flat,
        "--eval-split",
        "holdout:0.25",
        "--epochs",
        "1",
        "--output-dir",
        tmp_path / "ft",
    ]
    result = run_all({"holdout": command}, tmp_path)["holdout"]
    assert result.returncode == 0, result.stderr[-3000:]
    assert "hold-out of 25%" in result.stdout and "15 images" in result.stdout
    saved = json.loads((tmp_path / "ft" / "holdout.json").read_text())
    assert saved["fraction"] == 0.25 and len(saved["rows"]) == 15 and saved["seed"] == 0


DAMAGES = {
    "model.safetensors cut short": ("model.safetensors", lambda data: data[: len(data) // 2], "is cut short"),
    "model.safetensors empty": ("model.safetensors", lambda data: b"", "is empty"),
    "model.safetensors corrupt": ("model.safetensors", lambda data: data[:8] + b"\xff" * 64 + data[72:], "header"),
    "config.json cut short": ("config.json", lambda data: data[: len(data) // 2], "is not valid JSON"),
    "config.json empty": ("config.json", lambda data: b"", "is empty"),
    "preprocessor_config.json cut short": ("preprocessor_config.json", lambda data: data[:40], "is not valid JSON"),
}


def test_a_damaged_model_folder_is_one_line_for_every_command_that_takes_it(tiny_model, tmp_path):
    """A download cut short or a file overwritten: every command that takes a model folder names the file and what
    is wrong before anything loads (the loaders' own errors are tracebacks naming neither), and changes nothing."""
    damaged = {}
    for name, (file, damage, _) in DAMAGES.items():
        folder = damaged[name] = tmp_path / name.replace(" ", "-")
        shutil.copytree(tiny_model, folder)
        (folder / file).write_bytes(damage((folder / file).read_bytes()))
    kept = {folder: _fingerprint(folder) for folder in damaged.values()}
    takers = {
        "train": lambda m: ["alternet-train", "--model", m, "--dataset", "digits", "--output-dir", tmp_path / "t"],
        "evaluate": lambda m: ["alternet-evaluate", "--model", m, "--dataset", "digits"],
        "finetune": lambda m: ["alternet-finetune", "--model", m, "--dataset", "digits", "--output-dir", tmp_path],
        "analyze": lambda m: ["alternet-analyze", "--model", m, "--out", tmp_path / "a"],
        "compare": lambda m: ["alternet-compare", "--models", f"m={m}", "--out", tmp_path / "c"],
        "buildup": lambda m: ["alternet-buildup", "--model", m, "--dataset", "digits", "--output-dir", tmp_path / "b"],
        "push": lambda m: ["alternet-push", "--model", m, "--repo-id", "someone/x", "--dry-run", tmp_path / "p"],
    }
    commands = {(c, d): args(damaged[d]) for c, args in takers.items() for d in DAMAGES}
    results = run_all(commands, tmp_path)
    for (_, damage), result in results.items():
        file, _, says = DAMAGES[damage]
        assert_clear_error(result, f"{damaged[damage] / file} ", says, "copy, download or save the model again")
        assert result.stderr.count("error:") == 1, result.stderr
    for folder, fingerprint in kept.items():
        assert _fingerprint(folder) == fingerprint, folder
    assert not {p.name for p in tmp_path.iterdir()} & set("tacbp")
    with pytest.raises(ValueError, match="model.safetensors is cut short"):
        alternet_hf.create_model(str(damaged["model.safetensors cut short"]))


def test_an_output_folder_that_is_a_file_is_one_line_and_the_file_is_kept(tiny_model, tmp_path):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("kept")
    (tmp_path / "config.json").write_text(json.dumps({"model": "resnet-18-cifar10", "output_dir": str(a_file)}))
    commands = {
        "train": ["alternet-train", "--model", "resnet-18-cifar10", "--dataset", "digits", "--output-dir", a_file],
        "train --config": ["alternet-train", "--config", tmp_path / "config.json"],
        "evaluate": ["alternet-evaluate", "--model", tiny_model, "--output", a_file],
        "finetune": ["alternet-finetune", "--model", tiny_model, "--dataset", "digits", "--output-dir", a_file],
        "analyze": ["alternet-analyze", "--model", tiny_model, "--out", a_file / "inside"],
        "compare": ["alternet-compare", "--models", f"m={tiny_model}", "--out", a_file],
        "reproduce": ["alternet-reproduce", "--out", a_file],
        "push": ["alternet-push", "--model", tiny_model, "--repo-id", "someone/x", "--dry-run", a_file],
    }
    for name, result in run_all(commands, tmp_path).items():
        assert_clear_error(result, f"{a_file} is a file", "name a folder to write into")
        assert result.stderr.count("error:") == 1, (name, result.stderr)
    assert a_file.read_text() == "kept"


def _damaged_image_folder(root: Path) -> tuple[Path, dict[str, str]]:
    """Digits as an image folder whose training split holds four files that cannot be read, by what each says: three
    the check before the run finds from their headers and ends, one (its compressed data garbled, its end intact) only
    decoding finds."""
    _image_folder(root, splits=True)
    whole = next((root / "train" / "3").glob("*.png")).read_bytes()
    middle = slice(len(whole) // 2, len(whole) // 2 + 8)
    garbled = bytearray(whole)
    garbled[middle] = bytes(b ^ 0xFF for b in whole[middle])
    damaged = {
        "3/zero.png": (b"", "the file is empty (0 bytes)"),
        "3/cut.png": (whole[: len(whole) // 2], "the PNG file is cut short"),
        "4/notes.png": (b"not an image at all", "the file is no image"),
        "5/garbled.png": (bytes(garbled), "the image cannot be read"),
    }
    for name, (data, _) in damaged.items():
        (root / "train" / name).write_bytes(data)
    return root, {name: says for name, (_, says) in damaged.items()}


def test_unreadable_images_stop_a_run_before_its_first_step_or_are_left_out_and_listed(tiny_model, tmp_path):
    """Without --skip-unreadable, a folder's damaged files stop the run before anything trains, all counted and the
    first named; with it, training (prepared or streamed), fine-tuning and evaluation go on without them, and the
    summary and the output folder's list name all four, the garbled one found only as its batch is read (a stream's
    all four); the stopped run resumes with the flag."""
    folder, damaged = _damaged_image_folder(tmp_path / "digits")
    train = ["alternet-train", "--model", tiny_model, "--dataset", folder, "--epochs", "1", "--batch-size", "16"]
    commands = {
        "train": [*train, "--output-dir", tmp_path / "stopped"],
        "train, skipping": [*train, "--output-dir", tmp_path / "trained", "--skip-unreadable"],
        "train streamed, skipping": [*train, "--output-dir", tmp_path / "streamed", "--streaming", "--skip-unreadable"],
        "finetune, skipping": [
            *("alternet-finetune", "--model", tiny_model, "--dataset", folder, "--epochs", "1"),
            *("--output-dir", tmp_path / "finetuned", "--skip-unreadable"),
        ],
        "evaluate, skipping": [
            *("alternet-evaluate", "--model", tiny_model, "--dataset", folder, "--split", "train"),
            *("--output", tmp_path / "evaluated", "--skip-unreadable"),
        ],
    }
    results = run_all(commands, tmp_path)
    stopped = results.pop("train")
    assert_clear_error(stopped, "3 of 64 image files cannot be read", "--skip-unreadable", "row ")
    assert stopped.stderr.count("error:") == 1 and "epoch 1" not in stopped.stderr + stopped.stdout
    assert not (tmp_path / "stopped" / "checkpoints").exists()
    listed = {
        "train, skipping": tmp_path / "trained" / "unreadable.jsonl",
        "train streamed, skipping": tmp_path / "streamed" / "unreadable.jsonl",
        "finetune, skipping": tmp_path / "finetuned" / "unreadable.jsonl",
        "evaluate, skipping": tmp_path / "evaluated" / "eval_digits_train_unreadable.jsonl",
    }
    for name, result in results.items():
        assert result.returncode == 0, (name, result.stderr[-3000:])
        assert "4 unreadable image(s) left out (--skip-unreadable)" in result.stdout, (name, result.stdout[-3000:])
        entries = [json.loads(line) for line in listed[name].read_text().splitlines()]
        messages = {entry["message"].split("(file ")[1].split(")")[0]: entry["message"] for entry in entries}
        assert sorted(messages) == sorted(str(folder / "train" / name) for name in damaged), name
        for file, says in damaged.items():  # a stream has no check before the run: its reader names them all
            expected = "the image cannot be read" if "streamed" in name else says
            assert expected in messages[str(folder / "train" / file)], (name, file)
    assert "60 images" in results["evaluate, skipping"].stdout  # the split's 64, less the four
    resume = [*train, "--output-dir", tmp_path / "stopped", "--resume", "--skip-unreadable"]
    resumed = run_all({"resume": resume}, tmp_path)["resume"]  # the stopped run goes on, leaving them out
    assert resumed.returncode == 0 and "4 unreadable image(s) left out" in resumed.stdout, resumed.stderr[-3000:]
