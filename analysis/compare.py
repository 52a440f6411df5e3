"""Every analysis of the paper on one model or several, and the paper's figures with all models in one plot.

`analyse` runs the analyses of one model, the per-block ones (Fourier, variance, CKA, the clean accuracy) in one
pass of feature maps; `Settings` holds how much of each to run (the paper's amounts, or fewer on a CPU:
`Settings.for_device`). The comparison figures put every model on one axis over depth normalised to 0…1, as the
reference notebooks do, with a strip per model marking its MSA and downsampling blocks.
"""

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from . import _common, cka, fourier, hessian, landscape, lesion, robustness, variance
from ._common import AnalysisResult, logits_of
from .blocks import BlockAdapter, accumulate, describe_blocks
from .corruptions import CORRUPTIONS, SEVERITIES
from .hessian import HessianOperator


def _setting(default, help: str, choices: tuple[str, ...] | None = None):
    """A field of `Settings` with what its flag says about it."""
    return dataclasses.field(default=default, metadata={"help": help, "choices": choices})


ANALYSES = ("fourier", "variance", "hessian", "landscape", "robustness", "frequency-noise", "lesion", "cka")
PER_BLOCK = ("fourier", "variance", "cka")  # computed from one pass of feature maps


@dataclass
class Settings:
    """How much of each analysis to run; the defaults are the paper's amounts, for a GPU. Each field is a flag of
    `alternet-analyze`, `-compare` and `-reproduce` under its own name (`lanczos_steps`: `--lanczos-steps`), with its
    `help`; `CPU_AMOUNTS` are the CPU's defaults."""

    max_batches: int | None = _setting(None, "test batches of the per-block, noise and lesion analyses (None: all)")
    train_batch_size: int = _setting(96, "minibatch of the Hessian and the landscape")
    hessian_batches: int = _setting(10, "minibatches of the Hessian max-eigenvalue spectrum")
    top_k: int = _setting(5, "largest Hessian eigenvalues per minibatch")
    bottom_k: int = _setting(5, "most negative Hessian eigenvalues per minibatch (0: the largest only)")
    lanczos_steps: int = _setting(100, "Lanczos steps per minibatch at most")
    hessian_tol: float = _setting(1e-3, "relative residual bound at which Lanczos stops")
    hessian_time_limit: float | None = _setting(None, "seconds; the spectrum stops there, keeping finished minibatches")
    density_vectors: int = _setting(4, "SLQ vectors of the Hessian density (0: none)")
    density_steps: int = _setting(64, "Lanczos steps per SLQ vector")
    weight_decay: float = _setting(0.05, "L2 coefficient of the Hessian and landscape loss")
    penalty: str = _setting(
        "reference",
        "the L2 term of Hessian and landscape: the reference's wd·Σ‖p‖, or ½·wd·‖w‖²",
        ("reference", "squared"),
    )
    batchnorm: str | None = _setting(
        None, "BatchNorm mode of the Hessian (None: train) and the landscape (None: its protocol's)", ("train", "eval")
    )
    landscape_points: int = _setting(21, "landscape grid points per direction (odd: the centre is the trained weights)")
    landscape_batches: int = _setting(1, "training minibatches per landscape grid point")
    landscape_span: float = _setting(1.0, "the landscape grid spans ±span along each direction")
    landscape_protocol: str = _setting(
        "filter",
        "'filter': per-filter normalised directions, BatchNorm in train mode; 'reference': the paper's code "
        "(directions normalised over dim 0, BatchNorm in eval mode)",
        ("filter", "reference"),
    )
    corruptions: tuple[str, ...] = _setting(CORRUPTIONS, "CIFAR-C corruptions (comma-separated)")
    severities: tuple[int, ...] = _setting(SEVERITIES, "CIFAR-C severities (comma-separated)")
    corruption_images: int | None = _setting(None, "clean test images corrupted for generated CIFAR-C (None: all)")
    seed: int = _setting(0, "seed of every random draw of the analyses")

    # What two CPU cores do in a few minutes on a small model (AlterNet on digits: about 5 CPU-minutes, half of it
    # the Hessian); a GPU does the paper's amounts. Lanczos stops once both ends reach the tolerance: 30 steps leave
    # room for the five largest and five most negative eigenvalues of a small model's minibatch.
    CPU_AMOUNTS = dict(
        max_batches=2,
        train_batch_size=32,
        hessian_batches=2,
        lanczos_steps=30,
        hessian_tol=1e-2,
        density_vectors=0,
        landscape_points=9,
        corruption_images=128,
    )  # every severity: the robustness curve is over severities, as the paper's

    # The smallest amounts that still run every analysis's whole path (`alternet-reproduce --quick`, the release's
    # rehearsal): seconds per tiny model.
    QUICK_AMOUNTS = dict(
        max_batches=1,
        train_batch_size=16,
        hessian_batches=1,
        top_k=1,
        bottom_k=1,
        lanczos_steps=4,
        density_vectors=0,
        landscape_points=3,
        corruptions=("gaussian_noise", "fog"),
        severities=(3,),
        corruption_images=32,
    )

    @classmethod
    def for_device(cls, device: torch.device | str, **given) -> tuple["Settings", list[str]]:
        """The settings for `device`: the paper's amounts on a GPU, `CPU_AMOUNTS` on a CPU where not
        `given` (None values count as not given); also the notes saying what was scaled down."""
        given = {key: value for key, value in given.items() if value is not None}
        unknown = set(given) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"unknown settings {sorted(unknown)}")
        cpu, paper = torch.device(device).type == "cpu", cls()
        scaled = {key: value for key, value in cls.CPU_AMOUNTS.items() if cpu and key not in given}
        notes = [f"{k.replace('_', '-')} {_shown(v)} (paper: {_shown(getattr(paper, k))})" for k, v in scaled.items()]
        return cls(**{**scaled, **given}), notes

    def to_dict(self) -> dict:
        return {f.name: _common._plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def check(self) -> None:
        """Raise `ValueError` for amounts that cannot work together (named as fields and as flags)."""
        if self.landscape_points % 2 == 0:
            raise ValueError(
                f"landscape_points (--landscape-points) must be odd: the grid's centre is the trained weights; got "
                f"{self.landscape_points}"
            )
        if self.lanczos_steps < self.top_k + self.bottom_k:
            raise ValueError(
                f"lanczos_steps (--lanczos-steps) {self.lanczos_steps} cannot find top_k (--top-k) {self.top_k} + "
                f"bottom_k (--bottom-k) {self.bottom_k} eigenvalues; raise it or ask for fewer"
            )


def _shown(value) -> str:
    if value is None:
        return "all"
    return ",".join(map(str, value)) if isinstance(value, (tuple, list)) else str(value)


@dataclass
class AccuracyResult(AnalysisResult):
    """Accuracy and mean NLL of the clean test data, from the per-block pass."""

    accuracy: float
    nll: float
    num_samples: int


class AccuracyAccumulator:
    def __init__(self):
        self.correct, self.nll, self.count = 0, 0.0, 0

    def update(self, batch) -> None:
        if batch.targets is None:
            return
        logits, targets = logits_of(batch.logits).double(), batch.targets.to(batch.logits.device)
        self.correct += (logits.argmax(-1) == targets).sum().item()
        self.nll += F.cross_entropy(logits, targets, reduction="sum").item()
        self.count += len(targets)

    def result(self) -> AccuracyResult | None:
        return AccuracyResult(self.correct / self.count, self.nll / self.count, self.count) if self.count else None


# The accumulator of each per-block analysis, fed by one pass (`analysis.blocks.accumulate`).
ACCUMULATORS = {
    "fourier": fourier.FourierAccumulator,
    "variance": variance.VarianceAccumulator,
    "cka": cka.CKAAccumulator,
}
# The result class of each analysis, by the name its JSON is written under (`analysis.runner.read_result`).
RESULT_TYPES = {
    "fourier": fourier.FourierResult,
    "variance": variance.VarianceResult,
    "cka": cka.CKAResult,
    "hessian": hessian.SpectrumResult,
    "landscape": landscape.LandscapeResult,
    "robustness": robustness.CorruptionResult,
    "frequency-noise": robustness.FrequencyNoiseResult,
    "lesion": lesion.LesionResult,
    "accuracy": AccuracyResult,
}


def _ignore(*_) -> None:
    """The callback of `analyse` that is not given."""


def analyse(
    model: nn.Module,
    analyses: Sequence[str] = ANALYSES,
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
    on_partial: Callable[[str, AnalysisResult], None] = _ignore,
    on_start: Callable[[str], None] = _ignore,
    on_result: Callable[[str, AnalysisResult], None] = _ignore,
) -> dict[str, AnalysisResult]:
    """Run `analyses` on `model`; returns {name: result}, plus "accuracy" when a per-block analysis ran.

    `test_data`: clean, normalised test batches (a DataLoader). `train_data()`: a fresh iterable of the
    augmented training batches (the Hessian and landscape each draw theirs from a new one, so they see
    the same batches whatever ran before). `corruption_source`: CIFAR-C (`analysis.robustness`), its uint8
    images resized to `image_size` and normalised with `image_mean` and `image_std`.
    `on_partial(name, result)` receives the Hessian spectrum after each minibatch, `on_result(name,
    result)` each result as soon as it is done (to write it before the next one starts); `on_start(name)`
    is called before each analysis (for time estimates).
    """
    settings = settings or Settings()
    unknown = sorted(set(analyses) - set(ANALYSES))
    if unknown:
        raise ValueError(f"unknown analyses {unknown}; choose from {', '.join(ANALYSES)}")
    if {"hessian", "landscape"} & set(analyses) and train_data is None:
        raise ValueError("the Hessian and landscape analyses need train_data")
    if "robustness" in analyses and corruption_source is None:
        raise ValueError("the robustness analysis needs a corruption_source")
    adapter = describe_blocks(model, adapter)
    common = dict(device=device, progress=progress)
    results: dict[str, AnalysisResult] = {}

    per_block = [name for name in PER_BLOCK if name in analyses]
    if per_block:
        on_start(", ".join(per_block))
        chosen = {name: ACCUMULATORS[name]() for name in per_block} | {"accuracy": AccuracyAccumulator()}
        computed = accumulate(
            model,
            test_data,
            list(chosen.values()),
            adapter=adapter,
            max_batches=settings.max_batches,
            desc="+".join(per_block),
            **common,
        )
        results.update({name: result for name, result in zip(chosen, computed) if result is not None})
        for name in per_block:
            on_result(name, results[name])

    for name in [name for name in analyses if name not in PER_BLOCK]:
        on_start(name)
        if name == "hessian":
            results[name] = hessian.max_eigenvalue_spectrum(
                model,
                train_data(),
                top_k=settings.top_k,
                bottom_k=settings.bottom_k,
                weight_decay=settings.weight_decay,
                penalty=settings.penalty,
                batchnorm=settings.batchnorm or "train",
                tol=settings.hessian_tol,
                lanczos_steps=settings.lanczos_steps,
                max_batches=settings.hessian_batches,
                density_vectors=settings.density_vectors,
                density_steps=settings.density_steps,
                time_limit=settings.hessian_time_limit,
                seed=settings.seed,
                on_batch=lambda partial: on_partial("hessian", partial),
                **common,
            )
        elif name == "landscape":
            results[name] = landscape.loss_landscape(
                model,
                train_data(),
                num_points=settings.landscape_points,
                span=settings.landscape_span,
                weight_decay=settings.weight_decay,
                penalty=settings.penalty,
                protocol=settings.landscape_protocol,
                batchnorm=settings.batchnorm,
                max_batches=settings.landscape_batches,
                seed=settings.seed,
                **common,
            )
        elif name == "robustness":
            results[name] = robustness.evaluate_corruptions(
                model,
                corruption_source,
                corruptions=settings.corruptions,
                severities=settings.severities,
                image_size=image_size,
                image_mean=image_mean,
                image_std=image_std,
                **common,
            )
        elif name == "frequency-noise":
            results[name] = robustness.frequency_noise(
                model, test_data, max_batches=settings.max_batches, seed=settings.seed, **common
            )
        elif name == "lesion":
            results[name] = lesion.lesion_study(
                model, test_data, adapter=adapter, max_batches=settings.max_batches, **common
            )
        on_result(name, results[name])
    return results


# --- one model's figures -------------------------------------------------------------------------------


def figure_of(name: str, result: AnalysisResult):
    """The paper-style figure of one analysis of one model (what `alternet-analyze` saves as PNG)."""
    import matplotlib.pyplot as plt

    if name == "fourier":
        figure, axes = _row(2, 5, 3.5)
        fourier.plot_fourier_curves(result, ax=axes[0])
        fourier.plot_fourier(result, ax=axes[1])
        return figure
    if name == "hessian":
        if result.density is None:
            return hessian.plot_spectrum(result).figure
        figure, axes = _row(2, 5, 3.5)
        hessian.plot_spectrum(result, ax=axes[0])
        hessian.plot_density(hessian.DensityResult(**_arrays(result.density)), ax=axes[1])
        axes[1].set_title("SLQ density (first minibatch)")
        return figure
    if name == "landscape":
        figure = plt.figure(figsize=(10, 4), constrained_layout=True)
        landscape.plot_landscape(result, figure.add_subplot(1, 2, 1), kind="contour")
        landscape.plot_landscape(result, figure.add_subplot(1, 2, 2, projection="3d"), kind="surface")
        return figure
    plots = {
        "variance": variance.plot_variance,
        "robustness": robustness.plot_corruptions,
        "frequency-noise": robustness.plot_frequency_noise,
        "lesion": lesion.plot_lesion,
        "cka": cka.plot_cka,
    }
    return plots[name](result).figure


def _arrays(values: dict) -> dict:
    return {key: np.asarray(value, dtype=float) if isinstance(value, list) else value for key, value in values.items()}


# --- all models in one figure ---------------------------------------------------------------------------

# Every kind visibly coloured on a white page (a white Conv swatch read as a gap).
STRIP_COLOURS = {
    "msa": "0.55",
    "pool": "#6baed6",
    "conv": "#f6dfb2",
    "mlp": "#b8e0b0",
    "stem": "0.88",
    "head": "0.88",
    "input": "0.97",
}
KIND_MARKERS = {"msa": "o", "pool": "v", "conv": "D", "mlp": "s", "stem": "x", "head": "x", "input": "."}


def normalized_depth(count: int) -> np.ndarray:
    """0 … 1 over `count` states, as the reference notebooks plot depth."""
    return np.arange(count) / max(count - 1, 1)


def _colours(names):
    import matplotlib.pyplot as plt

    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return {name: palette[i % len(palette)] for i, name in enumerate(names)}


def _by_depth_figure(
    series: dict[str, tuple[np.ndarray, list[str]]],
    *,
    ylabel: str,
    title: str,
    log: bool = False,
    extra: dict[str, np.ndarray] | None = None,
    extra_label: str = "",
):
    """One axis with every model's curve over normalised depth (markers by block kind), and below it one
    strip per model showing where its MSA and downsampling blocks are."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    names = list(series)
    colours = _colours(names)
    figure = plt.figure(figsize=(7.5, 3.6 + 0.32 * len(names)), constrained_layout=True)
    grid = figure.add_gridspec(1 + len(names), 1, height_ratios=[8] + [1] * len(names))
    ax = figure.add_subplot(grid[0])
    for name in names:
        values, kinds = series[name]
        depth = normalized_depth(len(kinds))
        ax.plot(depth, values, color=colours[name], linewidth=1.2, label=name)
        for kind in dict.fromkeys(kinds):  # one drawing order, so one figure, whatever the hash seed
            chosen = [i for i, k in enumerate(kinds) if k == kind]
            filled = kind in ("msa", "pool")
            ax.scatter(
                depth[chosen],
                np.asarray(values)[chosen],
                marker=KIND_MARKERS.get(kind, "."),
                s=22 if filled else 12,
                color=colours[name],
                facecolors=colours[name] if filled else "none",
                zorder=3,
            )
        if extra and name in extra:
            ax.plot(depth, extra[name], color=colours[name], linewidth=0.8, linestyle="--")
    if log:
        ax.set_yscale("log")
    ax.set(ylabel=ylabel, title=title, xlim=(-0.02, 1.02))
    ax.tick_params(labelbottom=False)
    kinds_present = sorted({k for _, kinds in series.values() for k in kinds} & {"msa", "pool", "conv", "mlp"})
    handles = [Line2D([], [], color=colours[n], label=n) for n in names]
    handles += [Line2D([], [], linestyle="", marker=KIND_MARKERS[k], color="0.3", label=k) for k in kinds_present]
    if extra:
        handles.append(Line2D([], [], color="0.3", linestyle="--", label=extra_label))
    # the strips' colours too: one legend, off the data
    swatches = (("msa", "MSA"), ("pool", "downsampling"), ("mlp", "MLP"), ("conv", "Conv"))
    handles += [Patch(facecolor=STRIP_COLOURS[k], edgecolor="0.5", label=f"strip: {label}") for k, label in swatches]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    for row, name in enumerate(names, start=1):
        strip = figure.add_subplot(grid[row], sharex=ax)
        kinds = series[name][1]
        depth = normalized_depth(len(kinds))
        half = 0.5 / max(len(kinds) - 1, 1)
        for position, kind in zip(depth, kinds):
            strip.axvspan(position - half, position + half, color=STRIP_COLOURS.get(kind, "white"), linewidth=0)
        strip.set_yticks([])
        strip.set_ylabel(name, rotation=0, ha="right", va="center", fontsize=7)
        strip.tick_params(labelbottom=row == len(names), labelsize=7)
    strip.set_xlabel("normalised depth (0 = input)")
    return figure


def comparison_figures(results: dict[str, dict[str, AnalysisResult]]) -> dict[str, object]:
    """The paper's figures with every model in one plot, {file stem: matplotlib figure}, for the
    analyses present in `results` ({model: {analysis: result}})."""

    def having(analysis):
        return {name: found[analysis] for name, found in results.items() if analysis in found}

    figures = {}
    if found := having("fourier"):
        figures["fourier_by_depth"] = _by_depth_figure(
            {name: (r.high_frequency, r.kinds) for name, r in found.items()},
            ylabel="ΔlogA at π",
            title="High-frequency ΔlogA by depth (Fig. 2c / 8)",
        )
        figures["fourier_spectra"] = _panels(found, fourier.plot_fourier_curves, "ΔlogA spectra (Fig. 2a)", (3.6, 3.2))
    if found := having("variance"):
        figures["variance_by_depth"] = _by_depth_figure(
            {name: (r.variance, r.kinds) for name, r in found.items()},
            ylabel="feature-map variance",
            title="Feature-map variance by depth (Fig. 9)",
            log=True,
            extra={n: r.reference_variance for n, r in found.items() if r.reference_variance is not None},
            extra_label="reference notebook's definition",
        )
    if found := having("hessian"):
        figures["hessian_spectra"] = _hessian_figure(found)
    if found := having("landscape"):
        figures["landscape"] = _landscape_figure(found)
    if found := having("frequency-noise"):
        figures["frequency_noise"] = robustness.plot_frequency_noise(found).figure
    if found := having("lesion"):
        drops = {n: (np.concatenate([[np.nan], 100 * r.accuracy_drop]), ["input", *r.kinds]) for n, r in found.items()}
        figures["lesion"] = _by_depth_figure(
            drops, ylabel="accuracy drop (points)", title="Lesion study: accuracy lost without each block (Fig. 11)"
        )
    if found := having("robustness"):
        ax = _common.new_axes(None, figsize=(6, 3.5))
        for name, result in found.items():
            ax.plot(result.severities, 100 * np.asarray(result.accuracy).mean(axis=0), marker="o", label=name)
        counts = {(len(r.corruptions), len(r.severities)) for r in found.values()}
        shown = ", ".join(f"{c} corruptions × {s} severit{'y' if s == 1 else 'ies'}" for c, s in sorted(counts))
        sources = sorted({r.source for r in found.values() if r.source})
        ax.set(xlabel="severity", ylabel="mean accuracy over corruptions (%)")
        ax.set_title(f"Corruption robustness: {', '.join(sources) or 'CIFAR-C'}\n({shown})", fontsize=9)
        ax.set_xticks(sorted({s for r in found.values() for s in r.severities}))
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        figures["robustness"] = ax.figure
    if found := having("cka"):
        figures["cka"] = _panels(found, cka.plot_cka, "CKA", (4.2, 3.6))
    return figures


def _row(count: int, width: float, height: float):
    """A figure of `count` axes side by side, each `width` × `height` inches, and its axes."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, count, figsize=(width * count, height), squeeze=False, constrained_layout=True)
    return figure, axes[0]


def _panels(found: dict, plot, title: str, size: tuple[float, float]):
    """One panel per model, side by side, each drawn by `plot(result, ax=...)` and titled `<model>: title`."""
    figure, axes = _row(len(found), *size)
    for ax, (name, result) in zip(axes, found.items()):
        plot(result, ax=ax)
        ax.set_title(f"{name}: {title}", fontsize=9)
    return figure


def _hessian_figure(found: dict):
    densities = {name: r.density for name, r in found.items() if r.density is not None}
    figure, axes = _row(1 + bool(densities), 5.5, 3.6)
    colours = _colours(list(found))
    both = {n: np.concatenate([np.ravel(r.eigenvalues), np.ravel(r.smallest_eigenvalues)]) for n, r in found.items()}
    values = np.concatenate(list(both.values()))
    values = values[np.isfinite(values)]
    edges = np.linspace(values.min(), values.max(), 41) if values.size and values.min() < values.max() else 41
    ax = axes[0]
    if values.size and values.min() < 0:  # the negative side, where the loss is not locally convex
        ax.axvspan(values.min(), 0.0, color="#fde0dd", linewidth=0, zorder=0, label="negative eigenvalues")
    for name, result in found.items():
        counts, bins = np.histogram(both[name][np.isfinite(both[name])], bins=edges)
        spectrum = dataclasses.replace(result, counts=counts, bin_edges=bins)
        hessian.plot_spectrum(spectrum, ax=ax, label=name, color=colours[name], fill=False)  # outlines: none hidden
    both_ends = any(np.size(r.smallest_eigenvalues) for r in found.values())
    ends = "top-k and bottom-k" if both_ends else "top-k"
    ax.set_title(f"Hessian eigenvalue spectra, {ends} per minibatch (Fig. 1b / 4)", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    if densities:
        ax = axes[1]
        for name, density in densities.items():
            hessian.plot_density(hessian.DensityResult(**_arrays(density)), ax=ax, label=name, color=colours[name])
        ax.axvline(0.0, color="0.5", linewidth=0.8, linestyle="--")
        ax.set_title("SLQ spectral density")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return figure


def _landscape_figure(found: dict):
    """The loss along each direction through the trained weights (rise from the centre), every model on
    one axis, and each model's contour map."""
    figure, axes = _row(1 + len(found), 4.2, 3.8)
    colours = _colours(list(found))
    ax = axes[0]
    for name, result in found.items():
        loss = np.asarray(result.loss)
        centre = len(result.coordinates) // 2
        slices = [loss] if loss.ndim == 1 else [loss[:, centre], loss[centre, :]]
        for direction, values in enumerate(slices):
            ax.plot(
                result.coordinates,
                values - loss[(centre,) * loss.ndim],
                color=colours[name],
                linestyle="-" if direction == 0 else ":",
                label=name if direction == 0 else None,
            )
    protocols = sorted({r.protocol for r in found.values()})
    ax.set(
        xlabel="step along direction 1 (solid) / 2 (dotted)",
        ylabel="loss − loss at the trained weights",
        title=f"Loss-landscape slices ({', '.join(protocols)} protocol)",
    )
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    # One colour scale for every model's map (each on its own linear levels made the flattest look the sharpest),
    # logarithmic where the losses span decades (the reference protocol's edges reach thousands).
    from matplotlib import cm, colors

    maps = [np.asarray(r.loss) for r in found.values() if np.asarray(r.loss).ndim == 2 and np.asarray(r.loss).size > 1]
    low, high = (min(m.min() for m in maps), max(m.max() for m in maps)) if maps else (0.0, 0.0)
    shared = bool(maps) and low < high
    logarithmic = shared and low > 0 and high / low > 10
    levels = np.geomspace(low, high, 16) if logarithmic else np.linspace(low, high, 16) if shared else 15
    norm = colors.LogNorm(low, high) if logarithmic else colors.Normalize(low, high) if shared else None
    for ax, (name, result) in zip(axes[1:], found.items()):
        if shared and np.asarray(result.loss).ndim == 2 and np.asarray(result.loss).size > 1:
            landscape.plot_landscape(result, ax=ax, kind="filled", levels=levels, norm=norm)
        else:
            landscape.plot_landscape(result, ax=ax)
        ax.set_title(f"{name}: NLL + L2", fontsize=9)
    if shared:
        label = f"loss (NLL + L2), one {'log ' if logarithmic else ''}scale for all models"
        figure.colorbar(cm.ScalarMappable(norm=norm, cmap="viridis"), ax=list(axes[1:]), label=label, shrink=0.9)
    return figure


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


def finite(value):
    """JSON has no NaN or infinity: write null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list):
        return [finite(v) for v in value]
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    return value


# --- how long it will take --------------------------------------------------------------------------------


def _seconds(function, repeats: int = 1) -> float:
    function()  # warm-up: first calls allocate
    started = time.perf_counter()
    for _ in range(repeats):
        function()
    return (time.perf_counter() - started) / repeats


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
    device = _common.resolve_device(model, device)
    costs = {}
    with _common.analysis_mode(model, device=device), torch.no_grad():
        inputs = test_batch[0].to(device)
        costs["test_forward"] = _forward_seconds(model, inputs)
        costs["test_batch_size"] = len(inputs)
        if train_batch is not None:
            costs["train_forward"] = _forward_seconds(model, train_batch[0].to(device))
    if hessian is not None and train_batch is not None:
        batch = [(train_batch[0].to(device), train_batch[1].to(device))]
        with _common.analysis_mode(model, batchnorm=hessian.batchnorm or "train", device=device):
            operator = HessianOperator(model, batch, weight_decay=hessian.weight_decay, penalty=hessian.penalty)
            vector = operator.random_vector(torch.Generator(device=device).manual_seed(0))
            costs["hvp"] = _seconds(lambda: operator(vector))
    return costs


def estimate_seconds(
    analyses: Sequence[str],
    costs: dict[str, float],
    settings: Settings,
    *,
    test_batches: int,
    num_branches: int,
    corruption_images: int | None = None,
) -> dict[str, tuple[float, str]]:
    """{analysis: (seconds, how that was reckoned)} from measured `costs`; per-block analyses share
    one entry (they share one pass). Upper bounds for the Hessian (every Lanczos step taken)."""
    test = costs["test_forward"]
    estimates = {}

    def passes(count: int) -> tuple[float, str]:
        return count * test * test_batches, f"{count} passes over {test_batches} test batches"

    per_block = [name for name in PER_BLOCK if name in analyses]
    if per_block:
        estimates[", ".join(per_block)] = (1.3 * test * test_batches, f"one pass over {test_batches} test batches")
    if "hessian" in analyses and "hvp" in costs:
        products = settings.hessian_batches * settings.lanczos_steps + settings.density_vectors * settings.density_steps
        hvp, batches, vectors = costs["hvp"], settings.hessian_batches, settings.density_vectors
        density = f" + {vectors}×{settings.density_steps} for the density" if vectors else ""
        steps = f"at most {batches} minibatch{'es' * (batches != 1)} × {settings.lanczos_steps} Lanczos steps{density}"
        estimates["hessian"] = (products * hvp, f"{steps}, about {hvp:.2g} s per Hessian-vector product")
    if "landscape" in analyses and "train_forward" in costs:
        points = settings.landscape_points**2
        estimates["landscape"] = (
            points * settings.landscape_batches * costs["train_forward"],
            f"{points} grid points × {settings.landscape_batches} minibatch",
        )
    if "robustness" in analyses:
        sets = len(settings.corruptions) * len(settings.severities)
        images = corruption_images or test_batches * costs["test_batch_size"]
        estimates["robustness"] = (
            2.0 * sets * images / costs["test_batch_size"] * test,  # generation costs about a forward pass
            f"{sets} corruption sets × {images} images",
        )
    if "frequency-noise" in analyses:
        estimates["frequency-noise"] = passes(10)
    if "lesion" in analyses:
        estimates["lesion"] = passes(1 + num_branches)
    return estimates
