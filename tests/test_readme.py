"""Every command and Python snippet of the README and of docs/, run as a user runs them: in order, in one fresh folder,
offline, after the quickstart's main job. Placeholders (`<org>`, `path/to/imagefolder`, ...) are filled
with small local data. What needs the Hub must fail with the clear offline message; what takes minutes of
timing (benchmarks) has its arguments checked by the command's own parser; everything else must succeed.
The `--help` examples of every command are held to the same rules. A README edit that breaks a command
fails here.
"""

import contextlib
import importlib
import io
import json
import os
import re
import shlex
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from commands import run_command, run_shell, start_command
from conftest import SCRIPTS, command_names, tool_names
from upstream import gradio_page

pytestmark = pytest.mark.commands  # runs installed commands (see CONTRIBUTING.md)

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# The README, then the pages it links to: a command of docs/ is run like one of the README.
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]

RUN, CLEAR_ERROR, PARSE_ONLY, SERVER, SKIP = "run", "clear error", "parse-only", "server", "skip"
# How a command is checked, by the first pattern it matches (default: RUN, it must succeed). Every rule
# says why; nothing else is exempt. CLEAR_ERROR: one message, no traceback of ours.
RULES = [
    (r"^pip install", SKIP, "the install itself: .ci/run does it on a fresh machine"),
    (r"-m pytest", SKIP, "the test command: .ci/run runs it"),
    (
        r"runpy\.run_path\(.*validate\.py",
        RUN,
        "timm's validate.py through the zoo's wrapper: tests/readme_data.py's stand-in for validate.py builds the "
        "model as validate.py does (timm's own argument parsing and create_model) from a saved AlterNet-50; no data",
    ),
    (r"scripts/release\.py(?!.*--rehearsal)", CLEAR_ERROR, "needs CIFAR-100-C's Zenodo arrays, then the Hub"),
    (
        r"scripts/release\.py .*--rehearsal",
        PARSE_ONLY,
        "minutes; tests/test_release.py runs it end to end, killed and resumed",
    ),
    (r"^alternet-buildup", PARSE_ONLY, "minutes of training; tests/test_buildup.py runs a search, killed and resumed"),
    (r"--num_machines", PARSE_ONLY, "several nodes: the launch waits for all of them to join"),
    (r"uoft-cs/|imagenet|<org>/(alternet|resnet|vit)-\d", CLEAR_ERROR, "Hub data or models"),
    (r"--model timm/", CLEAR_ERROR, "a model of the Hub, checked and fetched: offline it is not in the cache"),
    (r"--recipe paper --model \S+-cifar(?!.*--print-config)|-paper\b", CLEAR_ERROR, "the paper's recipe on Hub data"),
    (r"--config my_run\.json", CLEAR_ERROR, "my_run.json: a run on the Hub's CIFAR-10"),
    (r"^alternet-(push|publish-cifar100c)(?!.*--dry-run)", CLEAR_ERROR, "uploads to the Hub"),
    (r"scripts/benchmark\.py", PARSE_ONLY, "minutes of timing on a CPU"),
    (r"scripts/device_check\.py", PARSE_ONLY, "minutes, or a GPU; tests/test_device_check.py runs its rehearsal"),
    (r"--paper", CLEAR_ERROR, "the paper's five models (AlterNet-50: no released weights) and CIFAR-100, from the Hub"),
    (r"^alternet-space", SERVER, "a web server: it must come up and serve the page"),
    (
        r"^alternet-atlas",
        PARSE_ONLY,
        "Hub models: tests/test_atlas.py runs each form (ids, --from-file, --top, a refresh, --check, --push-to) over "
        "a local Hub server",
    ),
]
CLEAR_MESSAGES = (
    r"error: .*(cannot be reached|from the Hugging Face Hub|no Hugging Face token|there is no folder|is not a folder"
    r"|lacks the paper's)|Error: Local entry not found\. Cannot reach .*: offline mode is enabled"  # the `hf` command's
)


