"""Robustness (Park & Kim 2022, Fig. 2(b) and Table 1; docs/paper.md §6): accuracy on CIFAR-100-C (Hendrycks &
Dietterich 2019) and under frequency-band noise (`frequency_noise`).

`evaluate_corruptions` reads any of CIFAR-C's sources (`alternet_hf.data.cifar_c.sources`: the released arrays, the
parquet dataset, or corruptions generated on the fly).
"""

import functools
import statistics
import time
import timeit
import types
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from alternet_hf.data.augmentation import normalize_images
from alternet_hf.data.cifar_c import CORRUPTIONS, SEVERITIES
from alternet_hf.data.cifar_c.sources import Batches, check_uint8_images
from alternet_hf.metrics.classification import classification_metrics

from . import shared
from .shared import AnalysisResult, analysis_mode, logits_of, model_normalization


def stratified_subset(labels: Sequence[int], per_class: int, *, seed: int = 0) -> np.ndarray:
    """Sorted positions of `per_class` images of each class (all of a class that has fewer), drawn with `seed`:
    the same positions serve every corruption and severity, since CIFAR-C's sets are the same test images in the
    same order."""
    if per_class < 1:
        raise ValueError(f"per_class must be at least 1, not {per_class}")
    labels = np.asarray(labels)
    generator = np.random.default_rng(seed)
    chosen = [
        generator.choice(
            np.flatnonzero(labels == label), size=min(per_class, int((labels == label).sum())), replace=False
        )
        for label in np.unique(labels)
    ]
    return np.sort(np.concatenate(chosen))


def subset_standard_error(correct: np.ndarray, subset_labels: Sequence[int], set_labels: Sequence[int]) -> float:
    """Standard error of the mean accuracy over sets each measured on the same class-stratified subset; `correct`:
    (sets, subset images), right or wrong. The sets share their images, so the estimate is the stratified mean of each
    image's accuracy over the sets, of variance Σ_h W_h² (1 − n_h/N_h) s_h² / n_h over classes h (W_h = N_h/N, n_h of
    N_h images drawn, s_h² the within-class variance of the per-image accuracies; where one image is drawn, the pooled
    within-class variance, or where no class has two, the spread over every drawn image)."""
    per_image = np.asarray(correct, dtype=np.float64).mean(axis=0)
    subset_labels, set_labels = np.asarray(subset_labels), np.asarray(set_labels)
    classes = np.unique(set_labels)
    within = [per_image[subset_labels == h] for h in classes]
    pooled = [values - values.mean() for values in within if len(values) > 1]
    if pooled:
        pooled_variance = float(np.concatenate(pooled).var(ddof=len(pooled)))
    else:  # one image per class: the spread over all of them, which counts the spread between classes too
        pooled_variance = float(per_image.var(ddof=1)) if len(per_image) > 1 else 0.0
    variance = 0.0
    for h, values in zip(classes, within):
        population, drawn = int((set_labels == h).sum()), len(values)
        if drawn == 0 or drawn == population:
            continue
        spread = values.var(ddof=1) if drawn > 1 else pooled_variance
        variance += (population / len(set_labels)) ** 2 * (1 - drawn / population) * spread / drawn
    return float(np.sqrt(variance))


@dataclass
class CorruptionResult(AnalysisResult):
    """Metrics per corruption (rows, in `corruptions` order) × severity (columns); `clean` holds the
    metrics of the uncorrupted source images if they were given. Where a subset of each set was evaluated,
    `images_per_set` of `set_size` images, `mean_accuracy_standard_error` says what that subset leaves uncertain."""

    corruptions: list[str]
    severities: list[int]
    accuracy: np.ndarray
    nll: np.ndarray
    ece: np.ndarray
    mean_accuracy: float
    mean_nll: float
    mean_ece: float
    clean: dict | None = None
    source: str | None = None  # what the corrupted images were: the dataset's name, or how they were generated
    images_per_set: int | None = None
    set_size: int | None = None
    mean_accuracy_standard_error: float | None = None  # None: every image of every set


