"""Helpers every part of the zoo shares (the commands, the library, the analyses and the maintainer's scripts).

Only the standard library is imported here, so that a command's `--help` and `import alternet_hf` stay instant;
what a helper needs beyond it is imported when the helper runs.
"""

import contextlib
import importlib.abc
import importlib.util
import json
import os
import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path


class _AfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """A finder that lets the other finders locate `name` and wraps the loader they return, so that its `callbacks`
    run once the module has run; one per module, however many callbacks wait for it, since each asks the other
    finders for the spec. It leaves `sys.meta_path` only then: transformers asks for timm's spec at import to see
    whether it is installed, without importing it."""

    def __init__(self, name: str):
        self.name, self.callbacks = name, []

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        for finder in [f for f in sys.meta_path if not isinstance(f, _AfterImport) and hasattr(f, "find_spec")]:
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    self.loader, spec.loader = spec.loader, self
                return spec
        return None

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__spec__.loader = module.__loader__ = self.loader  # the module sees its own loader
        _IMPORTING.add(self.name)
        try:
            self.loader.exec_module(module)
        finally:
            _IMPORTING.discard(self.name)
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        for callback in self.callbacks:
            _call_or_warn(callback, self.name)


_IMPORTING: set[str] = set()  # the modules `when_imported` waits for whose import has begun and not ended


def _call_or_warn(callback: Callable[[], None], name: str) -> None:
    try:
        callback()
    except Exception as error:  # a release of `name` we do not fit must break neither its import nor ours
        warnings.warn(f"alternet_hf could not register its models once {name} was imported: {error!r}", stacklevel=3)


def when_imported(name: str, callback: Callable[[], None]) -> None:
    """Run `callback` now if the module `name` is imported, else right after its import completes: how the zoo
    registers with transformers' Auto classes and timm without importing either itself."""
    if name in sys.modules:
        _call_or_warn(callback, name)
        return
    waiting = next((f for f in sys.meta_path if isinstance(f, _AfterImport) and f.name == name), None)
    if waiting is None:
        waiting = _AfterImport(name)
        sys.meta_path.insert(0, waiting)
    if callback not in waiting.callbacks:
        waiting.callbacks.append(callback)


def half_imported(name: str) -> bool:
    """Whether the import of `name`, a module given to `when_imported`, has begun and not ended."""
    return name in _IMPORTING


def lazy_package(package: str, exports: dict[str, tuple[str, ...]] | None = None) -> Callable[[str], object]:
    """The module-level `__getattr__` of a package that imports nothing until a name is used: a name of `exports`
    ({module: names}) from its module, else a module of the package (`alternet_hf.data`); each kept once loaded."""
    module_of = {name: module for module, names in (exports or {}).items() for name in names}

    def __getattr__(name: str):
        if name in module_of:
            value = getattr(importlib.import_module(f".{module_of[name]}", package), name)
        elif importlib.util.find_spec(f"{package}.{name}") is not None:
            value = importlib.import_module(f".{name}", package)
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__


# What a failed call to the Hub met (`hub_failure`).
UNREACHABLE, UNAUTHENTICATED, GATED, FORBIDDEN, NOT_FOUND = (
    "unreachable",
    "unauthenticated",
    "gated",
    "forbidden",
    "not found",
)
_STATUS = {401: UNAUTHENTICATED, 403: FORBIDDEN, 404: NOT_FOUND}
# Connection failures as the HTTP libraries under huggingface_hub, datasets and fsspec raise them: (module, class).
_TRANSPORT_ERRORS = (
    ("httpx", "TransportError"),
    ("httpx2", "TransportError"),
    ("requests", "ConnectionError"),
    ("requests", "Timeout"),
    ("aiohttp", "ClientConnectionError"),
)