def rule_for(command: str) -> tuple[str, str]:
    for pattern, kind, reason in RULES:
        if re.search(pattern, command):
            return kind, reason
    return RUN, "must succeed"


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, code) of every fenced block."""
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)]


def shell_commands(code: str) -> list[str]:
    """One string per command: continuation lines joined, comments and blank lines dropped."""
    commands, current = [], ""
    for line in code.splitlines():
        current += line.rstrip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        command = _strip_comment(current).strip()
        if command:
            commands.append(re.sub(r"\s+", " ", command))
        current = ""
    return commands


def _strip_comment(line: str) -> str:
    """Drop a trailing `# ...` that is outside quotes."""
    quote = None
    for i, char in enumerate(line):
        if char in "\"'" and quote in (None, char):
            quote = None if quote else char
        elif char == "#" and quote is None and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def _parser(command: str):
    """The argument parser of an installed command (`alternet-x`) or of a tool (`scripts/x.py`), built in this
    process: what `--help` prints and what the command parses, without a second process importing the package
    (test_cli runs every `--help` itself)."""
    if command.endswith(".py"):
        return importlib.import_module(Path(command).stem).build_parser()  # scripts/ is on sys.path (conftest)
    module = command.removeprefix("alternet-").replace("-", "_")
    return importlib.import_module(f"alternet_hf.cli.{module}").build_parser()


def help_examples(command: str) -> list[str]:
    """The example command lines of a command's --help (from its module docstring)."""
    text = _parser(command).format_help()
    description = text.split("\noptions:")[0].split("\n\n", 1)[-1]  # after the usage lines
    programs = r"(alternet-[a-z0-9-]+|accelerate launch|python scripts/\w+\.py)( |$)"
    return [c for c in shell_commands(description) if re.match(programs, c)]


@dataclass
class Workspace:
    folder: Path
    placeholders: dict[str, str]

    def fill(self, command: str) -> str:
        for placeholder, value in self.placeholders.items():
            command = command.replace(placeholder, value)
        return command


def _env(threads: int = 1) -> dict:
    """A user's shell, offline; commands that run beside each other get one thread each (two cores)."""
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "OMP_NUM_THREADS": str(threads),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check(command: str, workspace: Workspace) -> None:
    """Run `command` (placeholders filled) by its rule; fail with what the user would have seen."""
    kind, reason = rule_for(command)
    filled = workspace.fill(command)
    if kind == SKIP:
        return
    if kind == PARSE_ONLY:
        _check_arguments(filled)
        return
    if kind == SERVER:
        _check_server(filled, workspace.folder)
        return
    result = run_shell(filled, cwd=workspace.folder, env=_env())
    shown = f"$ {filled}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    assert "Traceback" not in _without_launcher_traceback(result.stderr), shown
    if kind == CLEAR_ERROR:
        assert result.returncode != 0 and re.search(CLEAR_MESSAGES, result.stderr), f"expected ({reason}):\n{shown}"
    else:
        assert result.returncode == 0, shown


def _without_launcher_traceback(stderr: str) -> str:
    """`accelerate launch` reports a failed script with a traceback of its own launcher: not ours to judge."""
    return re.sub(r"Traceback \(most recent call last\):\n(?:.*\n)*?subprocess\.CalledProcessError.*", "", stderr)


def _check_arguments(command: str) -> None:
    """The command's own parser accepts the arguments (the command is not run)."""
    argv = shlex.split(command)
    if argv[0] == "python":
        argv = argv[1:]
    if argv[:2] == ["accelerate", "launch"]:  # the module's arguments (Accelerate checks its own)
        module = argv.index("-m") + 1
        argv = ["alternet-" + argv[module].rsplit(".", 1)[-1].replace("_", "-"), *argv[module + 1 :]]
    errors = io.StringIO()
    with _PARSING, contextlib.redirect_stderr(errors):  # one at a time: check_all runs commands in threads
        try:
            _parser(argv[0]).parse_args(argv[1:])
        except SystemExit as exit:
            assert exit.code == 0, f"$ {command}\n{errors.getvalue()[-2000:]}"


_PARSING = threading.Lock()


def _check_server(command: str, cwd: Path) -> None:
    port = _free_port()
    process = start_command([*shlex.split(command), "--port", str(port)], cwd=cwd, env=_env(), merge=True)
    try:
        deadline = time.monotonic() + 300
        while True:
            assert process.poll() is None, f"$ {command}\nexited: {process.output()[0][-3000:]}"
            if (page := gradio_page(port)) is not None:
                break
            assert time.monotonic() < deadline, f"$ {command}: no page after 300 s"
            time.sleep(1)
        assert "Models:" in page, page[:2000]
    finally:
        process.terminate()
        output = process.communicate(timeout=60)[0]
    assert "Traceback" not in output, output[-3000:]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Workspace:
    """A fresh folder where the quickstart's main job has run, plus small local data for the placeholders."""
    folder = tmp_path_factory.mktemp("readme-user")
    main_job = run_command([MAIN_JOB], cwd=folder, env=_env(threads=2), warm=False)  # the quickstart, from scratch
    assert main_job.returncode == 0, main_job.stderr[-3000:]
    accuracy = float(re.search(r"final test accuracy ([\d.]+)%", main_job.stdout).group(1))
    assert accuracy >= 95, main_job.stdout[-2000:]  # the README promises a model that works

    data = tmp_path_factory.mktemp("readme-data")
    builder = ROOT / "tests" / "readme_data.py"  # a script: forked from the warm interpreter, as the tools are
    built = run_command([sys.executable, str(builder), str(data)], cwd=data, env=_env(threads=2))
    assert built.returncode == 0, built.stderr[-3000:]
    placeholders = json.loads((data / "placeholders.json").read_text())
    for program in ("bash", "python"):  # run from a clone: the repository's scripts
        placeholders[f"{program} scripts/"] = f"{program} {SCRIPTS}/"
    return Workspace(folder, placeholders)


