"""The package itself, released as timm's and transformers' maintainers release theirs: an sdist and a wheel built with
the standard front end (`python -m build`, which builds the wheel from the sdist, so the sdist is proven to build),
checked with `twine check --strict` (metadata, the README rendered as the long description), installed into a fresh
virtual environment outside the checkout and run from a neutral folder (every command's `--help`, and the
quickstart's main job) before anything is published; then uploaded once to the index the standard twine settings
name (`TWINE_REPOSITORY_URL`, `TWINE_USERNAME`/`TWINE_PASSWORD` or a token; PyPI by default). A version already on the
index with the same files is skipped; with other files it is refused, since a released version never changes.
"""

import hashlib
import html.parser
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

from .checks import ReleaseError

ROOT = Path(__file__).resolve().parents[2]
NAME = "alternet-hf"
PYPI_UPLOAD = "https://upload.pypi.org/legacy/"
# Where twine uploads and where pip reads are two addresses of one index: PyPI's and TestPyPI's are known; a
# pypiserver or devpi serves its simple pages under the upload address. `ALTERNET_PACKAGE_INDEX_URL` says otherwise.
SIMPLE_PAGES = {
    PYPI_UPLOAD: "https://pypi.org/simple/",
    "https://test.pypi.org/legacy/": "https://test.pypi.org/simple/",
}


def version() -> str:
    """The one version: `alternet_hf.__version__`, which setup.cfg reads for the metadata."""
    from alternet_hf import __version__

    return __version__


def _run(command: list, *, cwd: Path | None = None, env: dict | None = None, what: str) -> str:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise ReleaseError(f"{what} failed (exit {done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
    return done.stdout


def build(out: Path) -> list[Path]:
    """The sdist and the wheel of this checkout in `out` (emptied first), checked by twine."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.iterdir():
        old.unlink()
    # --no-isolation: built with this environment's setuptools and wheel, the ones the tests and CI have
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)], what="python -m build")
    stem = f"alternet_hf-{version()}"
    files = [out / f"{stem}.tar.gz", out / f"{stem}-py3-none-any.whl"]
    missing = [file.name for file in files if not file.is_file()]
    if missing:
        found = ", ".join(sorted(file.name for file in out.iterdir())) or "nothing"
        raise ReleaseError(f"the build wrote {found}, not {', '.join(missing)}: is the version in setup.cfg read?")
    _run([sys.executable, "-m", "twine", "check", "--strict", *map(str, files)], what="twine check")
    return files


def commands(wheel: Path) -> list[str]:
    """The console scripts the wheel installs, from its entry points."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt"))
        text = archive.read(name).decode()
    section = text.split("[console_scripts]", 1)[-1].split("\n[", 1)[0]
    return sorted(line.split("=", 1)[0].strip() for line in section.splitlines() if "=" in line)


def fresh_environment(folder: Path, *, dependencies_from: Path | None = None) -> Path:
    """A new virtual environment in `folder`; its python. `dependencies_from`: a site-packages folder whose packages
    it may import (a line in a .pth file: a rehearsal reuses installed torch instead of downloading it), never its
    editable installs, whose .pth files are not read from there."""
    _run([sys.executable, "-m", "venv", str(folder)], what="python -m venv")
    python = folder / "bin" / "python"
    if dependencies_from is not None:
        site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], what="venv"))
        (Path(str(site).strip()) / "_dependencies.pth").write_text(f"{dependencies_from}\n")
    return python


