"""alternet-analyze end to end: every analysis on a saved model and the embedded digits, offline."""

import json
import subprocess
from pathlib import Path

from conftest import TINY, installed_command

import alternet_hf
from analysis.corruptions import CORRUPTIONS

ROOT = Path(__file__).resolve().parents[1]


def test_every_analysis_writes_json_and_png(tmp_path):
    model = alternet_hf.create_model("alternet-50-cifar100", **{**TINY["alternet-50-cifar100"], "num_labels": 10})
    model.save_pretrained(tmp_path / "model")
    out = tmp_path / "results"
    command = [
        installed_command("alternet-analyze"), "--model", str(tmp_path / "model"), "--out", str(out),
        "--batch-size", "32", "--max-batches", "1", "--train-batch-size", "16", "--hessian-batches", "2",
        "--top-k", "2", "--landscape-points", "3", "--corruptions", "fog,contrast", "--severities", "1,5",
    ]  # fmt: skip
    completed = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    names = ("fourier", "variance", "hessian", "landscape", "robustness", "frequency-noise", "lesion", "cka")
    for name in names:
        assert (out / f"{name}.png").stat().st_size > 5000, name
        payload = json.loads((out / f"{name}.json").read_text())
        assert payload["analysis"] == name and payload["dataset"] == "digits"
    kinds = alternet_hf.block_kinds(model)
    assert json.loads((out / "fourier.json").read_text())["result"]["kinds"] == ["input"] + kinds
    hessian = json.loads((out / "hessian.json").read_text())["result"]
    assert len(hessian["eigenvalues"]) == 2 and all(a >= b for a, b in hessian["eigenvalues"])
    robustness = json.loads((out / "robustness.json").read_text())["result"]
    assert robustness["corruptions"] == ["fog", "contrast"] and len(robustness["accuracy"][0]) == 2
    lesion = json.loads((out / "lesion.json").read_text())["result"]
    assert lesion["accuracy"][0] is None and lesion["accuracy"][1] is not None  # stem has no branch: NaN -> null
    assert "wrote" in completed.stdout and len(CORRUPTIONS) == 15


def test_unknown_analysis_is_refused(tmp_path):
    command = [installed_command("alternet-analyze"), "--model", "alternet-18-cifar10", "--analyses", "fourier,hesian"]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert completed.returncode != 0 and "unknown analyses ['hesian']" in completed.stderr


def test_augmented_analyses_are_reproducible_whatever_ran_before(tmp_path):
    """Hessian batches are seeded RandAugment draws from their own loader: the same with or without a
    landscape run first."""
    model = alternet_hf.create_model("alternet-50-cifar100", **{**TINY["alternet-50-cifar100"], "num_labels": 10})
    model.save_pretrained(tmp_path / "model")
    eigenvalues = []
    for analyses in ("landscape,hessian", "hessian"):
        out = tmp_path / analyses.replace(",", "-")
        command = [
            installed_command("alternet-analyze"), "--model", str(tmp_path / "model"), "--out",
            str(out), "--analyses", analyses, "--train-batch-size", "8", "--hessian-batches", "1", "--top-k", "1",
            "--landscape-points", "3",
        ]  # fmt: skip
        completed = subprocess.run(command, capture_output=True, text=True, timeout=600)
        assert completed.returncode == 0, completed.stderr[-3000:]
        eigenvalues.append(json.loads((out / "hessian.json").read_text())["result"]["eigenvalues"])
    assert eigenvalues[0] == eigenvalues[1]