def hub_failure(error: BaseException) -> str | None:
    """What a failed call to the Hub met, read from huggingface_hub's exception types and the HTTP status of the
    Hub's answer among the errors `error` was raised from, the Hub's own answer first: `GATED` (a gated repo without
    access), `UNAUTHENTICATED` (401, or no token saved), `FORBIDDEN` (403), `NOT_FOUND` (404: no such repo, revision
    or file), else `UNREACHABLE` (offline mode, no connection, a refused or timed-out one, and nothing cached), or
    None (not a failure of the Hub). An error that carries a `hub_failure` of its own says it."""
    from huggingface_hub import errors

    chain = list(_errors_in_chain(error))
    for cause in chain:
        if getattr(cause, "hub_failure", None):  # an error of the zoo's that asked the Hub itself
            return cause.hub_failure
        if isinstance(cause, errors.GatedRepoError):
            return GATED
        if isinstance(cause, errors.LocalTokenNotFoundError):
            return UNAUTHENTICATED
        if isinstance(cause, (errors.RepositoryNotFoundError, errors.RevisionNotFoundError, errors.EntryNotFoundError)):
            if not isinstance(cause, errors.LocalEntryNotFoundError):  # a file neither cached nor fetched: below
                return NOT_FOUND
        if isinstance(cause, errors.HfHubHTTPError) and getattr(cause.response, "status_code", None) in _STATUS:
            return _STATUS[cause.response.status_code]
    transport = tuple(getattr(sys.modules[module], name) for module, name in _TRANSPORT_ERRORS if module in sys.modules)
    unreachable = (errors.OfflineModeIsEnabled, errors.LocalEntryNotFoundError, ConnectionError, TimeoutError)
    return UNREACHABLE if any(isinstance(cause, (*unreachable, *transport)) for cause in chain) else None


def _errors_in_chain(error: BaseException):
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def padded_to_first_batch(step):
    """`step` on batches padded to the size of the first, so that a smaller last batch compiles nothing new (the
    padding in channels-last memory, the layout of the loaders' batches): a compiled evaluation step's wrapper."""
    import torch

    full_size = None

    def padded_step(pixel_values):
        nonlocal full_size
        full_size = full_size or len(pixel_values)
        missing = full_size - len(pixel_values)
        if missing <= 0:
            return step(pixel_values)
        padding = pixel_values.new_zeros((missing, *pixel_values.shape[1:]))
        return step(torch.cat([pixel_values, padding]).contiguous(memory_format=torch.channels_last))[:-missing]

    return padded_step


def to_rgb(image):
    """Any PIL image as 8-bit RGB, one rule for training, evaluation and the Space. Greyscale of more than 8 bits is
    scaled, where PIL's own `convert("RGB")` would clip most of it to white: 16-bit images (modes I;16…, and I, as
    which PIL opens some 16-bit PNG and TIFF files) from 0…65535, float images (F) from 0…1 where their values fit
    in it, else from 0…255, else from 0…65535. Palette, alpha and other modes convert as PIL converts them."""
    import numpy as np
    from PIL import Image

    if image.mode == "RGB":
        return image
    if image.mode in ("I", "F") or image.mode.startswith("I;16"):
        values = np.asarray(image, dtype=np.float64)
        top = 65535.0
        if image.mode == "F" and values.size:
            top = next((limit for limit in (1.0, 255.0) if np.nanmax(values) <= limit), top)
        grey = np.clip(np.rint(np.nan_to_num(values) * (255 / top)), 0, 255).astype(np.uint8)
        return Image.fromarray(grey, "L").convert("RGB")
    return image.convert("RGB")


def not_a_folder(path: str | Path) -> str | None:
    """Why `path` cannot be a folder to write into (it, or a folder above it, is a file), or None."""
    path = Path(path).expanduser()
    for candidate in (path, *path.parents):
        if candidate.exists() and not candidate.is_dir():
            inside = "" if candidate == path else f", so {path} cannot be a folder"
            return f"{candidate} is a file{inside}: name a folder to write into (one that is missing is created)"
    return None


MODEL_JSON_FILES = ("config.json", "preprocessor_config.json", "model.safetensors.index.json")


