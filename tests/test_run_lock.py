"""One run per folder: a second run on a folder in use stops at once naming the first, for every command that
writes one (`alternet-train`, `-finetune`, `-analyze`, `-release`); the lock dies with its process, SIGKILL included."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from commands import run_command, start_command
from conftest import installed_command, tool_command, tool_names
from test_training import TINY_ALTERNET

from alternet_hf.utils.run_lock import LOCK_FILE, FolderInUse, hold_folder

pytestmark = pytest.mark.commands  # runs installed commands (see CONTRIBUTING.md)

OFFLINE = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
HOLDER = """
import sys, time
from alternet_hf.utils.run_lock import hold_folder
with hold_folder(sys.argv[1]):
    print("held", flush=True)
    time.sleep(600)
"""
PROBE = """
import sys
from alternet_hf.utils.run_lock import hold_folder
with hold_folder(sys.argv[1]):
    pass
"""


def _hold_elsewhere(folder: Path) -> subprocess.Popen:
    """Another process holding `folder`, as a running command would."""
    process = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder)], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline() == "held\n"
    return process


def _error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return next(line for line in result.stderr.replace("\r", "\n").splitlines() if line.startswith("error: "))


def test_a_folder_is_held_once_across_processes_reentrantly_within_one_and_left_as_found(tmp_path):
    folder = tmp_path / "new" / "run"
    with hold_folder(folder):
        assert json.loads((folder / LOCK_FILE).read_text())["pid"] == os.getpid()
        with hold_folder(folder):  # a release training into the folder it holds
            pass
        assert (folder / LOCK_FILE).exists()
        probe = subprocess.run([sys.executable, "-c", PROBE, str(folder)], capture_output=True, text=True)
        assert probe.returncode == 1
        assert f"FolderInUse: {folder} is in use by another run (pid {os.getpid()} on " in probe.stderr
    assert not folder.exists()  # created for the run, which wrote nothing else
    (tmp_path / "kept").mkdir()
    with hold_folder(tmp_path / "kept"):
        (tmp_path / "kept" / "result.json").write_text("{}")
    assert sorted(p.name for p in (tmp_path / "kept").iterdir()) == ["result.json"]


def test_the_lock_dies_with_its_process_even_by_sigkill(tmp_path):
    holder = _hold_elsewhere(tmp_path / "run")
    with pytest.raises(FolderInUse, match=f"pid {holder.pid} on .*: .* wait for it to end"):
        with hold_folder(tmp_path / "run"):
            pass
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert (tmp_path / "run" / LOCK_FILE).exists()  # left behind by the killed run: no longer a lock
    with hold_folder(tmp_path / "run"):
        assert json.loads((tmp_path / "run" / LOCK_FILE).read_text())["pid"] == os.getpid()


def test_a_second_training_on_a_folder_in_use_stops_at_once_and_resumes_once_the_first_is_gone(tmp_path, tiny_dataset):
    train = [
        installed_command("alternet-train"),
        "--model-overrides",
        json.dumps(TINY_ALTERNET),
        "--batch-size",
        "8",
        "--dataset",
        tiny_dataset,
        "--output-dir",
        "run",
        "--epochs",
        "200",
        "--save-every-steps",
        "4",
    ]
    first = start_command(train, cwd=tmp_path, env=OFFLINE)
    checkpoints = tmp_path / "run" / "checkpoints"
    deadline = time.monotonic() + 120
    while not (checkpoints.is_dir() and any(checkpoints.glob("checkpoint-*"))):
        assert first.poll() is None and time.monotonic() < deadline, first.output()
        time.sleep(0.2)
    for again in ([], ["--resume"]):
        started = time.monotonic()
        message = _error(run_command([*train, *again], cwd=tmp_path, env=OFFLINE))
        assert f"is in use by another run (pid {first.pid} on " in message
        assert message.endswith("wait for it to end, or stop it and then continue it with --resume")
        assert time.monotonic() - started < 60  # before any data or model is built
    assert first.poll() is None  # untouched by the refused runs
    first.kill()
    first.wait(30)
    resumed = start_command([*train, "--resume"], cwd=tmp_path, env=OFFLINE)  # the lock died with its run
    try:
        while "resumed from run/checkpoints/checkpoint-" not in resumed.output()[0]:
            assert resumed.poll() is None and time.monotonic() < deadline + 120, resumed.output()
            time.sleep(0.2)
    finally:
        resumed.kill()
        resumed.wait(30)


@pytest.mark.parametrize(
    "command, arguments",
    [
        ("alternet-finetune", ["--model", "alternet-18-cifar10", "--dataset", "digits", "--output-dir", "{folder}"]),
        ("alternet-analyze", ["--model", "alternet-18-cifar10", "--analyses", "fourier", "--out", "{folder}"]),
        (
            "release",
            [
                "--org",
                "me",
                "--rehearsal",
                "--models",
                "resnet-50-cifar100",
                "--without-cifar100c",
                "--no-estimate",
                "--dry-run",
                "{folder}",
            ],
        ),
    ],
)
def test_every_command_that_writes_a_folder_refuses_one_in_use(tmp_path, command, arguments):
    folder = tmp_path / "out"
    holder = _hold_elsewhere(folder)
    try:
        program = tool_command(command) if command in tool_names() else [installed_command(command)]
        argv = [*program, *(a.format(folder=folder) for a in arguments)]
        message = _error(run_command(argv, cwd=tmp_path, env=OFFLINE, timeout=120))
        assert f"{folder} is in use by another run (pid {holder.pid} on " in message
        assert sorted(p.name for p in folder.iterdir()) == [LOCK_FILE]  # nothing written beside the running one
    finally:
        holder.kill()
        holder.wait()