def bf16_matrix_units() -> str | None:
    """The CPU's bf16 matrix instructions ("AMX", "AVX-512 BF16"), or None: where bf16 inference pays on a CPU
    (elsewhere bf16 products are emulated, no faster than float32's)."""
    if torch.cpu._is_amx_tile_supported():
        return "AMX"
    return "AVX-512 BF16" if torch.cpu._is_avx512_bf16_supported() else None


ONEDNN_MIN_GAIN = 1.2  # how much faster oneDNN's float32 linear layers must be than MKL's for the evaluation to use it


@functools.cache
def onednn_linear_gain() -> float:
    """How many times faster this CPU runs a float32 linear layer (a ViT-Ti block's shape) through oneDNN than through
    MKL, best of five each; 0 without oneDNN. Inductor's frozen graphs call MKL for float32 linear layers unless their
    batch is dynamic, and on some CPUs MKL's float32 products run at half of oneDNN's (docs/benchmarks.md)."""
    if not torch.backends.mkldnn.is_available():
        return 0.0
    generator = torch.Generator().manual_seed(0)
    inputs, weight, bias = (torch.randn(*shape, generator=generator) for shape in ((4096, 192), (768, 192), (768,)))
    runs = {
        "mkl": lambda: F.linear(inputs, weight, bias),
        "onednn": lambda: torch.ops.mkldnn._linear_pointwise(inputs, weight, bias, "none", [], ""),
    }
    with torch.no_grad():  # the first of six calls warms up
        best = {name: min(timeit.repeat(run, number=1, repeat=6)[1:]) for name, run in runs.items()}
    return best["mkl"] / best["onednn"]


def _linear_through_onednn(model: nn.Module) -> bool:
    """Whether a CPU evaluation of `model` in float32 marks the batch dynamic, so that inductor calls oneDNN for its
    linear layers: for a model built of them (not a CNN with a linear head, whose convolutions are oneDNN's already
    and run faster with a static batch) where oneDNN multiplies faster here."""
    linear_layers = sum(isinstance(module, nn.Linear) for module in model.modules())
    return linear_layers > 1 and onednn_linear_gain() >= ONEDNN_MIN_GAIN


def _classifier(model: nn.Module, mean: torch.Tensor, std: torch.Tensor, compile_mode: str | None, bf16: bool = False):
    """Images (uint8, or floats in 0…1) -> float32 logits, normalisation and model as one function, under bf16
    autocast where `bf16`: under `compile_mode`, one graph, every batch padded to the first's size so that a set's
    smaller last batch compiles no other. On a CPU the graph freezes the weights: inductor folds them in as constants
    and prepacks them for oneDNN (the function is for inference only and never sees the weights change)."""

    def classify(images: torch.Tensor) -> torch.Tensor:
        with torch.autocast(images.device.type, dtype=torch.bfloat16, enabled=bf16):
            return logits_of(model(normalize_images(images, mean, std).contiguous())).float()  # the step's NCHW

    if not compile_mode:
        return classify
    from torch._inductor import config as inductor_config

    from alternet_hf.utils import padded_to_first_batch

    # Its own code object: dynamo keeps compiled graphs per code object, guarded by the model's identity, not by its
    # weights, which the graphs hold frozen; so a later classifier of the same model after training must not find
    # them, and a process that evaluates many models must not reach dynamo's recompile limit (and run them eager).
    classify = types.FunctionType(classify.__code__.replace(), classify.__globals__, closure=classify.__closure__)
    compiled = torch.compile(classify, mode=compile_mode)
    if mean.device.type != "cpu":
        return padded_to_first_batch(compiled)
    dynamic_batch = not bf16 and _linear_through_onednn(model)  # bf16 linear layers are oneDNN's anyway

    def frozen(images: torch.Tensor) -> torch.Tensor:
        if dynamic_batch:
            torch._dynamo.maybe_mark_dynamic(images, 0)
        with inductor_config.patch(freezing=True):  # read when a graph compiles (torch.compile's options are not)
            return compiled(images)

    return padded_to_first_batch(frozen)