MAIN_JOB = "alternet-train"  # the quickstart's main job: the workspace fixture runs it first
BLOCKS = [block for page in PAGES for block in fenced_blocks(page.read_text())]
# In README order, `a && b` as two commands, each once (a user does not run the same line twice).
README_COMMANDS = list(
    dict.fromkeys(
        part.strip()
        for lang, code in BLOCKS
        if lang == "bash"
        for line in shell_commands(code)
        for part in line.split("&&")
    )
)
README_SNIPPETS = [code for lang, code in BLOCKS if lang == "python"]


def test_the_readme_has_commands_and_snippets():
    assert MAIN_JOB in README_COMMANDS and len(README_SNIPPETS) >= 3
    assert len(PAGES) >= 7 and len(README.read_text().splitlines()) <= 200  # a front door; the detail is in docs/


def test_every_link_of_the_docs_resolves_inside_the_repository():
    """The README and docs/ link to each other and to the repo's files, never to a file outside it."""
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", page.read_text()):
            if not re.match(r"https?://", target):
                resolved = (page.parent / target).resolve()
                assert resolved.is_relative_to(ROOT) and resolved.exists(), f"{page.name}: {target}"
    assert all(rule_for(c)[0] != SKIP or c.startswith(("pip install", "python -m pytest")) for c in README_COMMANDS)


def _outputs(command: str) -> list[str]:
    """What a command writes: `> file`, `--out`, `--output-dir`, `--dry-run` targets, alternet-convert's folder."""
    found = re.findall(r"(?:^|\s)(?:>|--out|--output-dir|--dry-run)\s+(\S+)", command)
    if command.startswith("alternet-convert "):
        found.append(command.split()[-1])  # alternet-convert FILE PRESET FOLDER
    return [path.rstrip("/") for path in found]


def _reads(command: str, path: str) -> bool:
    """Whether `command` names `path` (or something inside it, or the folder it is in) other than as its own
    output."""
    tokens = [t.rstrip("/") for t in re.split(r"[\s=,]+", command) if t.rstrip("/")]
    return path not in _outputs(command) and any(
        t == path or path.startswith(t + "/") or t.startswith(path + "/") for t in tokens
    )


def _program(command: str) -> str:
    """The command a line runs (`accelerate launch -m alternet_hf.cli.train ...`: the module)."""
    words = command.split()
    return words[words.index("-m") + 1] if "-m" in words else words[0]


def check_all(commands: list[str], workspace: Workspace) -> None:
    """`check` each command; those whose output another one reads (`> run.json`, `--out tiny-zoo/`) first and in
    order, the rest three programs at a time (each spends most of its time importing). The lines of one program
    run in order, as a user runs them: two of them may write the same folder (its default, or the same `--out`),
    and a second run on a folder in use stops at once (`alternet_hf.utils.run_lock`). Every failure is reported."""
    writers = [c for c in commands if any(_reads(other, out) for out in _outputs(c) for other in commands)]
    failures = []

    def attempt(command: str) -> None:
        try:
            check(command, workspace)
        except AssertionError as error:
            failures.append(str(error))

    for command in writers:
        attempt(command)
    by_program = {}
    for command in commands:
        if command not in writers:
            by_program.setdefault(_program(command), []).append(command)
    with ThreadPoolExecutor(max_workers=3) as pool:
        list(pool.map(lambda lines: [attempt(line) for line in lines], by_program.values()))
    assert not failures, "\n\n".join(failures)


def test_every_readme_command(workspace):
    check_all([command for command in README_COMMANDS if command != MAIN_JOB], workspace)


@pytest.mark.parametrize("index", range(len(README_SNIPPETS)))
def test_every_readme_python_snippet(workspace, index):
    code = workspace.fill(README_SNIPPETS[index])
    result = run_command([sys.executable, "-c", code], cwd=workspace.folder, env=_env(threads=2), timeout=600)
    assert result.returncode == 0, f"{code}\n{result.stderr[-3000:]}"


def test_every_help_example(workspace):
    programs = [*command_names(), *(f"scripts/{name}.py" for name in tool_names())]
    examples = sorted({example for name in programs for example in help_examples(name)} - set(README_COMMANDS))
    check_all(examples, workspace)
