"""The paper's classification metrics (docs/paper.md §5 defines them), as plain functions of logits and labels.
A metric over an empty set (no confident or no wrong predictions) is NaN.
"""

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from scipy.special import softmax

# `evaluate.load(EVALUATE_METRIC_PATH)`: the same metrics as an `evaluate` module, no Hub needed.
EVALUATE_METRIC_PATH = str(Path(__file__).parent / "zoo_classification")

METRIC_NAMES = ("accuracy", "nll", "ece", "acc_90", "unc_90", "freq_90", "iou", "iou_90", "brier")
CONFIDENT = 0.9


def _probabilities_and_labels(logits_or_probs, labels, from_logits: bool) -> tuple[np.ndarray, np.ndarray]:
    """(samples, classes) probabilities in float64 and one class index per sample, checked."""
    probs = np.asarray(logits_or_probs, dtype=np.float64)
    if probs.ndim != 2:
        raise ValueError(f"expected (samples, classes) scores, got shape {probs.shape}")
    probs = softmax(probs, axis=-1) if from_logits else probs
    num_samples, num_classes = probs.shape
    labels = np.asarray(labels).astype(np.int64).reshape(-1)
    if labels.shape[0] != num_samples:
        raise ValueError(f"{labels.shape[0]} labels for {num_samples} predictions")
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f"labels must lie in [0, {num_classes}), got [{labels.min()}, {labels.max()}]")
    return probs, labels


def mean_iou(predictions: np.ndarray, labels: np.ndarray, num_classes: int) -> float:
    """Mean over classes that occur (in labels or predictions) of TP / (TP + FP + FN)."""
    if labels.size == 0:
        return float("nan")
    confusion = np.bincount(labels * num_classes + predictions, minlength=num_classes**2).reshape(num_classes, -1)
    true_positive = np.diag(confusion).astype(np.float64)
    union = confusion.sum(axis=0) + confusion.sum(axis=1) - true_positive
    occurs = union > 0
    return float(np.mean(true_positive[occurs] / union[occurs]))


@dataclass
class ReliabilityDiagram:
    """Per confidence bin: its edges, sample count, mean confidence and accuracy (NaN for empty bins)."""

    bin_edges: np.ndarray
    counts: np.ndarray
    confidence: np.ndarray
    accuracy: np.ndarray

    def to_dict(self) -> dict:
        return {key: value.tolist() for key, value in asdict(self).items()}


def reliability_diagram(logits_or_probs, labels, *, num_bins: int = 10, from_logits: bool = True) -> ReliabilityDiagram:
    probs, labels = _probabilities_and_labels(logits_or_probs, labels, from_logits)
    confidence, correct = probs.max(axis=1), probs.argmax(axis=1) == labels
    # Bin i holds confidences in (i/n, (i+1)/n]; confidences are > 0 for a probability vector.
    bins = np.clip(np.ceil(confidence * num_bins).astype(np.int64) - 1, 0, num_bins - 1)
    counts = np.bincount(bins, minlength=num_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_confidence = np.bincount(bins, weights=confidence, minlength=num_bins) / counts
        accuracy = np.bincount(bins, weights=correct, minlength=num_bins) / counts
    return ReliabilityDiagram(np.linspace(0, 1, num_bins + 1), counts, mean_confidence, accuracy)


def expected_calibration_error(diagram: ReliabilityDiagram) -> float:
    """Σ_i (n_i / N) |acc_i − conf_i| over the non-empty bins."""
    filled = diagram.counts > 0
    if not filled.any():
        return float("nan")
    weights = diagram.counts[filled] / diagram.counts.sum()
    return float(np.sum(weights * np.abs(diagram.accuracy[filled] - diagram.confidence[filled])))


def classification_metrics(
    logits_or_probs, labels, *, num_bins: int = 10, from_logits: bool = True
) -> dict[str, float]:
    """Every metric of `METRIC_NAMES` for one set of predictions; accuracies as fractions in [0, 1]."""
    probs, labels = _probabilities_and_labels(logits_or_probs, labels, from_logits)
    num_samples, num_classes = probs.shape
    if num_samples == 0:
        return {name: float("nan") for name in METRIC_NAMES}
    predictions, confidence = probs.argmax(axis=1), probs.max(axis=1)
    correct = predictions == labels
    confident = confidence > CONFIDENT
    onehot = np.eye(num_classes)[labels]
    nan = float("nan")
    return {
        "accuracy": float(correct.mean()),
        "nll": float(-np.mean(np.log(np.clip(probs[np.arange(num_samples), labels], 1e-300, None)))),
        "ece": expected_calibration_error(reliability_diagram(probs, labels, num_bins=num_bins, from_logits=False)),
        "acc_90": float(correct[confident].mean()) if confident.any() else nan,
        "unc_90": float(np.mean(~confident[~correct])) if (~correct).any() else nan,
        "freq_90": float(confident.mean()),
        "iou": mean_iou(predictions, labels, num_classes),
        "iou_90": mean_iou(predictions[confident], labels[confident], num_classes),
        "brier": float(np.mean(np.sum((onehot - probs) ** 2, axis=1))),
    }


def plot_reliability_diagram(diagram: ReliabilityDiagram, ax=None, *, title: str | None = None):
    """Bars of per-bin accuracy against the diagonal of perfect calibration."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(4, 4), layout="constrained")
    edges = diagram.bin_edges
    width = edges[1:] - edges[:-1]
    ax.bar(edges[:-1], np.nan_to_num(diagram.accuracy), width=width, align="edge", edgecolor="black", label="accuracy")
    ax.plot([0, 1], [0, 1], linestyle="--", color="gray", label="perfect calibration")
    ax.set(
        xlim=(0, 1),
        ylim=(0, 1),
        xlabel="confidence",
        ylabel="accuracy",
        title=title or f"ECE {expected_calibration_error(diagram):.3f}",
    )
    ax.legend(loc="upper left", fontsize="small")  # inside the axes: nothing sticks out of a saved figure
    return ax
