"""The reference's released files: fetched over HTTP as the release fetches them (from a server on this machine that
cuts connections and ignores ranges when asked), never left cut under their final name, and refused clearly when
they cannot be had."""

import hashlib
import http.server
import json
import threading

import pytest

import zoo_release as release
from alternet_hf.hub import reference
from alternet_hf.utils import format_duration

DATA = bytes(range(256)) * 4096  # 1 MiB


class Server:
    """A release's files over HTTP with range requests, as GitHub's release storage serves them; `cut_after` bytes
    closes the connection midway, `ignore_ranges` answers every request with the whole file."""

    def __init__(self, files: dict[str, bytes]):
        self.files, self.cut_after, self.ignore_ranges, self.ranges = files, None, False, []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_HEAD(self):
                self.respond(body=False)

            def do_GET(self):
                self.respond(body=True)

            def respond(self, body: bool):
                data = server.files.get(self.path.rsplit("/", 1)[-1])
                if data is None:
                    self.send_error(404, "Not Found")
                    return
                start = 0
                asked = self.headers.get("Range")
                server.ranges.append(asked)
                if asked and not server.ignore_ranges:
                    start = int(asked.removeprefix("bytes=").split("-")[0])
                    if start >= len(data):
                        self.send_error(416, "Range Not Satisfiable")
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(data) - start))
                self.end_headers()
                if body:
                    end = len(data) if server.cut_after is None else min(len(data), start + server.cut_after)
                    self.wfile.write(data[start:end])

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v0.1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    files = {name: DATA[: len(DATA) - 1000 * i] for i, name in enumerate(reference.REFERENCE_FILES.values())}
    server = Server(files)
    yield server
    server.close()


def test_a_cut_download_is_resumed_and_named_only_when_whole(server, tmp_path):
    name = reference.REFERENCE_FILES["vit-ti-cifar100"]
    target = tmp_path / name
    server.cut_after = 300_000
    with pytest.raises(reference.DownloadError, match="run again to resume it"):
        reference.download(f"{server.url}/{name}", target, progress=False)
    partial = tmp_path / f"{name}.partial"
    assert not target.exists() and partial.stat().st_size == 300_000  # the cut file is never the file
    server.cut_after = None
    reference.download(f"{server.url}/{name}", target, progress=False)
    assert target.read_bytes() == server.files[name] and not partial.exists()
    assert server.ranges == [None, "bytes=300000-"]  # the second request asked for the rest only


def test_a_server_that_ignores_ranges_gives_the_whole_file_again(server, tmp_path):
    name = reference.REFERENCE_FILES["pit-ti-cifar100"]
    (tmp_path / f"{name}.partial").write_bytes(b"stale bytes of another try")
    server.ignore_ranges = True
    reference.download(f"{server.url}/{name}", tmp_path / name, progress=False)
    assert (tmp_path / name).read_bytes() == server.files[name]


def test_a_partial_file_as_long_as_the_file_starts_again(server, tmp_path):
    name = reference.REFERENCE_FILES["swin-ti-cifar100"]
    (tmp_path / f"{name}.partial").write_bytes(b"x" * (len(server.files[name]) + 10))  # the server answers 416
    reference.download(f"{server.url}/{name}", tmp_path / name, progress=False)
    assert (tmp_path / name).read_bytes() == server.files[name]


def test_missing_files_and_no_network_are_errors(server, tmp_path):
    with pytest.raises(reference.DownloadError, match="HTTP 404"):
        reference.download(f"{server.url}/absent.pth.tar", tmp_path / "absent.pth.tar", progress=False)
    with pytest.raises(reference.DownloadError, match="could not download http://127.0.0.1:9/"):
        reference.download("http://127.0.0.1:9/x.pth.tar", tmp_path / "x.pth.tar", progress=False, timeout=5)
    assert not list(tmp_path.iterdir())


def test_the_release_fetches_records_and_hashes_each_file(server, tmp_path, monkeypatch):
    """`fetch` as a release runs it: downloaded from the release URL (here the server), with its size and SHA-256
    recorded for the card; a folder given instead is read in place."""
    monkeypatch.setenv(reference.RELEASE_URL_VARIABLE, server.url)
    preset = "resnet-50-cifar100"
    name = reference.REFERENCE_FILES[preset]
    options = release.ReleaseOptions(org="someone", out=tmp_path / "out", from_reference=True, models=(preset,))
    release.check_reference_files(options)  # reachable: no error
    outputs = release.Release(options, say=lambda line: None).fetch(preset)
    record = json.loads(outputs[0].read_text())
    assert outputs[1] == tmp_path / "out" / "work" / "reference" / name
    assert record["sha256"] == hashlib.sha256(server.files[name]).hexdigest()
    assert record["size"] == len(server.files[name]) and record["url"] == f"{server.url}/{name}"
    assert record["obtained"] == "downloaded from its url"

    given = tmp_path / "given"
    given.mkdir()
    (given / name).write_bytes(b"some bytes")
    options = release.ReleaseOptions(
        org="someone", out=tmp_path / "out2", from_reference=True, reference_dir=given, models=(preset,)
    )
    outputs = release.Release(options, say=lambda line: None).fetch(preset)
    assert len(outputs) == 1 and json.loads(outputs[0].read_text())["obtained"] == "given in a folder"


def test_files_that_cannot_be_had_are_named_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.setenv(reference.RELEASE_URL_VARIABLE, "http://127.0.0.1:9/v0.1")  # nothing listens there
    options = release.ReleaseOptions(org="someone", out=tmp_path / "out", from_reference=True)
    with pytest.raises(release.ReleaseError) as refused:
        release.check_reference_files(options)
    message = str(refused.value)
    assert "cannot be reached" in message and "nothing was written" in message and "--from-reference DIR" in message
    assert all(name in message for name in reference.REFERENCE_FILES.values())
    folder = tmp_path / "ckpts"
    folder.mkdir()
    (folder / reference.REFERENCE_FILES["vit-ti-cifar100"]).write_bytes(b"")
    options = release.ReleaseOptions(org="someone", out=tmp_path / "out", from_reference=True, reference_dir=folder)
    with pytest.raises(release.ReleaseError, match=f"{folder} lacks resnet_50_cifar100_691cc9a9e4.pth.tar, pit_ti"):
        release.check_reference_files(options)
    assert not (tmp_path / "out").exists()


def test_durations_read_as_people_write_them():
    assert [release.parse_duration(text) for text in ("90", "90s", "30m", "1.5h", "2d")] == [90, 90, 1800, 5400, 172800]
    for wrong in ("soon", "-1h", "h"):
        with pytest.raises(ValueError, match="is not a duration"):
            release.parse_duration(wrong)
    assert release.round_down(0.3) == 1 and release.round_down(27.9) == 20 and release.round_down(60) == 50
    shown = [format_duration(seconds) for seconds in (45, 150, 45 * 60, 3 * 3600, 3 * 86400)]
    assert shown == ["45 s", "2.5 min", "45 min", "3.0 h", "3.0 days"]
