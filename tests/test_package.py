"""The package's release (`scripts/zoo_release/package.py`) against a real index server (`package_index`): built with
`python -m build`, checked by twine, uploaded by twine, installed by name into a fresh environment and run from a
neutral folder (every command's `--help` and the quickstart's main job); a second upload of the same version is a
no-op, and a changed file under the same version is refused with nothing uploaded."""

import shutil
import sysconfig
from pathlib import Path

import pytest
from package_index import package_index

import zoo_release as release
from zoo_release import package


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

        changed = tmp_path / "changed"
        changed.mkdir()
        for file in files:
            shutil.copy(file, changed / file.name)
        with (changed / files[1].name).open("ab") as wheel:
            wheel.write(b"\0")
        with pytest.raises(release.ReleaseError, match="with other files .* a released version never changes"):
            package.publish(sorted(changed.iterdir()))
        assert package.published_files(url, package.version()) == on_index  # nothing was uploaded
