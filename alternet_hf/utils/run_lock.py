"""One run per output folder: a run holds a lock on the folder it writes, and a second run on that folder stops at
once, naming the first (two runs in one folder corrupt each other's checkpoints).

The lock is filelock's on a file in the folder (`LOCK_FILE`, which says who holds it): `flock` on Unix, so the kernel
releases it when its process ends, SIGKILL included, and the operating system's own lock on Windows. Under a
multi-process launch (`RANK` set) rank 0 holds it for all. Within one process it is re-entrant (`scripts/release.py`
holds its folder for its checks, then `Release.run` for its steps).
"""

import contextlib
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


class _StaleLockFile(Exception):
    """The lock taken is of a lock file that is no longer the folder's."""


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
    from filelock import FileLock, Timeout

    created = [folder, *folder.parents]  # the folders this run makes, innermost first
    created = created[: next(i for i, path in enumerate(created) if path.exists())]
    lock_file = folder / LOCK_FILE
    holder = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv and sys.argv[0] else "python",
    }

    def claim(descriptor: int) -> None:
        """With the lock held: check it is the folder's lock file's, then say who holds it."""
        try:
            current = os.stat(lock_file).st_ino == os.fstat(descriptor).st_ino
        except FileNotFoundError:
            current = False
        if not current:  # removed by the run that held it between our open and our lock: lock the new one
            raise _StaleLockFile
        os.ftruncate(descriptor, 0)
        os.write(descriptor, json.dumps(holder).encode())

    while True:
        folder.mkdir(parents=True, exist_ok=True)  # again where a run that has just ended removed it
        lock = FileLock(lock_file, timeout=0, thread_local=False, on_acquired=claim)
        try:
            lock.acquire()
            break
        except Timeout:
            raise FolderInUse(f"{folder} is in use by another run ({_holder(lock_file)}); {advice}") from None
        except (_StaleLockFile, FileNotFoundError):
            continue
    _held[folder] = 1
    try:
        yield folder
    finally:
        del _held[folder]
        with contextlib.suppress(FileNotFoundError, PermissionError):  # Windows: the release removes it
            lock_file.unlink()  # still holding it, so no other run has it
        lock.release()
        with contextlib.suppress(OSError):
            for path in created:
                path.rmdir()  # only where the run wrote nothing else (and no new run has begun)
