"""The installed commands, run as a shell runs them: each in its own process, with its argv, working folder,
environment, exit status, standard output and standard error, that a test can wait for, read, signal or kill.

Every `alternet-*` command imports the zoo's models once its arguments are parsed: about 3.5 CPU seconds of torch
and transformers, and the suite runs over a hundred commands. So the processes of console scripts are forked from a
warm interpreter that has imported `alternet_hf` with every public name of it (as an eager package `__init__` would)
and transformers' Auto classes, and the libraries most commands import next (datasets, matplotlib, scikit-learn's
embedded datasets), and nothing else (a small fork server, below):
the forked process takes its folder, environment, argv and a console script's `sys.path`, calls the console
script's entry point as the script does, runs the exit handlers and exits with the command's status. What it
computes is what a cold start computes after those imports. Cold starts are tested too: `test_cli` runs every
installed command's `--help` in a fresh interpreter, and the README's main job runs in one.

The repository's tools (`python scripts/<tool>.py ...`) are forked the same way, run as Python runs a script, and
so is `python -c CODE` when the code imports alternet_hf first (the README's snippets). Anything else runs cold (a
plain subprocess). The warm import must be the one the command makes: a command whose environment differs from the
test process's in a variable that libraries read while being imported (the Hub's endpoint and offline switch, cache
folders, PYTHONPATH, ...) runs cold, unless the test gave that environment a server of its own (`warm_environment`).
"""

import atexit
import contextlib
import importlib.metadata
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# Read by torch, transformers, huggingface_hub or Python when they are imported: a command whose environment
# differs from the fork server's in one of these is run cold. A token is read when a request is made, not before.
IMPORT_TIME_VARIABLES = re.compile(
    r"^(?!HF_TOKEN$|HUGGING_FACE_HUB_TOKEN$)"
    r"(HF_|HUGGINGFACE_|TRANSFORMERS_|TORCH|PYTORCH_|CUDA_|XDG_|HOME$|PYTHON|MPL|MATPLOTLIB|SKLEARN_)"
)

# The fork server: imports alternet_hf and the libraries above once, then for each request (a JSON line on stdin)
# forks a process that runs one command and answers with its pid (a line on stdout); it reaps its children and
# writes each one's exit status (negative: the signal that ended it) into the request's status file.
_SERVER = r"""
import json, os, select, sys
import alternet_hf  # the first thing every command imports; then what it loads of it, and the Auto classes
import transformers.models.auto.modeling_auto  # noqa: F401
for name in alternet_hf.__all__:
    getattr(alternet_hf, name)
import datasets, matplotlib.pyplot, sklearn.datasets  # noqa: F401, E401  (what most import next)
import torch
DEFAULT_THREADS = torch.get_num_threads()  # the server starts without OMP_NUM_THREADS: the machine's default

def run(request):
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    err = out
    if request["stderr"] is not None:
        err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    # torch read OMP_NUM_THREADS when this server imported it: each command gets the count its cold start has
    torch.set_num_threads(int(request["env"].get("OMP_NUM_THREADS") or DEFAULT_THREADS))
    sys.argv = list(request["argv"])
    sys.path[:] = request["sys_path"]
    status = 0
    try:
        if "script" in request:  # python scripts/<tool>.py
            import runpy
            runpy.run_path(request["script"], run_name="__main__")
            result = 0
        elif "code" in request:  # python -c CODE, in a __main__ of its own
            import types
            main = sys.modules["__main__"] = types.ModuleType("__main__")
            exec(compile(request["code"], "<string>", "exec"), vars(main))
            result = 0
        else:
            import importlib
            module, _, function = request["entry_point"].partition(":")
            result = getattr(importlib.import_module(module), function)()
        status = result if isinstance(result, int) else 0
    except SystemExit as exit:
        if exit.code is None or isinstance(exit.code, int):
            status = exit.code or 0
        else:
            print(exit.code, file=sys.stderr)
            status = 1
    except BaseException:
        import traceback
        traceback.print_exc()
        status = 1
    finally:
        try:
            import atexit
            atexit._run_exitfuncs()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)

children = {}
requests = os.fdopen(0, "r")
while True:
    ready, _, _ = select.select([requests], [], [], 0.02)
    if ready:
        line = requests.readline()
        if not line:
            break
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            requests.close()
            run(request)
        children[pid] = request["status"]
        sys.stdout.write(f"{pid}\n")
        sys.stdout.flush()
    while children:
        pid, code = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            break
        status = -os.WTERMSIG(code) if os.WIFSIGNALED(code) else os.WEXITSTATUS(code)
        path = children.pop(pid)
        with open(path + ".tmp", "w") as file:
            file.write(str(status))
        os.replace(path + ".tmp", path)
"""


