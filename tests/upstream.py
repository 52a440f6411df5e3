"""The test files of the libraries the zoo plugs into, run against the zoo: timm's `tests/test_models.py` and
transformers' `tests/test_modeling_common.py`; and old releases the reference used (timm 0.5.4), installed into a
side folder (`side_installed`) for scripts run in their own process.

Neither ships its tests in its wheel. We download the source distribution of the *installed* version from the
package registry with pip (as CI installs everything else), unpack its `tests/` once into a cache shared by the
pytest-xdist workers, and import the files from there: nothing of theirs is copied into this repository, and a
new timm or transformers brings its own tests with it.

`ALTERNET_HF_UPSTREAM_TESTS` moves the cache (default `~/.cache/alternet-hf/upstream-tests`); a folder that
already holds `<distribution>-<version>/tests` is used as it is, which is how to run these tests without a
registry.

Checks on what another library does read its behaviour, never its wording (`raises_from`: an error by its type; the
Gradio readers below: its API's structure), and their failures name the installed versions (`versions`), so that a
failure that follows a new release says which one changed what.
"""

import contextlib
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
import warnings
from pathlib import Path

import pytest
from filelock import FileLock

CACHE = Path(os.environ.get("ALTERNET_HF_UPSTREAM_TESTS", Path.home() / ".cache" / "alternet-hf" / "upstream-tests"))


def sdist_tests(distribution: str) -> Path:
    """The `tests/` folder of the installed `distribution`'s source distribution, downloaded once."""
    version = importlib.metadata.version(distribution)
    target = CACHE / f"{distribution}-{version}"
    CACHE.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{target}.lock"):
        if not (target / "tests").is_dir():
            _download_tests(distribution, version, target)
    return target / "tests"


def _download_tests(distribution: str, version: str, target: Path) -> None:
    with tempfile.TemporaryDirectory(dir=CACHE) as scratch:
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:"]
        result = subprocess.run(
            [*command, f"{distribution}=={version}", "--dest", scratch], capture_output=True, text=True
        )
        archives = list(Path(scratch).glob("*.tar.gz"))
        if result.returncode != 0 or not archives:
            raise RuntimeError(
                f"could not download the source distribution of {distribution}=={version}, whose tests these tests "
                f"run ({' '.join(command)} {distribution}=={version}):\n{result.stderr[-2000:]}\n"
                f"Without a package registry, unpack its tests/ into {target}/tests"
            )
        unpacked = Path(scratch) / "unpacked"
        with tarfile.open(archives[0]) as archive:
            root = archive.getnames()[0].split("/")[0]
            members = [m for m in archive.getmembers() if m.name.startswith(f"{root}/tests/")]
            archive.extractall(unpacked, members=members, filter="data")
        shutil.rmtree(target, ignore_errors=True)
        (unpacked / root).rename(target)


def side_installed(distribution: str, version: str) -> Path:
    """A folder holding `distribution==version` alone (no dependencies), installed once from the package registry
    with pip: put it first on a subprocess's PYTHONPATH to run code against that old release."""
    target = CACHE / f"{distribution}-{version}-site"
    CACHE.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{target}.lock"):
        if not (target / distribution).is_dir():
            with tempfile.TemporaryDirectory(dir=CACHE) as scratch:
                command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", scratch]
                result = subprocess.run([*command, f"{distribution}=={version}"], capture_output=True, text=True)
                if result.returncode != 0:
                    raise RuntimeError(
                        f"could not install {distribution}=={version} into a side folder ({' '.join(command)}):\n"
                        f"{result.stderr[-2000:]}\nWithout a package registry, install it into {target} by hand"
                    )
                shutil.rmtree(target, ignore_errors=True)
                Path(scratch).rename(target)
                Path(scratch).mkdir()  # for TemporaryDirectory's cleanup
    return target


def import_file(path: Path, module_name: str):
    """Import one file as `module_name` (once per process), with its folder's siblings importable."""
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        with warnings.catch_warnings():  # marks registered in their own configuration, not in ours
            warnings.simplefilter("ignore", pytest.PytestUnknownMarkWarning)
            spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


# What transformers' test_modeling_common.py imports from folders its source distribution leaves out: the export
# tests (torch.export of every zoo family is tested in test_model_contract.py) and the generation tests (the zoo
# has no generative model).
_TRANSFORMERS_STUBS = {
    "__init__.py": "",
    "exporters/__init__.py": "",
    "exporters/test_export.py": "class ExportTesterMixin:\n    pass\n",
    "generation/__init__.py": "",
    "generation/test_utils.py": "class GenerationTesterMixin:\n    pass\n",
}


