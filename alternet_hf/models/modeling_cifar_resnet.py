"""Post-activation ResNet for small images, the CNN baseline of "How Do Vision Transformers Work?".

Paper: He et al., "Deep Residual Learning for Image Recognition" (CVPR 2016), in the CIFAR form the
reference code `xxxnell/how-do-vits-work` trained and released (`resnet_50_cifar100_*.pth.tar`): no max-pool in
the stem, the stride on the bottleneck's 3×3 conv, projection shortcuts (1×1 conv + BN) where the shape changes.
Added: optional stochastic depth (off by default, as there) and one hidden state per block.

This file imports only its configuration and `modeling_common`: they are copied next to the weights for
`trust_remote_code=True`.
"""

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPoolingAndNoAttention, ImageClassifierOutputWithNoAttention

from .configuration_cifar_resnet import CifarResNetConfig
from .modeling_common import (
    DropPath,
    ZooModelMixin,
    add_residual,
    check_pixel_values,
    compute_layout,
    linear_drop_path_rates,
)


class CifarResNetConvLayer(nn.Sequential):
    """Conv (no bias) → BN → optional ReLU: the post-activation unit."""

    def __init__(
        self, in_channels: int, out_channels: int, *, kernel_size: int, stride: int = 1, activation: bool = True
    ):
        super().__init__()
        self.convolution = nn.Conv2d(
            in_channels, out_channels, kernel_size, stride=stride, padding=kernel_size // 2, bias=False
        )
        self.normalization = nn.BatchNorm2d(out_channels)
        self.activation = nn.ReLU(inplace=True) if activation else nn.Identity()


class CifarResNetEmbeddings(nn.Module):
    """The stem: 3×3/1 conv → BN → ReLU for CIFAR; 7×7/2 conv → BN → ReLU → 3×3/2 max-pool for ImageNet."""

    def __init__(self, config: CifarResNetConfig):
        super().__init__()
        cifar = config.stem_type == "cifar"
        self.embedder = CifarResNetConvLayer(
            config.num_channels, config.embedding_size, kernel_size=3 if cifar else 7, stride=1 if cifar else 2
        )
        self.pooler = nn.Identity() if cifar else nn.MaxPool2d(kernel_size=3, stride=2, padding=1)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.pooler(self.embedder(pixel_values))


