"""The paper's analyses in one table, an `Analysis` entry each (CONTRIBUTING.md, "Adding an analysis"), and the
settings that say how much of each to run, each a flag of `alternet-analyze`, `-compare` and `-reproduce`. Only the
standard library is imported here, so that the commands build their flags from this table before torch is imported.
"""

import dataclasses
import importlib
from dataclasses import dataclass, field

from alternet_hf.data.cifar_c import CORRUPTIONS, SEVERITIES

PAPER_AMOUNT = object()  # a `Setting`'s CPU or quick amount that is the paper's own


@dataclass(frozen=True)
class Setting:
    """An amount or choice of the analyses: its type and default (the paper's), what its flag says, and the amounts
    of a CPU (`Settings.for_device`) and of the smallest run that still takes every path (`alternet-reproduce
    --quick`, the release's rehearsal)."""

    kind: object
    default: object
    help: str
    cpu: object = PAPER_AMOUNT
    quick: object = PAPER_AMOUNT
    choices: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Analysis:
    """One analysis as the commands run it: CONTRIBUTING.md ("Adding an analysis") says what each field names, on the
    lesion study's entry. The names are of objects in `analysis.<module>` (the analysis's own name unless `module`
    says otherwise); `run`'s `inputs` is an `analysis.inputs.Inputs`, and only the Hessian sends `on_partial` a
    partial result; `estimate` returns None where the costs (`runner.measure_costs`) lack what it needs, the
    per-block analyses sharing the pass's estimate instead."""

    name: str
    result: str
    run: str
    module: str | None = None
    plot: str | None = None
    summary: str | None = None
    estimate: str | None = None
    comparisons: tuple[tuple[str, str, str], ...] = ()
    settings: dict[str, Setting] = field(default_factory=dict)
    per_block: bool = False
    training_batches: str | None = None
    corruptions: bool = False
    # False: run only when asked for by name (the probe, the Hessian's trace, density and per-block curvature).
    paper: bool = True
    # False: an analysis of its own fixed images (the probe); it reads no dataset.
    dataset: bool = True

    def load(self, name: str):
        """The object called `name` in the analysis's module (`module`, else its own name): `entry.load(entry.run)`."""
        return getattr(importlib.import_module(f"analysis.{self.module or self.name}"), name)


# Settings that several analyses read.
SHARED = dict(
    max_batches=Setting(
        int | None, None, "test batches of the per-block, noise and lesion analyses (None: all)", cpu=2, quick=1
    ),
    train_batch_size=Setting(int, 96, "minibatch of the Hessian and the landscape", cpu=32, quick=16),
    weight_decay=Setting(float, 0.05, "L2 coefficient of the Hessian and landscape loss"),
    penalty=Setting(
        str,
        "reference",
        "the L2 term of Hessian and landscape: the reference's wd·Σ‖p‖, or ½·wd·‖w‖²",
        choices=("reference", "squared"),
    ),
    batchnorm=Setting(
        str | None,
        None,
        "BatchNorm mode of the Hessian (None: train) and the landscape (None: its protocol's)",
        choices=("train", "eval"),
    ),
    seed=Setting(int, 0, "seed of every random draw of the analyses"),
)

