"""Pieces shared by the zoo's model files: stochastic depth, weight init, input checks, the loss.

Kept free of package imports so that it travels with the modeling files for `trust_remote_code=True`.
"""

import math

import torch
from torch import nn


def linear_drop_path_rates(max_rate: float, num_blocks: int) -> list[float]:
    """Stochastic-depth rate of each block, rising linearly from 0 to `max_rate` (Huang et al. 2016)."""
    return [max_rate * j / max(num_blocks - 1, 1) for j in range(num_blocks)]


class DropPath(nn.Module):
    """Drops the whole residual branch per sample during training, rescaling the kept ones."""

    def __init__(self, rate: float):
        super().__init__()
        self.rate = rate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.rate == 0.0 or not self.training:
            return x
        keep = 1.0 - self.rate
        mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
        return x * mask / keep

    def extra_repr(self) -> str:
        return f"rate={self.rate:.3f}"


@torch.no_grad()
def reset_parameters(module: nn.Module) -> None:
    """He init for convs, torch's default for linears (so a re-initialised head looks like a new one), unit BN."""
    if isinstance(module, nn.Conv2d):
        nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Linear):
        nn.init.kaiming_uniform_(module.weight, a=math.sqrt(5))
        if module.bias is not None:
            bound = 1 / math.sqrt(module.weight.shape[1])
            nn.init.uniform_(module.bias, -bound, bound)
    elif isinstance(module, nn.BatchNorm2d):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)
        # Through nn.init, which transformers guards, so statistics loaded by from_pretrained survive.
        nn.init.zeros_(module.running_mean)
        nn.init.ones_(module.running_var)
        nn.init.zeros_(module.num_batches_tracked)


def check_pixel_values(pixel_values: torch.Tensor, config, *, min_size: int) -> None:
    """Fail with a message that says what to change, instead of a shape error deep inside a conv."""
    if not isinstance(pixel_values, torch.Tensor) or pixel_values.ndim != 4:
        shape = tuple(pixel_values.shape) if isinstance(pixel_values, torch.Tensor) else type(pixel_values).__name__
        raise ValueError(f"pixel_values must be a tensor of shape (batch, channels, height, width), got {shape}")
    if pixel_values.shape[1] != config.num_channels:
        raise ValueError(
            f"pixel_values has {pixel_values.shape[1]} channels but the model expects {config.num_channels} "
            "(config.num_channels): convert the images, e.g. PIL `.convert('RGB')`, or use the image processor"
        )
    height, width = pixel_values.shape[-2:]
    if height < min_size or width < min_size:
        raise ValueError(
            f"pixel_values of size {height}×{width} is smaller than the {min_size}×{min_size} this model can "
            f"take: resize the images (the saved image processor resizes to {config.image_size}×{config.image_size})"
        )


def classification_loss(logits: torch.Tensor, labels: torch.Tensor, num_labels: int) -> torch.Tensor:
    """Cross-entropy on integer labels, or on soft targets (Mixup/CutMix) given as probabilities."""
    if labels.dtype.is_floating_point:
        if labels.shape != logits.shape:
            raise ValueError(
                f"soft labels must have the logits' shape {tuple(logits.shape)}, got {tuple(labels.shape)}"
            )
        return torch.sum(-labels * torch.log_softmax(logits.float(), dim=-1), dim=-1).mean()
    labels = labels.view(-1)
    if labels.numel() and (labels.min() < 0 or labels.max() >= num_labels):
        raise ValueError(
            f"labels must lie in [0, {num_labels}) (config.num_labels), got values in "
            f"[{int(labels.min())}, {int(labels.max())}]"
        )
    return nn.functional.cross_entropy(logits.float(), labels)


def build_image_processor(config):
    """The preprocessing a zoo model expects: resize any photo to the training size, then normalise.

    Uses transformers' own `ViTImageProcessor`, so `AutoImageProcessor` and `pipeline` need no custom code.
    """
    from transformers import ViTImageProcessor

    size = config.image_size
    return ViTImageProcessor(
        do_resize=True,
        size={"height": size, "width": size},
        resample=2,  # PIL bilinear (antialiased when shrinking a photo to 32×32)
        image_mean=list(getattr(config, "image_mean", (0.5, 0.5, 0.5))),
        image_std=list(getattr(config, "image_std", (0.5, 0.5, 0.5))),
    )


def save_image_processor(config, save_directory) -> None:
    build_image_processor(config).save_pretrained(save_directory)


class ZooModelMixin:
    """`save_pretrained` that also writes the image processor and, on request, the remote code."""

    saves_image_processor = True
    auto_classes: dict[str, str]  # transformers auto class -> our class name, for `auto_map`

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """Like transformers', but a checkpoint that lacks backbone weights is an error, not a random model.

        Only a classifier may be missing (a new head on a pretrained backbone)."""
        output_loading_info = kwargs.pop("output_loading_info", False)
        model, loading_info = super().from_pretrained(*args, output_loading_info=True, **kwargs)
        missing = sorted(key for key in loading_info["missing_keys"] if not key.startswith("classifier."))
        if missing:
            raise ValueError(
                f"the checkpoint lacks {len(missing)} weights of {cls.__name__}, e.g. {missing[:3]}: it was saved "
                "from another architecture or configuration, or the file is damaged; save it again"
            )
        return (model, loading_info) if output_loading_info else model

    def save_pretrained(self, save_directory, *args, remote_code: bool = False, **kwargs):
        """Like transformers', plus `preprocessor_config.json`; with `remote_code=True` also the modeling
        files and an `auto_map`, so the folder loads with `trust_remote_code=True` without `alternet_hf`."""
        import os
        import shutil
        import sys

        from transformers.dynamic_module_utils import get_relative_import_files

        if remote_code:
            modeling = type(self).__module__.rsplit(".", 1)[-1]
            configuration = type(self.config).__module__.rsplit(".", 1)[-1]
            self.config.auto_map = {
                "AutoConfig": f"{configuration}.{type(self.config).__name__}",
                **{auto: f"{modeling}.{name}" for auto, name in self.auto_classes.items()},
            }
        try:
            super().save_pretrained(save_directory, *args, **kwargs)
        finally:
            if remote_code:
                del self.config.auto_map
        if not kwargs.get("is_main_process", True):
            return
        save_image_processor(self.config, save_directory)
        if remote_code:
            module_file = sys.modules[type(self).__module__].__file__
            for source in [module_file, *get_relative_import_files(module_file)]:
                shutil.copyfile(source, os.path.join(save_directory, os.path.basename(source)))
