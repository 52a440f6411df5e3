"""The atlas: the *Any model* tab's probe over many Hub image classifiers, kept as a Hub dataset, and the paper's
claims decided across it.

Each model goes through the same door, worker and answer cache as the tab (`apps.any_model`): its commit is resolved,
an unchanged commit is not measured again, and a model that may not or cannot be analysed gets a row with its one
sentence, so that nothing is silently missing. A folder is a dataset repo as the Hub shows one: the rows in parquet
with declared `datasets.Features` (`COLUMNS`), a card from `hub/templates/atlas_card.md` (what each column means,
how it was measured, the command, counts, the claims), `claims.json` and figures. Every model's row is written as
soon as it is measured, so a killed run loses at most the model in flight, and a second run on the folder is refused
(`utils.run_lock`). A repo has one row: the commit measured last (a new commit replaces it). A release's own models
are measured from their folders before they are uploaded (`measure_folder`), without a commit until a refresh.
"""

import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from ..hub.door.refusals import RefusedModel

DATA_FILE = "data/train-00000-of-00001.parquet"
CARD_FILE = "README.md"
CLAIMS_FILE = "claims.json"
FIGURES = "figures"
MEASURED, REFUSED, FAILED = "measured", "refused", "failed"
LIBRARIES = ("transformers", "timm")
# A re-measured number agrees with its row within these (numpy.isclose's), as the same machine gives it bit for bit.
RELATIVE_TOLERANCE, ABSOLUTE_TOLERANCE = 1e-4, 1e-6
# Each kind's colour in the card's figures and the Space's scatter (matplotlib's tab10), and a visitor's model's.
KIND_COLOURS = {"convolution": "#1f77b4", "attention": "#ff7f0e", "hybrid": "#2ca02c", "other": "#7f7f7f"}
PLACED_COLOUR = "#d62728"

# Every column: (its type, what it means). The one place the schema and the card's table of columns come from.
COLUMNS = {
    "model_id": ("string", "the Hub repo of the model"),
    "sha": ("string", "the commit measured (null where the repo could not be resolved, or not yet uploaded)"),
    "status": ("string", "measured, refused (the repo may not or cannot be analysed) or failed (retried next run)"),
    "reason": ("string", "why a model was refused or failed, in one sentence; empty where measured"),
    "library": ("string", "transformers or timm"),
    "architecture": ("string", "the model's class (transformers) or architecture (timm)"),
    "kind": ("string", "convolution (only), attention (only: MSA and MLP blocks), hybrid (both) or other"),
    "parameters": ("int64", "number of parameters"),
    "image_size": ("int64", "the input size it was probed at (its own, or the cap for a larger CNN)"),
    "block_kinds": ("list:string", "the kind of each state: the input, then each block's output (stem, conv, msa, …)"),
    "depth": ("list:float64", "each state's normalised depth (0 the input, 1 the last block)"),
    "delta_log_amplitude": ("list:float64", "ΔlogA at π of each state's feature map (Fig. 2 of the paper)"),
    "variance": ("list:float64", "each state's feature-map variance (null without a spatial map)"),
    "noise_frequencies": ("list:float64", "the noise bands' centre frequencies, in units of π"),
    "prediction_kept": ("list:float64", "share of (photo, noise draw) pairs whose top-1 class survives each band"),
    "probability_drop": ("list:float64", "mean fall of the clean class's probability under each band"),
    "attention_share": ("float64", "MSA blocks over all MSA, MLP and convolutional blocks"),
    "late_delta_log_amplitude": ("float64", "mean ΔlogA at π over the late stage (normalised depth ≥ 2/3)"),
    "delta_log_amplitude_slope": ("float64", "least-squares slope of ΔlogA at π over normalised depth"),
    "msa_delta_log_amplitude_change": ("float64", "mean change of ΔlogA at π across its MSA blocks"),
    "msa_filter": ("string", "its MSA blocks read as low-pass, high-pass or no clear change (beyond 2 SE)"),
    "msa_variance_factor": ("float64", "geometric mean of variance after / before its MSA blocks"),
    "conv_delta_log_amplitude_change": ("float64", "mean change of ΔlogA at π across its convolutional blocks"),
    "conv_filter": ("string", "its convolutional blocks read as low-pass, high-pass or no clear change"),
    "conv_variance_factor": ("float64", "geometric mean of variance after / before its convolutional blocks"),
    "low_frequency_kept": ("float64", "share of top-1 predictions kept under noise at ≤ 0.3π"),
    "high_frequency_kept": ("float64", "share of top-1 predictions kept under noise at ≥ 0.7π"),
    "noise_gap": ("float64", "low_frequency_kept − high_frequency_kept: how much more high-frequency noise hurts"),
    "num_images": ("int64", "photos probed"),
    "noise_draws": ("int64", "noise draws per photo and band"),
    "noise_eps": ("float64", "the noise's amplitude"),
    "noise_bandwidth": ("float64", "each band's width, in units of π"),
    "noise_seed": ("int64", "the seed of the noise draws"),
    "package_version": ("string", "the alternet-hf version that measured it"),
    "seconds": ("float64", "seconds the worker took to check, fetch and probe it"),
}
# The scalars a visitor may put on the atlas' axes (not `seconds`: the speed of a machine is no property of a model).
MEASURES = [
    "late_delta_log_amplitude",
    "high_frequency_kept",
    "delta_log_amplitude_slope",
    "noise_gap",
    "low_frequency_kept",
    "attention_share",
    "msa_delta_log_amplitude_change",
    "conv_delta_log_amplitude_change",
    "msa_variance_factor",
    "conv_variance_factor",
    "parameters",
]


