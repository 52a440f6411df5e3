"""alternet-hf: the model zoo of "How Do Vision Transformers Work?" (Park & Kim, ICLR 2022).

Importing the package registers AlterNet and the CIFAR ResNet with transformers' Auto classes;
ViT is transformers' own `ViTForImageClassification`.
"""

from transformers import AutoConfig, AutoModel, AutoModelForImageClassification

from .blocks import BLOCK_KINDS, block_kinds, block_states, residual_branches
from .configuration_alternet import AlterNetConfig
from .configuration_cifar_resnet import CifarResNetConfig
from .convert import convert_original_checkpoint
from .metrics import EVALUATE_METRIC_PATH, classification_metrics
from .modeling_alternet import AlterNetForImageClassification, AlterNetModel, AlterNetPreTrainedModel
from .modeling_cifar_resnet import CifarResNetForImageClassification, CifarResNetModel, CifarResNetPreTrainedModel
from .modeling_common import build_image_processor
from .presets import DATASETS, create_config, create_model, list_models
from .timm_models import register_when_timm_is_imported

__version__ = "0.1.0"

for _config, _model, _classifier in (
    (AlterNetConfig, AlterNetModel, AlterNetForImageClassification),
    (CifarResNetConfig, CifarResNetModel, CifarResNetForImageClassification),
):
    AutoConfig.register(_config.model_type, _config, exist_ok=True)
    AutoModel.register(_config, _model, exist_ok=True)
    AutoModelForImageClassification.register(_config, _classifier, exist_ok=True)
register_when_timm_is_imported()  # timm.create_model("alternet_50") etc.; timm itself is not imported here

__all__ = [
    "AlterNetConfig",
    "AlterNetModel",
    "AlterNetForImageClassification",
    "AlterNetPreTrainedModel",
    "CifarResNetConfig",
    "CifarResNetModel",
    "CifarResNetForImageClassification",
    "CifarResNetPreTrainedModel",
    "BLOCK_KINDS",
    "block_kinds",
    "block_states",
    "residual_branches",
    "build_image_processor",
    "convert_original_checkpoint",
    "DATASETS",
    "create_config",
    "create_model",
    "list_models",
    "EVALUATE_METRIC_PATH",
    "classification_metrics",
]