_ANALYSES = (
    Analysis(
        "fourier",
        "FourierResult",
        "FourierAccumulator",
        plot="fourier_figure",
        summary="fourier_summary",
        comparisons=(
            (
                "fourier_by_depth",
                "fourier_by_depth",
                "ΔlogA at π by normalised depth; filled circles are MSA blocks, triangles downsampling blocks. The "
                "strips below mark each model's MSA (grey) and downsampling (blue) blocks.",
            ),
            (
                "fourier_spectra",
                "fourier_spectra",
                "ΔlogA over frequency of every state, shallow (dark) to deep (bright).",
            ),
        ),
        per_block=True,
    ),
    Analysis(
        "variance",
        "VarianceResult",
        "VarianceAccumulator",
        plot="plot_variance",
        summary="variance_summary",
        comparisons=(
            (
                "variance_by_depth",
                "variance_by_depth",
                "Feature-map variance by normalised depth (log scale); dashed: the reference notebook's definition "
                "on the same maps.",
            ),
        ),
        per_block=True,
    ),
    Analysis(
        "hessian",
        "SpectrumResult",
        "spectrum_analysis",
        plot="spectrum_figure",
        summary="spectrum_summary",
        estimate="spectrum_estimate",
        comparisons=(
            (
                "hessian_spectra",
                "spectra_comparison",
                "Top-k and bottom-k Hessian eigenvalues of every minibatch, pooled (and the SLQ density).",
            ),
        ),
        settings=dict(
            hessian_batches=Setting(int, 10, "minibatches of the Hessian max-eigenvalue spectrum", cpu=2, quick=1),
            top_k=Setting(int, 5, "largest Hessian eigenvalues per minibatch", quick=1),
            bottom_k=Setting(int, 5, "most negative Hessian eigenvalues per minibatch (0: the largest only)", quick=1),
            lanczos_steps=Setting(int, 100, "Lanczos steps per minibatch at most", cpu=30, quick=4),
            hessian_tol=Setting(float, 1e-3, "relative residual bound at which Lanczos stops", cpu=1e-2),
            hessian_time_limit=Setting(
                float | None, None, "seconds; the spectrum stops there, keeping finished minibatches"
            ),
            density_vectors=Setting(int, 4, "SLQ vectors of the Hessian density (0: none)", cpu=0, quick=0),
            density_steps=Setting(int, 64, "Lanczos steps per SLQ vector"),
        ),
        training_batches="hessian_batches",
    ),
    Analysis(
        "landscape",
        "LandscapeResult",
        "landscape_analysis",
        plot="landscape_figure",
        summary="landscape_summary",
        estimate="landscape_estimate",
        comparisons=(
            (
                "landscape",
                "landscape_comparison",
                "NLL + L2 along the two directions through the trained weights, and each model's contour map.",
            ),
        ),
        settings=dict(
            landscape_points=Setting(
                int, 21, "landscape grid points per direction (odd: the centre is the trained weights)", cpu=9, quick=3
            ),
            landscape_batches=Setting(int, 1, "training minibatches per landscape grid point"),
            landscape_span=Setting(float, 1.0, "the landscape grid spans ±span along each direction"),
            landscape_protocol=Setting(
                str,
                "filter",
                "'filter': per-filter normalised directions, BatchNorm in train mode; 'reference': the paper's code "
                "(directions normalised over dim 0, BatchNorm in eval mode)",
                choices=("filter", "reference"),
            ),
        ),
        training_batches="landscape_batches",
    ),
    Analysis(
        "robustness",
        "CorruptionResult",
        "corruption_analysis",
        plot="plot_corruptions",
        summary="corruption_summary",
        estimate="corruption_estimate",
        comparisons=(("robustness", "corruption_comparison", "Mean accuracy over the corruptions by severity."),),
        settings=dict(
            corruptions=Setting(
                tuple[str, ...], CORRUPTIONS, "CIFAR-C corruptions (comma-separated)", quick=("gaussian_noise", "fog")
            ),
            # every severity on a CPU too: the robustness curve is over severities, as the paper's
            severities=Setting(tuple[int, ...], SEVERITIES, "CIFAR-C severities (comma-separated)", quick=(3,)),
            corruption_images=Setting(
                int | None, None, "clean test images corrupted for generated CIFAR-C (None: all)", cpu=128, quick=32
            ),
        ),
        corruptions=True,
    ),
    Analysis(
        "frequency-noise",
        "FrequencyNoiseResult",
        "frequency_noise_analysis",
        module="robustness",
        plot="plot_frequency_noise",
        summary="frequency_noise_summary",
        estimate="frequency_noise_estimate",
        comparisons=(
            (
                "frequency_noise",
                "plot_frequency_noise",
                "Accuracy change under noise restricted to one frequency band.",
            ),
        ),
    ),
    Analysis(
        "lesion",
        "LesionResult",
        "lesion_analysis",
        plot="plot_lesion",
        summary="lesion_summary",
        estimate="lesion_estimate",
        comparisons=(
            (
                "lesion",
                "lesion_comparison",
                "Accuracy lost when one block's residual branch is removed, at the depth of the block's output.",
            ),
        ),
    ),
    Analysis(
        "cka",
        "CKAResult",
        "CKAAccumulator",
        plot="plot_cka",
        summary="cka_summary",
        comparisons=(("cka", "cka_comparison", "Minibatch CKA between the blocks of each model."),),
        per_block=True,
    ),
    Analysis(
        "probe",
        "ProbeResult",
        "probe_analysis",
        plot="plot_probe",
        summary="probe_summary",
        estimate="probe_estimate",
        comparisons=(
            (
                "probe",
                "plot_probe",
                "The Space's Any model tab: ΔlogA at π and feature-map variance by normalised depth, and the share of "
                "top-1 predictions kept under band-limited noise, on the same fixed photographs for every model.",
            ),
        ),
        paper=False,
        dataset=False,
    ),
    Analysis(
        "hessian-trace",
        "TracesResult",
        "trace_analysis",
        module="hessian",
        plot="trace_figure",
        summary="trace_summary",
        estimate="trace_estimate",
        comparisons=(
            (
                "hessian_trace",
                "traces_comparison",
                "The Hessian trace (the sum of every eigenvalue: the average curvature) of each training minibatch "
                "with its 95% interval; a smaller trace is a flatter minimum, the paper's claim for models with MSAs.",
            ),
        ),
        settings=dict(
            trace_rtol=Setting(float, 1e-2, "the trace stops at this 95% half-width relative to itself", quick=0.2),
            trace_max_samples=Setting(int, 1000, "Hutchinson samples of the trace at most", cpu=300, quick=10),
            deflation_steps=Setting(
                int, 30, "Lanczos steps at most whose Krylov space the trace takes exactly", quick=3
            ),
        ),
        training_batches="hessian_batches",
        paper=False,
    ),
    Analysis(
        "hessian-density",
        "DensityResult",
        "density_analysis",
        module="hessian",
        plot="density_figure",
        summary="density_summary",
        estimate="density_estimate",
        comparisons=(
            (
                "hessian_density",
                "densities_comparison",
                "The Hessian's eigenvalue density (stochastic Lanczos quadrature, first training minibatch): mass "
                "below zero is negative curvature, the paper's non-convex ViT loss.",
            ),
        ),
        settings=dict(
            slq_vectors=Setting(int, 8, "start vectors of the hessian-density analysis", cpu=4, quick=2),
            slq_steps=Setting(int, 64, "Lanczos steps per start vector of the hessian-density analysis", quick=4),
        ),
        training_batches="hessian_batches",
        paper=False,
    ),
    Analysis(
        "hessian-blocks",
        "BlockCurvatureResult",
        "curvature_analysis",
        module="curvature",
        plot="curvature_figure",
        summary="curvature_summary",
        estimate="curvature_estimate",
        comparisons=(
            (
                "hessian_blocks",
                "curvature_by_depth",
                "The top eigenvalue of each block's own Hessian (its parameters alone) by normalised depth, filled "
                "circles MSA blocks: where each model's sharpness sits, the paper's flatter MSAs block by block.",
            ),
            (
                "hessian_block_traces",
                "block_traces_by_depth",
                "The trace of each block's own Hessian by normalised depth: its share of the whole model's curvature.",
            ),
        ),
        training_batches="hessian_batches",
        paper=False,
    ),
)
# The analyses a user asks for, by name, in the paper's order; `PAPER_ANALYSES` runs when none is named.
ANALYSES: dict[str, Analysis] = {analysis.name: analysis for analysis in _ANALYSES}
PAPER_ANALYSES: tuple[str, ...] = tuple(name for name, analysis in ANALYSES.items() if analysis.paper)
# Every result the per-block pass and the analyses write (`runner.read_result`): the clean accuracy too, computed
# whenever the per-block pass runs and never asked for by name.
RESULTS = ANALYSES | {"accuracy": Analysis("accuracy", "AccuracyResult", "AccuracyAccumulator", "blocks")}

