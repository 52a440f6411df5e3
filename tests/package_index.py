"""A local package index for the tests: pypiserver (from the package index, like any user's) on a free port, taking
uploads without a password, as a rehearsal of the release's upload to the real index."""

import contextlib
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from test_space import free_port


def wait_until_it_answers(url: str, process: subprocess.Popen, what: str, seconds: float) -> None:
    """Return once `url` answers; fail with `process`'s stderr if it ends first, or after `seconds` (a bound for a
    server that hangs, far above the seconds it takes)."""
    deadline = time.monotonic() + seconds
    while True:
        assert process.poll() is None, process.stderr.read().decode()[-3000:]
        try:
            urllib.request.urlopen(url, timeout=5).read()
            return
        except OSError:
            assert time.monotonic() < deadline, f"{what} did not answer within {seconds:.0f} s"
            time.sleep(0.2)


@contextlib.contextmanager
def package_index(folder: Path) -> Iterator[str]:
    """pypiserver serving `folder` while the block runs: its upload address (its simple pages are under `simple/`)."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    command = [sys.executable, "-m", "pypiserver", "run", "-i", "127.0.0.1", "-p", str(port), "-a", ".", "-P", "."]
    server = subprocess.Popen([*command, "--disable-fallback", str(folder)], stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_until_it_answers(f"{url}simple/", server, "pypiserver", 120)
        yield url
    finally:
        server.terminate()
        server.wait(30)