class Classifiers:
    """A model's evaluation function (`_classifier`) per precision, each built when first asked for, then reused: given
    to `bf16_agreement`, `images_per_second` and `evaluate_corruptions`, one model's compiled graphs serve its bf16
    check, its speed probe and its CIFAR-C pass (a CPU release compiles each graph once, not once per use)."""

    def __init__(self, model: nn.Module, compile_mode: str | None = None, image_mean=None, image_std=None):
        self.model, self.compile_mode, self.image_mean, self.image_std = model, compile_mode, image_mean, image_std
        self.built = {}

    def __call__(self, model: nn.Module, device: torch.device, bf16: bool):
        if model is not self.model:
            raise ValueError("these Classifiers were built for another model: give each model its own")
        if (device, bf16) not in self.built:
            mean, std = model_normalization(model, self.image_mean, self.image_std, device)
            self.built[device, bf16] = _classifier(model, mean, std, self.compile_mode, bf16)
        return self.built[device, bf16]


@torch.no_grad()
def _predict(classify, batches: Batches, device, size: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Logits and labels of uint8 batches, resized (as floats in 0…1) where they are not `size`. Images go in
    channels-last, the layout of the engine's batches (`data.collate_images`): one compiled graph serves both."""
    logits, labels = [], []
    for images, targets in batches:
        check_uint8_images(images)
        images = images.to(device, non_blocking=True).contiguous(memory_format=torch.channels_last)
        if size and tuple(images.shape[-2:]) != (size, size):
            images = F.interpolate(
                images.float() / 255.0, size=(size, size), mode="bilinear", antialias=True, align_corners=False
            )
        logits.append(classify(images).cpu())
        labels.append(targets)
    return torch.cat(logits).numpy(), torch.cat(labels).numpy()


def images_per_second(
    model: nn.Module,
    *,
    batch_size: int = 256,
    image_size: int | None = None,
    compile_mode: str | None = None,
    bf16: bool = False,
    device: str | torch.device | None = None,
    repeats: int = 3,
    classifiers: Classifiers | None = None,
) -> float:
    """Images per second of `evaluate_corruptions`'s pass over batches of `batch_size` uint8 images, timed over
    `repeats` batches after two untimed ones (which compile, with `compile_mode`, unless `classifiers` already
    did): what a budget is weighed by."""
    size = image_size or getattr(getattr(model, "config", None), "image_size", None) or 32
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (batch_size, 3, size, size), dtype=torch.uint8, generator=generator)
    with analysis_mode(model, device=device) as device:
        classify = (classifiers or Classifiers(model, compile_mode))(model, device, bf16)
        for index in range(2 + repeats):
            if index == 2:
                shared.synchronize(device)
                started = time.perf_counter()
            _predict(classify, [(images, torch.zeros(batch_size))], device, size)
        shared.synchronize(device)
    return repeats * batch_size / (time.perf_counter() - started)


def images_per_second_in_turn(
    model: nn.Module,
    variants: Sequence[tuple[bool, bool]],
    *,
    batch_size: int = 256,
    compile_mode: str = "default",
    device: str | torch.device | None = None,
    repeats: int = 3,
) -> dict[tuple[bool, bool], float]:
    """Images per second of `evaluate_corruptions`'s pass for each of `variants`, (compiled, bf16) pairs: the
    variants take turns batch by batch, after two untimed batches each (which compile), and each rate is of its median
    batch of `repeats`. A change in the machine's own speed (a shared host) then reaches every variant alike, so that
    their ratios hold from run to run where `images_per_second` times one variant after another."""
    size = getattr(getattr(model, "config", None), "image_size", None) or 32
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (batch_size, 3, size, size), dtype=torch.uint8, generator=generator)
    built = {compiled: Classifiers(model, compile_mode if compiled else None) for compiled, _ in variants}
    seconds = {variant: [] for variant in variants}
    with analysis_mode(model, device=device) as device:
        classifiers = {(compiled, bf16): built[compiled](model, device, bf16) for compiled, bf16 in variants}
        for index in range(2 + repeats):
            for variant, classify in classifiers.items():
                shared.synchronize(device)
                started = time.perf_counter()
                _predict(classify, [(images, torch.zeros(batch_size))], device, size)
                shared.synchronize(device)
                if index >= 2:
                    seconds[variant].append(time.perf_counter() - started)
    return {variant: batch_size / statistics.median(times) for variant, times in seconds.items()}


