"""alternet-analyze end to end: every analysis on a saved model and the embedded digits, offline."""

import dataclasses
import json
import re
from pathlib import Path

import pytest
from commands import run_command
from conftest import TINY, installed_command

import alternet_hf
from alternet_hf.cli.analyze import build_parser, settings_from_args
from alternet_hf.data.cifar_c import CORRUPTIONS
from alternet_hf.training.recipe import TrainingConfig
from analysis import registry
from analysis.blocks import block_kinds
from analysis.registry import PAPER_ANALYSES

pytestmark = pytest.mark.commands  # runs installed commands (see CONTRIBUTING.md)

ROOT = Path(__file__).resolve().parents[1]


def test_every_analysis_writes_json_and_png(tmp_path):
    model = alternet_hf.create_model("alternet-50-cifar100", **{**TINY["alternet-50-cifar100"], "num_labels": 10})
    model.save_pretrained(tmp_path / "model")
    out = tmp_path / "results"
    command = [
        installed_command("alternet-analyze"),
        "--model",
        str(tmp_path / "model"),
        "--out",
        str(out),
        "--batch-size",
        "32",
        "--max-batches",
        "1",
        "--train-batch-size",
        "16",
        "--hessian-batches",
        "2",
        "--top-k",
        "2",
        "--bottom-k",
        "1",
        "--lanczos-steps",
        "5",
        "--hessian-tol",
        "1e-9",
        "--landscape-points",
        "3",
        "--corruptions",
        "fog,contrast",
        "--severities",
        "1,5",
    ]
    completed = run_command(command, cwd=tmp_path, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    for name in PAPER_ANALYSES:  # what runs when --analyses is not given
        assert (out / f"{name}.png").stat().st_size > 5000, name
        payload = json.loads((out / f"{name}.json").read_text())
        assert payload["analysis"] == name and payload["dataset"] == "digits" and payload["partial"] is False
    kinds = block_kinds(model)
    assert "pool" in kinds and json.loads((out / "fourier.json").read_text())["result"]["kinds"] == ["input"] + kinds
    hessian = json.loads((out / "hessian.json").read_text())
    assert hessian["augmentation"]["source"].startswith("the paper's recipe (the model has no training_config.json)")
    assert hessian["settings"]["penalty"] == "reference" and hessian["train_batch_size"] == 16
    result = hessian["result"]
    assert len(result["eigenvalues"]) == 2 and all(a >= b for a, b in result["eigenvalues"])
    assert len(result["smallest_eigenvalues"]) == 2 and len(result["smallest_eigenvalues"][0]) == 1
    assert result["complete"] and result["penalty"] == "reference"
    landscape = json.loads((out / "landscape.json").read_text())["result"]
    assert (
        landscape["protocol"] == "filter" and landscape["batchnorm"] == "train" and landscape["penalty"] == "reference"
    )
    # Defaults fit the device: on a CPU fewer Lanczos steps etc., said so; a time estimate before each analysis.
    assert "on a CPU, scaled down from the paper's amounts" in completed.stdout
    assert "hessian: about" in completed.stdout and "at most 2 minibatches × 5 Lanczos steps" in completed.stdout
    robustness = json.loads((out / "robustness.json").read_text())["result"]
    assert robustness["corruptions"] == ["fog", "contrast"] and len(robustness["accuracy"][0]) == 2
    lesion = json.loads((out / "lesion.json").read_text())["result"]
    assert lesion["accuracy"][0] is None and lesion["accuracy"][1] is not None  # stem has no branch: NaN -> null
    assert "wrote" in completed.stdout and len(CORRUPTIONS) == 15
    # The zoo's own warning (5 steps cannot reach 1e-9) reads as one line, as its errors do.
    warned = [line for line in completed.stderr.splitlines() if "Lanczos did not reach" in line]
    assert warned == [
        "warning: Lanczos did not reach tol=1e-09 within lanczos_steps=5 on 2 of 2 minibatches; their eigenvalues are "
        "less accurate (see `residuals`). Raise lanczos_steps or tol."
    ]
    assert "UserWarning: Lanczos" not in completed.stderr


def test_the_hessian_trace_density_and_curvature_per_block_from_the_command_line(tmp_path):
    """The three Hessian analyses run only by name: each writes its JSON and figure with its error stated, and their
    results read back into the comparison's figures and report."""
    from analysis.report import write_comparison
    from analysis.runner import read_results, summary_of

    model = alternet_hf.create_model("alternet-18-cifar10", **{**TINY["alternet-18-cifar10"], "num_labels": 10})
    model.save_pretrained(tmp_path / "model")
    out = tmp_path / "results"
    flags = dict(
        analyses="hessian-trace,hessian-density,hessian-blocks", train_batch_size="8", hessian_batches="1",
        trace_rtol="0.05", trace_max_samples="30", deflation_steps="6", slq_vectors="2", slq_steps="6",
        lanczos_steps="10", hessian_tol="1e-2",
    )  # fmt: skip
    command = [installed_command("alternet-analyze"), "--model", str(tmp_path / "model"), "--out", str(out)]
    command += [x for key, value in flags.items() for x in (f"--{key.replace('_', '-')}", value)]
    completed = run_command(command, cwd=tmp_path, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    for name in ("hessian-trace", "hessian-density", "hessian-blocks"):
        assert (out / f"{name}.png").stat().st_size > 5000, name
        assert f"{name}: about" in completed.stdout and f"model: {name}: " in completed.stdout  # estimate, summary
    trace = json.loads((out / "hessian-trace.json").read_text())["result"]
    (value,), (width,), (samples,) = trace["traces"], trace["half_widths"], trace["num_samples"]
    assert width > 0 and 2 <= samples <= 30 and trace["num_hvps"] == samples + trace["deflation_dimensions"][0]
    assert trace["converged"] == [width <= 0.05 * abs(value)]  # and said where not (a warning, a summary note)
    assert trace["converged"][0] or "did not reach its 95% half-width" in completed.stderr
    blocks = json.loads((out / "hessian-blocks.json").read_text())["result"]
    assert blocks["kinds"] == block_kinds(model)
    assert sum(blocks["parameters"]) + blocks["rest_parameters"] == sum(p.numel() for p in model.parameters())
    msa = blocks["kinds"].index("msa")
    assert blocks["top_eigenvalues"][0][msa] > 0 and blocks["half_widths"][0][msa] > 0
    density = json.loads((out / "hessian-density.json").read_text())["result"]
    assert len(density["nodes"]) == 2 and len(density["density_error"]) == len(density["grid"])
    results = read_results(out)
    summaries = {name: summary_of(model) for name in ("a", "b")}
    written = write_comparison(tmp_path / "comparison", {"a": results, "b": results}, summaries)
    for stem in ("hessian_trace", "hessian_density", "hessian_blocks", "hessian_block_traces"):
        assert written[stem].stat().st_size > 5000 and f"({stem}.png)" in written["report"].read_text()


def test_unknown_analysis_is_refused(tmp_path):
    command = [installed_command("alternet-analyze"), "--model", "alternet-18-cifar10", "--analyses", "fourier,hesian"]
    completed = run_command(command, cwd=tmp_path, timeout=120)
    assert completed.returncode != 0 and "unknown analyses ['hesian']" in completed.stderr
    out = tmp_path / "results"
    command = [
        installed_command("alternet-analyze"),
        "--model",
        "alternet-18-cifar10",
        "--augmentation",
        "bogus",
        "--out",
        str(out),
    ]
    completed = run_command(command, cwd=tmp_path, timeout=120)
    assert completed.returncode == 2 and "--augmentation: takes model, paper, none" in completed.stderr
    assert "Traceback" not in completed.stderr and not out.exists()  # refused before a model is built
    for analysis, flag, value, message in (
        ("hessian-trace", "--trace-rtol", "-1", "trace_rtol (--trace-rtol) must lie between 0 and 1, got -1.0"),
        ("hessian-trace", "--trace-max-samples", "1", "the trace needs trace_max_samples (--trace-max-samples) >= 2"),
        ("hessian", "--lanczos-steps", "3", "lanczos_steps (--lanczos-steps) 3 cannot find top_k (--top-k) 5 + "),
    ):
        command = [installed_command("alternet-analyze"), "--model", "alternet-18-cifar10", flag, value]
        completed = run_command([*command, "--analyses", analysis, "--out", str(out)], cwd=tmp_path)
        assert completed.returncode == 2 and message in completed.stderr, completed.stderr[-2000:]
        assert "Traceback" not in completed.stderr and not out.exists()  # a stop never reached: refused at once


def test_amounts_at_odds_are_refused_only_where_an_analysis_run_uses_them():
    settings = registry.Settings(lanczos_steps=3)  # the spectrum's top_k 5 + bottom_k 5 need 10 steps
    settings.check(["fourier", "hessian-trace", "hessian-blocks"])  # each block's top eigenvalue needs one
    for analyses in (["fourier", "hessian"], None):
        with pytest.raises(ValueError, match="lanczos_steps .--lanczos-steps. 3 cannot find top_k"):
            settings.check(analyses)


def test_every_setting_is_a_flag_of_its_own_name_that_reaches_the_analyses():
    """Each field of `registry.Settings` is the flag of the same name; a value typed reaches the settings unchanged,
    one not typed is the paper's on a GPU and the CPU's amount on a CPU."""
    typed = dict(
        max_batches="3", train_batch_size="8", hessian_batches="4", top_k="2", bottom_k="1", lanczos_steps="9",
        hessian_tol="0.5", hessian_time_limit="60", density_vectors="1", density_steps="7", weight_decay="0.1",
        penalty="squared", batchnorm="eval", landscape_points="5", landscape_batches="2", landscape_span="0.5",
        landscape_protocol="reference", corruptions="fog,snow", severities="2,4", corruption_images="16", seed="7",
        trace_rtol="0.1", trace_max_samples="50", deflation_steps="4", slq_vectors="3", slq_steps="5",
    )  # fmt: skip
    assert set(typed) == {field.name for field in dataclasses.fields(registry.Settings)}
    argv = ["--model", "alternet-18-cifar10", *(x for k, v in typed.items() for x in (f"--{k.replace('_', '-')}", v))]
    settings, notes = settings_from_args(build_parser().parse_args(argv), "cpu")
    assert notes == [] and settings == registry.Settings(
        max_batches=3, train_batch_size=8, hessian_batches=4, top_k=2, bottom_k=1, lanczos_steps=9, hessian_tol=0.5,
        hessian_time_limit=60.0, density_vectors=1, density_steps=7, weight_decay=0.1, penalty="squared",
        batchnorm="eval", landscape_points=5, landscape_batches=2, landscape_span=0.5, landscape_protocol="reference",
        corruptions=("fog", "snow"), severities=(2, 4), corruption_images=16, seed=7, trace_rtol=0.1,
        trace_max_samples=50, deflation_steps=4, slq_vectors=3, slq_steps=5,
    )  # fmt: skip
    untyped = build_parser().parse_args(["--model", "alternet-18-cifar10"])
    assert settings_from_args(untyped, "cuda")[0] == registry.Settings()
    on_cpu, notes = settings_from_args(untyped, "cpu")
    assert on_cpu == registry.Settings(**registry.Settings.CPU_AMOUNTS) and len(notes) == len(
        registry.Settings.CPU_AMOUNTS
    )
    assert registry.AUGMENTATIONS == ("model", "paper", "none")


def test_a_sample_of_n_images_is_analysed_whole_whatever_the_device_s_amounts():
    """`--max-images 512` at batch 64 reads 8 test batches and corrupts the 512 images, where a CPU would read 2;
    `--max-batches` still says how many when it is given."""
    parse = build_parser().parse_args
    settings, _ = settings_from_args(parse(["--model", "m/m", "--max-images", "512", "--batch-size", "64"]), "cpu")
    assert settings.max_batches == 8 and settings.corruption_images == 512
    argv = ["--model", "m/m", "--max-images", "512", "--batch-size", "64", "--max-batches", "2"]
    settings, _ = settings_from_args(parse(argv), "cpu")
    assert settings.max_batches == 2 and settings.corruption_images == 128
    argv = ["--model", "m/m", "--max-images", "100", "--cifar-c", "c"]
    settings, _ = settings_from_args(parse(argv), "cuda")
    assert settings.max_batches == 1 and settings.corruption_images is None  # CIFAR-C's own images


def test_hessian_batches_are_augmented_as_the_model_was_trained(tmp_path):
    """A folder written by alternet-train carries training_config.json: the Hessian and landscape use its
    augmentation (here Mixup, label smoothing, no RandAugment), recorded in the JSON; --augmentation none
    chooses clean batches. A time limit that no minibatch can meet is one clear error."""
    model = alternet_hf.create_model("resnet-50-cifar100", **{**TINY["resnet-50-cifar100"], "num_labels": 10})
    model.save_pretrained(tmp_path / "model")
    recipe = TrainingConfig(random_crop_padding=3, mixup_alpha=0.5, label_smoothing=0.1, rand_augment=None)
    recipe.save(tmp_path / "model" / "training_config.json")
    base = [
        installed_command("alternet-analyze"),
        "--model",
        str(tmp_path / "model"),
        "--analyses",
        "landscape",
        "--train-batch-size",
        "8",
        "--landscape-points",
        "1",
    ]
    for augmentation in ("model", "none"):
        out = tmp_path / augmentation
        completed = run_command([*base, "--out", str(out), "--augmentation", augmentation], cwd=tmp_path, timeout=600)
        assert completed.returncode == 0, completed.stderr[-3000:]
        recorded = json.loads((out / "landscape.json").read_text())["augmentation"]
        if augmentation == "model":
            assert recorded["source"] == f"{tmp_path / 'model'}/training_config.json"
            assert (recorded["random_crop_padding"], recorded["mixup_alpha"], recorded["label_smoothing"]) == (
                3,
                0.5,
                0.1,
            )
        else:
            assert (
                recorded["source"] == "none" and recorded["random_crop_padding"] == 0 and recorded["mixup_alpha"] == 0
            )
    timed_out = run_command(
        [*base[:4], "hessian", "--train-batch-size", "8", "--hessian-time-limit", "0", "--out", str(tmp_path / "t")],
        cwd=tmp_path,
        timeout=600,
    )
    assert timed_out.returncode == 2 and "the time limit of 0 s ended the first minibatch" in timed_out.stderr


def test_augmented_analyses_are_reproducible_whatever_ran_before(tmp_path):
    """Hessian batches are seeded RandAugment draws from their own loader: the same with or without a
    landscape run first."""
    model = alternet_hf.create_model("alternet-50-cifar100", **{**TINY["alternet-50-cifar100"], "num_labels": 10})
    model.save_pretrained(tmp_path / "model")
    eigenvalues = []
    for analyses in ("landscape,hessian", "hessian"):
        out = tmp_path / analyses.replace(",", "-")
        command = [
            installed_command("alternet-analyze"),
            "--model",
            str(tmp_path / "model"),
            "--out",
            str(out),
            "--analyses",
            analyses,
            "--train-batch-size",
            "8",
            "--hessian-batches",
            "1",
            "--top-k",
            "1",
            "--bottom-k",
            "0",
            "--landscape-points",
            "3",
        ]
        completed = run_command(command, cwd=tmp_path, timeout=600)
        assert completed.returncode == 0, completed.stderr[-3000:]
        eigenvalues.append(json.loads((out / "hessian.json").read_text())["result"]["eigenvalues"])
    assert eigenvalues[0] == eigenvalues[1]


def test_contributing_shows_the_lesion_entry_as_the_registry_has_it():
    """CONTRIBUTING.md's example of adding an analysis is the registry's own entry, not a copy that drifts."""
    text = (Path(__file__).resolve().parents[1] / "CONTRIBUTING.md").read_text()
    (example,) = re.findall(r"```python\n(Analysis\(\n.*?\n\))\n```", text, re.S)
    assert eval(example, {"Analysis": registry.Analysis}) == registry.ANALYSES["lesion"]
