"""The paper's classification metrics as an `evaluate` module, loaded by path (no Hub needed).

import evaluate, alternet_hf
metric = evaluate.load(alternet_hf.EVALUATE_METRIC_PATH)
metric.compute(predictions=logits, references=labels)
"""

import datasets
import evaluate
import numpy as np

from alternet_hf.metrics.classification import classification_metrics

_DESCRIPTION = (
    "Accuracy, NLL, ECE (10 equal-width bins), Acc-90, Unc-90, Freq-90, IoU, IoU-90 and Brier score of "
    '"How Do Vision Transformers Work?" (Park & Kim, ICLR 2022), computed from logits.'
)
_KWARGS = """
Args:
    predictions: logits (or probabilities with `from_logits=False`), one row of class scores per sample.
    references: integer class labels.
    num_bins: confidence bins of the ECE (default 10).
Returns:
    a dict with accuracy, nll, ece, acc_90, unc_90, freq_90, iou, iou_90, brier.
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS)
class ZooClassification(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="@inproceedings{park2022how, title={How Do Vision Transformers Work?}, year={2022}}",
            inputs_description=_KWARGS,
            features=datasets.Features(
                {"predictions": datasets.Sequence(datasets.Value("float32")), "references": datasets.Value("int64")}
            ),
        )

    def _compute(self, predictions, references, num_bins: int = 10, from_logits: bool = True):
        return classification_metrics(
            np.asarray(predictions), np.asarray(references), num_bins=num_bins, from_logits=from_logits
        )
