"""The paper's metrics on examples small enough to compute by hand."""

import math

import evaluate
import numpy as np
import pytest
import torch

import alternet_hf
from alternet_hf.metrics.classification import classification_metrics, plot_reliability_diagram, reliability_diagram

# Four samples, three classes, given as probabilities.
PROBS = np.array(
    [
        [0.95, 0.03, 0.02],  # label 0: right, confident
        [0.10, 0.60, 0.30],  # label 2: wrong (predicts 1), unconfident
        [0.05, 0.92, 0.03],  # label 0: wrong (predicts 1), confident
        [0.20, 0.20, 0.60],  # label 2: right, unconfident
    ]
)
LABELS = np.array([0, 2, 0, 2])


def test_hand_computed_metrics():
    m = classification_metrics(PROBS, LABELS, from_logits=False)
    assert m["accuracy"] == pytest.approx(0.5)
    assert m["nll"] == pytest.approx(-(math.log(0.95) + math.log(0.30) + math.log(0.05) + math.log(0.60)) / 4)
    assert m["freq_90"] == pytest.approx(0.5)  # samples 0 and 2
    assert m["acc_90"] == pytest.approx(0.5)  # of those, sample 0 is right
    assert m["unc_90"] == pytest.approx(0.5)  # wrong: 1 (unconfident) and 2 (confident)
    brier = [
        (0.05**2 + 0.03**2 + 0.02**2),
        (0.1**2 + 0.6**2 + 0.7**2),
        (0.95**2 + 0.92**2 + 0.03**2),
        (0.2**2 + 0.2**2 + 0.4**2),
    ]
    assert m["brier"] == pytest.approx(np.mean(brier))
    # IoU: class 0: TP 1, FP 0, FN 1 -> 1/2; class 1: TP 0, FP 2 -> 0; class 2: TP 1, FN 1 -> 1/2.
    assert m["iou"] == pytest.approx((0.5 + 0.0 + 0.5) / 3)
    # IoU-90 on samples 0 and 2: class 0: TP 1, FN 1 -> 1/2; class 1: FP 1 -> 0; class 2 absent.
    assert m["iou_90"] == pytest.approx(0.25)
    # ECE: bins (0.5,0.6] {0.6 right, 0.6 wrong}, (0.9,1] {0.95 right, 0.92 wrong}
    expected_ece = 0.5 * abs(0.5 - 0.6) + 0.5 * abs(0.5 - 0.935)
    assert m["ece"] == pytest.approx(expected_ece)


def test_logits_and_probabilities_agree():
    logits = np.log(PROBS)
    assert classification_metrics(logits, LABELS) == pytest.approx(
        classification_metrics(PROBS, LABELS, from_logits=False)
    )


def test_perfect_confident_predictions():
    logits = np.eye(5)[np.arange(10) % 5] * 50.0
    m = classification_metrics(logits, np.arange(10) % 5)
    assert m["accuracy"] == m["acc_90"] == m["freq_90"] == m["iou"] == m["iou_90"] == 1.0
    assert m["ece"] == pytest.approx(0.0, abs=1e-12) and m["brier"] == pytest.approx(0.0, abs=1e-12)
    assert math.isnan(m["unc_90"])  # no wrong predictions at all


def test_reliability_diagram_bins():
    diagram = reliability_diagram(PROBS, LABELS, from_logits=False)
    assert diagram.counts.tolist() == [0, 0, 0, 0, 0, 2, 0, 0, 0, 2]
    assert diagram.accuracy[5] == 0.5 and diagram.confidence[9] == pytest.approx(0.935)
    ax = plot_reliability_diagram(diagram)
    assert len(ax.patches) == 10


def test_bad_labels_are_refused():
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\)"):
        classification_metrics(PROBS, [0, 1, 2, 3], from_logits=False)
    with pytest.raises(ValueError, match="3 labels for 4"):
        classification_metrics(PROBS, [0, 1, 2], from_logits=False)


def test_evaluate_module_loads_by_path_offline():
    metric = evaluate.load(alternet_hf.EVALUATE_METRIC_PATH)
    logits = torch.log(torch.tensor(PROBS))
    for start in (0, 2):  # accumulate batches as an evaluation loop would
        metric.add_batch(predictions=logits[start : start + 2].numpy(), references=LABELS[start : start + 2])
    result = metric.compute()
    assert result == pytest.approx(classification_metrics(PROBS, LABELS, from_logits=False), rel=1e-5)


def test_the_reliability_diagram_fits_its_figure(tmp_path):
    """Legend and title lie inside the saved image (the legend used to sit above the axes, cut off)."""
    rng = np.random.default_rng(0)
    logits, labels = rng.normal(size=(200, 5)), rng.integers(0, 5, 200)
    ax = plot_reliability_diagram(reliability_diagram(logits, labels))
    figure = ax.figure
    figure.savefig(tmp_path / "r.png")
    renderer = figure.canvas.get_renderer()
    page = figure.bbox
    for artist in (ax.get_legend(), ax.title, ax.xaxis.label, ax.yaxis.label):
        box = artist.get_window_extent(renderer)
        assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1, artist