def features():
    """The atlas' `datasets.Features`, from `COLUMNS`."""
    from datasets import Features, List, Value

    def feature(kind: str):
        return List(Value(kind.removeprefix("list:"))) if kind.startswith("list:") else Value(kind)

    return Features({name: feature(kind) for name, (kind, _) in COLUMNS.items()})


def _settings_columns() -> dict:
    from analysis.probe import PHOTOS, SETTINGS

    return dict(
        num_images=len(PHOTOS),
        noise_draws=SETTINGS["draws"],
        noise_eps=SETTINGS["eps"],
        noise_bandwidth=SETTINGS["bandwidth"],
        noise_seed=SETTINGS["seed"],
    )


def empty_row(model_id: str, sha: str | None, status: str, reason: str = "") -> dict:
    from .. import __version__

    row = dict.fromkeys(COLUMNS)
    return row | {"model_id": model_id, "sha": sha, "status": status, "reason": reason, "package_version": __version__}


def measured_row(answer: dict) -> dict:
    """The row of a probe's answer (`any_model.probe_answer`'s JSON, from the worker or the cache)."""
    from analysis.population import model_measures
    from analysis.probe import ProbeResult
    from analysis.shared import plain

    result = ProbeResult.from_dict(answer)
    row = empty_row(answer["model_id"], answer["revision"], MEASURED)
    row |= {key: answer.get(key) for key in ("library", "architecture", "parameters", "image_size")}
    row |= {"block_kinds": list(result.kinds), **plain(model_measures(result), nulls=True)}
    for name in ("depth", "delta_log_amplitude", "variance", "noise_frequencies", "prediction_kept"):
        row[name] = plain(getattr(result, name), nulls=True)
    row["probability_drop"] = plain(result.probability_drop, nulls=True)
    row |= {
        "num_images": result.num_images,
        "noise_draws": result.noise_draws,
        "noise_eps": result.eps,
        "noise_bandwidth": result.bandwidth,
        "noise_seed": answer.get("settings", {}).get("seed"),
        "seconds": answer.get("probe_seconds"),
    }
    return row


def probe_result(row: dict):
    """The `ProbeResult` of a measured row."""
    from analysis.probe import ProbeResult

    return ProbeResult.from_dict(
        {
            **row,
            "kinds": row["block_kinds"],
            "eps": row["noise_eps"],
            "bandwidth": row["noise_bandwidth"],
        }
    )