def console_scripts() -> dict[str, str]:
    """The project's installed console scripts: name -> entry point (`module:function`, setup.cfg's)."""
    return {
        entry.name: entry.value
        for entry in importlib.metadata.entry_points(group="console_scripts")
        if entry.value.startswith("alternet_hf.")
    }


def _import_time(env: dict[str, str]) -> tuple:
    """The variables of `env` that libraries read while being imported: a warm interpreter's key."""
    return tuple(sorted((name, value) for name, value in env.items() if IMPORT_TIME_VARIABLES.match(name)))


class _ForkServer:
    """A fork server, started on first use with the environment it serves: the test process's own, or one given to
    `warm_environment`."""

    servers: dict[tuple, "_ForkServer"] = {}
    # The environments served, by key: the test process's (when its first command starts), and `warm_environment`'s.
    environments: dict[tuple, dict[str, str]] = {}
    lock = threading.Lock()

    def __init__(self, env: dict[str, str]):
        self.environment = {name: value for name, value in env.items() if name != "OMP_NUM_THREADS"}
        # sys.path of a console script: its own folder, then what the interpreter adds (PYTHONPATH, site).
        default = subprocess.run(
            [sys.executable, "-c", "import json, sys; print(json.dumps(sys.path[1:]))"],
            capture_output=True,
            text=True,
            check=True,
            env=self.environment,
        ).stdout
        self.script_path = [str(Path(sys.executable).parent), *json.loads(default)]
        self.process = subprocess.Popen(
            [sys.executable, "-c", _SERVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=self.environment,
            cwd=tempfile.gettempdir(),
        )
        atexit.register(self.stop)

    @classmethod
    def add_own(cls) -> None:
        """The test process's environment, as it is when first asked for: the first one served."""
        if not cls.environments:
            cls.environments[_import_time(os.environ)] = dict(os.environ)

    @classmethod
    def serving(cls, env: dict[str, str]) -> "_ForkServer | None":
        """The live server whose warm import is the one a command in `env` makes, started if it is the test
        process's own environment or one given to `warm_environment`; None: run the command cold."""
        key = _import_time(env)
        with cls.lock:
            server = cls.servers.get(key)
            if server is not None and server.process.poll() is not None:
                server = None  # it died (say, killed for memory): a new one, and one failed test, not all
            if server is None:
                cls.add_own()
                if key not in cls.environments:
                    return None
                server = cls.servers[key] = cls(cls.environments[key])
            return server

    def start(self, request: dict) -> int:
        """Fork the command of `request`; its pid."""
        with self.lock:
            sys_path = [request.pop("path0", self.script_path[0]), *self.script_path[1:]]
            self.process.stdin.write(json.dumps({**request, "sys_path": sys_path}) + "\n")
            self.process.stdin.flush()
            answer = self.process.stdout.readline()
            if not answer:
                raise RuntimeError(f"the fork server of tests/commands.py has ended ({_ended(self.process)})")
            return int(answer)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            self.process.wait(30)


def warm_environment(env: dict[str, str]) -> None:
    """Fork the commands run in `env` (a test's Hub endpoint and cache, say) from a warm interpreter of their own,
    started with `env` on first use, when `env` differs from the test process's in variables read at import."""
    with _ForkServer.lock:
        _ForkServer.add_own()
        _ForkServer.environments.setdefault(_import_time(env), dict(env))


def _ended(process: subprocess.Popen) -> str:
    status = process.wait()
    return f"killed by signal {-status}" if status < 0 else f"exit status {status}"


def _is_python(program: str) -> bool:
    return Path(program).name in ("python", "python3", Path(sys.executable).name)


def _python_script(argv: list[str], cwd: Path) -> Path | None:
    """The script of `python path/to/script.py ...` (the repository's `scripts/`), else None."""
    if len(argv) >= 2 and _is_python(argv[0]) and argv[1].endswith(".py") and (Path(cwd) / argv[1]).is_file():
        return (Path(cwd) / argv[1]).resolve()
    return None


def _python_code(argv: list[str]) -> str | None:
    """The code of `python -c CODE ...` (a README snippet) when its leading imports import alternet_hf."""
    if len(argv) >= 3 and _is_python(argv[0]) and argv[1] == "-c":
        for line in argv[2].splitlines():
            words = line.split()
            if words[:2] in (["import", "alternet_hf"], ["from", "alternet_hf"]) or line.startswith(
                "from alternet_hf."
            ):
                return argv[2]
            if words and words[0] not in ("import", "from") and not words[0].startswith("#"):
                return None
    return None


class CommandProcess:
    """A started command, with `subprocess.Popen`'s `pid`, `returncode`, `poll`, `wait`, `communicate`,
    `send_signal`, `terminate` and `kill`; its output goes to files, read by `communicate` or `output`."""

    def __init__(
        self, argv: list[str], *, cwd: Path, env: dict[str, str], stdout_file: Path | None, merge: bool, warm: bool
    ):
        self.args = list(argv)
        self._folder = tempfile.TemporaryDirectory(prefix="command-")
        folder = Path(self._folder.name)
        self._stdout = Path(stdout_file) if stdout_file else folder / "stdout"
        self._stderr = folder / "stderr"
        self._status = folder / "status"
        self._merge = merge
        self.returncode: int | None = None
        scripts, name = console_scripts(), Path(argv[0]).name
        script, code = _python_script(argv, cwd), _python_code(argv)
        eligible = warm and (name in scripts or script is not None or code is not None)
        self._server = _ForkServer.serving(env) if eligible else None
        self.warm = self._server is not None
        if self.warm:
            request = dict(cwd=str(cwd), env=env, stdout=str(self._stdout), status=str(self._status))
            request["stderr"] = None if merge else str(self._stderr)
            if script is not None:  # sys.path of `python script.py`: the script's folder first
                request |= dict(argv=[str(script), *argv[2:]], script=str(script), path0=str(script.parent))
            elif code is not None:  # and of `python -c`: the working folder
                request |= dict(argv=["-c", *argv[3:]], code=code, path0="")
            else:
                request |= dict(argv=[str(Path(sys.executable).parent / name), *argv[1:]], entry_point=scripts[name])
            self.pid = self._server.start(request)
        else:
            with open(self._stdout, "wb") as out, open(self._stderr, "wb") as err:
                self._process = subprocess.Popen(
                    argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT if merge else err
                )
            self.pid = self._process.pid

    def poll(self) -> int | None:
        if self.returncode is None:
            if not self.warm:
                self.returncode = self._process.poll()
            elif self._status.exists():
                self.returncode = int(self._status.read_text())
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self.warm:
            self.returncode = self._process.wait(timeout)
            return self.returncode
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if self._server.process.poll() is not None and self.poll() is None:  # nobody left to write the status
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
                raise RuntimeError(
                    f"the fork server of tests/commands.py ended ({_ended(self._server.process)}) while {self.args} ran"
                )
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.02)
        return self.returncode

    def output(self) -> tuple[str, str]:
        """What the command has written so far to standard output and standard error."""

        def read(path: Path) -> str:
            return path.read_text(errors="replace") if path.exists() else ""

        return read(self._stdout), "" if self._merge else read(self._stderr)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        return self.output()

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def kill_once_written(process, path: Path, timeout: float = 300) -> None:
    """SIGKILL `process` as soon as `path` exists (say, a run's first checkpoint), and wait for it to end; the caller
    checks that it was still running then (`process.returncode == -signal.SIGKILL`)."""
    deadline = time.monotonic() + timeout
    while not path.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait()


