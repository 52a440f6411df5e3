"""The training engine on Accelerate: the recipes and every option (`recipe`), the resumable training loop
(`engine`), and fine-tuning with transformers' `Trainer` (`finetuning`). Imported when first used.
"""

from ..utils import lazy_package

_EXPORTS = {
    "recipe": ("PAPER_RECIPE", "TrainingConfig", "recipe_config"),
    "engine": ("train", "TrainingSession"),
    "finetuning": ("finetune",),
}
__all__ = [name for names in _EXPORTS.values() for name in names]
__getattr__ = lazy_package(__name__, _EXPORTS)
