"""Helpers every part of the zoo shares (the commands, the library, the analyses and the maintainer's scripts).

Only the standard library is imported here, so that a command's `--help` and `import alternet_hf` stay instant;
what a helper needs beyond it is imported when the helper runs.
"""

import importlib.abc
import importlib.util
import sys
import warnings
from collections.abc import Callable


class _AfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """A one-shot finder that lets the normal finders locate `name` and runs `callback` once its module has run."""

    def __init__(self, name: str, callback: Callable[[], None]):
        self.name, self.callback = name, callback

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            self.loader, spec.loader = spec.loader, self
        return spec

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__spec__.loader = module.__loader__ = self.loader  # the module sees its own loader
        _IMPORTING.add(self.name)
        try:
            self.loader.exec_module(module)
        finally:
            _IMPORTING.discard(self.name)
        _call_or_warn(self.callback, self.name)


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
    elif not any(isinstance(f, _AfterImport) and (f.name, f.callback) == (name, callback) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(name, callback))


def half_imported(name: str) -> bool:
    """Whether the import of `name`, a module given to `when_imported`, has begun and not ended."""
    return name in _IMPORTING


def hub_unreachable(error: BaseException) -> bool:
    """Whether `error` (or an error it was raised from) says the Hub could not be reached: offline or no network."""
    names = {"OfflineModeIsEnabled", "LocalEntryNotFoundError", "ConnectionError", "ConnectTimeout", "ConnectError"}
    texts = ("couldn't connect", "offline mode", "hf_hub_offline", "connection refused", "failed to resolve")
    return any(
        type(e).__name__ in names or any(text in str(e).lower() for text in texts) for e in _errors_in_chain(error)
    )


def hub_unauthenticated(error: BaseException) -> bool:
    """Whether `error` (or one in its chain) says the Hub refused for want of a valid token."""
    names = {"LocalTokenNotFoundError", "GatedRepoError"}
    return any(type(e).__name__ in names or "401" in str(e) for e in _errors_in_chain(error))


def _errors_in_chain(error: BaseException):
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__