def start_command(
    argv: list,
    *,
    cwd: Path,
    env: dict | None = None,
    stdout_file: Path | None = None,
    merge: bool = False,
    warm: bool = True,
) -> CommandProcess:
    """Start `argv` (a console script name or path, then its arguments); `merge` sends stderr into stdout;
    `warm=False` starts even a console script in a fresh interpreter."""
    return CommandProcess(
        [str(a) for a in argv],
        cwd=Path(cwd),
        env=dict(os.environ if env is None else env),
        stdout_file=stdout_file,
        merge=merge,
        warm=warm,
    )


def run_command(
    argv: list,
    *,
    cwd: Path,
    env: dict | None = None,
    timeout: float = 900,
    stdout_file: Path | None = None,
    warm: bool = True,
) -> subprocess.CompletedProcess:
    """Run `argv` to its end (see `start_command`): its exit status, standard output and standard error."""
    process = start_command(argv, cwd=cwd, env=env, stdout_file=stdout_file, warm=warm)
    try:
        stdout, stderr = process.communicate(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def run_shell(command: str, *, cwd: Path, env: dict, timeout: float = 900) -> subprocess.CompletedProcess:
    """A command line as a user types it into bash: an installed command (optionally `> file`) runs as
    `run_command` does; anything else (variables, pipes, other programs) through bash itself."""
    words = shlex.split(command)
    stdout_file = None
    if len(words) >= 3 and words[-2] == ">":
        words, stdout_file = words[:-2], Path(cwd) / words[-1]
    plain = not any(word in ("|", "&&", "||", ";", "<", ">", ">>", "2>", "&") for word in words)
    if plain and words and (words[0] in console_scripts() or _python_script(words, cwd)):
        return run_command(words, cwd=cwd, env=env, timeout=timeout, stdout_file=stdout_file)
    return run_command(["bash", "-c", command], cwd=cwd, env=env, timeout=timeout)
