"""`scripts/device_check.py`: the rehearsal of the GPU check runs its parts end to end on this CPU, each part's rows
survive a failure or a spent budget, and the wheels a GPU machine lacks are installed only where it lacks them."""

import json
import zipfile

import device_check
import pytest
from commands import run_command
from conftest import tool_command
from test_benchmark import write_reference_stand_in

pytestmark = pytest.mark.commands


def test_the_rehearsal_runs_the_parts_end_to_end_and_prints_the_table_last(tmp_path):
    """The machine, one model's engine (four variants), the evaluation and the analyses at tiny sizes; graphs are
    checked with aot_eager (the same graph breaks and recompiles as inductor, without generating code)."""
    parts = ["machine", "engine-vit-ti", "evaluation", "analyses"]
    command = [*tool_command("device_check"), "--cpu-rehearsal", "--compile-backend", "aot_eager", "--parts", *parts]
    completed = run_command([*command, "--out", "results"], cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr[-3000:]
    results = json.loads((tmp_path / "results" / "device_check.json").read_text())
    assert list(results["parts"]) == ["data", *parts]  # the engine's data first, outside the parts' budgets
    assert all(part["status"] == "ok" for part in results["parts"].values())
    rows = [row for part in results["parts"].values() for row in part["rows"]]
    assert not [row for row in rows if "error" in row or "skipped" in row]
    engine = [row for row in rows if row["what"] == "engine"]
    assert [(row["precision"], row["compiled"]) for row in engine] == list(device_check.ENGINE_VARIANTS)
    for row in engine:
        assert row["images_per_second"] > 0 and row["steps"] >= device_check.REHEARSAL.min_steps
        assert 0 <= row["data_wait_share"] < 1 and row["flops_per_image"] > 0
        assert row["graph_breaks"] == 0 and row["recompiles"] == (0 if row["compiled"] else None)
    precision = [row for row in rows if row["what"] == "precision"]
    assert len(precision) == 3 and all(0 < row["logits_relative_error"] < 0.05 for row in precision)
    assert {row["what"] for row in rows} >= {"environment", "matmul", "evaluation", "hessian", "feature maps"}
    assert len([row for row in rows if row["what"] == "corruption"]) == 15
    table = (tmp_path / "results" / "device_check.md").read_text()
    assert completed.stdout.rstrip().endswith("wrote results/device_check.json and results/device_check.md")
    assert table.strip() in completed.stdout
    assert table.count("| vit-ti-cifar100 |") == 4 and "| engine-vit-ti | ok |" in table


def test_the_reference_part_trains_the_reference_s_alternet_and_ours_in_turn_in_the_engine_s_loop(tmp_path):
    """The rehearsal of the reference part on a stand-in clone (`write_reference_stand_in`) at its tiny layout: the
    reference's model and ours, eager, in fp32 and bf16, through the engine's loop on the same data and batch; the
    reference as its users run it (contiguous). Without a clone the part says where to get one; a folder that is not
    one is refused before any part runs."""
    stand_in = write_reference_stand_in(tmp_path / "how-do-vits-work")
    command = [*tool_command("device_check"), "--cpu-rehearsal", "--parts", "reference", "--out", "results"]
    completed = run_command([*command, "--reference-dir", str(stand_in)], cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr[-3000:]
    results = json.loads((tmp_path / "results" / "device_check.json").read_text())
    rows = [row for row in results["parts"]["reference"]["rows"] if row["what"] == "reference"]
    expected = [(code, p) for p, _ in device_check.REFERENCE_VARIANTS for code in ("reference", "alternet_hf")]
    assert [(row["code"], row["precision"]) for row in rows] == expected
    assert all(row["images_per_second"] > 0 and row["steps"] >= device_check.REHEARSAL.min_steps for row in rows)
    assert [row["channels_last"] for row in rows] == [False, True] * 2 and {row["batch_size"] for row in rows} == {8}
    built = [json.loads(line) for line in (stand_in / "models" / "built.jsonl").read_text().splitlines()]
    assert built[0]["depths"] == device_check.REHEARSAL.reference_overrides["depths"]
    for precision in ("fp32", "bf16"):
        reference, ours = (row for row in rows if row["precision"] == precision)
        ratio = ours["images_per_second"] / reference["images_per_second"]
        assert f"| {precision}, eager | {reference['images_per_second']:,.0f} | " in completed.stdout
        assert f"| {ratio:.2f}× |" in completed.stdout

    without = run_command(command, cwd=tmp_path)
    assert without.returncode == 0
    assert f"| — | no copy of the reference code: git clone {device_check.REFERENCE_CODE}" in without.stdout
    refused = run_command([*command, "--reference-dir", str(tmp_path / "results")], cwd=tmp_path)
    assert refused.returncode == 2 and "not a copy of the reference code (no models/alternet.py)" in refused.stderr


def test_a_spent_budget_skips_the_parts_left_keeps_the_results_and_fails(tmp_path):
    completed = run_command([*tool_command("device_check"), "--cpu-rehearsal", "--budget", "1"], cwd=tmp_path)
    assert completed.returncode == 1
    results = json.loads((tmp_path / "device-check" / "device_check.json").read_text())
    assert [part["status"] for part in results["parts"].values()] == ["skipped: the check's --budget was spent"] * 8
    assert "| machine | skipped: the check's --budget was spent |" in completed.stdout


def test_a_row_that_fails_or_finds_no_time_is_recorded_and_the_part_goes_on(tmp_path):
    import time

    rows = tmp_path / "rows.jsonl"
    recorder = device_check.Recorder(rows, deadline=time.time() + 60)
    recorder.measure({"what": "first"}, lambda: 1 / 0)
    recorder.measure({"what": "second"}, lambda: {"value": 2}, needs=3600)
    recorder.measure({"what": "third"}, lambda: {"value": 3})
    written = [json.loads(line) for line in rows.read_text().splitlines()]
    assert written[0]["error"] == "ZeroDivisionError: division by zero"
    assert written[1]["skipped"].startswith("out of time (") and "value" not in written[1]
    assert written[2]["value"] == 3
    results = {"mode": "gpu", "parts": {"engine-vit-ti": {"status": "killed at its time limit", "seconds": 9.0}}}
    skipped = {**written[1], "what": "engine", "model": "m", "precision": "bf16", "compiled": True}
    results["parts"]["engine-vit-ti"]["rows"] = [skipped]
    table = device_check.summary(results)
    assert "| m | bf16 | yes | out of time (" in table and "| engine-vit-ti | killed at its time limit | 9 |" in table


def _wheel(folder, name: str, version: str):
    """A pure-Python wheel of one module, `name`, that says its version."""
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{name}.py", f"VERSION = {version!r}\n")
        wheel.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        wheel.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        wheel.writestr(f"{info}/RECORD", "")
    return path


def test_wheels_are_installed_only_where_the_machine_lacks_the_package_or_has_an_older_one(tmp_path):
    import numpy

    folder = tmp_path / "wheels"
    folder.mkdir()
    _wheel(folder, "alternet_probe", "1.0")
    _wheel(folder, "numpy", "1.0")  # older than the installed one: kept as it is
    installed = device_check.install_wheels(folder, tmp_path / "site-packages")
    assert installed == ["alternet_probe-1.0-py3-none-any.whl"]
    assert (tmp_path / "site-packages" / "alternet_probe.py").read_text() == "VERSION = '1.0'\n"
    assert not (tmp_path / "site-packages" / "numpy.py").exists() and numpy.__version__ != "1.0"


def test_the_compile_modes_offered_are_the_engines():
    from alternet_hf.training.recipe import COMPILE_MODES

    assert device_check.COMPILE_MODES == COMPILE_MODES


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--wheels", "empty"], "--wheels empty: no wheels there; write them with --prepare-wheels empty"),
        (["--budget", "-5"], "--budget takes a number of seconds above 0"),
        (["--parts", "engine-alternet"], "argument --parts: invalid choice: 'engine-alternet'"),
    ],
)
def test_bad_arguments_are_refused_before_anything_runs(arguments, message, tmp_path):
    (tmp_path / "empty").mkdir()
    completed = run_command([*tool_command("device_check"), *arguments], cwd=tmp_path)
    assert completed.returncode == 2 and message in completed.stderr
    assert not (tmp_path / "device-check").exists()