def read_ids(path: Path) -> list[str]:
    """Model ids from a file: one per line; blank lines and `#` comments skipped."""
    lines = (line.split("#", 1)[0].strip() for line in Path(path).read_text().splitlines())
    return [line for line in lines if line]


def top_models(count: int, libraries: Sequence[str] = LIBRARIES) -> list[str]:
    """The `count` most downloaded image classifiers of each library on the Hub (`HfApi.list_models`)."""
    from huggingface_hub import HfApi

    api, found = HfApi(), []
    for library in libraries:
        listing = api.list_models(filter=library, pipeline_tag="image-classification", sort="downloads", limit=count)
        found += [model.id for model in listing if model.id not in found]
    return found


class Atlas:
    """The rows of an atlas folder (one per repo), read from its parquet file if there is one; `save()` writes them
    back atomically."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.rows: dict[str, dict] = {}
        path = self.folder / DATA_FILE
        if path.exists():
            import pyarrow.parquet as pq

            for row in pq.read_table(path).to_pylist():
                self.rows[row["model_id"]] = {name: row.get(name) for name in COLUMNS}
        self._check_settings()

    def _check_settings(self) -> None:
        current = _settings_columns()
        for row in self.rows.values():
            if row["status"] != MEASURED:
                continue
            other = {key: row[key] for key in current if row[key] != current[key]}
            if other:
                raise ValueError(
                    f"{self.folder} was measured with other probe settings ({other}; this version's: "
                    f"{ {key: current[key] for key in other} }): its rows and new ones would not be comparable. "
                    "Write this atlas to a new --output-dir."
                )

    def measured(self) -> list[dict]:
        """The measured rows, by repo id (the order the claims' resampling sees them in)."""
        return sorted((row for row in self.rows.values() if row["status"] == MEASURED), key=lambda row: row["model_id"])

    def save(self) -> Path:
        """The rows as parquet with the declared features, written to a temporary file, then moved into place."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = self.folder / DATA_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        rows = sorted(self.rows.values(), key=lambda row: row["model_id"])
        table = pa.Table.from_pylist(rows, schema=features().arrow_schema)  # the schema names the features
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".parquet.partial", delete=False) as partial:
            scratch = Path(partial.name)
        try:
            pq.write_table(table, scratch)
            os.replace(scratch, path)
        finally:
            scratch.unlink(missing_ok=True)
        return path


def _service(cache_dir: Path | None, time_limit: float | None):
    """The *Any model* tab's service without its reference models: the Space's answer cache (and its size limit), or
    `cache_dir` without a limit (a clean cache for `check`)."""
    from .any_model import CACHE_SIZE, AnyModel, Line, ResultCache, default_cache_dir

    if cache_dir is None:
        cache = ResultCache(default_cache_dir(), CACHE_SIZE.value() * 2**20)
    else:
        cache = ResultCache(cache_dir, float("inf"))
    return AnyModel({}, cache=cache, line=Line(1), time_limit=time_limit)


def measure(
    atlas: Atlas,
    ids: Iterable[str],
    *,
    cache_dir: Path | None = None,
    time_limit: float | None = None,
    report: Callable[[str], None] = print,
    progress: bool = True,
) -> dict[str, int]:
    """Measure each of `ids` into `atlas`, saving after every model; unchanged commits and refusals are kept as they
    are. {outcome: count} of this run (measured, refused, failed, unchanged)."""
    from tqdm.auto import tqdm

    from ..hub.door.checks import resolve_commit
    from ..hub.door.worker import WorkerStopped

    service = _service(cache_dir, time_limit)
    counts = dict.fromkeys((MEASURED, REFUSED, FAILED, "unchanged"), 0)
    ids = list(dict.fromkeys(ids))
    bar = tqdm(ids, desc="atlas", unit="model", disable=not progress, file=sys.stderr)
    said = report

    def report(line: str) -> None:  # each model's line above the bar, which is drawn again below it
        with tqdm.external_write_mode(file=sys.stderr):
            said(line)

    for model_id in bar:
        bar.set_postfix_str(model_id[:40])
        started = time.monotonic()
        try:
            repo_id, sha = resolve_commit(model_id)
        except RefusedModel as error:
            name = model_id if model_id.isprintable() and len(model_id) <= 200 else ascii(model_id)[:80]
            atlas.rows[name] = empty_row(name, None, REFUSED, str(error))
            counts[REFUSED] += 1
            report(f"refused  {name}: {error}")
            atlas.save()
            continue
        except Exception as error:  # the Hub out of reach, say: a row that says so, tried again next run
            atlas.rows[model_id] = empty_row(model_id, None, FAILED, _failure(error))
            counts[FAILED] += 1
            report(f"failed   {model_id}: {_failure(error)}")
            atlas.save()
            continue
        old = atlas.rows.get(repo_id)
        if old is not None and old["sha"] == sha and old["status"] in (MEASURED, REFUSED):
            counts["unchanged"] += 1
            continue
        try:
            row = measured_row(service.answer(repo_id, sha))
        except (RefusedModel, WorkerStopped) as error:
            status = REFUSED if isinstance(error, RefusedModel) else FAILED
            row = empty_row(repo_id, sha, status, str(error))
        except Exception as error:
            row = empty_row(repo_id, sha, FAILED, _failure(error))
        if row["seconds"] is None:
            row["seconds"] = round(time.monotonic() - started, 3)
        if model_id != repo_id:
            atlas.rows.pop(model_id, None)
        atlas.rows[repo_id] = row
        atlas.save()
        counts[row["status"]] += 1
        where = f"{repo_id} at {sha[:10]}"
        report(f"{row['status']:<8} {where}" + (f": {row['reason']}" if row["reason"] else f" ({row['kind']})"))
    return counts


def measure_folder(atlas: Atlas, repo_id: str, folder: str | Path) -> dict:
    """The row of a model folder of one's own (a release's model before its upload), measured in this process and
    saved under `repo_id` with no commit (`sha` null): a later refresh of the atlas measures its Hub commit. Never
    for a stranger's folder: it is loaded as the zoo loads its own, without the door's checks."""
    from transformers import AutoModelForImageClassification

    from analysis.probe import SETTINGS, photo_inputs, probe

    from .. import models  # noqa: F401  (the zoo's classes, registered with the Auto classes)
    from .any_model import probe_answer

    started = time.monotonic()
    model = AutoModelForImageClassification.from_pretrained(folder).eval()
    size, mean, std = _preprocessing(model.config, Path(folder))
    result = probe(model, photo_inputs(size, mean, std), **SETTINGS)
    answer = probe_answer(
        repo_id,
        None,
        result,
        parameters=sum(p.numel() for p in model.parameters()),
        architecture=type(model).__name__,
        library="transformers",
        image_size=size,
    )
    row = measured_row({**answer, "probe_seconds": round(time.monotonic() - started, 3)})
    atlas.rows[repo_id] = row
    atlas.save()
    return row


def _preprocessing(config, folder: Path) -> tuple[int, list, list]:
    """(input size, mean, std) of one's own model folder: the zoo's config carries them, else its image processor."""
    if all(hasattr(config, name) for name in ("image_mean", "image_std")):
        return int(config.image_size), list(config.image_mean), list(config.image_std)
    processor = json.loads((folder / "preprocessor_config.json").read_text())
    size = processor["size"]
    side = size.get("height") or size.get("shortest_edge") if isinstance(size, dict) else size
    return int(side), list(processor["image_mean"]), list(processor["image_std"])


def placement(atlas: Atlas, model_id: str, among: Sequence[str] | None = None) -> dict:
    """Where the measured row `model_id` sits among the measured rows of `among` (default: all others): how many
    they are, and its rank on the late-stage ΔlogA (1: the lowest, the most low-pass) and on the predictions kept
    under high-frequency noise (1: the most kept), with its values; ties share the better rank."""
    row = atlas.rows[model_id]
    others = [r for r in atlas.measured() if r["model_id"] != model_id]
    if among is not None:
        others = [r for r in others if r["model_id"] in set(among)]

    def rank(name: str, lower_is_first: bool) -> int | None:
        value = row[name]
        if value is None:
            return None
        values = [r[name] for r in others if r[name] is not None]
        return 1 + sum((v < value) if lower_is_first else (v > value) for v in values)

    return {
        "count": len(others),
        "kind": row["kind"],
        "late_delta_log_amplitude": row["late_delta_log_amplitude"],
        "late_delta_log_amplitude_rank": rank("late_delta_log_amplitude", True),
        "high_frequency_kept": row["high_frequency_kept"],
        "high_frequency_kept_rank": rank("high_frequency_kept", False),
    }


def _failure(error: Exception) -> str:
    """One sentence for a failure of this machine's side (the Hub's answer, the disk), its details to stderr."""
    import traceback

    traceback.print_exception(error, file=sys.stderr)
    return f"could not be analysed ({type(error).__name__}); run again to retry"


def claims(atlas: Atlas, *, seed: int = 0) -> list:
    """The paper's claims decided over the atlas' measured rows (`analysis.population.population_claims`)."""
    from analysis.population import population_claims

    return population_claims([probe_result(row) for row in atlas.measured()], seed=seed)


def write_outputs(atlas: Atlas, *, command: str, seed: int = 0) -> list:
    """claims.json, the figures and the card, from the atlas' rows; the claims."""
    from ..utils import write_atomically, write_json

    decided = claims(atlas, seed=seed)
    write_json(atlas.folder / CLAIMS_FILE, {"seed": seed, "claims": [claim.to_dict() for claim in decided]})
    figures = draw_figures(atlas, decided)
    write_atomically(atlas.folder / CARD_FILE, str(atlas_card(atlas, decided, figures, command=command)))
    return decided


