"""Any Hub model, as a visitor of a public Space names it, probed beside the zoo's: checked before anything is fetched,
one analysis at a time, each in a worker process with a memory ceiling and a hard time limit, and every answer kept
on disk for the next visitor.

The Space process reads only the typed id and the commit it names (`alternet_hf.hub.door`); everything that reads the
visitor's repo (its config, its headers, its weights) and runs the model happens in `probe_repo`, in a worker
(`door.worker`): a check missed, a model too big or too slow, costs that worker, and the next visitor is served at
once. A visitor's weights leave the disk once they are loaded. Answers are cached by (repo, commit, probe settings,
package version), so a new commit of the repo is probed afresh and a cached answer never waits in the line; nothing
is cached for a worker that was stopped.
"""

import contextlib
import functools
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ..hub.door import limits
from ..utils import write_json

CACHE_VARIABLE = "ALTERNET_SPACE_CACHE"
CACHE_SIZE = limits.Limit("ALTERNET_SPACE_CACHE_MB", 64.0, "MB", "256")
MAX_WAITING = limits.Limit("ALTERNET_SPACE_MAX_WAITING", 8, "analyses", "16")
EXAMPLES = ("timm/resnet50.a1_in1k", "google/vit-base-patch16-224", "microsoft/swin-tiny-patch4-window7-224")
# What a worker imports beyond the door's own modules: the probe and its block discovery.
WORKER_MODULES = ["analysis.probe", "analysis.blocks", "alternet_hf.apps.any_model"]


class Busy(RuntimeError):
    """The line of analyses is full: one sentence for the visitor."""


def default_cache_dir() -> Path:
    """`ALTERNET_SPACE_CACHE`, else a folder of the user's cache."""
    folder = os.environ.get(CACHE_VARIABLE)
    return Path(folder).expanduser() if folder else Path.home() / ".cache" / "alternet-hf" / "any-model"


class ResultCache:
    """Answers as JSON files named by the hash of their key, written atomically; the least recently used go once the
    folder holds more than `max_bytes`."""

    def __init__(self, folder: str | Path, max_bytes: float):
        self.folder, self.max_bytes = Path(folder), max_bytes
        self._lock = threading.Lock()

    @staticmethod
    def key(repo_id: str, revision: str, settings: dict) -> str:
        from .. import __version__

        fields = dict(repo=repo_id, revision=revision, settings=settings, version=__version__)
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:40]

    def _path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def get(self, key: str) -> dict | None:
        path = self._path(key)
        try:
            value = json.loads(path.read_text())
            os.utime(path)  # just used: the last to go
        except (FileNotFoundError, ValueError, UnicodeDecodeError):
            return None
        return value

    def put(self, key: str, value: dict) -> None:
        write_json(self._path(key), value)
        with self._lock:
            self._prune()

    def _prune(self) -> None:
        files = []
        for path in self.folder.glob("*.json"):
            with contextlib.suppress(FileNotFoundError):
                stat = path.stat()
                files.append((stat.st_mtime, stat.st_size, path))
        total = sum(size for _, size, _ in files)
        for _, size, path in sorted(files):
            if total <= self.max_bytes:
                break
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            total -= size


class Line:
    """One analysis at a time; at most `max_waiting` waiting for their turn, the next one refused at once."""

    def __init__(self, max_waiting: int):
        self.max_waiting = max_waiting
        self._turn = threading.Lock()
        self._lock = threading.Lock()
        self.waiting = 0

    @contextlib.contextmanager
    def turn(self, on_wait: Callable[[int], None] | None = None) -> Iterator[None]:
        """Wait for the CPU (calling `on_wait(how many are ahead)` while waiting), then hold it for the block."""
        with self._lock:
            if self.waiting >= self.max_waiting:
                raise Busy(
                    f"The Space is busy: {self.waiting} analyses are waiting for the CPU. Try again in a few minutes, "
                    "or pick one of the examples (those answers are kept)."
                )
            self.waiting += 1
            ahead = self.waiting - 1 + self._turn.locked()
        try:
            while not self._turn.acquire(timeout=1.0):
                if on_wait is not None:
                    on_wait(ahead)
        finally:
            with self._lock:
                self.waiting -= 1
        try:
            yield
        finally:
            self._turn.release()


def probe_answer(
    repo_id: str,
    revision: str | None,
    result,
    *,
    parameters: int,
    architecture: str,
    library: str,
    image_size: int | None = None,
    note: str = "",
) -> dict:
    """The JSON value of a probe: the probe's numbers, what was analysed, and how."""
    from analysis.probe import SETTINGS
    from analysis.shared import plain

    return {
        "model_id": repo_id,
        "revision": revision,
        "library": library,
        "architecture": architecture,
        "parameters": parameters,
        "image_size": image_size,
        "preprocessing_note": note,
        **plain(result.to_dict(), nulls=True),
        "settings": dict(SETTINGS),
    }