def transformers_modeling_common():
    """transformers' `tests/test_modeling_common.py` of the installed version (`ModelTesterMixin`, `floats_tensor`,
    ...), imported inside its `tests/` folder as the package `transformers_sdist_tests`."""
    tests = sdist_tests("transformers")
    with FileLock(f"{tests.parent}.lock"):
        for relative, text in _TRANSFORMERS_STUBS.items():
            path = tests / relative
            if not path.exists():
                path.parent.mkdir(exist_ok=True)
                path.write_text(text)
    if "transformers_sdist_tests" not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            "transformers_sdist_tests", tests / "__init__.py", submodule_search_locations=[str(tests)]
        )
        package = importlib.util.module_from_spec(spec)
        sys.modules["transformers_sdist_tests"] = package
        spec.loader.exec_module(package)
    with warnings.catch_warnings():  # marks registered in transformers' configuration, not in ours
        warnings.simplefilter("ignore", pytest.PytestUnknownMarkWarning)
        try:
            return importlib.import_module("transformers_sdist_tests.test_modeling_common")
        except ModuleNotFoundError as error:
            if not (error.name or "").startswith("transformers_sdist_tests."):
                raise
            raise ImportError(
                f"transformers {importlib.metadata.version('transformers')}'s tests/test_modeling_common.py imports "
                f"{error.name.partition('.')[2]}, which its source distribution leaves out: stub what it takes from "
                "there in _TRANSFORMERS_STUBS"
            ) from error


def versions(*distributions: str) -> str:
    """'transformers 5.25.0, torch 2.14.1': the installed versions of the libraries a check reads."""
    return ", ".join(f"{distribution} {importlib.metadata.version(distribution)}" for distribution in distributions)


@contextlib.contextmanager
def naming_versions(*distributions: str):
    """For a block that reads what `distributions` do: an error in it is noted with their installed versions."""
    try:
        yield
    except BaseException as error:
        if hasattr(error, "add_note"):  # Python 3.11 and later
            error.add_note(f"with {versions(*distributions)}")
        raise


@contextlib.contextmanager
def raises_from(expected, *distributions: str):
    """`pytest.raises(expected)` for an error that `distributions` raise, told by its type, never by their sentences;
    a failure names their installed versions."""
    try:
        with naming_versions(*distributions), pytest.raises(expected) as info:
            yield info
    except pytest.fail.Exception as failure:  # nothing raised
        pytest.fail(f"{failure} with {versions(*distributions)}", pytrace=False)


# Gradio, as gradio_client describes an app and returns its outputs.
GRADIO = ("gradio", "gradio_client")


def gradio_page(port: int) -> str | None:
    """The configuration from which the Gradio app at `port` builds its page (/config: its components and their
    texts); None while nothing answers there yet."""
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/config", timeout=5).read().decode()
    except urllib.error.HTTPError as error:
        if error.code not in (404, 405):  # not up yet
            return None
        raise AssertionError(f"{versions(*GRADIO)} serve no /config (HTTP {error.code}) where the page is") from None
    except OSError:
        return None


def gradio_parameters(client, endpoint: str) -> dict[str, dict]:
    """{label: description} of the parameters of `endpoint` ("/robustness") in the client's description of the app."""
    described = client.view_api(return_format="dict")
    try:
        return {parameter["label"]: parameter for parameter in described["named_endpoints"][endpoint]["parameters"]}
    except (KeyError, TypeError) as error:
        raise AssertionError(f"{versions(*GRADIO)} describe {endpoint} otherwise ({error!r}): {described}") from None


def gradio_describes_a_number(parameter: dict) -> bool:
    """Whether Gradio describes a parameter as a number, by its Python type (float, int) or its JSON type."""
    described = [parameter.get(field) for field in ("python_type", "type")]
    kinds = {kind.get("type") for kind in described if isinstance(kind, dict)}
    return bool(kinds & {"float", "int", "number", "integer"})


def gradio_confidences(output) -> list[float] | None:
    """The confidences of a `gr.Label` output ({"label", "confidences": [{"label", "confidence"}, ...]}); None for
    any other output."""
    if not isinstance(output, dict) or not isinstance(output.get("confidences"), list):
        return None
    return [entry["confidence"] for entry in output["confidences"]]


def gradio_plot(output) -> str:
    """The image of a `gr.Plot` output of a matplotlib figure (a data: URL)."""
    image = output.get("plot") if isinstance(output, dict) and output.get("type") == "matplotlib" else None
    assert isinstance(image, str) and image.startswith("data:image"), (
        f"{versions(*GRADIO)} return a matplotlib plot otherwise: {str(output)[:300]}"
    )
    return image
