"""What every command shares: how an error reaches the user, how `--model` and `--config` are read, and how files
reach the Hub.

Errors the user caused (a bad flag value, a missing folder, the Hub out of reach, a malformed file) are
printed as one `error: ...` message with exit status 2, as argparse does; a bug still shows its traceback.
`ALTERNET_DEBUG=1` shows the traceback of every error. Warnings of the zoo's own code (an analysis that did not
converge, a time limit reached) read the same way, one `warning: ...` line each; other libraries' keep Python's
format, which names the line that warned.
"""

import argparse
import functools
import json
import os
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

from alternet_hf.utils import (
    FORBIDDEN,
    GATED,
    UNAUTHENTICATED,
    UNREACHABLE,
    damaged_model_file,
    hub_failure,
    not_a_folder,
)

DEBUG_VARIABLE = "ALTERNET_DEBUG"
# Where the zoo's own code lives: warnings raised from files under these read as one line.
OWN_CODE = tuple(str(Path(__file__).resolve().parents[2] / package) for package in ("alternet_hf", "analysis"))
MODEL_SOURCES = (
    'a preset name (e.g. alternet-50-cifar100; `python -c "import alternet_hf; print(alternet_hf.list_models())"` '
    "lists them), a folder written by alternet-train / alternet-finetune / save_pretrained, or a Hub id (owner/name)"
)


class CommandError(Exception):
    """An error the user can fix: printed as its message alone."""


def command(main: Callable[[list[str] | None], None]) -> Callable[[list[str] | None], None]:
    """Wrap a command's `main(argv)`: user errors become one message and exit status 2, Ctrl-C exit 130, the zoo's
    warnings one line each."""

    @functools.wraps(main)
    def wrapper(argv: list[str] | None = None) -> None:
        python_format = warnings.showwarning
        warnings.showwarning = functools.partial(_show_warning, python_format=python_format)
        try:
            main(argv)
        except KeyboardInterrupt:
            print("\ninterrupted", file=sys.stderr)
            raise SystemExit(130) from None
        except (CommandError, ValueError, OSError) as error:
            if os.environ.get(DEBUG_VARIABLE):
                raise
            print(f"error: {error if isinstance(error, CommandError) else describe(error)}", file=sys.stderr)
            if not isinstance(error, CommandError):
                print(f"(set {DEBUG_VARIABLE}=1 to see where it was raised)", file=sys.stderr)
            raise SystemExit(2) from None
        finally:
            warnings.showwarning = python_format

    return wrapper


def _show_warning(message, category, filename, lineno, file=None, line=None, *, python_format) -> None:
    """`warnings.showwarning` while a command runs: `warning: <message>` for the zoo's own code."""
    if str(filename).startswith(OWN_CODE) and not os.environ.get(DEBUG_VARIABLE):
        print(f"warning: {message}", file=file or sys.stderr)
    else:
        python_format(message, category, filename, lineno, file, line)


def describe(error: BaseException) -> str:
    """The message of `error`, with what to do when it says what the Hub answered (`utils.hub_failure`); the zoo's
    own errors about the Hub say it already."""
    message = str(error) or type(error).__name__
    failure = None if getattr(error, "hub_failure", None) else hub_failure(error)
    if failure == UNREACHABLE:
        if "hugging face hub" not in message.splitlines()[0].lower():  # transformers' text: a URL and a docs link
            message = (
                "the Hugging Face Hub cannot be reached from here (offline, HF_HUB_OFFLINE=1, or no network) and what "
                f"was asked for is not in the local cache: {message.splitlines()[0]}"
            )
        message += (
            "\nUse local files instead: a model folder for --model, a local dataset (a folder written by "
            "`Dataset.save_to_disk`, parquet, an image folder, or 'digits') for --dataset."
        )
    elif failure in (UNAUTHENTICATED, GATED, FORBIDDEN):
        gated = " and ask for access on the repo's page" if failure == GATED else ""
        message += f"\nLog in first (`hf auth login`, or set HF_TOKEN) with an account that may read it{gated}."
    return message


