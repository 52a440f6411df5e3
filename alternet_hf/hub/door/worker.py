"""A visitor's model is checked, fetched, loaded and analysed in a worker process that the Space survives.

Workers fork from a server process that has imported torch, transformers and timm once (multiprocessing's
forkserver), so a job starts in a fraction of a second. Each worker caps its own address space at what it had when it
started plus the memory limit (an rlimit it cannot raise), and the parent watches its resident size and the clock:
past the memory limit or the time limit the worker is killed, and the caller gets one sentence. A worker reports its
progress and its answer, or a refusal's sentence, through a pipe as JSON of bounded size (never a pickle: the Space
trusts nothing a worker says beyond plain values); anything else it raises is logged in full and reaches the visitor
as a fixed sentence.
"""

import contextlib
import json
import logging
import multiprocessing
import sys
import threading
import time
import traceback
from collections.abc import Callable

from .refusals import RefusedModel

logger = logging.getLogger(__name__)
PRELOAD = ["torch", "transformers", "timm", "safetensors.torch", "alternet_hf.hub.door.checks"]
MAX_MESSAGE_BYTES = 16 << 20  # an answer is a few KB
_context_lock = threading.Lock()
_context = None


class WorkerStopped(RuntimeError):
    """A worker killed for memory or time, or one that failed: one sentence for the visitor (`str(error)`)."""


def _forkserver():
    global _context
    with _context_lock:
        if _context is None:
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(PRELOAD)
            _context = context
        return _context


def preload(modules: list[str]) -> None:
    """Have the fork server import `modules` too (what the jobs import), before it starts."""
    _forkserver().set_forkserver_preload([*PRELOAD, *modules])


def warm() -> None:
    """Start the fork server now: it imports torch, transformers and timm (about 5 s on 2 cores) while the Space
    starts, and the first job waits only for what is left of that."""
    _forkserver()
    from multiprocessing import forkserver

    forkserver.ensure_running()


def _resident_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError, ValueError):
        pass
    return 0


def _virtual_bytes() -> int:
    with contextlib.suppress(FileNotFoundError, ValueError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _work(connection, job: Callable, memory_bytes: int) -> None:
    """The worker: its address space capped, `job(step)` run, its outcome sent."""
    with contextlib.suppress(ImportError, ValueError, OSError):
        import resource

        ceiling = _virtual_bytes() + memory_bytes
        resource.setrlimit(resource.RLIMIT_AS, (ceiling, ceiling))

    def send(*message) -> None:
        connection.send_bytes(json.dumps(message).encode())

    def step(fraction: float, what: str) -> None:
        send("step", float(fraction), str(what))

    try:
        send("answer", job(step))
    except RefusedModel as refusal:
        send("refused", str(refusal))
    except MemoryError:
        send("memory", "")
    except Exception as error:
        traceback.print_exc(file=sys.stderr)  # the Space's log; the visitor gets a fixed sentence
        out_of_memory = isinstance(error, RuntimeError) and "alloc" in str(error).lower()
        send("memory" if out_of_memory else "failed", "")
    finally:
        connection.close()


def run_in_worker(
    job: Callable,
    *,
    what: str,
    seconds: float,
    memory_bytes: float,
    on_step: Callable[[float, str], None] | None = None,
):
    """`job(step)` (a picklable callable: a module's function or a partial of one) in a worker process: its return
    value, or `RefusedModel` with the sentence it refused with, or `WorkerStopped` if it ran past `seconds`, past
    `memory_bytes` of resident memory, or failed. `what` names the model in those sentences."""
    context = _forkserver()
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_work, args=(sender, job, int(memory_bytes)), daemon=True)
    process.start()
    sender.close()
    deadline = time.monotonic() + seconds
    gigabytes = memory_bytes / 1e9
    outcome, reason = None, None
    try:
        while outcome is None:
            if time.monotonic() > deadline:
                reason = f"needed more than the {seconds:.0f} s this Space gives one model"
                break
            if _resident_bytes(process.pid) > memory_bytes:
                reason = f"needed more than the {gigabytes:g} GB of memory this Space gives one model"
                break
            if receiver.poll(0.1):
                try:
                    kind, *values = json.loads(receiver.recv_bytes(MAX_MESSAGE_BYTES))
                except EOFError:  # it died without a word: killed by the system, most likely for memory
                    reason = "stopped before it finished (most likely out of memory)"
                    break
                except (OSError, ValueError, TypeError):  # not a message of ours: the worker is not trusted further
                    reason = "sent something that is not an answer"
                    break
                if kind == "step":
                    if on_step is not None and len(values) == 2:
                        on_step(float(values[0]), str(values[1])[:200])
                elif kind in ("answer", "refused", "memory", "failed") and len(values) == 1:
                    outcome = (kind, values[0])
                else:
                    reason = "sent something that is not an answer"
                    break
    finally:
        if process.is_alive():
            process.kill()
        process.join(30)
        receiver.close()
    if reason is not None:
        logger.warning("worker for %s stopped: %s", what, reason)
        raise WorkerStopped(f"The analysis of “{what}” {reason}, so it was stopped.")
    kind, value = outcome
    if kind == "answer":
        return value
    if kind == "refused":
        raise RefusedModel(str(value)[:500])
    if kind == "memory":
        raise WorkerStopped(
            f"The analysis of “{what}” needed more than the {gigabytes:g} GB of memory this Space gives one model, "
            "so it was stopped."
        )
    raise WorkerStopped(f"“{what}” passed the checks but could not be analysed (the details are in the Space's log).")


def memory_limit_bytes() -> float:
    from .limits import WORKER_MEMORY_GB

    return WORKER_MEMORY_GB.value() * 1e9
