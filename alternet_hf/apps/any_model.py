"""Any Hub model, as a visitor of a public Space names it, probed beside the zoo's: checked before anything is fetched,
one analysis at a time on the CPU, a time limit each, and every answer kept on disk for the next visitor.

A name goes through `alternet_hf.hub.vetting` (a Hub id, public, not gated, no remote code, safetensors, under the
parameter limit), its blocks are found on the meta device (`analysis.models.empty_model`), and only then are its
weights fetched and the probe run (`analysis.probe`). Answers are cached by (repo, commit, probe settings, package
version), so a new commit of the repo is probed afresh and a cached answer never waits in the line. Only the visitor's
model is loaded for its analysis and freed after it: the zoo's models and one visitor's are all that is in memory.
"""

import contextlib
import gc
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..utils import write_json

CACHE_VARIABLE = "ALTERNET_SPACE_CACHE"
CACHE_SIZE_VARIABLE = "ALTERNET_SPACE_CACHE_MB"
TIME_LIMIT_VARIABLE = "ALTERNET_SPACE_TIME_LIMIT"
WAITING_VARIABLE = "ALTERNET_SPACE_MAX_WAITING"
# Sized for a free 2-vCPU Space: an ImageNet ResNet-50 takes about 20 s, a ViT-B/16 under a minute.
DEFAULT_TIME_LIMIT = 180.0
DEFAULT_MAX_WAITING = 8
DEFAULT_CACHE_MB = 64.0
EXAMPLES = ("timm/resnet50.a1_in1k", "google/vit-base-patch16-224", "microsoft/swin-tiny-patch4-window7-224")


class Busy(RuntimeError):
    """The line of analyses is full: one sentence for the visitor."""


class TimeLimit(RuntimeError):
    """An analysis ran past its time limit: one sentence for the visitor."""


def _number(variable: str, default: float) -> float:
    value = os.environ.get(variable, "").strip()
    try:
        number = float(value) if value else default
    except ValueError:
        raise ValueError(f"{variable}={value!r} is not a number") from None
    if number <= 0:
        raise ValueError(f"{variable} must be above 0, not {value}")
    return number


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


@dataclass
class Deadline:
    """The time an analysis may take; `check` raises `TimeLimit` once it has passed."""

    seconds: float
    what: str

    def __post_init__(self):
        self.end = time.monotonic() + self.seconds

    def check(self) -> None:
        if time.monotonic() > self.end:
            raise TimeLimit(
                f"The analysis of “{self.what}” took longer than the {self.seconds:.0f} s this Space gives one model "
                f"(it runs on a small CPU; {TIME_LIMIT_VARIABLE} raises the limit on a bigger machine)."
            )


def probe_answer(repo_id: str, revision: str, result, *, parameters: int, architecture: str, library: str) -> dict:
    """The JSON value of a probe: the probe's numbers, what was analysed, and how."""
    from analysis.probe import SETTINGS
    from analysis.shared import plain

    return {
        "model_id": repo_id,
        "revision": revision,
        "library": library,
        "architecture": architecture,
        "parameters": parameters,
        **plain(result.to_dict(), nulls=True),
        "settings": dict(SETTINGS),
    }


class AnyModel:
    """The *Any model* tab's service: `analyse(model_id, revision)` returns the JSON answer or raises one of
    `RefusedModel`, `Busy`, `TimeLimit` with a sentence for the visitor; `reference_results()` probes the Space's own
    models once, lazily."""

    def __init__(
        self,
        references: dict,
        *,
        cache: ResultCache | None = None,
        line: Line | None = None,
        time_limit: float | None = None,
        photos: list | None = None,
    ):
        self.references = references  # {name: a model with its config (image_size, image_mean, image_std)}
        self.cache = cache or ResultCache(default_cache_dir(), _number(CACHE_SIZE_VARIABLE, DEFAULT_CACHE_MB) * 2**20)
        self.line = line or Line(int(_number(WAITING_VARIABLE, DEFAULT_MAX_WAITING)))
        self.time_limit = time_limit or _number(TIME_LIMIT_VARIABLE, DEFAULT_TIME_LIMIT)
        self._photos = photos
        self._reference_results = None
        self._reference_lock = threading.Lock()

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
        """The answer for `model_id` at `revision` (its main branch by default): from the cache if this commit was
        probed before, else computed in its turn within the time limit. `on_wait(ahead)` while waiting,
        `on_step(fraction, what)` while computing."""
        from analysis.probe import SETTINGS

        from ..hub.vetting import resolve_commit, vet_model

        started = time.monotonic()
        repo_id, sha, _ = resolve_commit(model_id, revision)
        key = self.cache.key(repo_id, sha, SETTINGS)
        answer = self.cache.get(key)
        if answer is None:
            with self.line.turn(on_wait):
                answer = self.cache.get(key)  # probed by someone who was ahead in the line
                if answer is None:
                    answer = self._compute(vet_model(repo_id, sha), on_step or (lambda fraction, what: None))
                    self.cache.put(key, answer)
                    return {**answer, "cached": False, "seconds": round(time.monotonic() - started, 3)}
        return {**answer, "cached": True, "seconds": round(time.monotonic() - started, 3)}

    def _compute(self, vetted, on_step) -> dict:
        from analysis.blocks import UndescribedModelError, discover_blocks
        from analysis.models import empty_model, load_vetted
        from analysis.probe import NOISE_FREQUENCIES, photo_inputs, probe

        from ..hub.vetting import RefusedModel, fetch_model

        deadline = Deadline(self.time_limit, vetted.repo_id)
        on_step(0.0, "reading its architecture")
        try:
            discover_blocks(empty_model(vetted))
        except UndescribedModelError:
            raise RefusedModel(
                f"“{vetted.repo_id}” ({vetted.architecture}) is of a family whose blocks the analyses do not know "
                "yet (ResNet, ViT, DeiT, Swin, ConvNeXt, PiT and the zoo's are known)."
            ) from None
        on_step(0.05, f"fetching {vetted.parameters / 1e6:.1f} M parameters")
        folder = fetch_model(vetted)
        deadline.check()
        on_step(0.3, "loading")
        loaded = load_vetted(vetted, folder)
        try:
            inputs = photo_inputs(loaded.image_size, loaded.image_mean, loaded.image_std, self.photos)
            steps = iter(range(1, len(NOISE_FREQUENCIES) + 2))

            def step():
                deadline.check()
                done = next(steps, len(NOISE_FREQUENCIES) + 1)
                on_step(0.35 + 0.65 * done / (len(NOISE_FREQUENCIES) + 1), "probing")

            on_step(0.35, "probing")
            result = probe(loaded.model, inputs, step=step)
        finally:
            del loaded
            gc.collect()
        return probe_answer(
            vetted.repo_id,
            vetted.revision,
            result,
            parameters=vetted.parameters,
            architecture=vetted.architecture,
            library=vetted.library,
        )
