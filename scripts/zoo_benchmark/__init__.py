"""Speed measurement, in one place (`scripts/benchmark.py` and `scripts/device_check.py` run it). CPU figures are
process time where a shared machine's other jobs would distort wall-clock time."""

from .analyses import corruption_speed, hessian_convergence, per_block_speed
from .engine import measure_data_path, measure_engine_overhead, measure_training_run, sample_speed
from .models import evaluation_throughput, measure_throughput, race_reference

__all__ = [
    "corruption_speed",
    "evaluation_throughput",
    "hessian_convergence",
    "measure_data_path",
    "measure_engine_overhead",
    "measure_throughput",
    "measure_training_run",
    "per_block_speed",
    "race_reference",
    "sample_speed",
]
