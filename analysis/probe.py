"""The paper's three views of any image classifier on a few fixed photographs, with no labels: ΔlogA at π by depth
(Fig. 2), feature-map variance by depth (Fig. 9) and robustness to band-limited noise (Fig. 2(b)), the last read as
the share of images whose top-1 prediction survives the noise rather than as accuracy.

It is what the Space's *Any model* tab shows for a model named by a visitor, and what `alternet-analyze --analyses
probe` writes for any model: the photos are scikit-image's (`probe_photos`), the same for every model, each prepared
at the model's own input size and normalisation. Where `analysis.robustness.frequency_noise` counts correct labels,
this counts kept predictions, so that a model of any label set (ImageNet's, CIFAR's, a fine-tune's) is measured on
the same images; the noise is the same band-limited noise, added after normalisation.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from . import shared
from .blocks import BlockAdapter, accumulate
from .fourier import FourierAccumulator
from .robustness import band_pass_noise
from .shared import AnalysisResult, analysis_mode, logits_of
from .variance import VarianceAccumulator

# scikit-image's photographs (shipped with it: no download), colour and grey: people, an animal, objects, the sky.
PHOTOS = ("astronaut", "camera", "chelsea", "coffee", "coins", "hubble_deep_field", "moon", "rocket")
NOISE_FREQUENCIES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
# The probe's own amounts: noise draws per image, the noise's amplitude and band width (robustness.frequency_noise's),
# and the seed of the draws. The Space keys its cached answers by them.
SETTINGS = dict(draws=2, eps=0.7, bandwidth=0.2, seed=0)


@dataclass
class ProbeResult(AnalysisResult):
    """State i is the input (i = 0) or the output of block i-1, of kind `kinds[i]`, at normalised depth `depth[i]`
    (0 the input, 1 the last block): `delta_log_amplitude[i]` its ΔlogA at π, `variance[i]` its feature-map variance
    (NaN where a state has no spatial map). `prediction_kept[k]`: the share of (image, noise draw) pairs whose top-1
    class under noise at `noise_frequencies[k]` (units of π) is the clean one; `probability_drop[k]`: the mean fall of
    the clean class's probability."""

    kinds: list[str]
    depth: np.ndarray
    delta_log_amplitude: np.ndarray
    variance: np.ndarray
    noise_frequencies: np.ndarray
    prediction_kept: np.ndarray
    probability_drop: np.ndarray
    num_images: int
    noise_draws: int
    eps: float
    bandwidth: float

    @classmethod
    def from_dict(cls, values: dict) -> "ProbeResult":
        """The result from its `to_dict()` (or a JSON answer holding those fields), nulls read as NaN."""
        arrays = (
            "depth",
            "delta_log_amplitude",
            "variance",
            "noise_frequencies",
            "prediction_kept",
            "probability_drop",
        )
        fields = {name: values[name] for name in cls.__dataclass_fields__}
        for name in arrays:
            fields[name] = np.array([np.nan if v is None else v for v in fields[name]], dtype=float)
        return cls(**fields)


def probe_photos(names: Sequence[str] = PHOTOS) -> list:
    """The probe's photographs as RGB PIL images, from scikit-image (which ships them)."""
    try:
        from skimage import data
    except ImportError:
        raise ImportError(
            "the probe reads scikit-image's photographs: pip install scikit-image (or alternet-hf[space])"
        ) from None
    from PIL import Image

    return [Image.fromarray(getattr(data, name)()).convert("RGB") for name in names]


def photo_inputs(image_size: int, mean, std, photos: list | None = None) -> torch.Tensor:
    """The probe's photos as a model takes them: resized to its input size and normalised, (N, 3, S, S)."""
    from alternet_hf.data.augmentation import eval_transform

    transform = eval_transform(image_size, mean, std)
    return torch.stack([transform(photo) for photo in (probe_photos() if photos is None else photos)])


