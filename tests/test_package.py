"""The package's release (`scripts/zoo_release/package.py`) against a real index server (`package_index`): built with
`python -m build`, checked by twine, uploaded by twine, installed by name into a fresh environment and run from a
neutral folder (every command's `--help` and the quickstart's main job, a zoo repo loaded by its Hub id over the
tests' Hub server without remote code, the Space started from its pinned requirements); a second upload of the same
version is a no-op, and a changed file under the same version is refused with nothing uploaded."""

import json
import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

import hub_server
import pytest
from conftest import TINY
from package_index import package_index, wait_until_it_answers
from test_space import free_port

import alternet_hf
import zoo_release as release
from zoo_release import package
from zoo_release.outputs import space_requirements

ROOT = Path(__file__).resolve().parents[1]
LOADS_BY_ID = """import alternet_hf, json
from transformers import AutoModelForImageClassification
model = AutoModelForImageClassification.from_pretrained("org/tiny-alternet")
print(json.dumps([type(model).__name__, alternet_hf.__file__]))
"""


def _user(python: Path, workdir: Path, **env) -> dict:
    """The environment of a user of the fresh environment: its commands first, none of the checkout's paths."""
    variables = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return (
        variables | {"PATH": f"{python.parent}{os.pathsep}{os.environ['PATH']}", "HF_HOME": str(workdir / "hf")} | env
    )


@pytest.mark.commands
def test_the_package_is_published_once_and_installs_by_name_from_the_index(tmp_path, monkeypatch):
    files = package.build(tmp_path / "dist")
    assert [file.name for file in files] == [f"alternet_hf-{package.version()}.tar.gz", files[1].name]
    with package_index(tmp_path / "index") as url:
        monkeypatch.setenv("TWINE_REPOSITORY_URL", url)
        monkeypatch.setenv("TWINE_USERNAME", "rehearsal")
        monkeypatch.setenv("TWINE_PASSWORD", "rehearsal")
        assert package.publish(files, dry_run=True).endswith("not uploaded (--dry-run)")
        assert package.published_files(url, package.version()) == {}
        assert package.publish(files).startswith(f"alternet-hf {package.version()} published on {url}")
        on_index = package.published_files(url, package.version())
        assert on_index == {file.name: package.sha256(file) for file in files}
        assert package.publish(files).endswith("with these files already: skipped")

        ran = package.try_installed(
            files[1],
            tmp_path / "user",
            dependencies_from=Path(sysconfig.get_path("purelib")),
            index=f"{url}simple/",
        )
        assert set(ran) == {f"{name} --help" for name in package.commands(files[1])} | {"alternet-train"}
        assert (tmp_path / "user" / "neutral" / "outputs" / "alternet-digits" / "model.safetensors").is_file()
        python, neutral = tmp_path / "user" / "venv" / "bin" / "python", tmp_path / "user" / "neutral"

        # A zoo repo by its Hub id, over the tests' Hub server, with the installed package and no remote code.
        repo = tmp_path / "mirrors" / "models" / "org" / "tiny-alternet"
        alternet_hf.create_model("alternet-50-cifar100", **TINY["alternet-50-cifar100"]).save_pretrained(repo)
        for code in repo.glob("*.py"):  # what the package registers must be what loads it
            code.unlink()
        hub_server.commit(repo)
        server, endpoint = hub_server.serve(
            tmp_path / "mirrors", tmp_path / "fetched.log", "api/models/org/tiny-alternet"
        )
        try:
            env = _user(python, tmp_path / "user", HF_ENDPOINT=endpoint, HF_HUB_OFFLINE="0")
            done = subprocess.run([python, "-c", LOADS_BY_ID], cwd=neutral, env=env, capture_output=True, text=True)
        finally:
            server.terminate()
            server.wait(30)
        assert done.returncode == 0, done.stderr[-3000:]
        name, location = json.loads(done.stdout.splitlines()[-1])
        assert name == "AlterNetForImageClassification" and location.startswith(str(tmp_path / "user" / "venv"))

        # The Space: its pinned alternet-hf resolves on the index, and its app starts on the installed package.
        pins = space_requirements(ROOT / "spaces" / "requirements.txt").splitlines()
        (pin,) = [line for line in pins if line.startswith("alternet-hf")]
        assert pin == f"alternet-hf[space]=={package.version()}"
        fetch = [
            python,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "-d",
            tmp_path / "got",
            "--index-url",
            f"{url}simple/",
            pin,
        ]
        assert subprocess.run(fetch, capture_output=True).returncode == 0
        space = shutil.copytree(ROOT / "spaces", tmp_path / "space")
        port = free_port()
        models = f"AlterNet={repo}"
        env = _user(python, tmp_path / "user", GRADIO_SERVER_PORT=str(port), ALTERNET_SPACE_MODELS=models)
        app = subprocess.Popen([python, "app.py"], cwd=space, env=env | {"HF_HUB_OFFLINE": "1"}, stderr=subprocess.PIPE)
        try:
            wait_until_it_answers(f"http://127.0.0.1:{port}/config", app, "the Space", 300)
        finally:
            app.kill()
            app.wait(30)

        changed = tmp_path / "changed"
        changed.mkdir()
        for file in files:
            shutil.copy(file, changed / file.name)
        with (changed / files[1].name).open("ab") as wheel:
            wheel.write(b"\0")
        with pytest.raises(release.ReleaseError, match="with other files .* a released version never changes"):
            package.publish(sorted(changed.iterdir()))
        assert package.published_files(url, package.version()) == on_index  # nothing was uploaded