def bf16_agreement(
    model: nn.Module,
    source,
    *,
    rows: Sequence[int],
    severity: int = 3,
    batch_size: int = 256,
    compile_mode: str | None = None,
    device: str | torch.device | None = None,
    classifiers: Classifiers | None = None,
) -> dict:
    """float32's and bf16's top-1 through the evaluation's own function (`classifiers`, which the evaluation then
    reuses) on a fixed set: the positions `rows` of every corruption of `source` at `severity`. The images, how many
    each gets right, and on how many they disagree."""
    size = getattr(getattr(model, "config", None), "image_size", None)
    classifiers, predictions = classifiers or Classifiers(model, compile_mode), {}
    with analysis_mode(model, device=device) as device:
        for bf16 in (False, True):
            classify = classifiers(model, device, bf16)
            found = [
                _predict(classify, source.batches(name, severity, batch_size=batch_size, rows=rows), device, size)
                for name in source.available()
            ]
            predictions[bf16] = np.concatenate([logits.argmax(-1) for logits, _ in found])
            labels = np.concatenate([labels for _, labels in found])
    return {
        "images": len(labels),
        "severity": severity,
        "correct_float32": int((predictions[False] == labels).sum()),
        "correct_bf16": int((predictions[True] == labels).sum()),
        "disagreements": int((predictions[False] != predictions[True]).sum()),
    }


def evaluate_corruptions(
    model: nn.Module,
    source,
    *,
    corruptions: Sequence[str] = CORRUPTIONS,
    severities: Sequence[int] = SEVERITIES,
    clean: tuple[torch.Tensor, torch.Tensor] | None = None,
    batch_size: int = 256,
    image_size: int | None = None,
    image_mean: Sequence[float] | None = None,
    image_std: Sequence[float] | None = None,
    rows: Sequence[int] | None = None,
    compile_mode: str | None = None,
    bf16: bool = False,
    device: str | torch.device | None = None,
    progress: bool = False,
    classifiers: Classifiers | None = None,
) -> CorruptionResult:
    """Accuracy, NLL and ECE of `model` on every corruption × severity of `source`, and their means. Images are scaled
    to [0, 1], resized to `image_size` where they differ and normalised with `image_mean`/`image_std` (default: the
    model config's); `clean`: uint8 images and labels to report too; `rows`: these positions of every set only
    (`stratified_subset`), with the standard error they leave; `compile_mode`: run under `torch.compile`; `bf16`: under
    bf16 autocast (the clean images too), for a model that `bf16_agreement` found unchanged by it; `classifiers`: the
    functions (compiled graphs) an earlier step built for this model, in the place of new ones."""
    size = image_size or getattr(getattr(model, "config", None), "image_size", None)
    shape = (len(corruptions), len(severities))
    metrics = {name: np.full(shape, np.nan) for name in ("accuracy", "nll", "ece")}
    sets = [(i, c, j, s) for i, c in enumerate(corruptions) for j, s in enumerate(severities)]
    correct = []  # per set, whether each image of the subset was classified right
    with analysis_mode(model, device=device) as device:
        mean, std = model_normalization(model, image_mean, image_std, device)
        classifiers = classifiers or Classifiers(model, compile_mode, image_mean, image_std)
        classify, clean_metrics = classifiers(model, device, bf16), None
        if clean is not None:
            logits, labels = _predict(_classifier(model, mean, std, None, bf16), [clean], device, size)
            clean_metrics = classification_metrics(logits, labels)
        for i, corruption, j, severity in shared.progress(sets, enabled=progress, desc="CIFAR-C", unit="set"):
            batches = source.batches(corruption, severity, batch_size=batch_size, rows=rows)
            logits, labels = _predict(classify, batches, device, size)
            values = classification_metrics(logits, labels)
            for name in metrics:
                metrics[name][i, j] = values[name]
            correct.append(logits.argmax(-1) == labels)
    subset = {}
    if rows is not None and sets:
        set_labels = source.set_labels(corruptions[0], severities[0])
        standard_error = subset_standard_error(np.stack(correct), set_labels[np.asarray(rows)], set_labels)
        subset = dict(images_per_set=len(rows), set_size=len(set_labels), mean_accuracy_standard_error=standard_error)
    means = {f"mean_{name}": float(values.mean()) for name, values in metrics.items()}
    return CorruptionResult(
        list(corruptions),
        list(severities),
        **metrics,
        **means,
        clean=clean_metrics,
        source=getattr(source, "name", None),
        **subset,
    )


