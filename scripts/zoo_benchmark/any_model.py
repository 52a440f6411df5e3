"""The Space's *Any model* tab on this machine: seconds to answer for an ImageNet classifier whose weights are
already local (a model created without weights, saved in timm's Hub format into a Hub cache and read offline), and
seconds to a cached answer with its figures drawn as PNG, as a second visitor waits for them."""

import functools
import io
import os
import time
from pathlib import Path


def _nothing(step) -> dict:
    """A worker's job that does nothing: what starting a worker and hearing from it costs."""
    return {}


def any_model_speed(workdir: str, *, architecture: str = "resnet50", repeats: int = 2) -> dict:
    """Seconds of the tab's service (`alternet_hf.apps.any_model.AnyModel`) for `architecture`: the workers' fork
    server started, to a first empty job's answer after its imports (once per Space), an empty job's round trip
    through a worker (once per analysis), the first answer (in a worker: the checks, blocks found on the meta device,
    weights loaded, the probe), then cached answers with their three figures drawn, the best of `repeats`. Needs
    HF_HUB_OFFLINE=1 and ALTERNET_MODEL_CACHE=<workdir>/hub set before huggingface_hub is imported
    (`scripts/benchmark.py any-model` sets them)."""
    from huggingface_hub import constants
    from matplotlib.figure import Figure

    from alternet_hf.apps.any_model import AnyModel, ResultCache
    from alternet_hf.utils import machine
    from analysis.probe import ProbeResult, plot_probe_by_depth, plot_probe_noise

    from .hub_cache import timm_snapshot

    cache = Path(os.environ["ALTERNET_MODEL_CACHE"])
    assert constants.HF_HUB_OFFLINE and cache.is_relative_to(workdir), "set the environment before any import"
    repo_id = f"timm/{architecture}.untrained"
    timm_snapshot(cache, repo_id, architecture)
    service = AnyModel({}, cache=ResultCache(Path(workdir) / "answers", 2**26))
    service.photos  # noqa: B018  (scikit-image's photos read once, as a running Space has them)
    from alternet_hf.hub.door.worker import run_in_worker

    round_trips = []
    for _ in range(1 + max(repeats, 2)):  # the first waits for the server's imports
        started = time.perf_counter()
        run_in_worker(_nothing, what="nothing", seconds=60, memory_bytes=service.memory_bytes)
        round_trips.append(time.perf_counter() - started)
    first = service.analyse(repo_id)
    cached = []
    for _ in range(repeats):
        started = time.perf_counter()
        answer = service.analyse(repo_id)
        found = {repo_id: ProbeResult.from_dict(answer)}
        variance = functools.partial(plot_probe_by_depth, field="variance")
        for draw in (plot_probe_by_depth, variance, plot_probe_noise):
            figure = Figure(figsize=(5.2, 3.6), layout="constrained")
            draw(found, figure.subplots(), highlight=repo_id)
            figure.savefig(io.BytesIO(), format="png")  # as Gradio sends a figure: a PNG
        cached.append(time.perf_counter() - started)
    return {
        "architecture": architecture,
        "parameters": first["parameters"],
        "fork_server_seconds": round_trips[0],
        "worker_seconds": min(round_trips[1:]),
        "analysed_seconds": first["seconds"],
        "cached_seconds": min(cached),
        "cached": answer["cached"],
        "machine": machine(),
    }