def damaged_model_file(folder: str | Path) -> str | None:
    """What makes a saved model folder unloadable as it stands (a JSON file or a safetensors file cut short or not
    what its name says), said in one line with what to do, or None. Reads the JSON files and the safetensors
    headers only, so a command can say it before anything loads; the loaders' own errors name neither the file nor
    the cause."""
    folder = Path(folder)
    problems = [(folder / name, _json_object_problem(folder / name)) for name in MODEL_JSON_FILES]
    problems += [(path, _safetensors_problem(path)) for path in sorted(folder.glob("*.safetensors"))]
    for path, problem in problems:
        if problem:
            return f"{path} {problem}: the model folder is damaged; copy, download or save the model again"
    return None


def _json_object_problem(path: Path) -> str | None:
    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        return "is empty" if not path.stat().st_size else f"is not valid JSON ({error})"
    return None if isinstance(value, dict) else f"holds a JSON {type(value).__name__}, not an object"


def _safetensors_problem(path: Path) -> str | None:
    """A safetensors file is an 8-byte header length, a JSON header whose `data_offsets` end where the file ends."""
    size = path.stat().st_size
    with path.open("rb") as file:
        prefix = file.read(8)
        if not prefix:
            return "is empty"
        if len(prefix) < 8:
            return f"is cut short ({size} bytes, less than a safetensors header)"
        header_size = int.from_bytes(prefix, "little")
        if header_size > size - 8:
            return f"is cut short ({size:,} bytes) or no safetensors file (its header says {header_size:,} bytes)"
        try:
            header = json.loads(file.read(header_size))
            end = max([entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"], default=0)
        except (UnicodeDecodeError, json.JSONDecodeError, AttributeError, KeyError, IndexError, TypeError):
            return "is not a safetensors file (its header is unreadable)"
    expected = 8 + header_size + end
    if size < expected:
        return f"is cut short ({size:,} of the {expected:,} bytes its header lists)"
    if size > expected:
        return f"has {size - expected:,} bytes past the tensors its header lists"
    return None


def write_atomically(path: str | Path, data: str | bytes) -> Path:
    """Write `data` into `path` whole or not at all, so that a kill or a reader never meets half a file: into a
    hidden file beside it, named for this process and thread, then renamed over it. Makes the parent folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.partial")
    if isinstance(data, bytes):
        partial.write_bytes(data)
    else:
        partial.write_text(data)
    os.replace(partial, path)
    return path


def write_json(path: str | Path, value, **options) -> Path:
    """`value` as JSON in `path` (indented by 2 unless `options` say otherwise), written atomically."""
    return write_atomically(path, json.dumps(value, **{"indent": 2, **options}))


def format_duration(seconds: float) -> str:
    """A duration as a person says it: 45 s, 2.5 min, 40 min, 3.0 h, 2.5 days."""
    minutes = seconds / 60
    if seconds < 90:
        return f"{seconds:.0f} s"
    if minutes < 90:
        return f"{minutes:.1f} min" if minutes < 10 else f"{minutes:.0f} min"
    if minutes < 48 * 60:
        return f"{minutes / 60:.1f} h"
    return f"{minutes / 1440:.1f} days"


def machine() -> str:
    """The processor, its cores and torch's version: the context every measured figure needs."""
    import platform

    import torch

    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}"


@contextlib.contextmanager
def quiet_progress_bars():
    """datasets' and transformers' own progress bars off while a step of longer work runs (a split read among many,
    a model saved during training) under the bar of that work; as they were afterwards. A library not imported yet
    shows none to silence."""
    loggers = [
        importlib.import_module(f"{name}.utils.logging") for name in ("datasets", "transformers") if name in sys.modules
    ]
    enabled = [logging for logging in loggers if logging.is_progress_bar_enabled()]
    for logging in loggers:
        logging.disable_progress_bar()
    try:
        yield
    finally:
        for logging in enabled:
            logging.enable_progress_bar()