class CifarResNetBasicLayer(GradientCheckpointingLayer):
    """3×3 → 3×3, then add the shortcut and apply ReLU (post-activation)."""

    def __init__(self, in_channels: int, out_channels: int, *, stride: int, drop_path_rate: float):
        super().__init__()
        self.shortcut = (
            CifarResNetConvLayer(in_channels, out_channels, kernel_size=1, stride=stride, activation=False)
            if stride != 1 or in_channels != out_channels
            else nn.Identity()
        )
        self.layer = self.residual_branch(in_channels, out_channels, stride)
        self.drop_path = DropPath(drop_path_rate)
        self.activation = nn.ReLU(inplace=True)

    @staticmethod
    def residual_branch(in_channels: int, out_channels: int, stride: int) -> nn.Sequential:
        return nn.Sequential(
            CifarResNetConvLayer(in_channels, out_channels, kernel_size=3, stride=stride),
            CifarResNetConvLayer(out_channels, out_channels, kernel_size=3, activation=False),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(add_residual(self.drop_path, self.shortcut(x), self.layer(x)))


class CifarResNetBottleNeckLayer(CifarResNetBasicLayer):
    """1×1 reduce → 3×3 (stride) → 1×1 expand (×4), then add the shortcut and apply ReLU."""

    @staticmethod
    def residual_branch(in_channels: int, out_channels: int, stride: int) -> nn.Sequential:
        width = out_channels // 4
        return nn.Sequential(
            CifarResNetConvLayer(in_channels, width, kernel_size=1),
            CifarResNetConvLayer(width, width, kernel_size=3, stride=stride),
            CifarResNetConvLayer(width, out_channels, kernel_size=1, activation=False),
        )


class CifarResNetStage(nn.Module):
    def __init__(self, layers: list[nn.Module]):
        super().__init__()
        self.layers = nn.ModuleList(layers)


class CifarResNetEncoder(nn.Module):
    def __init__(self, config: CifarResNetConfig):
        super().__init__()
        layer_class = CifarResNetBottleNeckLayer if config.block_type == "bottleneck" else CifarResNetBasicLayer
        rates = linear_drop_path_rates(config.drop_path_rate, sum(config.depths))
        stages, in_channels, block_index = [], config.embedding_size, 0
        for stage_index, (depth, out_channels) in enumerate(zip(config.depths, config.hidden_sizes)):
            layers = []
            for j in range(depth):
                stride = 2 if stage_index > 0 and j == 0 else 1
                layers.append(layer_class(in_channels, out_channels, stride=stride, drop_path_rate=rates[block_index]))
                in_channels, block_index = out_channels, block_index + 1
            stages.append(CifarResNetStage(layers))
        self.stages = nn.ModuleList(stages)

    def blocks(self) -> list[nn.Module]:
        return [layer for stage in self.stages for layer in stage.layers]


class CifarResNetPreTrainedModel(ZooModelMixin, PreTrainedModel):
    auto_classes = {
        "AutoModel": "CifarResNetModel",
        "AutoModelForImageClassification": "CifarResNetForImageClassification",
    }
    config_class = CifarResNetConfig
    config: CifarResNetConfig
    base_model_prefix = "resnet"
    _no_split_modules = ["CifarResNetBasicLayer", "CifarResNetBottleNeckLayer"]

    def block_kinds(self) -> list[str]:
        """The kind of each entry of `output_hidden_states`: the stem, every residual block, the head input."""
        return ["stem"] + ["conv"] * sum(self.config.depths) + ["head"]


class CifarResNetModel(CifarResNetPreTrainedModel):
    def __init__(self, config: CifarResNetConfig):
        super().__init__(config)
        self.embedder = CifarResNetEmbeddings(config)
        self.encoder = CifarResNetEncoder(config)
        self.pooler = nn.AdaptiveAvgPool2d(1)
        self.post_init()

    def forward(
        self,
        pixel_values: torch.Tensor,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> BaseModelOutputWithPoolingAndNoAttention | tuple:
        output_hidden_states = (
            output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
        )
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        pixel_values = check_pixel_values(
            pixel_values,
            num_channels=self.config.num_channels,
            image_size=self.config.image_size,
            min_size=1,
            dtype=self.embedder.embedder.convolution.weight.dtype,
        )
        pixel_values = compute_layout(pixel_values)

        hidden_state = self.embedder(pixel_values)
        hidden_states = [hidden_state]
        for block in self.encoder.blocks():
            hidden_state = block(hidden_state)
            hidden_states.append(hidden_state)
        # The head input is the last block's output itself (post-activation nets end activated).
        hidden_states.append(hidden_state)
        pooled_output = self.pooler(hidden_state).flatten(1)

        hidden_states = tuple(hidden_states) if output_hidden_states else None
        if not return_dict:
            return tuple(v for v in (hidden_state, pooled_output, hidden_states) if v is not None)
        return BaseModelOutputWithPoolingAndNoAttention(
            last_hidden_state=hidden_state, pooler_output=pooled_output, hidden_states=hidden_states
        )


class CifarResNetForImageClassification(CifarResNetPreTrainedModel):
    def __init__(self, config: CifarResNetConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.resnet = CifarResNetModel(config)
        self.classifier = (
            nn.Linear(config.hidden_sizes[-1], config.num_labels) if config.num_labels > 0 else nn.Identity()
        )
        self.post_init()

    def forward(
        self,
        pixel_values: torch.Tensor,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> ImageClassifierOutputWithNoAttention | tuple:
        """Logits, and the `loss` when `labels` are given (see `modeling_common.image_classification_loss`)."""
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        outputs = self.resnet(pixel_values, output_hidden_states=output_hidden_states, return_dict=True)
        logits = self.classifier(outputs.pooler_output)
        loss = self.loss_function(labels, logits, self.config) if labels is not None else None
        if not return_dict:
            output = (logits,) + ((outputs.hidden_states,) if outputs.hidden_states is not None else ())
            return ((loss,) + output) if loss is not None else output
        return ImageClassifierOutputWithNoAttention(loss=loss, logits=logits, hidden_states=outputs.hidden_states)