def prediction_kept(
    model: nn.Module,
    inputs: torch.Tensor,
    *,
    frequencies: Sequence[float] = NOISE_FREQUENCIES,
    draws: int = SETTINGS["draws"],
    eps: float = SETTINGS["eps"],
    bandwidth: float = SETTINGS["bandwidth"],
    seed: int = SETTINGS["seed"],
    step: Callable[[], None] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(share of predictions kept, mean drop of the clean class's probability) per band, over `draws` noise draws of
    every image of the normalised `inputs`; each band's noise is drawn with the same generator state, so bands differ
    only in where its energy lies. `step` is called after each band."""
    device = inputs.device
    clean = logits_of(model(inputs)).float().softmax(-1)
    classes = clean.argmax(-1)
    repeated = inputs.repeat(draws, 1, 1, 1)  # (draws·N, 3, H, W): draw d of image i at row d·N + i
    repeated_classes = classes.repeat(draws)
    clean_probability = clean.gather(1, classes[:, None])[:, 0].repeat(draws)
    kept, drops = [], []
    for frequency in frequencies:
        generator = torch.Generator(device=device).manual_seed(seed)
        noise = band_pass_noise(
            repeated.shape, float(frequency), bandwidth=bandwidth, eps=eps, generator=generator, device=device
        )
        noisy = logits_of(model(repeated + noise)).float().softmax(-1)
        kept.append((noisy.argmax(-1) == repeated_classes).float().mean().item())
        drops.append((clean_probability - noisy.gather(1, repeated_classes[:, None])[:, 0]).mean().item())
        if step is not None:
            step()
    return np.array(kept), np.array(drops)


def probe(
    model: nn.Module,
    inputs: torch.Tensor,
    *,
    frequencies: Sequence[float] = NOISE_FREQUENCIES,
    draws: int = SETTINGS["draws"],
    eps: float = SETTINGS["eps"],
    bandwidth: float = SETTINGS["bandwidth"],
    seed: int = SETTINGS["seed"],
    adapter: BlockAdapter | None = None,
    device: str | torch.device | None = None,
    step: Callable[[], None] | None = None,
) -> ProbeResult:
    """The probe of `model` on normalised `inputs` (N, 3, H, W): one pass block by block for ΔlogA and variance, then
    the noise bands (`prediction_kept`); `step` is called between the parts (e.g. to stop at a time limit)."""
    fourier, variance = accumulate(
        model, inputs, [FourierAccumulator(), VarianceAccumulator()], adapter=adapter, device=device
    )
    if step is not None:
        step()
    with analysis_mode(model, device=device) as device, torch.no_grad():
        kept, drop = prediction_kept(
            model,
            inputs.to(device),
            frequencies=frequencies,
            draws=draws,
            eps=eps,
            bandwidth=bandwidth,
            seed=seed,
            step=step,
        )
    states = len(fourier.kinds)
    return ProbeResult(
        kinds=list(fourier.kinds),
        depth=np.linspace(0.0, 1.0, states),
        delta_log_amplitude=fourier.high_frequency,
        variance=variance.variance,
        noise_frequencies=np.asarray(frequencies, dtype=float),
        prediction_kept=kept,
        probability_drop=drop,
        num_images=len(inputs),
        noise_draws=draws,
        eps=eps,
        bandwidth=bandwidth,
    )


def _style(name: str, colour, highlight: str | None) -> dict:
    """The `highlight`ed model (the one a visitor asked about) drawn boldest, the others lighter; all alike without."""
    bold = highlight is None or name == highlight
    return dict(
        color=colour,
        marker="o",
        markersize=3.5 if bold else 2,
        linewidth=(2.2 if highlight else 1.5) if bold else 1.1,
        alpha=1.0 if bold else 0.8,
        zorder=3 if bold else 2,
    )


def _shade_msa(ax, result: ProbeResult) -> None:
    """MSA blocks shaded at their normalised depth (each state spans half a step either side)."""
    half = 0.5 / max(len(result.depth) - 1, 1)
    for depth, kind in zip(result.depth, result.kinds):
        if kind == "msa":
            ax.axvspan(depth - half, depth + half, color="0.88", linewidth=0, zorder=0)


def plot_probe_by_depth(
    found: dict[str, ProbeResult], ax, *, field: str = "delta_log_amplitude", highlight: str | None = None
):
    """ΔlogA at π (or `field="variance"`, on a log scale) by normalised depth, one line per model (`highlight`
    boldest), the MSA blocks of the highlighted model (else the first) shaded."""
    colours = shared.model_colours(list(found))
    _shade_msa(ax, found.get(highlight) or next(iter(found.values())))
    for name, result in found.items():
        ax.plot(result.depth, getattr(result, field), label=name, **_style(name, colours[name], highlight))
    if field == "variance":
        ax.set(xlabel="normalised depth (0 = input, 1 = last block)", ylabel="feature-map variance", yscale="log")
    else:
        ax.set(xlabel="normalised depth (0 = input, 1 = last block)", ylabel="ΔlogA at π")
    ax.legend(fontsize=7)
    return ax


def plot_probe_noise(found: dict[str, ProbeResult], ax, *, highlight: str | None = None):
    """The share of top-1 predictions kept under noise by its frequency band, one line per model (`highlight`
    boldest)."""
    colours = shared.model_colours(list(found))
    for name, result in found.items():
        kept = 100 * np.asarray(result.prediction_kept)
        ax.plot(result.noise_frequencies, kept, label=name, **_style(name, colours[name], highlight))
    ax.set(xlabel="noise frequency (π)", ylabel="top-1 predictions kept (%)", ylim=(-2, 102))
    ax.legend(fontsize=7)
    return ax


def plot_probe(result: ProbeResult | dict[str, ProbeResult], ax=None, *, figure=None):
    """ΔlogA at π, variance and predictions kept under noise, one line per model (a {name: result} dict): a row
    of three axes, in `figure` (a matplotlib `Figure`, as a long-running server draws without
    pyplot) or a new one; `ax` is not used."""
    found = result if isinstance(result, dict) else {"model": result}
    if figure is None:
        figure, axes = shared.row_of_axes(3, 4.4, 3.4)
    else:
        axes = figure.subplots(1, 3)
    plot_probe_by_depth(found, axes[0]).set_title("High-frequency amplitude by depth", fontsize=9)
    plot_probe_by_depth(found, axes[1], field="variance").set_title("Feature-map variance by depth", fontsize=9)
    plot_probe_noise(found, axes[2]).set_title("Predictions kept under band-limited noise", fontsize=9)
    return figure


def probe_analysis(model: nn.Module, inputs, settings, *, on_partial=None, **common) -> ProbeResult:
    """The registry's entry: the probe on its photos at the model's input size, as the Space computes it (the seed of
    the analyses' settings, the probe's own amounts otherwise); `inputs.test` is those photos already."""
    photos = next(shared.iterate_batches(inputs.test))[0]
    options = {**SETTINGS, "seed": settings.seed}
    return probe(model, photos, adapter=inputs.adapter, device=common.get("device"), **options)


def probe_estimate(costs: dict, settings) -> tuple[float, str]:
    passes = 1 + SETTINGS["draws"] * len(NOISE_FREQUENCIES)
    return 1.3 * costs["test_forward"] * passes, f"{passes} passes over the {len(PHOTOS)} photos"


def probe_summary(result: ProbeResult) -> str:
    kept = " ".join(f"{100 * k:.0f}" for k in result.prediction_kept)
    return f"probe: ΔlogA at π from {result.delta_log_amplitude[0]:+.2f} to {result.delta_log_amplitude[-1]:+.2f}; " + (
        f"top-1 kept under noise at {result.noise_frequencies.min():.1f}…{result.noise_frequencies.max():.1f}π (%): "
        f"{kept}"
    )


def _verdict(decided: bool | None, expected: bool, finding: str) -> str:
    """How an effect reads against the paper's `finding`: agreeing, against it, or, undecided, beside it."""
    if decided is None:
        return f"; the paper finds {finding}"
    return ", as the paper finds" if decided == expected else f", against the paper, which finds {finding}"


def probe_reading(name: str, result: ProbeResult, references: dict[str, ProbeResult] | None = None) -> str:
    """One paragraph that reads `result` in the paper's terms: MSAs as low-pass filters that lower the feature-map
    variance, convolutions as high-pass filters that raise it, and robustness to high-frequency noise; beside the
    `references` where given. An effect is called one way or the other only where it is clear of its uncertainty by
    the comparison report's rule (`analysis.claims.decide`: beyond two standard errors, over the blocks of a kind, or
    binomial over the noisy images); otherwise the reading says there is no clear change."""
    from .claims import binomial_error, decide
    from .population import HIGH_BAND, LOW_BAND, band_means, filter_effect, variance_effect

    kinds = result.kinds
    msa, conv = kinds.count("msa"), kinds.count("conv")
    parts = [f"{name} has {msa} MSA block{'s' * (msa != 1)} and {conv} convolutional block{'s' * (conv != 1)}."]
    for kind, label, low_pass in (("msa", "MSA", True), ("conv", "convolutional", False)):
        finding = f"{label} blocks to be {'low' if low_pass else 'high'}-pass filters"
        change, error, lowers = filter_effect(result, kind)
        if change is None:
            continue
        acts = {True: "act as a low-pass filter", False: "act as a high-pass filter", None: "leave them as they are"}
        parts.append(
            f"Across its {label} blocks the high-frequency amplitude (ΔlogA at π) changes by {change:+.2f} "
            f"± {2 * error:.2f} on average: they {acts[lowers]}{_verdict(lowers, low_pass, finding)}."
        )
    for kind, label, reduces in (("msa", "MSA", True), ("conv", "convolutional", False)):
        change, error, lowers = variance_effect(result, kind)
        if change is None:
            continue
        effect = {True: "lower", False: "raise", None: "do not clearly change"}[lowers]
        parts.append(
            f"Its {label} blocks {effect} the feature-map variance (a factor of {np.exp(change):.2f} on average, "
            f"{np.exp(change - 2 * error):.2f}–{np.exp(change + 2 * error):.2f})"
            f"{_verdict(lowers, reduces, f'{label} blocks ' + ('lower it' if reduces else 'raise it'))}."
        )
    frequencies = np.asarray(result.noise_frequencies)
    low, high = band_means(frequencies, result.prediction_kept)
    pairs = result.num_images * result.noise_draws
    error = float(
        np.hypot(
            *(
                binomial_error(kept, pairs * int(band.sum()))
                for kept, band in ((low, frequencies <= LOW_BAND + 1e-9), (high, frequencies >= HIGH_BAND - 1e-9))
            )
        )
    )
    hurts = {True: "high-frequency noise hurts it more", False: "low-frequency noise hurts it more"}
    high_drop = float(np.asarray(result.probability_drop)[frequencies >= HIGH_BAND - 1e-9].mean())
    parts.append(
        f"Under band-limited noise it keeps {100 * low:.0f}% of its top-1 predictions at low frequencies (≤ 0.3π) "
        f"and {100 * high:.0f}% at high frequencies (≥ 0.7π), where the clean class's probability changes by "
        f"{-100 * high_drop:+.1f} points: "
        + hurts.get(decide(low - high, error), "no clear difference between the bands")
        + "."
    )
    if references:
        beside = ", ".join(
            f"{other} {100 * band_means(probed.noise_frequencies, probed.prediction_kept)[1]:.0f}%"
            for other, probed in references.items()
        )
        parts.append(
            f"At high frequencies the zoo's models keep {beside}; the paper finds MSAs make a model more robust to "
            "high-frequency noise, which convolutions amplify."
        )
    return " ".join(parts)
