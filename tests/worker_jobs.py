"""Jobs for `alternet_hf.hub.door.worker` in the tests: importable by name, as a worker imports a job."""

import os
import signal
import time

from alternet_hf.hub.door.refusals import RefusedModel


def hoard_memory(step):
    kept = []
    while True:  # 100 MB at a time, touched, until something stops it
        kept.append(bytearray(100 << 20))
        kept[-1][::4096] = b"x" * len(kept[-1][::4096])


def run_for_ever(step):
    while True:
        time.sleep(0.05)


def refuse(step):
    raise RefusedModel("a sentence of the job's")


def fail(step):
    raise OSError("/secret/path/of/this/machine")


def answer(step):
    step(0.5, "halfway")
    return {"answer": 42}


def die(step):
    os.kill(os.getpid(), signal.SIGKILL)  # as the system's out-of-memory killer ends a process
