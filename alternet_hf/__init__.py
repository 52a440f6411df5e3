"""alternet-hf: the model zoo of "How Do Vision Transformers Work?" (Park & Kim, ICLR 2022).

Importing the package registers AlterNet and the CIFAR ResNet with transformers' Auto classes and the zoo's names
with timm; ViT is transformers' own `ViTForImageClassification`. The import itself is instant: the names below are
loaded when first used, and the registrations run as soon as transformers' Auto classes or timm are imported (at
once if they already are), so a command's `--help` never waits for torch.
"""

import sys

from .utils import half_imported, lazy_package, when_imported

__version__ = "0.1.0"

# Each public name and the module that defines it, loaded on first use.
_EXPORTS = {
    "models.blocks": ("BLOCK_KINDS", "block_kinds", "block_states", "residual_branches"),
    "models.configuration_alternet": ("AlterNetConfig",),
    "models.configuration_cifar_resnet": ("CifarResNetConfig",),
    "hub.convert": ("convert_original_checkpoint",),
    "metrics.classification": ("EVALUATE_METRIC_PATH", "classification_metrics"),
    "models.modeling_alternet": ("AlterNetModel", "AlterNetForImageClassification", "AlterNetPreTrainedModel"),
    "models.modeling_cifar_resnet": (
        "CifarResNetModel",
        "CifarResNetForImageClassification",
        "CifarResNetPreTrainedModel",
    ),
    "models.modeling_common": ("build_image_processor",),
    "models.presets": ("DATASETS", "create_config", "create_model", "list_models"),
}
__all__ = [name for names in _EXPORTS.values() for name in names]
__getattr__ = lazy_package(__name__, _EXPORTS)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


# transformers' own layers import its Auto classes midway through their import, and so do the zoo's model files,
# which import those layers: each registration waits until every module its classes need is whole, and runs at the
# end of whichever import completes last.
_CONFIG_MODULES = (f"{__name__}.models.configuration_alternet", f"{__name__}.models.configuration_cifar_resnet")
_MODEL_MODULES = (
    "transformers.modeling_utils",
    "transformers.modeling_layers",
    f"{__name__}.models.modeling_common",
    f"{__name__}.models.modeling_alternet",
    f"{__name__}.models.modeling_cifar_resnet",
)
_AUTO_CONFIG, _AUTO_MODEL = "transformers.models.auto.configuration_auto", "transformers.models.auto.modeling_auto"


def _ready(auto: str, modules: tuple[str, ...]) -> bool:
    return auto in sys.modules and not any(half_imported(name) for name in (auto, *modules))


def _register_configs() -> None:
    if not _ready(_AUTO_CONFIG, _CONFIG_MODULES):
        return
    from transformers.models.auto.configuration_auto import AutoConfig

    from .models.configuration_alternet import AlterNetConfig
    from .models.configuration_cifar_resnet import CifarResNetConfig

    for config in (AlterNetConfig, CifarResNetConfig):
        AutoConfig.register(config.model_type, config, exist_ok=True)


def _register_models() -> None:
    if not _ready(_AUTO_MODEL, _MODEL_MODULES):
        return
    from transformers.models.auto.modeling_auto import AutoModel, AutoModelForImageClassification

    from .models.modeling_alternet import AlterNetForImageClassification, AlterNetModel
    from .models.modeling_cifar_resnet import CifarResNetForImageClassification, CifarResNetModel

    for model, classifier in (
        (AlterNetModel, AlterNetForImageClassification),
        (CifarResNetModel, CifarResNetForImageClassification),
    ):
        AutoModel.register(model.config_class, model, exist_ok=True)
        AutoModelForImageClassification.register(model.config_class, classifier, exist_ok=True)


def _register_timm() -> None:
    from .models.timm_models import register_models

    register_models()  # timm.create_model("alternet_50") etc.


for _name in (_AUTO_CONFIG, *_CONFIG_MODULES):
    when_imported(_name, _register_configs)
for _name in (_AUTO_MODEL, *_MODEL_MODULES):
    when_imported(_name, _register_models)
when_imported("timm", _register_timm)
