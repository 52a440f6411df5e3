"""`alternet-atlas` on this machine: how many ImageNet-size classifiers it measures per hour when their weights are
already local (created untrained, saved as their Hub repos hold them into a Hub cache, read offline), and what a
second run over the same, unchanged commits costs."""

import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path


def local_model(cache: Path, name: str, *, seed: int = 0) -> str:
    """`name` (a timm architecture, or one of `hub_cache.TRANSFORMERS_MODELS`) untrained in the Hub cache `cache`;
    the repo id the atlas is given."""
    from .hub_cache import TRANSFORMERS_MODELS, timm_snapshot, transformers_snapshot

    if name in TRANSFORMERS_MODELS:
        repo_id = f"local/{name}.untrained"
        transformers_snapshot(cache, repo_id, name, seed=seed)
    else:
        repo_id = f"timm/{name}.untrained"
        timm_snapshot(cache, repo_id, name, seed=seed)
    return repo_id


def _atlas_run(folder: Path, ids: list[str]) -> dict:
    """One run of what `alternet-atlas <ids> --output-dir <folder>` does, in this process: the models measured (or
    kept, where their commit is unchanged), then the card, claims and figures; seconds of each part, and the wall
    seconds up to each model's line (`measure` reports a model once its row is saved)."""
    from alternet_hf.apps import atlas

    heard = []

    def report(line: str) -> None:
        heard.append((time.perf_counter(), line))

    with atlas.held(folder):
        found = atlas.Atlas(folder)
        started = time.perf_counter()
        counts = atlas.measure(found, ids, report=report, progress=False)
        measured = time.perf_counter()
        atlas.write_outputs(found, command=shlex.join(["alternet-atlas", *ids, "--output-dir", str(folder)]))
        written = time.perf_counter()
    ends = [started, *(at for at, _ in heard)]
    return {
        "counts": counts,
        "lines": [line for _, line in heard],
        "wall_seconds": [end - start for start, end in zip(ends, ends[1:])],
        "measure_seconds": measured - started,
        "outputs_seconds": written - measured,
        "rows": found.rows,
    }


def atlas_speed(workdir: str, *, models: Sequence[str], seed: int = 0) -> dict:
    """`models` made local (untimed), then `alternet-atlas` over them into a fresh folder: per model its row's
    `seconds` (the worker's checks, fetch from the cache and probe) and the wall time to its row saved (the first
    also starts the workers' fork server); models per hour over the whole loop. Then the same again on the folder
    (every commit unchanged), and the installed command's refresh of it (`alternet-atlas --output-dir`, interpreter
    start-up included). Needs HF_HUB_OFFLINE=1 and ALTERNET_MODEL_CACHE and ALTERNET_SPACE_CACHE under `workdir` set
    before huggingface_hub is imported (`scripts/benchmark.py atlas` sets them)."""
    from huggingface_hub import constants

    from alternet_hf.apps.any_model import CACHE_VARIABLE as ANSWERS_VARIABLE
    from alternet_hf.hub.door.checks import CACHE_VARIABLE as MODELS_VARIABLE
    from alternet_hf.utils import machine

    cache, answers = Path(os.environ[MODELS_VARIABLE]), Path(os.environ[ANSWERS_VARIABLE])
    offline = constants.HF_HUB_OFFLINE and cache.is_relative_to(workdir) and answers.is_relative_to(workdir)
    assert offline, "set the environment before any import"
    ids = [local_model(cache, name, seed=seed) for name in models]
    folder = Path(workdir) / "atlas"
    load_before = os.getloadavg()
    first = _atlas_run(folder, ids)
    again = _atlas_run(folder, ids)
    started = time.perf_counter()
    command = [sys.executable, "-m", "alternet_hf.cli.atlas", "--output-dir", str(folder), "--no-progress"]
    refreshed = subprocess.run(command, capture_output=True, text=True)
    refresh_command_seconds = time.perf_counter() - started
    load_after = os.getloadavg()
    if refreshed.returncode != 0:
        raise RuntimeError(f"alternet-atlas --output-dir {folder} failed:\n{refreshed.stderr[-3000:]}")
    (refresh_said,) = [line for line in refreshed.stdout.splitlines() if line.startswith(f"{len(ids)} model")]
    rows = []
    for name, repo_id, line, wall in zip(models, ids, first["lines"], first["wall_seconds"], strict=True):
        assert repo_id in line, f"{repo_id} was measured out of turn: {line}"
        row = first["rows"][repo_id]
        rows.append(
            {
                "model": name,
                "model_id": repo_id,
                "library": row["library"],
                "kind": row["kind"],
                "parameters": row["parameters"],
                "status": row["status"],
                "reason": row["reason"],
                "seconds": row["seconds"],
                "wall_seconds": wall,
            }
        )
    return {
        "models": rows,
        "measured": first["counts"]["measured"],
        "measure_seconds": first["measure_seconds"],
        "outputs_seconds": first["outputs_seconds"],
        "models_per_hour": len(ids) / (first["measure_seconds"] / 3600),
        "unchanged": again["counts"]["unchanged"],
        "refresh_measure_seconds": again["measure_seconds"],
        "refresh_outputs_seconds": again["outputs_seconds"],
        "refresh_command_seconds": refresh_command_seconds,
        "refresh_command_said": refresh_said,
        "load_average_before": load_before,
        "load_average_after": load_after,
        "machine": machine(),
    }