def plot_corruptions(result: CorruptionResult, ax=None):
    """Accuracy against severity, one line per corruption, with the mean in black."""
    from matplotlib import colormaps

    ax = shared.new_axes(ax, figsize=(8, 4))  # a constrained layout: room for the legend outside
    colours = colormaps["tab20"]  # 15 corruptions, each its own colour
    for i, (corruption, accuracy) in enumerate(zip(result.corruptions, result.accuracy)):
        ax.plot(result.severities, 100 * accuracy, linewidth=0.9, alpha=0.8, color=colours(i % 20), label=corruption)
    ax.plot(result.severities, 100 * result.accuracy.mean(axis=0), color="k", linewidth=2.5, label="mean")
    ax.set_xticks(result.severities)
    ax.set_xlabel("severity")
    ax.set_ylabel("accuracy (%)")
    ax.set_title(
        f"{result.source or 'Corruption robustness'}: mean accuracy {100 * result.mean_accuracy:.1f}%\n"
        f"({len(result.corruptions)} corruptions × {len(result.severities)} severities)",
        fontsize=9,
    )
    shared.legend_beside(ax, fontsize=7)
    return ax


def band_pass_noise(
    shape: tuple[int, ...],
    frequency: float,
    *,
    bandwidth: float = 0.2,
    eps: float = 0.7,
    generator: torch.Generator | None = None,
    device=None,
) -> torch.Tensor:
    """Random ±eps noise keeping only the frequencies whose largest component |f|∞ (units of π) lies in
    (frequency − bandwidth/2, frequency + bandwidth/2]: a square band around the centre of the spectrum."""
    signs = torch.randint(0, 2, shape, generator=generator, device=device or "cpu").float() * 2 - 1
    height, width = shape[-2:]
    fy = torch.fft.fftfreq(height, device=signs.device).abs() * 2  # units of π
    fx = torch.fft.fftfreq(width, device=signs.device).abs() * 2
    radius = torch.maximum(fy[:, None], fx[None, :])
    mask = (radius > frequency - bandwidth / 2) & (radius <= frequency + bandwidth / 2)
    return torch.fft.ifft2(torch.fft.fft2(eps * signs) * mask).real


@dataclass
class FrequencyNoiseResult(AnalysisResult):
    """Accuracy with noise in each band of centre `frequencies` (units of π), and its change from clean."""

    frequencies: np.ndarray
    accuracy: np.ndarray
    clean_accuracy: float
    delta_accuracy: np.ndarray
    eps: float
    bandwidth: float


@torch.no_grad()
def frequency_noise(
    model: nn.Module,
    data,
    *,
    frequencies: Sequence[float] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9),
    eps: float = 0.7,
    bandwidth: float = 0.2,
    max_batches: int | None = None,
    seed: int = 0,
    device: str | torch.device | None = None,
    progress: bool = False,
) -> FrequencyNoiseResult:
    """Δaccuracy of `model` per band when band-limited noise is added to its inputs after normalisation, as the
    reference's generator adds it; the noise is drawn once per batch, so bands differ only in where its energy lies."""
    frequencies = np.asarray(frequencies, dtype=float)
    correct, clean_correct, count = np.zeros(len(frequencies)), 0, 0
    with analysis_mode(model, device=device) as device:
        batches = shared.batches(data, max_batches=max_batches, enabled=progress, desc="frequency noise")
        for index, (inputs, targets) in enumerate(batches):
            inputs, targets = inputs.to(device), targets.to(device)
            clean_correct += (logits_of(model(inputs)).argmax(-1) == targets).sum().item()
            for k, frequency in enumerate(frequencies):
                generator = torch.Generator(device=device).manual_seed(seed * 1_000_003 + index)
                noise = band_pass_noise(
                    inputs.shape, frequency, bandwidth=bandwidth, eps=eps, generator=generator, device=device
                )
                correct[k] += (logits_of(model(inputs + noise)).argmax(-1) == targets).sum().item()
            count += len(targets)
    if count == 0:
        raise ValueError("the data gave no batches")
    accuracy, clean_accuracy = correct / count, clean_correct / count
    return FrequencyNoiseResult(frequencies, accuracy, clean_accuracy, accuracy - clean_accuracy, eps, bandwidth)


