"""A Hub-compatible HTTP server for the tests: olah serving local git repositories as Hub repos, offline, at
`HF_ENDPOINT=http://127.0.0.1:<port>`. Some answers are made the Hub's for repos that exist only here: a file the
repo lacks is a 404 with `X-Error-Code: EntryNotFound` (olah answers 500); `/api/<type>/<org>/<repo>` without a
revision is the head of `main`; a repo whose folder holds an (uncommitted) file `.status`, say `401 GatedRepo`,
answers every request with that HTTP status and `X-Error-Code`, as the Hub answers without access to a gated repo
(401 GatedRepo), to a wrong token (401), without permission (403) or for no such repo (404 RepoNotFound), and so
does a repo that is not there at all with `.status` where its folder would be; an API call at a revision the repo
lacks is a 404 with `X-Error-Code: RevisionNotFound`; a GET with a `Range` (what a
stream reads: a parquet file's footer, then its row groups) is answered with those bytes (206), where olah would send
the whole file, except in a repo whose folder holds a file `.ignores-range`: there it is the whole file (200), as a
mirror that ignores Range (olah offline, some proxies) answers, which HTTP allows. Each file served (GET of
`/resolve/`, whole or a range) is appended to --log, one path per line, so that a test counts what a command
fetched; every request's method and path, to `<log>.requests` (what was asked for, files or not). The models
listing (`/api/models?filter=<library>&pipeline_tag=...&sort=downloads&limit=N`, what `HfApi.list_models` asks) is
answered from the mirrors: a repo's library is timm where its config has timm's `architecture`, else transformers,
its downloads the number in its (uncommitted) file `.downloads` (0 without), every repo an image classifier.

    python tests/hub_server.py --mirrors DIR --port N --log FILE   # DIR/{datasets,models}/<org>/<repo>: git repos
"""

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

TYPES = {"models", "datasets", "spaces"}


def commit(repo: Path, message: str = "files") -> str:
    """Commit every file of the folder `repo` (a git repo on `main`, made on first use); the new commit's sha."""
    identity = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }

    def git(*args):
        done = subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, env={**os.environ, **identity})
        return done.stdout.decode().strip()

    if not (repo / ".git").exists():
        git("init", "-q", "-b", "main")
    git("add", "-A")
    git("commit", "-q", "-m", message)
    return git("rev-parse", "HEAD")