def draw_figures(atlas: Atlas, decided: list) -> list[str]:
    """The card's figures under figures/ (every model's ΔlogA curve, a scatter of two measures, the claims'
    effects with their intervals); their paths in the folder."""
    from matplotlib.figure import Figure

    folder = atlas.folder / FIGURES
    folder.mkdir(exist_ok=True)
    rows = atlas.measured()
    written = []

    def save(figure, name: str) -> None:
        figure.savefig(folder / name, dpi=110)
        written.append(f"{FIGURES}/{name}")

    figure = Figure(figsize=(6.4, 3.8), layout="constrained")
    ax = figure.subplots()
    seen = set()
    for row in rows:
        label = row["kind"] if row["kind"] not in seen else None
        seen.add(row["kind"])
        depth, values = row["depth"], [float("nan") if v is None else v for v in row["delta_log_amplitude"]]
        ax.plot(depth, values, color=KIND_COLOURS[row["kind"]], alpha=0.6, linewidth=1.1, label=label)
    ax.set(xlabel="normalised depth (0 = input, 1 = last block)", ylabel="ΔlogA at π")
    ax.set_title(f"High-frequency amplitude by depth, {len(rows)} models", fontsize=9)
    if seen:
        ax.legend(fontsize=7, title="kind", title_fontsize=7)
    save(figure, "delta_log_amplitude_by_depth.png")

    figure = Figure(figsize=(5.4, 4.0), layout="constrained")
    ax = figure.subplots()
    scatter(ax, rows, "late_delta_log_amplitude", "high_frequency_kept")
    save(figure, "late_delta_log_amplitude_vs_high_frequency_kept.png")

    figure = Figure(figsize=(6.4, 0.6 + 0.55 * len(decided)), layout="constrained")
    ax = figure.subplots()
    for position, claim in enumerate(decided):
        if claim.effect is not None:
            low, high = claim.interval
            ax.errorbar(claim.effect, position, xerr=[[claim.effect - low], [high - claim.effect]], fmt="o", capsize=3)
        else:
            ax.text(0, position, "not decidable", ha="center", va="center", fontsize=7, color="0.4")
    ax.axvline(0, color="0.6", linewidth=0.8)
    ax.set_yticks(range(len(decided)), [claim.key for claim in decided], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("effect with its 95% bootstrap interval (the sign the paper predicts: see the card)", fontsize=8)
    save(figure, "claims.png")
    return written


def scatter(ax, rows: list[dict], x: str, y: str) -> None:
    """`y` against `x`, one point per model, coloured by kind."""
    for kind, colour in KIND_COLOURS.items():
        points = [(row[x], row[y]) for row in rows if row["kind"] == kind and row[x] is not None and row[y] is not None]
        if points:
            xs, ys = zip(*points)
            ax.scatter(xs, ys, s=18, color=colour, label=f"{kind} ({len(points)})", alpha=0.8)
    ax.set(xlabel=x.replace("_", " "), ylabel=y.replace("_", " "))
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


def atlas_card(atlas: Atlas, decided: list, figures: list[str], *, command: str):
    """The dataset card: its metadata (the parquet file as the `train` split, the features) and what it holds."""
    from datasets import DatasetInfo
    from datasets.info import DatasetInfosDict
    from huggingface_hub import DatasetCard, DatasetCardData

    from .. import __version__
    from ..hub.repos import PAPER_URL, TEMPLATES

    data = DatasetCardData(
        license="mit",
        pretty_name="Atlas of how image classifiers handle frequencies",
        tags=["image-classification", "vision-transformers", "fourier-analysis", "alternet-hf"],
        configs=[{"config_name": "default", "data_files": [{"split": "train", "path": DATA_FILE}]}],
    )
    DatasetInfosDict({"default": DatasetInfo(features=features())}).to_dataset_card_data(data)
    rows = list(atlas.rows.values())
    counts = {status: sum(row["status"] == status for row in rows) for status in (MEASURED, REFUSED, FAILED)}
    kinds = {}
    for row in atlas.measured():
        kinds[row["kind"]] = kinds.get(row["kind"], 0) + 1
    return DatasetCard.from_template(
        data,
        template_path=str(TEMPLATES / "atlas_card.md"),
        counts=counts,
        kinds=", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items())) or "none yet",
        from_folders=sum(row["sha"] is None for row in atlas.measured()),
        columns="\n".join(f"| `{name}` | {kind} | {meaning} |" for name, (kind, meaning) in COLUMNS.items()),
        claims=claims_table([claim.to_dict() for claim in decided]),
        refused="\n".join(f"- `{row['model_id']}`: {row['reason']}" for row in rows if row["status"] != MEASURED),
        figures=figures,
        command=command,
        paper_url=PAPER_URL,
        version=__version__,
        settings=_settings_columns(),
        tolerance=(RELATIVE_TOLERANCE, ABSOLUTE_TOLERANCE),
    )


def claims_table(claims: list[dict]) -> str:
    """The claims (`PopulationClaim.to_dict()`s) as a markdown table: what each says, its test, the sign the paper
    predicts, the verdict with its effect, 95% interval and p, and the models it rests on."""
    lines = [
        "| claim | test | the paper predicts an effect | verdict: effect [95% interval], p | models |",
        "|---|---|---|---|---|",
    ]
    for claim in claims:
        if claim["effect"] is None:
            verdict = f"**{claim['verdict']}** ({claim['note']})"
        else:
            low, high = claim["interval"]
            verdict = (
                f"**{claim['verdict']}**: {claim['effect']:+.3f} [{low:+.3f}, {high:+.3f}], p = {claim['p_value']:.3g}"
            )
        models = ", ".join(f"{n} {group}" for group, n in claim["models"].items())
        lines.append(f"| {claim['statement']} | {claim['test']} | {claim['expected']} | {verdict} | {models} |")
    return "\n".join(lines)


def check(
    atlas: Atlas,
    sample: int,
    *,
    seed: int = 0,
    time_limit: float | None = None,
    report: Callable[[str], None] = print,
) -> list[str]:
    """Re-measure `sample` measured rows (drawn with `seed`) from a clean cache at their commits; one sentence per
    row whose numbers differ beyond (RELATIVE_TOLERANCE, ABSOLUTE_TOLERANCE), naming the columns."""
    import numpy as np

    rows = atlas.measured()
    chosen = np.random.default_rng(seed).permutation(len(rows))[: min(sample, len(rows))]
    differences = []
    with tempfile.TemporaryDirectory(prefix="alternet-atlas-check-") as clean:
        service = _service(Path(clean), time_limit)
        for index in sorted(chosen):
            row = rows[index]
            try:
                again = measured_row(service.answer(row["model_id"], row["sha"]))
            except Exception as error:  # refused or stopped now, or the Hub's answer: as much a difference
                differences.append(f"{row['model_id']} at {row['sha'][:10]}: not measured again ({error})")
                report(differences[-1])
                continue
            differing = [name for name in COLUMNS if not _agree(row[name], again[name], name)]
            if differing:
                differences.append(
                    f"{row['model_id']} at {row['sha'][:10]}: {', '.join(differing)} differ beyond the tolerance "
                    f"(measured by {row['package_version']}, re-measured by {again['package_version']})"
                )
            report(differences[-1] if differing else f"agrees  {row['model_id']} at {row['sha'][:10]}")
    return differences


def _agree(kept, again, name: str) -> bool:
    import numpy as np

    if name in ("seconds", "package_version"):
        return True
    if isinstance(kept, list) and isinstance(again, list) and kept and isinstance(kept[0], (float, int, type(None))):
        if len(kept) != len(again):
            return False
        a, b = (np.array([np.nan if v is None else v for v in values], dtype=float) for values in (kept, again))
        return bool(np.isclose(a, b, rtol=RELATIVE_TOLERANCE, atol=ABSOLUTE_TOLERANCE, equal_nan=True).all())
    if isinstance(kept, float) or isinstance(again, float):
        if kept is None or again is None:
            return kept is again
        return bool(np.isclose(kept, again, rtol=RELATIVE_TOLERANCE, atol=ABSOLUTE_TOLERANCE))
    return kept == again


def load_rows(source: str | Path) -> list[dict]:
    """An atlas' rows, from a folder written by `alternet-atlas` or a Hub dataset id, through `datasets`."""
    from datasets import load_dataset

    folder = Path(source)
    if folder.is_dir():
        data = load_dataset("parquet", data_files=str(folder / DATA_FILE), split="train")
    else:
        data = load_dataset(str(source), split="train")
    return data.to_list()


def load_claims(source: str | Path) -> dict:
    """claims.json of an atlas folder or Hub dataset."""
    folder = Path(source)
    if folder.is_dir():
        return json.loads((folder / CLAIMS_FILE).read_text())
    from huggingface_hub import hf_hub_download

    return json.loads(Path(hf_hub_download(str(source), CLAIMS_FILE, repo_type="dataset")).read_text())


@contextlib.contextmanager
def held(folder: Path):
    """The folder held for this run (`utils.run_lock.hold_folder`)."""
    from ..utils.run_lock import hold_folder

    with hold_folder(folder, advice="wait for that atlas run to end, or stop it, then run this again") as path:
        yield path


# The table's columns, as the Space's *Atlas* tab shows them.
TABLE_COLUMNS = [
    "model_id",
    "kind",
    "architecture",
    "parameters",
    "attention_share",
    "late_delta_log_amplitude",
    "delta_log_amplitude_slope",
    "high_frequency_kept",
    "noise_gap",
    "msa_filter",
    "conv_filter",
    "status",
    "reason",
]
PLACED = "your model"  # the kind of a point a visitor has just measured


class AtlasView:
    """An atlas as the Space shows it: its rows and claims, from a folder or a Hub dataset (`load`); a scatter of any
    two `MEASURES`, a table to sort and filter, one model's curves, and a visitor's model placed among them."""

    def __init__(self, rows: list[dict], claims: list[dict], source: str):
        self.rows = {row["model_id"]: row for row in rows}
        self.claims = claims
        self.source = source

    @classmethod
    def load(cls, source: str | Path) -> "AtlasView":
        """The atlas of `source`; its claims from claims.json, else decided again from its rows."""
        rows = load_rows(source)
        try:
            claims = load_claims(source)["claims"]
        except (OSError, KeyError, ValueError):
            from analysis.population import population_claims

            measured = sorted((r for r in rows if r["status"] == MEASURED), key=lambda row: row["model_id"])
            claims = [claim.to_dict() for claim in population_claims([probe_result(r) for r in measured])]
        return cls(rows, claims, str(source))

    def measured(self) -> list[dict]:
        return [row for row in self.rows.values() if row["status"] == MEASURED]

    def summary(self) -> str:
        kinds = {}
        for row in self.measured():
            kinds[row["kind"]] = kinds.get(row["kind"], 0) + 1
        other = len(self.rows) - len(self.measured())
        return (
            f"**{len(self.measured())} models** from `{self.source}` ("
            + ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
            + f"; {other} not measured, each with its reason in the table)"
        )

    def points(self, x: str, y: str, placed: dict | None = None):
        """A pandas frame of the measured rows with both measures (model_id, kind, x, y), and `placed` last."""
        import pandas as pd

        for name in (x, y):
            if name not in MEASURES:
                raise ValueError(f"{name!r} is not one of the atlas' measures ({', '.join(MEASURES)})")
        rows = [*self.measured(), *([{**placed, "kind": PLACED}] if placed else [])]
        kept = [row for row in rows if row.get(x) is not None and row.get(y) is not None]
        columns = list(dict.fromkeys(["model_id", "kind", x, y]))
        return pd.DataFrame([{name: row[name] for name in columns} for row in kept], columns=columns)

    def table(self, search: str = "", kinds: Sequence[str] | None = None):
        """A pandas frame of `TABLE_COLUMNS`, the rows whose id or architecture holds `search` (any case) and whose
        kind is among `kinds` ("not measured" for the others); parameters in millions."""
        import pandas as pd

        search = (search or "").strip().lower()
        chosen = []
        for row in sorted(self.rows.values(), key=lambda row: row["model_id"]):
            kind = row["kind"] if row["status"] == MEASURED else "not measured"
            if kinds is not None and kind not in kinds:
                continue
            if search and search not in f"{row['model_id']} {row['architecture'] or ''}".lower():
                continue
            shown = {name: row[name] for name in TABLE_COLUMNS} | {"kind": kind}
            if shown["parameters"] is not None:
                shown["parameters"] = round(shown["parameters"] / 1e6, 2)
            for name in (
                "attention_share",
                "late_delta_log_amplitude",
                "delta_log_amplitude_slope",
                "high_frequency_kept",
                "noise_gap",
            ):
                shown[name] = None if shown[name] is None else round(shown[name], 3)
            chosen.append(shown)
        frame = pd.DataFrame(chosen, columns=TABLE_COLUMNS)
        return frame.rename(columns={"parameters": "parameters (M)"})

    def claims_markdown(self) -> str:
        """The claims' verdicts with their intervals, as the atlas' card shows them."""
        return claims_table(self.claims)

    def reading(self, row: dict) -> str:
        """One model's row in words: what it is, where it sits, and its probe's reading."""
        from analysis.probe import probe_reading

        if row["status"] != MEASURED:
            return f"**{row['model_id']}** is not measured: {row['reason']}"
        measured = self.measured()
        rank = 1 + sum(
            other["high_frequency_kept"] > row["high_frequency_kept"]
            for other in measured
            if other["high_frequency_kept"] is not None and other["model_id"] != row["model_id"]
        )
        commit = f" at `{row['sha'][:10]}`" if row["sha"] else ""
        return (
            f"**{row['model_id']}**{commit} ({row['architecture']}, "
            f"{row['parameters'] / 1e6:.1f} M parameters, {row['library']}, {row['kind']}): ranks {rank} of "
            f"{len(measured) + (row['model_id'] not in self.rows)} for predictions kept under high-frequency "
            f"noise.\n\n{probe_reading(row['model_id'], probe_result(row))}"
        )
