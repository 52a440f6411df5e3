"""The device every benchmark runs on, named as the results name it, and how each figure is timed: wall clock with
the device waited for, or CPU time where a shared machine's other jobs would distort the wall clock."""

import time
from contextlib import contextmanager

import torch

from analysis.inputs import choose_device
from analysis.shared import synchronize


def device_name(device: str | torch.device | None = None) -> str:
    """The GPU's name, or "cpu": the device as the results name it."""
    device = choose_device(device)
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


@contextmanager
def torch_threads(count: int | None):
    """torch's CPU threads set to `count` (None: left as they are) inside the block, restored after it."""
    kept = torch.get_num_threads()
    torch.set_num_threads(count or kept)
    try:
        yield
    finally:
        torch.set_num_threads(kept)


def timed(run, repeats: int = 1, *, calls: int = 1, warmup: int = 1, device=None) -> list[float]:
    """Wall-clock seconds of each of `repeats` timings of `calls` calls of `run`, after `warmup` untimed calls (where
    compilation, caches and the allocator settle); with a `device`, each reading of the clock waits for its work."""
    wait = (lambda: None) if device is None else (lambda: synchronize(device))
    for _ in range(warmup):
        run()
    wait()
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(calls):
            run()
        wait()
        seconds.append(time.perf_counter() - started)
    return seconds


def timed_in_turn(runs: dict, repeats: int) -> dict:
    """Seconds of each of `runs` ({name: function}) by wall clock and by CPU (process) time, the runs taking turns
    `repeats` times after one untimed call each: {(clock, name): [seconds, ...]}, the clock "wall" or "cpu"."""
    for run in runs.values():
        run()  # warm-up
    timings = {(clock, name): [] for clock in ("wall", "cpu") for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            started_wall, started_cpu = time.perf_counter(), time.process_time()
            run()
            timings["wall", name].append(time.perf_counter() - started_wall)
            timings["cpu", name].append(time.process_time() - started_cpu)
    return timings