def try_installed(
    wheel: Path,
    workdir: Path,
    *,
    dependencies_from: Path | None = None,
    main_job: bool = True,
    index: str | None = None,
) -> dict:
    """Install the package into a fresh environment under `workdir` (the wheel file, or `alternet-hf==<version>` by
    name from `index`) and run, from a neutral folder there, every command's `--help` and (`main_job`) the
    quickstart's main job: {command: seconds}. `dependencies_from`: see `fresh_environment`."""
    python = fresh_environment(workdir / "venv", dependencies_from=dependencies_from)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    if dependencies_from is not None:  # and the checkout's own install, seen there too, is not this package
        pip += ["--no-deps", "--ignore-installed"]
    if index is None:
        pip.append(str(wheel))
    else:
        pip += ["--index-url", index, f"{NAME}=={version()}"]
    _run(pip, what="installing the package")
    neutral = workdir / "neutral"
    neutral.mkdir(exist_ok=True)
    env = {**os.environ, "PATH": f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}", "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    location = _run(
        [str(python), "-c", "import alternet_hf; print(alternet_hf.__file__, alternet_hf.__version__)"],
        cwd=neutral,
        env=env,
        what="importing the installed package",
    ).split()
    if not Path(location[0]).is_relative_to(workdir) or location[1] != version():
        raise ReleaseError(f"the fresh environment imports alternet_hf {location[1]} from {location[0]}, not its own")
    seconds = {}
    runs = [[name, "--help"] for name in commands(wheel)] + ([["alternet-train"]] if main_job else [])
    for name, *args in runs:
        started = time.perf_counter()
        _run([str(python.parent / name), *args], cwd=neutral, env=env, what=" ".join([name, *args]))
        seconds[" ".join([name, *args])] = round(time.perf_counter() - started, 2)
    return seconds


def simple_page(repository_url: str) -> str:
    """The simple index that serves what `repository_url` receives (see SIMPLE_PAGES)."""
    given = os.environ.get("ALTERNET_PACKAGE_INDEX_URL")
    if given:
        return given.rstrip("/") + "/"
    return SIMPLE_PAGES.get(repository_url, repository_url.rstrip("/") + "/simple/")


class _Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self.links.append(dict(attrs).get("href", ""))


def published_files(repository_url: str, release: str) -> dict[str, str]:
    """{file name: sha256} of `release` on the index (empty if it has none), from its simple page."""
    url = urllib.parse.urljoin(simple_page(repository_url), f"{NAME}/")
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            text = response.read().decode()
    except urllib.error.HTTPError as error:
        if error.code == 404:  # the project is not on the index yet
            return {}
        raise ReleaseError(f"the package index answered {error.code} for {url}") from None
    except OSError as error:
        raise ReleaseError(f"the package index {url} cannot be reached ({error})") from None
    parser = _Links()
    parser.feed(text)
    found = {}
    for link in parser.links:
        path, _, fragment = link.partition("#")
        name = urllib.parse.unquote(path.rsplit("/", 1)[-1])
        if re.match(rf"alternet[_-]hf-{re.escape(release)}(\.tar\.gz|-py3-none-any\.whl)$", name):
            found[name] = fragment.removeprefix("sha256=") if fragment.startswith("sha256=") else ""
    return found


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def publish(files: list[Path], *, dry_run: bool = False) -> str:
    """Upload `files` to the index of the twine settings, unless this version is there already with the same files
    (skipped); with other files, a `ReleaseError` before anything is uploaded. One sentence of what happened."""
    repository_url = os.environ.get("TWINE_REPOSITORY_URL") or PYPI_UPLOAD
    release, ours = version(), {file.name: sha256(file) for file in files}
    theirs = published_files(repository_url, release)
    if theirs:
        if theirs == ours:
            return f"{NAME} {release} is on {repository_url} with these files already: skipped"
        raise ReleaseError(
            f"{NAME} {release} is on {repository_url} with other files ({', '.join(sorted(theirs))}); a released "
            "version never changes: raise the version in alternet_hf/__init__.py and release again"
        )
    if dry_run:
        return f"{NAME} {release} built and checked; not uploaded (--dry-run)"
    command = [sys.executable, "-m", "twine", "upload", "--non-interactive", "--repository-url", repository_url]
    _run([*command, *map(str, files)], what="twine upload")
    return f"{NAME} {release} published on {repository_url}"
