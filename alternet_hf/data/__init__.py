"""The data: image-classification datasets from the Hub, a folder or the embedded digits (`sources`), their labels
and unreadable rows, per-image and per-batch augmentation, streaming, and CIFAR-C (its corruptions and the three
sources of its arrays). The loaders below are imported when first used.
"""

from ..utils import lazy_package

_EXPORTS = {
    "sources": (
        "DatasetUnavailableError",
        "load_digits_dataset",
        "load_image_classification",
        "load_image_sample",
        "load_raw_dataset",
        "load_train_and_eval",
        "stream_image_classification",
    ),
}
__all__ = [name for names in _EXPORTS.values() for name in names]
__getattr__ = lazy_package(__name__, _EXPORTS)
