"""Speed measurement, in one place (`scripts/benchmark.py` and `scripts/device_check.py` run it). CPU figures are
process time where a shared machine's other jobs would distort wall-clock time. Each module is imported when first
used."""

from alternet_hf.utils import lazy_package

__getattr__ = lazy_package(
    __name__,
    {
        "analyses": ("corruption_speed", "hessian_convergence", "per_block_speed"),
        "engine": ("measure_data_path", "measure_training_run"),
        "models": ("evaluation_throughput", "measure_throughput", "race_reference"),
    },
)
