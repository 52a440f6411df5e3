"""The reference's PiT-Ti and Swin-Ti files, written by timm 0.5.4 itself, converted: the zoo's models compute the
reference's logits and, block by block, the states of the reference's own decomposition.

timm 0.5.4 is installed from the package registry into a side folder (`upstream.side_installed`) and run in its
own process by `timm054_reference.py`; nothing here imports it.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from commands import run_command
from conftest import installed_command
from upstream import side_installed

import alternet_hf
from alternet_hf.hub.convert import save_reference_checkpoint
from analysis.blocks import as_feature_map, run_blocks

PRESETS = {"pit_ti": "pit-ti-cifar100", "swin_ti": "swin-ti-cifar100"}
PREFIX_TOKENS = {"pit_ti": 1, "swin_ti": 0}  # the class token ahead of the patches in the reference's states


@pytest.fixture(scope="module")
def reference_files(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("timm054")
    env = {**os.environ, "PYTHONPATH": str(side_installed("timm", "0.5.4"))}
    script = Path(__file__).with_name("timm054_reference.py")
    result = subprocess.run([sys.executable, str(script), str(out)], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def _expected(reference_files: Path, name: str) -> dict:
    return torch.load(reference_files / f"{name}.expected.pt", weights_only=True)


@pytest.mark.parametrize("name", PRESETS)
def test_converted_model_computes_the_reference_block_by_block(reference_files, name):
    model = alternet_hf.convert_original_checkpoint(reference_files / f"{name}.pth.tar", PRESETS[name])
    expected = _expected(reference_files, name)
    with torch.no_grad():
        torch.testing.assert_close(model(expected["input"]).logits, expected["logits"], rtol=1e-4, atol=1e-4)
        run = run_blocks(model, expected["input"])
    assert run.kinds == expected["kinds"]
    for index, (kind, ours, theirs) in enumerate(zip(run.kinds, run.states, expected["states"])):
        if kind == "head":  # the reference's classifier block ends in the logits, compared above
            continue
        ours = as_feature_map(ours, run.num_prefix_tokens, channels_last=run.channels_last)
        theirs = as_feature_map(theirs, PREFIX_TOKENS[name])
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4, msg=f"block {index} ({kind})")


@pytest.mark.parametrize("name", PRESETS)
def test_the_way_back_writes_files_timm_054_loads(reference_files, name, tmp_path):
    """A converted model written back in the reference's layout (what the release rehearsal's stand-ins are) loads
    into timm 0.5.4's own module strictly, buffers included, and computes the original's logits."""
    model = alternet_hf.convert_original_checkpoint(reference_files / f"{name}.pth.tar", PRESETS[name])
    family = PRESETS[name].split("-")[0]
    written = save_reference_checkpoint(model, family, tmp_path / f"{name}.pth.tar", name=name)
    logits = reference_files / f"{name}.from-zoo.pt"  # beside the expected outputs the loader reads
    env = {**os.environ, "PYTHONPATH": str(side_installed("timm", "0.5.4"))}
    script = Path(__file__).with_name("timm054_reference.py")
    command = [sys.executable, str(script), "--load", str(written), name, str(logits)]
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    torch.testing.assert_close(torch.load(logits), _expected(reference_files, name)["logits"], rtol=1e-5, atol=1e-5)


@pytest.mark.commands
def test_command_writes_a_folder_timm_and_transformers_load(reference_files, tmp_path):
    """`alternet-convert` as the README shows it; the folder loads with transformers and with timm alone."""
    name = "swin_ti"
    out = tmp_path / PRESETS[name]
    result = run_command(
        [installed_command("alternet-convert"), str(reference_files / f"{name}.pth.tar"), PRESETS[name], str(out)],
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "27,562,126 parameters" in result.stdout
    config = json.loads((out / "config.json").read_text())
    assert config["architecture"] == "swin_tiny_patch4_window7_224" and config["model_args"]["window_size"] == 4
    expected = _expected(reference_files, name)
    torch.save(expected["input"], tmp_path / "input.pt")
    script = (
        "import sys, timm, torch; sys.modules['alternet_hf'] = None\n"  # timm alone, no zoo
        f"model = timm.create_model('local-dir:{out}', pretrained=True).eval()\n"
        f"with torch.no_grad(): torch.save(model(torch.load('{tmp_path / 'input.pt'}')), '{tmp_path / 'timm.pt'}')\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    torch.testing.assert_close(torch.load(tmp_path / "timm.pt"), expected["logits"], rtol=1e-4, atol=1e-4)


def test_mismatched_files_are_refused_clearly(reference_files):
    swin = reference_files / "swin_ti.pth.tar"
    with pytest.raises(ValueError, match="fit no model weight.*looks like a reference swin checkpoint"):
        alternet_hf.convert_original_checkpoint(swin, "pit-ti-cifar100")
    # Another window size: the file's relative-position indices and masks are not what the model computes.
    with pytest.raises(ValueError, match="relative_position_index.*window size or image size differs"):
        alternet_hf.convert_original_checkpoint(swin, "swin-ti-cifar100", window_size=2)
    with pytest.raises(ValueError, match="shapes differ"):
        alternet_hf.convert_original_checkpoint(reference_files / "pit_ti.pth.tar", "pit-ti-cifar10")
