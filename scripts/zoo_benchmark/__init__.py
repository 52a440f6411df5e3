"""Speed measurement, in one place (`scripts/benchmark.py` runs it; benchmarks, not tests).

- `models`: images per second of the zoo's models, bare steps, eager or compiled; the release's CIFAR-100-C pass;
  AlterNet-50 raced against the reference implementation's;
- `engine`: the training engine's data path per loader worker, its loop overhead, end-to-end runs; a streamed
  sample of a split against preparing it;
- `analyses`: CIFAR-C generation, Hessian eigenvalue solvers, the per-block statistics;
- `device`: the device chosen, named, waited for and timed; what `scripts/device_check.py` measures on a GPU;
- `tables`: the results as the Markdown tables the command prints and the README quotes.

CPU figures are process time where a shared machine's other jobs would distort wall-clock time.
"""

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
