"""The analyses of a model, as `alternet-analyze`, `alternet-compare` and the release run them: in memory
(`analyse`), from disk or the Hub with every result written as soon as it is done (`analyse_model`), and several
models compared (`compare_models`, or `compare_stored` from results already written). Each split is read once
whatever the number of models.
"""

import contextlib
import dataclasses
import functools
import json
import timeit
import typing
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from alternet_hf.utils import format_duration, write_json
from alternet_hf.utils.run_lock import hold_folder

from . import shared
from .blocks import BlockAdapter, accumulate, describe_blocks
from .claims import COMPETENCE
from .hessian import HessianOperator
from .inputs import DataCache, DataOptions, Inputs, prepare_data
from .models import load_model
from .registry import ANALYSES, PAPER_ANALYSES, RESULTS, Settings
from .report import write_comparison
from .shared import AnalysisResult, count_batches, iterate_batches, plain


def analyse(
    model: nn.Module,
    analyses: Sequence[str] = PAPER_ANALYSES,
    *,
    test_data,
    train_data: Callable[[], object] | None = None,
    corruption_source=None,
    settings: Settings | None = None,
    adapter: BlockAdapter | None = None,
    image_size: int | None = None,
    image_mean: Sequence[float] | None = None,
    image_std: Sequence[float] | None = None,
    device: str | torch.device | None = None,
    progress: bool = False,
) -> dict[str, AnalysisResult]:
    """Run `analyses` on `model`; returns {name: result}, plus "accuracy" when a per-block analysis ran. The data are
    the fields of `analysis.inputs.Inputs`: `test_data` its `test`, `train_data` its `train`, `corruption_source` its
    `corruptions` (`analysis.robustness`)."""
    inputs = Inputs(test_data, train_data, corruption_source, image_size, image_mean, image_std, adapter)
    return run_analyses(model, analyses, inputs, settings or Settings(), device=device, progress=progress)


def _ignore(*_) -> None:
    """The callback of `run_analyses` that is not given."""


def run_analyses(
    model: nn.Module,
    analyses: Sequence[str],
    inputs: Inputs,
    settings: Settings,
    *,
    device: str | torch.device | None,
    progress: bool,
    on_partial: Callable[[str, AnalysisResult], None] = _ignore,
    on_start: Callable[[str], None] = _ignore,
    on_result: Callable[[str, AnalysisResult], None] = _ignore,
) -> dict[str, AnalysisResult]:
    """`analyse` on the `Inputs` of one model. `on_partial(name, result)` receives the Hessian spectrum after each
    minibatch, `on_result(name, result)` each result as soon as it is done (to write it before the next one starts);
    `on_start(name)` is called before each analysis (for time estimates)."""
    unknown = sorted(set(analyses) - set(ANALYSES))
    if unknown:
        raise ValueError(f"unknown analyses {unknown}; choose from {', '.join(ANALYSES)}")
    entries = [ANALYSES[name] for name in ANALYSES if name in analyses]
    if any(entry.training_batches for entry in entries) and inputs.train is None:
        raise ValueError(f"the {' and '.join(e.name for e in entries if e.training_batches)} analyses need train_data")
    if any(entry.corruptions for entry in entries) and inputs.corruptions is None:
        raise ValueError(
            f"the {' and '.join(e.name for e in entries if e.corruptions)} analysis needs a corruption_source"
        )
    inputs.adapter = describe_blocks(model, inputs.adapter)
    common = dict(device=device, progress=progress)
    results: dict[str, AnalysisResult] = {}

    per_block = [entry for entry in entries if entry.per_block]
    if per_block:
        names = [entry.name for entry in per_block]
        on_start(", ".join(names))
        passed = [*per_block, RESULTS["accuracy"]]
        computed = accumulate(
            model,
            inputs.test,
            [entry.load(entry.run)() for entry in passed],
            adapter=inputs.adapter,
            max_batches=settings.max_batches,
            desc="+".join(names),
            **common,
        )
        results.update({entry.name: result for entry, result in zip(passed, computed) if result is not None})
        for name in names:
            on_result(name, results[name])

    for entry in entries:
        if not entry.per_block:
            on_start(entry.name)
            partial = functools.partial(on_partial, entry.name)
            results[entry.name] = entry.load(entry.run)(model, inputs, settings, on_partial=partial, **common)
            on_result(entry.name, results[entry.name])
    return results


def _seconds(function) -> float:
    function()  # warm-up: first calls allocate
    return timeit.timeit(function, number=1)