def probe_repo(repo_id: str, revision: str, step: Callable[[float, str], None]) -> dict:
    """The probe of a visitor's repo at a resolved commit, from the typed id's checks to the answer: what a worker
    runs (`door.worker.run_in_worker`). Its blocks are found on the meta device before any weight is fetched."""
    from analysis.blocks import UndescribedModelError, discover_blocks
    from analysis.probe import NOISE_FREQUENCIES, photo_inputs, probe

    from ..hub.door.checks import check_model, forget_weights, load_checked
    from ..hub.door.refusals import RefusedModel

    started = time.monotonic()
    step(0.0, "reading its architecture")
    checked = check_model(repo_id, revision)
    try:
        discover_blocks(checked.empty_model)
    except UndescribedModelError:
        raise RefusedModel(
            f"“{repo_id}” ({checked.architecture}) is of a family whose blocks the analyses do not know yet (ResNet, "
            "ViT, DeiT, Swin, ConvNeXt, PiT and the zoo's are known)."
        ) from None
    step(0.05, f"fetching {checked.parameters / 1e6:.1f} M parameters")
    model = load_checked(checked)
    forget_weights(checked)  # the answer is kept; the weights need not be
    prepared = checked.preprocessing
    inputs = photo_inputs(prepared.image_size, prepared.mean, prepared.std)
    total = len(NOISE_FREQUENCIES) + 1
    done = iter(range(1, total + 1))
    step(0.35, "probing")
    result = probe(model, inputs, step=lambda: step(0.35 + 0.65 * min(next(done, total), total) / total, "probing"))
    answer = probe_answer(
        repo_id,
        checked.revision,
        result,
        parameters=checked.parameters,
        architecture=checked.architecture,
        library=checked.library,
        image_size=prepared.image_size,
        note=prepared.note,
    )
    return {**answer, "probe_seconds": round(time.monotonic() - started, 3)}


class AnyModel:
    """The *Any model* tab's service: `analyse(model_id, revision)` returns the JSON answer or raises one of
    `RefusedModel`, `Busy`, `WorkerStopped` with a sentence for the visitor; `reference_results()` probes the
    Space's own models once, lazily. `warm()` starts the workers' fork server ahead of the first visitor."""

    def __init__(
        self,
        references: dict,
        *,
        cache: ResultCache | None = None,
        line: Line | None = None,
        time_limit: float | None = None,
        memory_bytes: float | None = None,
        photos: list | None = None,
    ):
        from ..hub.door import worker

        self.references = references  # {name: a model with its config (image_size, image_mean, image_std)}
        self.cache = cache or ResultCache(default_cache_dir(), CACHE_SIZE.value() * 2**20)
        self.line = line or Line(int(MAX_WAITING.value()))
        self.time_limit = time_limit or limits.TIME_LIMIT.value()
        self.memory_bytes = memory_bytes or worker.memory_limit_bytes()
        self._photos = photos
        self._reference_results = None
        self._reference_lock = threading.Lock()
        worker.preload(WORKER_MODULES)

    def warm(self) -> None:
        """Start the workers' fork server (torch, transformers, timm and the probe imported once: seconds)."""
        from ..hub.door import worker

        worker.warm()

    @property
    def photos(self) -> list:
        if self._photos is None:
            from analysis.probe import probe_photos

            self._photos = probe_photos()
        return self._photos

    def reference_results(self) -> dict:
        """{name: ProbeResult} of the Space's own models, probed at first use (a few seconds: small inputs)."""
        with self._reference_lock:
            if self._reference_results is None:
                from analysis.probe import photo_inputs, probe

                found = {}
                for name, model in self.references.items():
                    config = model.config
                    found[name] = probe(
                        model, photo_inputs(config.image_size, config.image_mean, config.image_std, self.photos)
                    )
                self._reference_results = found
            return self._reference_results

    def analyse(self, model_id: str, revision: str | None = None, *, on_wait=None, on_step=None) -> dict:
        """The answer for `model_id` at `revision` (its main branch by default; a URL's /tree/<rev> counts): from
        the cache if this commit was probed before, else computed in its turn by a worker. `on_wait(ahead)` while
        waiting, `on_step(fraction, what)` while computing."""
        from ..hub.door.checks import resolve_commit

        started = time.monotonic()
        repo_id, sha = resolve_commit(model_id, revision)
        return self.answer(repo_id, sha, on_wait=on_wait, on_step=on_step, started=started)

    def answer(self, repo_id: str, sha: str, *, on_wait=None, on_step=None, started: float | None = None) -> dict:
        """`analyse` for a commit already resolved (`door.checks.resolve_commit`): the cached answer, else the
        worker's, with `cached` and `seconds` (since `started`, else since this call)."""
        from analysis.probe import SETTINGS

        from ..hub.door.worker import run_in_worker

        started = time.monotonic() if started is None else started
        key = self.cache.key(repo_id, sha, SETTINGS)
        answer = self.cache.get(key)
        if answer is None:
            with self.line.turn(on_wait):
                answer = self.cache.get(key)  # probed by someone who was ahead in the line
                if answer is None:
                    answer = run_in_worker(
                        functools.partial(probe_repo, repo_id, sha),
                        what=repo_id,
                        seconds=self.time_limit,
                        memory_bytes=self.memory_bytes,
                        on_step=on_step,
                    )
                    self.cache.put(key, answer)
                    return {**answer, "cached": False, "seconds": round(time.monotonic() - started, 3)}
        return {**answer, "cached": True, "seconds": round(time.monotonic() - started, 3)}