def plot_frequency_noise(results: FrequencyNoiseResult | dict[str, FrequencyNoiseResult], ax=None):
    """Δaccuracy (%) against the noise frequency, one line per model (pass a {name: result} dict)."""
    ax = shared.new_axes(ax)
    results = results if isinstance(results, dict) else {None: results}
    for name, result in results.items():
        ax.plot(result.frequencies, 100 * result.delta_accuracy, marker="o", markersize=3, label=name)
    ax.axhline(0.0, color="0.5", linewidth=0.8)
    ax.set_xlabel("noise frequency (π)")
    ax.set_ylabel("Δ accuracy (%)")
    ax.set_title("Robustness to frequency-band noise")
    if any(name is not None for name in results):
        shared.legend_beside(ax)
    return ax


# --- as the analysis commands run them (analysis.registry) -----------------------------------------------------


def corruption_analysis(model: nn.Module, inputs, settings, *, on_partial=None, **common) -> CorruptionResult:
    return evaluate_corruptions(
        model,
        inputs.corruptions,
        corruptions=settings.corruptions,
        severities=settings.severities,
        image_size=inputs.image_size,
        image_mean=inputs.image_mean,
        image_std=inputs.image_std,
        **common,
    )


def corruption_summary(result: CorruptionResult) -> str:
    accuracy = 100 * result.mean_accuracy
    return f"robustness: mean accuracy {accuracy:.2f}%, NLL {result.mean_nll:.3f}, ECE {result.mean_ece:.3f}"


def corruption_estimate(costs: dict, settings) -> tuple[float, str]:
    sets = len(settings.corruptions) * len(settings.severities)
    images = costs["corruption_images"] or costs["test_batches"] * costs["test_batch_size"]
    seconds = 2.0 * sets * images / costs["test_batch_size"] * costs["test_forward"]  # generating costs a forward
    return seconds, f"{sets} corruption sets × {images} images"


def corruption_comparison(found: dict[str, CorruptionResult]):
    ax = shared.new_axes(None, figsize=(6, 3.5))
    for name, result in found.items():
        ax.plot(result.severities, 100 * np.asarray(result.accuracy).mean(axis=0), marker="o", label=name)
    counts = {(len(r.corruptions), len(r.severities)) for r in found.values()}
    shown = ", ".join(f"{c} corruptions × {s} severit{'y' if s == 1 else 'ies'}" for c, s in sorted(counts))
    sources = sorted({r.source for r in found.values() if r.source})
    ax.set(xlabel="severity", ylabel="mean accuracy over corruptions (%)")
    ax.set_title(f"Corruption robustness: {', '.join(sources) or 'CIFAR-C'}\n({shown})", fontsize=9)
    ax.set_xticks(sorted({s for r in found.values() for s in r.severities}))
    shared.legend_beside(ax)
    return ax


def frequency_noise_analysis(model: nn.Module, inputs, settings, *, on_partial=None, **common) -> FrequencyNoiseResult:
    return frequency_noise(model, inputs.test, max_batches=settings.max_batches, seed=settings.seed, **common)


def frequency_noise_summary(result: FrequencyNoiseResult) -> str:
    deltas = " ".join(f"{100 * d:+.1f}" for d in result.delta_accuracy)
    band = f"{result.frequencies.min():.1f}…{result.frequencies.max():.1f}π"
    return f"frequency-noise: Δaccuracy (%) at {band}: {deltas}"


def frequency_noise_estimate(costs: dict, settings) -> tuple[float, str]:
    return shared.passes(costs, 10)
