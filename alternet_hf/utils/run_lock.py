"""One run per output folder: a run holds a lock on the folder it writes, and a second run on that folder stops at
once, naming the first (two runs in one folder corrupt each other's checkpoints).

The lock is `flock` on a file in the folder (`LOCK_FILE`, which says who holds it), so the kernel releases it when its
process ends, SIGKILL included. Under a multi-process launch (`RANK` set) rank 0 holds it for all. Within one process
it is re-entrant (`scripts/release.py` holds its folder for its checks, then `Release.run` for its steps).
"""

import contextlib
import errno
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from . import not_a_folder

LOCK_FILE = ".alternet-run.lock"

_held: dict[Path, int] = {}  # the folders this process holds, with how many holders


class FolderInUse(OSError):
    """Another live run is writing to the folder."""


def _holder(lock: Path) -> str:
    try:
        holder = json.loads(lock.read_text())
        return f"pid {holder['pid']} on {holder['host']}, started {holder['started']}: {holder['command']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "a process that did not say which"


def _is_rank_zero() -> bool:
    try:
        return int(os.environ.get("RANK") or 0) == 0
    except ValueError:
        return True


@contextlib.contextmanager
def hold_folder(
    folder: str | Path, *, advice: str = "wait for it to end, or stop it, then run this again"
) -> Iterator[Path]:
    """Hold `folder` (created if missing) for the block; `FolderInUse`, naming the holder, where another holds it."""
    problem = not_a_folder(folder)
    if problem:
        raise NotADirectoryError(problem)
    folder = Path(folder).resolve()
    if folder in _held or not _is_rank_zero():
        _held[folder] = _held.get(folder, 0) + 1
        try:
            yield folder
        finally:
            _held[folder] -= 1
            if not _held[folder]:
                del _held[folder]
        return
    import fcntl

    created = [folder, *folder.parents]  # the folders this run makes, innermost first
    created = created[: next(i for i, path in enumerate(created) if path.exists())]
    folder.mkdir(parents=True, exist_ok=True)
    lock = folder / LOCK_FILE
    while True:
        try:
            descriptor = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:  # the folder, made by a run that has just ended, removed by it
            folder.mkdir(parents=True, exist_ok=True)
            continue
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            os.close(descriptor)
            if error.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            raise FolderInUse(f"{folder} is in use by another run ({_holder(lock)}); {advice}") from None
        # The file may have been removed by the run that held it between our open and our lock: lock the new one.
        try:
            if os.stat(lock).st_ino == os.fstat(descriptor).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(descriptor)
    holder = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv and sys.argv[0] else "python",
    }
    os.ftruncate(descriptor, 0)
    os.write(descriptor, json.dumps(holder).encode())
    _held[folder] = 1
    try:
        yield folder
    finally:
        del _held[folder]
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()  # still holding it, so no other run has it
        with contextlib.suppress(OSError):
            for path in created:
                path.rmdir()  # only where the run wrote nothing else
        os.close(descriptor)