def serve(mirrors: Path, log: Path, probe: str) -> tuple[subprocess.Popen, str]:
    """This server on a free port, serving the repos under `mirrors`: (its process, its endpoint), once the API path
    `probe` (e.g. `api/models/org/name`) answers."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    command = [sys.executable, __file__, "--mirrors", str(mirrors), "--port", str(port), "--log", str(log)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120  # a bound for a server that hangs, far above the few seconds it takes
    while True:  # olah takes a few seconds to import; the port answers once it listens
        assert server.poll() is None, server.stderr.read().decode()[-3000:]
        try:
            urllib.request.urlopen(f"{endpoint}/{probe}", timeout=5).read()
            return server, endpoint
        except OSError:
            assert time.monotonic() < deadline, "the Hub server did not answer within 120 s"
            time.sleep(0.3)


def repo_of(path: str) -> Path | None:
    """The repo folder (relative to the mirrors) a Hub API or file path is about: `<type>/<org>/<name>`; a model's
    files are at `<org>/<name>/resolve/...`, without the type."""
    parts = path.strip("/").split("/")
    parts = parts[1:] if parts[0] == "api" else parts
    if len(parts) >= 3 and parts[0] in TYPES:
        return Path(*parts[:3])
    if len(parts) >= 3 and parts[2] == "resolve":
        return Path("models", *parts[:2])
    return None


def repo_and_file(path: str) -> tuple[Path, str, str] | None:
    """(repo folder relative to the mirrors, revision, file) of a `/resolve/` path (`<type>/<org>/<repo>/resolve/...`,
    or `<org>/<repo>/resolve/...` for a model); None for any other path."""
    parts, repo = path.strip("/").split("/"), repo_of(path)
    start = 3 if parts[0] in TYPES else 2
    if repo is None or parts[start : start + 1] != ["resolve"] or len(parts) < start + 3:
        return None
    return repo, parts[start + 1], "/".join(parts[start + 2 :])


def byte_range(header: str, size: int) -> tuple[int, int] | None:
    """The first and last byte of an HTTP `Range: bytes=a-b` (or `a-`, or `-n`: the last n) of a file of `size`."""
    unit, _, spec = header.partition("=")
    first, _, last = spec.split(",")[0].strip().partition("-")
    if unit.strip() != "bytes" or not (first or last):
        return None
    if not first:
        return max(0, size - int(last)), size - 1
    return int(first), min(size - 1, int(last)) if last else size - 1


def listing(mirrors: Path, query) -> list[dict]:
    """The Hub's answer to a models listing, over the model repos under `mirrors` (see the module's docstring)."""
    import json

    found = []
    for folder in sorted((mirrors / "models").glob("*/*")):
        try:
            config = json.loads((folder / "config.json").read_text())
        except (OSError, ValueError):
            config = {}
        library = "timm" if "architecture" in config else "transformers"
        downloads = int((folder / ".downloads").read_text()) if (folder / ".downloads").exists() else 0
        repo_id = f"{folder.parent.name}/{folder.name}"
        found.append(
            {
                "_id": repo_id,
                "id": repo_id,
                "modelId": repo_id,
                "downloads": downloads,
                "likes": 0,
                "private": False,
                "library_name": library,
                "pipeline_tag": "image-classification",
                "tags": [library, "image-classification"],
            }
        )
    for tag in query.getlist("filter"):
        found = [model for model in found if tag in model["tags"]]
    if query.get("pipeline_tag"):
        found = [model for model in found if model["pipeline_tag"] == query["pipeline_tag"]]
    if query.get("sort") == "downloads":
        found.sort(key=lambda model: -model["downloads"])
    return found[: int(query["limit"])] if query.get("limit") else found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mirrors", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log", type=Path, required=True)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hub-server-"))
    config = work / "olah.toml"
    config.write_text(
        f'[basic]\nhost = "127.0.0.1"\nport = {args.port}\nrepos-path = "{work / "repos"}"\n'
        f'mirrors-path = ["{args.mirrors.resolve()}"]\nmirror-scheme = "http"\n'
        f'mirror-netloc = "127.0.0.1:{args.port}"\nmirror-lfs-netloc = "127.0.0.1:{args.port}"\n'
        "[accessibility]\noffline = true\n"
    )
    os.environ["OLAH_CONFIG"], os.environ["OLAH_LOG_PATH"] = str(config), str(work / "logs")
    import git
    import uvicorn
    from olah.server import app  # reads OLAH_CONFIG when imported
    from starlette.responses import JSONResponse, Response

    @app.middleware("http")
    async def as_the_hub_answers(request, call_next):
        with Path(f"{args.log}.requests").open("a") as requests:
            requests.write(f"{request.method} {request.url.path}\n")
        if request.url.path.rstrip("/") == "/api/models":
            return JSONResponse(listing(args.mirrors, request.query_params))
        parts = request.url.path.strip("/").split("/")
        repo = repo_of(request.url.path)
        if repo is not None and (args.mirrors / repo / ".status").exists():
            status, _, code = (args.mirrors / repo / ".status").read_text().strip().partition(" ")
            headers = {"X-Error-Message": f"{repo}: {status} {code}".strip()} | ({"X-Error-Code": code} if code else {})
            return Response(status_code=int(status), headers=headers)
        if len(parts) == 4 and parts[0] == "api" and parts[1] in TYPES:
            request.scope["path"] = request.url.path.rstrip("/") + "/revision/main"
        if len(parts) == 6 and parts[0] == "api" and parts[4] == "revision" and (args.mirrors / repo).is_dir():
            try:
                git.Repo(args.mirrors / repo).commit(parts[5])
            except Exception:  # gitdb's BadName, git's errors: no such revision
                headers = {"X-Error-Code": "RevisionNotFound", "X-Error-Message": f"{repo} has no {parts[5]}"}
                return Response(status_code=404, headers=headers)
        found = repo_and_file(request.url.path)
        if found is not None:
            repo, revision, file = found
            try:
                blob = git.Repo(args.mirrors / repo).commit(revision).tree[file]
            except (KeyError, ValueError, git.exc.GitError):
                headers = {"X-Error-Code": "EntryNotFound", "X-Error-Message": f"{file} is not in {repo}"}
                return Response(status_code=404, headers=headers)
            if request.method == "GET":
                span = byte_range(request.headers.get("range", ""), blob.size)
                with args.log.open("a") as log:
                    log.write(f"{repo}/{file}" + (f" {span[0]}-{span[1]}/{blob.size}" if span else "") + "\n")
                if span is not None and (args.mirrors / repo / ".ignores-range").exists():
                    return Response(blob.data_stream.read(), media_type="application/octet-stream")
                if span is not None:
                    first, last = span
                    data = blob.data_stream.read()[first : last + 1]
                    headers = {"Content-Range": f"bytes {first}-{last}/{blob.size}", "Accept-Ranges": "bytes"}
                    return Response(data, status_code=206, headers=headers, media_type="application/octet-stream")
        return await call_next(request)

    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
