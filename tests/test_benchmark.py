import json
import subprocess

from conftest import installed_command

from alternet_hf.benchmark import measure_throughput


def test_measure_throughput_runs_both_modes():
    for mode in ("forward", "forward+backward"):
        result = measure_throughput("resnet-18-cifar10", batch_size=2, mode=mode, warmup=1, iterations=1)
        assert result.images_per_second > 0 and result.mode == mode and result.device == "cpu"


def test_benchmark_script_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    result = subprocess.run(
        [
            installed_command("alternet-benchmark"),
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
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "| resnet-18-cifar10 | cpu | float32 | no | 2 | forward |" in result.stdout
    rows = json.loads(out.read_text())
    assert len(rows) == 1 and rows[0]["images_per_second"] > 0


def test_training_throughput_runs_the_real_engine(tmp_path):
    from alternet_hf.benchmark import measure_training_throughput

    result = measure_training_throughput("resnet-18-cifar10", images=32, batch_size=16, workdir=str(tmp_path))
    assert result.images_per_second > 0 and result.mode.startswith("train (paper recipe")
