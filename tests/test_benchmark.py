import json
from pathlib import Path

import benchmark
import pytest
from commands import run_command
from conftest import TINY, tool_command

import alternet_hf
from zoo_benchmark import measure_throughput


def test_measure_throughput_runs_both_modes():
    for mode in ("forward", "forward+backward"):
        result = measure_throughput("resnet-18-cifar10", batch_size=2, mode=mode, warmup=1, iterations=1)
        assert result.images_per_second > 0 and result.mode == mode and result.device == "cpu"


@pytest.mark.commands
def test_benchmark_script_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    result = run_command(
        [
            *tool_command("benchmark"),
            "throughput",
            "--models",
            "resnet-18-cifar10",
            "--batch-sizes",
            "2",
            "--modes",
            "forward",
            "--iterations",
            "1",
            "--warmup",
            "1",
            "--output",
            str(out),
        ],
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "| resnet-18-cifar10 | cpu | float32 | no | 2 | forward |" in result.stdout
    rows = json.loads(out.read_text())
    assert len(rows) == 1 and rows[0]["images_per_second"] > 0


def test_the_evaluation_benchmark_times_the_release_pass_per_core():
    from zoo_benchmark import evaluation_throughput
    from zoo_benchmark.tables import evaluation_table

    (row,) = evaluation_throughput("resnet-18-cifar10", batch_size=4, variants=[(False, False)], repeats=1)
    assert row["images_per_second"] > 0 and row["threads"] >= 1 and row["over_eager"] == 1.0
    assert row["images_per_second_per_core"] == pytest.approx(row["images_per_second"] / row["threads"])
    assert row["cifar100c_hours"] == pytest.approx(750_000 / row["images_per_second"] / 3600)
    assert "| resnet-18-cifar10 | no | float32 | 4 |" in evaluation_table([row]) and "| 1.00× |" in evaluation_table(
        [row]
    )


@pytest.mark.commands
def test_the_training_benchmark_runs_the_real_engine_end_to_end(tmp_path):
    from zoo_benchmark import measure_training_run

    tiny = {key: value for key, value in TINY["resnet-50-cifar100"].items() if key != "num_labels"}
    run = measure_training_run(
        "resnet-50-cifar100",
        epochs=2,
        images=32,
        eval_images=8,
        batch_size=16,
        num_workers=2,
        model_overrides=tiny,
        workdir=str(tmp_path),
    )
    assert run.train_images == 64 and run.images_per_second > 0 and not run.compiled  # eager on a CPU
    assert set(run.shares) == {"data", "step", "evaluation", "checkpoint", "start-up"}
    assert abs(sum(run.shares.values()) - 1) < 1e-9 and all(share > 0 for share in run.shares.values())
    # The paper recipe's cadence: 31 epoch checkpoints of 305, plus one per 10 minutes of a 30-minute run.
    assert run.recipe_checkpoints == 34 and run.recipe_checkpoint_bytes == 34 * run.checkpoint_bytes


def test_training_with_compile_both_times_an_eager_and_a_compiled_run(tmp_path, monkeypatch, capsys):
    """`--compile both` gives `training` one run each way; without --compile the engine chooses (None)."""
    import benchmark

    import zoo_benchmark
    from zoo_benchmark.engine import TrainingRun

    asked = []

    def measured(name, *, batch_size, compiled, **_):
        asked.append(compiled)
        shares = dict.fromkeys(("data", "step", "evaluation", "checkpoint", "start-up"), 0.2)
        return TrainingRun(
            name, "cpu", bool(compiled), batch_size, 0, 2, 64, 1.0, 64.0, 70.0, shares, 10, 34, 30.0, 340
        )

    monkeypatch.setattr(zoo_benchmark, "measure_training_run", measured)
    out = tmp_path / "runs.json"
    benchmark.main(["training", "--compile", "both", "--models", "resnet-18-cifar10", "--output", str(out)])
    assert asked == [False, True] and [row["compiled"] for row in json.loads(out.read_text())] == [False, True]
    benchmark.main(["training", "--models", "resnet-18-cifar10"])
    assert asked[2:] == [None] and "resnet-18-cifar10" in capsys.readouterr().out


def test_the_data_path_benchmark(tmp_path):
    from zoo_benchmark import measure_data_path

    speed = measure_data_path("resnet-18-cifar10", images=48, batch_size=16, repeats=2, workdir=str(tmp_path))
    assert speed.images == 48 and len(speed.milliseconds_per_image) == 2 and speed.images_per_second_per_worker > 0


@pytest.mark.commands
def test_the_evaluation_benchmark_refuses_a_precision_the_evaluation_does_not_run(tmp_path):
    result = run_command([*tool_command("benchmark"), "evaluation", "--dtype", "float16"], cwd=tmp_path)
    assert result.returncode == 2 and "evaluation runs in float32 and/or bf16 autocast" in result.stderr


@pytest.mark.commands
def test_the_reference_comparison_names_a_folder_that_is_not_the_reference_code(tmp_path):
    command = [*tool_command("benchmark"), "reference", "--reference-dir", str(tmp_path)]
    result = run_command(command, cwd=tmp_path)
    assert result.returncode == 2 and "is not a checkout of the reference code" in result.stderr


@pytest.mark.commands
def test_the_reference_race_gives_both_models_the_same_format_and_both_clocks(tmp_path):
    """The race's mechanics on a stand-in checkout (`write_reference_stand_in`), asked for the paper's layout."""
    write_reference_stand_in(tmp_path / "checkout")
    out = tmp_path / "race.json"
    command = [*tool_command("benchmark"), "reference", "--reference-dir", str(tmp_path / "checkout")]
    command += ["--batch-size", "2", "--inference-batch-sizes", "1", "3", "--repeats", "1", "--output", str(out)]
    result = run_command(command, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = json.loads(out.read_text())
    passes = [("forward", 2), ("forward+backward", 2), ("inference", 1), ("inference", 3)]
    assert [(r["memory_format"], r["pass_"], r["batch_size"]) for r in rows] == [
        (memory_format, *kind) for memory_format in ("contiguous", "channels_last") for kind in passes
    ]
    for row in rows:
        assert all(
            row[f"{clock}_seconds_{name}"] > 0 for clock in ("wall", "cpu") for name in ("reference", "alternet_hf")
        )
        assert row["wall_ratio"] == pytest.approx(row["wall_seconds_alternet_hf"] / row["wall_seconds_reference"])
    assert "| channels_last | inference | 3 |" in result.stdout and "| wall ratio |" in result.stdout
    built = [json.loads(line) for line in (tmp_path / "checkout" / "models" / "built.jsonl").read_text().splitlines()]
    paper = dict(depths=[3, 4, 6, 4], num_attention_blocks=[0, 1, 1, 2], num_attention_heads=[3, 6, 12, 24])
    assert built == [dict(paper, num_labels=100, window_size=4, sd=0.1)] * 2  # one per memory format


STAND_IN_ALTERNET = """
import json
from pathlib import Path

import torch
import alternet_hf

AttentionBlockB = object()


def StemB(*args, pool):
    assert pool is False


class AlterNet(torch.nn.Module):
    def __init__(self, block1, block2, *, stem, num_blocks, num_blocks2, heads, num_classes, window_size, sd):
        super().__init__()
        stem()
        layout = dict(depths=num_blocks, num_attention_blocks=num_blocks2, num_attention_heads=heads)
        with (Path(__file__).parent / "built.jsonl").open("a") as built:
            built.write(json.dumps(dict(layout, num_labels=num_classes, window_size=window_size, sd=sd)) + "\\n")
        layout = {name: list(value) for name, value in layout.items()}
        self.model = alternet_hf.create_model(
            "alternet-50-cifar100", **layout, num_labels=num_classes, window_size=window_size, drop_path_rate=sd
        )

    def forward(self, x):
        return self.model(x).logits
"""


def write_reference_stand_in(folder: Path) -> Path:
    """A stand-in for a clone of the reference code: its module layout and AlterNet constructor, building the zoo's own
    AlterNet in the layout asked for (the real reference is a GitHub clone, out of CI's reach), and recording each
    layout it was asked for in `models/built.jsonl`."""
    models = folder / "models"
    models.mkdir(parents=True)
    (models / "__init__.py").write_text("")
    (models / "preresnet_dnn_block.py").write_text("Bottleneck = object()\n")
    (models / "alternet.py").write_text(STAND_IN_ALTERNET)
    return folder


@pytest.mark.commands
def test_the_finetune_benchmark_gives_trained_weights_the_fine_tuning_defaults(tmp_path):
    """`scripts/benchmark.py finetune` on a model folder (trained weights): the fine-tuning defaults, per seed, on
    the 200 real photographs; a preset would get the from-scratch ones (`recipe.FROM_SCRATCH_DEFAULTS`)."""
    from alternet_hf.training.recipe import FINETUNE_DEFAULTS
    from zoo_benchmark.finetuning import write_faces_dataset

    unnamed = run_command([*tool_command("benchmark"), "finetune"], cwd=tmp_path)
    assert unnamed.returncode == 2 and "error: finetune needs --models: presets (trained from scratch)" in (
        unnamed.stderr
    )
    alternet_hf.create_model("alternet-50-cifar100", **TINY["alternet-50-cifar100"]).save_pretrained(tmp_path / "m")
    completed = run_command(
        [*tool_command("benchmark"), "finetune", "--models", "m", "--seeds", "0", "1", "--output", "finetune.json"],
        cwd=tmp_path,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    rows = json.loads((tmp_path / "finetune.json").read_text())
    assert [(r["seed"], r["weights"], r["epochs"], r["learning_rate"]) for r in rows] == [
        (seed, "trained", FINETUNE_DEFAULTS["epochs"], FINETUNE_DEFAULTS["learning_rate"]) for seed in (0, 1)
    ]
    assert all(0 <= r["accuracy"] <= 1 and r["said"] == [] for r in rows)
    assert "| m | trained | 3 | 0.001 | " in completed.stdout
    faces = write_faces_dataset(tmp_path / "faces")
    from alternet_hf.data.sources import load_image_classification

    test = load_image_classification(str(faces), split="test")
    assert len(test) == 40 and sorted(set(test["label"])) == [0, 1] and test[0]["image"].size == (32, 32)


@pytest.mark.commands
@pytest.mark.parametrize(
    "measurement, flag", [("throughput", "--batch-sizes"), ("data", "--repeats"), ("evaluation", "--iterations")]
)
def test_a_count_below_one_is_refused_before_anything_runs(tmp_path, measurement, flag):
    completed = run_command([*tool_command("benchmark"), measurement, flag, "0"], cwd=tmp_path)
    assert completed.returncode == 2 and f"argument {flag}: takes a whole number of at least 1, not '0'" in (
        completed.stderr
    )
    assert "Traceback" not in completed.stderr and list(tmp_path.iterdir()) == []


@pytest.mark.commands
def test_a_measurement_must_be_named(tmp_path):
    completed = run_command([*tool_command("benchmark")], cwd=tmp_path)
    listed = "{" + ",".join(benchmark.SUBCOMMANDS) + "}"
    assert completed.returncode == 2 and f"the following arguments are required: {listed}" in completed.stderr
    assert "Traceback" not in completed.stderr


def test_the_any_model_benchmark_times_a_first_and_a_cached_answer(tmp_path):
    """`any-model`: a timm architecture saved untrained into a Hub cache, answered offline, then from the cache."""
    command = [*tool_command("benchmark"), "any-model", "--models", "test_resnet", "--repeats", "1"]
    completed = run_command([*command, "--output", "any-model.json"], cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr[-3000:]
    (row,) = json.loads((tmp_path / "any-model.json").read_text())
    assert row["architecture"] == "test_resnet" and row["cached"] is True and row["analysed_seconds"] > 0
    assert row["analysed_seconds"] > row["worker_seconds"] > 0 and row["fork_server_seconds"] > 0
    assert "| test_resnet | 0.5 M |" in completed.stdout
    unknown = run_command([*tool_command("benchmark"), "any-model", "--models", "nosuch_net"], cwd=tmp_path)
    assert unknown.returncode == 2 and "timm has no architecture nosuch_net" in unknown.stderr
    assert "Traceback" not in unknown.stderr


def test_the_atlas_benchmark_times_each_model_and_a_refresh(tmp_path):
    """`atlas`: timm architectures saved untrained into a Hub cache, measured offline by the atlas into a fresh
    folder (each model's row and wall seconds, models per hour), then again with every commit unchanged."""
    command = [*tool_command("benchmark"), "atlas", "--models", "test_resnet", "test_vit", "--output", "atlas.json"]
    completed = run_command(command, cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr[-3000:]
    (found,) = json.loads((tmp_path / "atlas.json").read_text())
    assert [(r["model_id"], r["library"], r["kind"], r["status"]) for r in found["models"]] == [
        ("timm/test_resnet.untrained", "timm", "convolution", "measured"),
        ("timm/test_vit.untrained", "timm", "attention", "measured"),
    ]
    assert all(r["wall_seconds"] >= r["seconds"] > 0 for r in found["models"])
    assert found["measure_seconds"] >= sum(r["wall_seconds"] for r in found["models"]) - 1e-6
    assert found["models_per_hour"] == pytest.approx(2 * 3600 / found["measure_seconds"])
    assert found["unchanged"] == 2 and found["refresh_measure_seconds"] < found["measure_seconds"]
    assert found["refresh_command_said"].startswith("2 models: 0 measured, 2 unchanged")
    assert "| timm/test_resnet.untrained | timm | convolution | 0.5 M | measured |" in completed.stdout
    assert "models per hour" in completed.stdout and "load average (1, 5, 15 min): before " in completed.stdout
    unknown = run_command([*tool_command("benchmark"), "atlas", "--models", "nosuch_net"], cwd=tmp_path)
    assert unknown.returncode == 2 and "neither timm nor zoo_benchmark.hub_cache has nosuch_net" in unknown.stderr
    used = run_command([*tool_command("benchmark"), "atlas", "--workdir", str(tmp_path)], cwd=tmp_path)
    assert used.returncode == 2 and f"--workdir {tmp_path} is not empty" in used.stderr
    assert "Traceback" not in unknown.stderr + used.stderr


def test_a_transformers_model_made_local_passes_the_door_offline(tmp_path, monkeypatch):
    """`hub_cache.transformers_snapshot`: config, safetensors and image processor settings as a Hub snapshot that
    the door's checks read from the cache with the Hub off (a tiny ViT, from the table's fields)."""
    from alternet_hf.hub.door.checks import check_model, resolve_commit
    from zoo_benchmark.hub_cache import transformers_snapshot

    monkeypatch.setenv("ALTERNET_MODEL_CACHE", str(tmp_path))
    repo_id = "local/vit-tiny.untrained"
    tiny = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32)

    def snapshot() -> str:
        return transformers_snapshot(tmp_path, repo_id, "vit-small-patch16-224", **tiny, num_labels=10)

    sha = snapshot()
    assert snapshot() == sha  # the same seed writes the same files: the same commit
    assert resolve_commit(repo_id) == (repo_id, sha)
    checked = check_model(repo_id, sha)
    assert (checked.library, checked.architecture, checked.preprocessing.image_size) == (
        "transformers",
        "ViTForImageClassification",
        32,
    )


@pytest.mark.commands
def test_the_hessian_comparison_reports_each_quantity_with_its_products_and_seconds(tmp_path):
    """Ours alone (the peer is installed from the package index, which tests do not reach): every row of the table,
    the trace with its interval, and the JSON with the counts the table shows."""
    model = alternet_hf.create_model("alternet-18-cifar10", **{**TINY["alternet-18-cifar10"], "num_labels": 10})
    model.save_pretrained(tmp_path / "model")
    out = tmp_path / "hessian.json"
    arguments = ["--model", str(tmp_path / "model"), "--batch-size", "8", "--density-steps", "4", "--trace-rtol", "0.3"]
    command = [*tool_command("benchmark"), "hessian", *arguments, "--without-peer", "--output", str(out)]
    result = run_command(command, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    (found,) = json.loads(out.read_text())
    quantities = [row["quantity"] for row in found["rows"]]
    assert quantities == ["top-1 eigenvalue", "top-3 eigenvalues", "trace", "density (SLQ)"]  # no peer: no equal budget
    trace = found["rows"][2]["ours"]
    assert trace["hvps"] > trace["deflation_dimension"] >= 1 and trace["half_width"] > 0 and trace["seconds"] > 0
    assert trace["converged"] == (trace["half_width"] <= 0.3 * abs(trace["values"][0]))
    assert "| trace | not run | – | – | " in result.stdout and f" ± {trace['half_width']:.2g}" in result.stdout


def test_the_peers_trace_to_our_interval_is_projected_from_its_own_spread():
    """PyHessian's plain Hutchinson held to our stop: (1.96 s / (rtol |mean|))² samples at its seconds per product."""
    from zoo_benchmark.hessian_peer import _projected_to
    from zoo_benchmark.tables import hessian_peer_table

    theirs = {"values": [100.0], "half_width": 5.0, "sample_sd": 10.0, "samples": 4, "hvps": 4, "seconds": 8.0}
    projected = _projected_to(theirs, 0.01)
    assert projected["hvps"] == 385 and projected["seconds"] == pytest.approx(770.0)  # ceil(19.6²): 385 products
    ours = {"values": [101.0], "half_width": 1.0, "converged": True, "hvps": 40, "seconds": 77.0}
    found = {"model": "m", "parameters": 10, "batch_size": 8, "dataset": "d", "threads": 1, "peer": "p", "machine": "x"}
    table = hessian_peer_table(found | {"rows": [{"quantity": "trace to ±1%", "peer": projected, "ours": ours}]})
    assert "| trace to ±1% | 100, projected from its samples | ≈385 | ≈770 | 101 ± 1 | 40 | 77.0 | 0.10× |" in table