# How the Hessian and landscape batches are augmented (`--augmentation`), or the path of a training_config.json.
AUGMENTATIONS = ("model", "paper", "none")


def _setting_specs() -> dict[str, Setting]:
    specs = dict(SHARED)
    for analysis in ANALYSES.values():
        clashing = set(specs) & set(analysis.settings)
        if clashing:
            raise ValueError(f"the settings {sorted(clashing)} of {analysis.name} are declared twice")
        specs |= analysis.settings
    return specs


SETTINGS = _setting_specs()


class _SettingsMethods:
    CPU_AMOUNTS = {name: s.cpu for name, s in SETTINGS.items() if s.cpu is not PAPER_AMOUNT}
    QUICK_AMOUNTS = {name: s.quick for name, s in SETTINGS.items() if s.quick is not PAPER_AMOUNT}

    @classmethod
    def for_device(cls, device, **given) -> tuple["Settings", list[str]]:
        """The settings for `device` (a torch device or its name): the paper's amounts on a GPU, `CPU_AMOUNTS` on a
        CPU where not `given` (None values count as not given); also the notes saying what was scaled down."""
        given = {key: value for key, value in given.items() if value is not None}
        unknown = set(given) - set(SETTINGS)
        if unknown:
            raise ValueError(f"unknown settings {sorted(unknown)}")
        cpu = (getattr(device, "type", None) or str(device).split(":")[0]) == "cpu"
        scaled = {key: value for key, value in cls.CPU_AMOUNTS.items() if cpu and key not in given}
        notes = [f"{k.replace('_', '-')} {shown(v)} (paper: {shown(SETTINGS[k].default)})" for k, v in scaled.items()]
        return cls(**{**scaled, **given}), notes

    def to_dict(self) -> dict:
        return {name: list(v) if isinstance(v := getattr(self, name), tuple) else v for name in SETTINGS}

    def check(self, analyses=None) -> None:
        """Raise `ValueError` for amounts that cannot work together (named as fields and as flags), of `analyses`
        (names) where given, else of every analysis."""
        if self.landscape_points % 2 == 0:
            raise ValueError(
                f"landscape_points (--landscape-points) must be odd: the grid's centre is the trained weights; got "
                f"{self.landscape_points}"
            )
        if not 0 < self.trace_rtol < 1:  # a negative or zero stop is never reached: every sample would be drawn
            raise ValueError(f"trace_rtol (--trace-rtol) must lie between 0 and 1, got {self.trace_rtol}")
        if self.trace_max_samples < 2 or self.deflation_steps < 1:
            raise ValueError(
                f"the trace needs trace_max_samples (--trace-max-samples) >= 2 for an interval and deflation_steps "
                f"(--deflation-steps) >= 1; got {self.trace_max_samples} and {self.deflation_steps}"
            )
        spectrum = analyses is None or "hessian" in analyses  # the one analysis that asks for top_k + bottom_k
        if spectrum and self.lanczos_steps < self.top_k + self.bottom_k:
            raise ValueError(
                f"lanczos_steps (--lanczos-steps) {self.lanczos_steps} cannot find top_k (--top-k) {self.top_k} + "
                f"bottom_k (--bottom-k) {self.bottom_k} eigenvalues; raise it or ask for fewer"
            )


Settings = dataclasses.make_dataclass(
    "Settings",
    [
        (name, spec.kind, field(default=spec.default, metadata={"help": spec.help, "choices": spec.choices}))
        for name, spec in SETTINGS.items()
    ],
    bases=(_SettingsMethods,),
)
Settings.__module__, Settings.__doc__ = (
    __name__,
    """How much of each analysis to run, one field per `Setting` of the table (the shared ones, then
each analysis's); the defaults are the paper's amounts, for a GPU. Each field is a flag of `alternet-analyze`,
`-compare` and `-reproduce` under its own name (`lanczos_steps`: `--lanczos-steps`) with its `help`; `CPU_AMOUNTS`
are a CPU's defaults, `QUICK_AMOUNTS` the smallest that run every analysis's whole path.""",
)


def shown(value) -> str:
    """A setting's value as its flag takes it (None: all)."""
    if value is None:
        return "all"
    return ",".join(map(str, value)) if isinstance(value, (tuple, list)) else str(value)