def publish(
    args: argparse.Namespace,
    write: Callable[[Path], None],
    what: str,
    *,
    repo_type: str | None = None,
    commit_message: str | None = None,
) -> bool:
    """Have `write(folder)` write the files of the Hub repo `--repo-id`: into `--dry-run` DIR (False: nothing
    uploaded), else into a temporary folder uploaded to the repo, created (`--private` where asked) if missing, and
    say where it was published (True). A Hub out of reach or refusing the token is an error that names --dry-run;
    `what` names what was uploaded."""
    if args.dry_run:
        write(args.dry_run)
        return False
    from huggingface_hub import HfApi

    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        write(folder)
        api = HfApi()
        try:
            api.create_repo(args.repo_id, repo_type=repo_type, private=args.private, exist_ok=True)
            api.upload_folder(
                repo_id=args.repo_id, repo_type=repo_type, folder_path=folder, commit_message=commit_message
            )
        except Exception as error:
            failure = hub_failure(error)
            if failure is None and not isinstance(error, OSError):
                raise
            unreachable = "the Hub cannot be reached (offline, HF_HUB_OFFLINE=1, or no network)"
            reason = unreachable if failure == UNREACHABLE else error
            raise CommandError(
                f"could not upload {what} to the Hub: {reason}. Log in with `hf auth login` (or set HF_TOKEN) where "
                "the Hub is reachable; with --dry-run DIR the files are written to DIR and nothing is uploaded."
            ) from error
    print(f"published https://huggingface.co/{'datasets/' if repo_type == 'dataset' else ''}{args.repo_id}")
    return True


def flag_values(args: argparse.Namespace, names: str) -> dict:
    """The parsed values of the flags `names` (space-separated, as `args` spells them), as keyword arguments."""
    return {name: getattr(args, name) for name in names.split()}


def model_source(text: str) -> str:
    """argparse type of `--model`: a preset, a model folder, or something that can only be a Hub id."""
    from alternet_hf.models.presets import list_models, unknown_preset_message

    path = Path(text).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            if text in list_models():
                return text  # a folder that merely has a preset's name (`hf download --local-dir`): the preset
            raise argparse.ArgumentTypeError(
                f"{text} is a folder but holds no config.json, so it is no saved model; --model takes {MODEL_SOURCES}"
            )
        problem = damaged_model_file(path)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return str(path)
    if text in list_models():
        return text
    if path.exists():
        raise argparse.ArgumentTypeError(f"{text} is a file, not a model folder; --model takes {MODEL_SOURCES}")
    parts = text.split("/")
    # `outputs/run` where `outputs/` exists is a path with a typo, not a Hub repo of a user called "outputs".
    could_be_hub_id = len(parts) == 2 and all(parts) and not text.startswith((".", "~")) and not Path(parts[0]).is_dir()
    if "/" not in text and os.sep not in text:
        raise argparse.ArgumentTypeError(unknown_preset_message(text))
    if not could_be_hub_id:
        raise argparse.ArgumentTypeError(f"there is no folder {text}; --model takes {MODEL_SOURCES}")
    return text  # owner/name: a Hub id (a missing local folder of that form gets the Hub's error, with a hint)


def output_folder(text: str) -> Path:
    """argparse type of a folder a command writes into: refused where it, or a folder above it, is a file."""
    problem = not_a_folder(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return Path(text)


def json_file(text: str) -> dict:
    """argparse type of a JSON settings file: its object, or an error that says what is wrong with the file."""
    path = Path(text).expanduser()
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"there is no file {text}" if not path.exists() else f"{text} is a folder")
    content = path.read_text()
    if not content.strip():
        raise argparse.ArgumentTypeError(f"{text} is empty; it must hold a JSON object of settings")
    try:
        value = json.loads(content)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(
            f"{text} is not valid JSON: {error.msg} at line {error.lineno}, column {error.colno}"
        ) from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"{text} must hold a JSON object of settings, not {type(value).__name__}")
    return value


def json_object(text: str) -> dict:
    """argparse type of an inline JSON object such as `--model-overrides '{"drop_path_rate": 0.1}'`."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"not valid JSON ({error.msg}): {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object such as '{{\"drop_path_rate\": 0.1}}', got {text!r}")
    return value


def positive_int(text: str) -> int:
    """argparse type of a count: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"takes a whole number of at least 1, not {text!r}")
    return value


class CommandParser(argparse.ArgumentParser):
    """argparse, but a wrong argument is answered with the message alone, not with a screen of usage."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n(`{self.prog} --help` lists the options)\n")


def make_parser(doc: str) -> CommandParser:
    """A parser whose description is the command module's docstring, examples kept as written."""
    return CommandParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