def _forward_seconds(model: nn.Module, inputs: torch.Tensor) -> float:
    """Seconds for a forward pass of `inputs`, timed on a quarter of them and scaled: a warm-up and a timed pass of
    the whole batch would cost as much as a one-pass analysis itself."""
    part = inputs[: max(1, len(inputs) // 4)]
    return _seconds(lambda: model(part)) * len(inputs) / len(part)


def measure_costs(
    model: nn.Module, *, test_batch, train_batch=None, hessian: Settings | None = None, device=None
) -> dict[str, float]:
    """Seconds per forward pass of a test and a training batch, and with `hessian` (the settings the Hessian will
    run with) per Hessian-vector product on the training batch, measured on the batches given: what
    `estimate_seconds` multiplies. A product is timed, not reckoned from forward passes: its double backward costs
    a different multiple of a forward pass for every architecture."""
    costs = {}
    with shared.analysis_mode(model, device=device) as device, torch.no_grad():
        inputs = test_batch[0].to(device)
        costs["test_forward"] = _forward_seconds(model, inputs)
        costs["test_batch_size"] = len(inputs)
        if train_batch is not None:
            costs["train_forward"] = _forward_seconds(model, train_batch[0].to(device))
    if hessian is not None and train_batch is not None:
        batch = [(train_batch[0].to(device), train_batch[1].to(device))]
        with shared.analysis_mode(model, batchnorm=hessian.batchnorm or "train", device=device):
            operator = HessianOperator(model, batch, weight_decay=hessian.weight_decay, penalty=hessian.penalty)
            vector = operator.random_vector(torch.Generator(device=device).manual_seed(0))
            costs["hvp"] = _seconds(lambda: operator(vector))
    return costs


def estimate_seconds(
    analyses: Sequence[str], costs: dict[str, float], settings: Settings
) -> dict[str, tuple[float, str]]:
    """{analysis: (seconds, how that was reckoned)} from measured `costs` (`measure_costs`, with `test_batches`,
    `num_branches` and `corruption_images`): each analysis's own estimate (`analysis.registry`); the per-block
    analyses share one entry, as they share one pass."""
    estimates = {}
    per_block = [name for name in ANALYSES if name in analyses and ANALYSES[name].per_block]
    if per_block:
        batches = costs["test_batches"]
        estimates[", ".join(per_block)] = (
            1.3 * costs["test_forward"] * batches,
            f"one pass over {batches} test batches",
        )
    for entry in [entry for name, entry in ANALYSES.items() if name in analyses and entry.estimate]:
        estimate = entry.load(entry.estimate)(costs, settings)
        if estimate is not None:
            estimates[entry.name] = estimate
    return estimates


def analyse_model(
    source: str,
    analyses: Sequence[str],
    *,
    data: DataOptions,
    settings: Settings,
    device: torch.device,
    out: Path | None,
    weights: str | Path | None = None,
    revision: str | None = None,
    scaled_down: Sequence[str] = (),
    say: Callable[[str], None] = print,
) -> dict:
    """Every analysis of `analyses` on the model `source` (see `analysis.models.load_model`; a Hub id at
    `revision`), written into `out`,
    which is held while the analyses write it (one analysis per folder at a time; the model and data are loaded
    first, so that a bad input is said before the folder is claimed)."""
    torch.manual_seed(data.seed)
    loaded = load_model(source, weights=weights, revision=revision)
    loaded.model.to(device)
    parameters = sum(p.numel() for p in loaded.model.parameters())
    say(f"analysing {source} ({type(loaded.model).__name__}, {parameters:,} parameters) on {device}")
    meta = {"model": source, **_run_meta(data, device, scaled_down, say)}
    if loaded.revision is not None:
        meta["revision"] = loaded.revision
    inputs = prepare_data(loaded, data, analyses, settings, DataCache(data), device=device)
    if inputs.augmentation:
        say(f"Hessian/landscape batches augmented as: {inputs.augmentation['source']}")
    with hold_folder(out) if out is not None else contextlib.nullcontext():
        return analyse_loaded(loaded, analyses, settings, inputs, device=device, out=out, meta=meta, say=say)


def compare_models(
    specs: Sequence[tuple[str, str]],
    analyses: Sequence[str],
    *,
    data: DataOptions,
    settings: Settings,
    device: torch.device,
    results_dir: Path,
    comparison_dir: Path,
    weights: dict[str, Path] | None = None,
    image_size: int | None = None,
    scaled_down: Sequence[str] = (),
    competence: float = COMPETENCE,
    say: Callable[[str], None] = print,
) -> dict:
    """Analyse every model of `specs` ([(name, source)]) into `results_dir/<name>/` (as `analyse_model` writes),
    then write the comparison into `comparison_dir` (models below `competence` × chance accuracy named as near
    chance); both folders are held for the run. Returns the written paths (`analysis.report`)."""
    with hold_folder(results_dir), hold_folder(comparison_dir):  # one comparison per folder at a time
        torch.manual_seed(data.seed)
        run_meta = _run_meta(data, device, scaled_down, say)
        cache, results, summaries = DataCache(data), {}, {}
        for name, source in specs:
            loaded = load_model(source, name=name, weights=(weights or {}).get(name), image_size=image_size)
            loaded.model.to(device)
            inputs = prepare_data(loaded, data, analyses, settings, cache, device=device)
            augmentation = inputs.augmentation
            say(
                f"{name}: {type(loaded.model).__name__} from {source}, {loaded.image_size}×{loaded.image_size} inputs"
                + (f"; Hessian/landscape batches augmented as {augmentation['source']}" if augmentation else "")
            )
            meta = {"model": source, **run_meta}
            results[name] = analyse_loaded(
                loaded, analyses, settings, inputs, device=device, out=results_dir / name, meta=meta, say=say
            )
            summaries[name] = model_summary(loaded, source, augmentation)
            loaded.model.cpu()
        return write_comparison_of(results, summaries, data, settings, device, comparison_dir, scaled_down, competence)


def compare_stored(
    specs: Sequence[tuple[str, str]],
    *,
    data: DataOptions,
    settings: Settings,
    device: torch.device,
    results_dir: Path,
    comparison_dir: Path,
    image_size: int | None = None,
    scaled_down: Sequence[str] = (),
    competence: float = COMPETENCE,
    pending: Sequence[str] = (),
) -> dict:
    """The comparison of `compare_models` from results already written (by `analyse_model` or `compare_models`)
    into `results_dir/<name>/`, without running an analysis again: what a resumed release does after analysing
    each model in its own step. The models are loaded for their block summaries only. `pending`: models of the
    line-up not compared yet (a release still to train them), named in the report."""
    results, summaries = {}, {}
    for name, source in specs:
        folder = results_dir / name
        results[name] = read_results(folder)
        loaded = load_model(source, name=name, image_size=image_size)
        trained = [name for name, entry in ANALYSES.items() if entry.training_batches]
        stored = [json.loads(p.read_text()) for a in trained if (p := folder / f"{a}.json").is_file()]
        summaries[name] = model_summary(loaded, source, stored[0].get("augmentation") if stored else None)
    return write_comparison_of(
        results, summaries, data, settings, device, comparison_dir, scaled_down, competence, pending=pending
    )


def _run_meta(data: DataOptions, device, scaled_down: Sequence[str], say) -> dict:
    """What every result of a run says of it (the model's source aside), once the scaling is said."""
    if scaled_down:
        say(f"on a CPU, scaled down from the paper's amounts (pass the flags to change): {'; '.join(scaled_down)}")
    return {"dataset": data.dataset, "device": str(device), "scaled_down": list(scaled_down)}


def model_summary(loaded, source: str, augmentation: dict | None) -> dict:
    """What the report says of one model (`summary_of` and where it came from)."""
    return {
        **summary_of(loaded.model),
        "source": source,
        "augmentation": augmentation,
        "image_size": loaded.image_size,
        "preprocessing_note": loaded.preprocessing_note,
    }


def write_comparison_of(
    results: dict,
    summaries: dict,
    data: DataOptions,
    settings: Settings,
    device,
    comparison_dir: Path,
    scaled_down: Sequence[str],
    competence: float,
    *,
    pending: Sequence[str] = (),
) -> dict:
    """`analysis.report.write_comparison` with the run's settings as its meta and notes (what `compare_models` and
    `compare_stored` pass, in their order)."""
    meta = {
        "dataset": data.dataset,
        "device": str(device),
        "settings": settings.to_dict(),
        "landscape_protocol": settings.landscape_protocol,
        "augmentation": {name: (s["augmentation"] or {}).get("source") for name, s in summaries.items()},
    }
    notes = [
        f"landscape: the {settings.landscape_protocol} protocol; L2 term: {settings.penalty}, weight decay "
        f"{settings.weight_decay} (the same in the Hessian)"
    ]
    if scaled_down:
        notes.append(f"scaled down for a CPU: {'; '.join(scaled_down)}")
    if pending:
        meta["pending"] = list(pending)
        notes.append(f"not compared yet (their weights are still to be trained): {', '.join(pending)}")
    return write_comparison(comparison_dir, results, summaries, meta=meta, notes=notes, competence=competence)


def analyse_loaded(
    loaded, analyses, settings: Settings, inputs: Inputs, *, device, out: Path | None, meta: dict, say=print
) -> dict:
    """Run `analyses` on one loaded model with time estimates; write each result (JSON + PNG) into `out`
    as soon as it is done, the Hessian spectrum also after every minibatch. Returns {analysis: result}."""
    import matplotlib.pyplot as plt

    inputs.adapter = describe_blocks(loaded.model)
    test_batch = next(iterate_batches(inputs.test))  # the loader's dict as (inputs, targets)
    train_batch = next(iter(inputs.train())) if inputs.train else None
    # the analyses of the Hessian's minibatches are those that make Hessian-vector products
    hessian = settings if any(ANALYSES[name].training_batches == "hessian_batches" for name in analyses) else None
    costs = measure_costs(loaded.model, test_batch=test_batch, train_batch=train_batch, hessian=hessian, device=device)
    costs |= {
        "test_batches": count_batches(inputs.test, settings.max_batches),
        "num_branches": sum(b.residual_branch is not None for b in inputs.adapter.blocks),
        "num_blocks": len(inputs.adapter.blocks),
        "corruption_images": len(inputs.corruptions.images) if hasattr(inputs.corruptions, "images") else None,
    }
    estimates = estimate_seconds(analyses, costs, settings)
    total = sum(seconds for seconds, _ in estimates.values())
    say(f"{loaded.name}: all analyses about {format_duration(total)} on {device}")

    def on_start(name):
        if name in estimates:
            seconds, how = estimates[name]
            say(f"{loaded.name}: {name}: about {format_duration(seconds)} ({how})")

    def meta_of(name, partial=False):
        extra = {"images": inputs.images}
        if RESULTS[name].training_batches:
            extra |= {"augmentation": inputs.augmentation, "train_batch_size": settings.train_batch_size}
        return {**meta, **extra, "settings": settings.to_dict(), "partial": partial}

    def on_partial(name, partial):
        if out is not None:
            write_result(out, name, partial, meta_of(name, partial=True))

    def on_result(name, result):
        entry = ANALYSES[name]
        say(f"{loaded.name}: {entry.load(entry.summary)(result)}")
        if out is not None:
            figure = entry.load(entry.plot)(result)
            write_result(out, name, result, meta_of(name), figure)
            plt.close(getattr(figure, "figure", figure))

    options = dict(on_partial=on_partial, on_start=on_start, on_result=on_result)
    results = run_analyses(loaded.model, analyses, inputs, settings, device=device, progress=True, **options)
    if out is not None and "accuracy" in results:  # the clean accuracy of the per-block pass: what claims weigh
        write_result(out, "accuracy", results["accuracy"], meta_of("accuracy"))
    return results


def write_result(out: Path, name: str, result, meta: dict, figure=None, *, stem: str | None = None) -> Path:
    """`<out>/<stem>.json` ({..meta, "analysis": name, "result"}; `stem`: the analysis's name unless given) written
    atomically, and `<stem>.png` (`figure`: a Figure or an Axes of one). `read_result` reads it back."""
    payload = {**meta, "analysis": name, "result": plain(result.to_dict(), nulls=True)}
    path = write_json(Path(out) / f"{stem or name}.json", payload)
    if figure is not None:
        figure = getattr(figure, "figure", figure)  # an Axes draws into its Figure
        figure.savefig(path.with_suffix(".png"), dpi=130)
    return path


def read_result(path: Path):
    """The result `write_result` wrote to `path`, as its class again: arrays as numpy arrays of the shapes the
    file holds (nulls, JSON's NaN, as NaN; an empty matrix as shape (0, 0))."""
    payload = json.loads(Path(path).read_text())
    if payload.get("partial"):
        raise ValueError(f"{path} holds a partial result (the analysis was interrupted): run the analysis again")
    entry = RESULTS[payload["analysis"]]
    kind = entry.load(entry.result)
    hints, values = typing.get_type_hints(kind), payload["result"]
    fields = {}
    for f in [f for f in dataclasses.fields(kind) if f.name in values]:
        value, allowed = values[f.name], (hints[f.name], *typing.get_args(hints[f.name]))
        if value is not None and np.ndarray in allowed:
            value = np.asarray(value)
            if value.dtype == object:  # nulls (NaN written to JSON) in an array of numbers
                value = np.asarray(values[f.name], dtype=float)
            if value.size == 0 and f.default_factory is not dataclasses.MISSING:
                value = value.reshape(f.default_factory().shape)
        elif value is None and float in allowed:
            value = float("nan")
        fields[f.name] = value
    return kind(**fields)


def read_results(folder: Path) -> dict:
    """Every complete result in `folder` (`<analysis>.json`), by analysis."""
    return {path.stem: read_result(path) for path in sorted(Path(folder).glob("*.json")) if path.stem in RESULTS}


def summary_of(model: nn.Module, adapter: BlockAdapter | None = None) -> dict:
    """Parameters and blocks of a model, for reports."""
    adapter = describe_blocks(model, adapter)
    kinds = adapter.kinds
    config = getattr(model, "config", None)
    return {
        "parameters": sum(p.numel() for p in model.parameters()),
        "num_labels": getattr(config, "num_labels", None) or getattr(model, "num_classes", None),
        "kinds": kinds,
        "names": adapter.names,
        "block_counts": {kind: kinds.count(kind) for kind in dict.fromkeys(kinds)},
    }
