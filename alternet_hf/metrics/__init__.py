"""The paper's metrics of a classifier, as functions (`classification`) and as an `evaluate` module loaded by path
(`zoo_classification/`, `EVALUATE_METRIC_PATH`), so that no metric is fetched from the Hub."""

from ..utils import lazy_package

_EXPORTS = {"classification": ("EVALUATE_METRIC_PATH", "METRIC_NAMES", "classification_metrics")}
__all__ = [name for names in _EXPORTS.values() for name in names]
__getattr__ = lazy_package(__name__, _EXPORTS)
