"""Pieces shared by the zoo's model files: stochastic depth, weight init, input checks, the loss, error hints.

Kept free of package imports so that it travels with the modeling files for `trust_remote_code=True`.
"""

import difflib
import math

import torch
from torch import nn


def close_match_hints(unknown, known) -> str:
    """`; did you mean 'x' for 'y'?` for each `unknown` name that a `known` one resembles, to end an error message."""
    hints = {key: difflib.get_close_matches(key, known, n=1) for key in unknown}
    return "".join(f"; did you mean {hint[0]!r} for {key!r}?" for key, hint in hints.items() if hint)


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
        return x * self._sample_scale(x)

    def _sample_scale(self, x: torch.Tensor) -> torch.Tensor:
        """Per sample: 0 (dropped) or 1/keep (kept), shaped to broadcast over `x`."""
        keep = 1.0 - self.rate
        return x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep).div_(keep)

    def extra_repr(self) -> str:
        return f"rate={self.rate:.3f}"


def add_residual(drop_path: nn.Module, shortcut: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """`shortcut + drop_path(residual)`: a residual block's sum, one fused multiply-add with the zoo's `DropPath` in
    training. Any other module in its place, or hooks on it (the lesion study's), get the plain sum: they always see
    the branch."""
    if (
        not isinstance(drop_path, DropPath)
        or drop_path.rate == 0.0
        or not drop_path.training
        or drop_path._forward_hooks
        or drop_path._forward_pre_hooks
    ):
        return shortcut + drop_path(residual)
    return torch.addcmul(shortcut, residual, drop_path._sample_scale(residual))


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


def check_pixel_values(
    pixel_values: torch.Tensor, *, num_channels: int, image_size: int, min_size: int, dtype: torch.dtype
) -> torch.Tensor:
    """Fail with a message that says what to change, instead of an error deep inside a conv; return the images in
    the model's dtype. Plain values, not the config, so that `torch.fx.wrap` can keep it one call in a traced graph."""
    if not isinstance(pixel_values, torch.Tensor) or pixel_values.ndim != 4:
        shape = tuple(pixel_values.shape) if isinstance(pixel_values, torch.Tensor) else type(pixel_values).__name__
        raise ValueError(f"pixel_values must be a tensor of shape (batch, channels, height, width), got {shape}")
    check_pixel_batch(pixel_values)
    if pixel_values.shape[1] != num_channels:
        raise ValueError(
            f"pixel_values has {pixel_values.shape[1]} channels but the model expects {num_channels} "
            "(config.num_channels): convert the images, e.g. PIL `.convert('RGB')`, or use the image processor"
        )
    height, width = pixel_values.shape[-2:]
    if height < min_size or width < min_size:
        raise ValueError(
            f"pixel_values of size {height}×{width} is smaller than the {min_size}×{min_size} this model can "
            f"take: resize the images (the saved image processor resizes to {image_size}×{image_size})"
        )
    return pixel_values.to(dtype)


# The smallest batch computed in channels-last on the CPU. Below it, oneDNN's per-call work on the weights outweighs
# what the layout saves (measured both ways in alternet-hf's benchmarks).
CHANNELS_LAST_MIN_BATCH = 8


def compute_layout(pixel_values: torch.Tensor) -> torch.Tensor:
    """The images in the memory layout the convolutions run fastest in: channels-last on the CPU for a batch of
    `CHANNELS_LAST_MIN_BATCH` or more, where oneDNN reorders every NCHW input. Every later map
    follows, so feature maps are channels-last tensors (`.reshape` them, not `.view`). Otherwise the caller's layout
    is kept: on CUDA the engine chooses it, and a compiled or exported graph leaves layouts to its compiler."""
    if (
        pixel_values.device.type != "cpu"
        or torch.compiler.is_compiling()  # true while exporting too
        or pixel_values.shape[0] < CHANNELS_LAST_MIN_BATCH
    ):
        return pixel_values
    return pixel_values.contiguous(memory_format=torch.channels_last)


def check_pixel_batch(pixel_values: torch.Tensor) -> None:
    """A batch of no images, or of raw pixels (uint8 0-255, any integer type), is not what a zoo model takes."""
    if pixel_values.shape[0] == 0:
        raise ValueError("pixel_values holds no images (a batch of 0): skip empty batches")
    if not pixel_values.dtype.is_floating_point:
        raise ValueError(
            f"pixel_values has dtype {pixel_values.dtype}, raw pixels; the model takes normalised floats: use the "
            "image processor (AutoImageProcessor.from_pretrained(model folder)), or divide by 255 and normalise "
            "with config.image_mean and config.image_std"
        )


PROBLEM_TYPES = ("regression", "single_label_classification", "multi_label_classification")
IGNORE_INDEX = -100  # transformers' label for "no target"


def image_classification_loss(
    labels: torch.Tensor, logits: torch.Tensor, config, num_items_in_batch=None, **forward_kwargs
) -> torch.Tensor:
    """The zoo's loss, one for every family, chosen by `config.problem_type` as in transformers' ResNet, except that
    float labels are soft single-label targets (Mixup/CutMix), not multi-label, and an inferred type is not written
    into the config (a saved model keeps what it was given). In float32 whatever the model's dtype;
    `num_items_in_batch` (labelled samples over an accumulated batch) turns the mean into a sum divided by it, as
    transformers' loss does.
    """
    labels = labels.to(logits.device)
    if logits.shape[0] == 0 or labels.numel() == 0:
        raise ValueError(
            "labels hold no samples (a batch of 0 images): the loss of an empty batch is undefined; skip empty batches"
        )
    num_labels = config.num_labels
    problem_type = config.problem_type
    if problem_type is None:
        if num_labels == 1:
            problem_type = "regression"
        elif labels.dtype == torch.bool:  # multi-hot flags
            problem_type = "multi_label_classification"
        else:  # class indices, or soft targets (float)
            problem_type = "single_label_classification"
    logits = logits.float()
    if problem_type == "regression":
        if labels.numel() != logits.numel():
            raise ValueError(
                f"regression labels must have one value per output, {tuple(logits.shape)}; got {tuple(labels.shape)}"
            )
        return nn.functional.mse_loss(logits.view(-1), labels.reshape(-1).float())
    if problem_type == "multi_label_classification":
        if labels.shape != logits.shape:
            raise ValueError(
                f"multi-label labels must be 0/1 per class, of the logits' shape {tuple(logits.shape)}; "
                f"got {tuple(labels.shape)}"
            )
        return nn.functional.binary_cross_entropy_with_logits(logits, labels.float())
    if problem_type != "single_label_classification":
        raise ValueError(f"config.problem_type must be one of {PROBLEM_TYPES} or None, got {problem_type!r}")
    reduction = "mean" if num_items_in_batch is None else "sum"
    if labels.dtype.is_floating_point:
        if labels.shape != logits.shape:
            raise ValueError(
                f"soft labels must have the logits' shape {tuple(logits.shape)}, got {tuple(labels.shape)}"
            )
        loss = nn.functional.cross_entropy(logits, labels.float(), reduction=reduction)
    else:
        labels = labels.reshape(-1)
        if labels.shape[0] != logits.shape[0]:
            raise ValueError(f"got {labels.shape[0]} labels for {logits.shape[0]} images: give one class index each")
        kept = labels[labels != IGNORE_INDEX]
        if kept.numel() == 0:
            raise ValueError(f"every label is {IGNORE_INDEX} (ignored): the batch has nothing to learn from")
        if kept.min() < 0 or kept.max() >= num_labels:
            raise ValueError(
                f"labels must lie in [0, {num_labels}) (config.num_labels), or be {IGNORE_INDEX} to ignore a "
                f"sample; got values in [{int(kept.min())}, {int(kept.max())}]"
            )
        loss = nn.functional.cross_entropy(logits, labels, ignore_index=IGNORE_INDEX, reduction=reduction)
    if num_items_in_batch is not None:
        loss = loss / torch.as_tensor(num_items_in_batch, device=loss.device)
    return loss


def build_image_processor(config):
    """The preprocessing a zoo model expects, as transformers' own `ViTImageProcessor` (no custom code to load)."""
    from transformers import ViTImageProcessor

    size = config.image_size
    return ViTImageProcessor(
        do_resize=True,
        size={"height": size, "width": size},
        resample=2,  # PIL bilinear (antialiased when shrinking a photo to 32×32)
        image_mean=_per_channel(getattr(config, "image_mean", 0.5)),
        image_std=_per_channel(getattr(config, "image_std", 0.5)),
    )


def _per_channel(value) -> float | list[float]:
    """One value for every channel, or one per channel (a config may hold either, as the processor does)."""
    return float(value) if isinstance(value, (int, float)) else [float(v) for v in value]


def keep_batch_norm_statistics(checkpoint, layer: nn.Module):
    """`checkpoint` for `layer` whose recomputation in the backward pass leaves batch-norm running statistics as the
    forward pass left them (a training-mode BatchNorm would count the batch twice)."""
    norms = [m for m in layer.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]

    def checkpointed(function, *args, **kwargs):
        runs = 0

        def run(*inputs):
            nonlocal runs
            runs += 1
            if runs == 1:
                return function(*inputs)
            # The recomputation updates copies, which its graph may keep; the model keeps its own statistics.
            kept = [(norm, norm.running_mean, norm.running_var, norm.num_batches_tracked) for norm in norms]
            for norm, mean, var, count in kept:
                norm.running_mean, norm.running_var, norm.num_batches_tracked = mean.clone(), var.clone(), count.clone()
            try:
                return function(*inputs)
            finally:
                for norm, mean, var, count in kept:
                    norm.running_mean, norm.running_var, norm.num_batches_tracked = mean, var, count

        return checkpoint(run, *args, **kwargs)

    return checkpointed


class ZooModelMixin:
    """What the zoo's own models add to `PreTrainedModel`: the zoo's loss, gradient checkpointing that keeps batch-norm
    statistics exact, `save_pretrained` that also writes the image processor and, on request, the remote code."""

    main_input_name = "pixel_values"
    supports_gradient_checkpointing = True
    auto_classes: dict[str, str]  # transformers auto class -> our class name, for `auto_map`

    def _init_weights(self, module: nn.Module) -> None:
        reset_parameters(module)

    @property
    def loss_function(self):
        """`image_classification_loss`, unless replaced (`model.loss_function = ...`, as on any transformers model)."""
        return getattr(self, "_loss_function", image_classification_loss)

    @loss_function.setter
    def loss_function(self, value):
        self._loss_function = value

    def _set_gradient_checkpointing(self, *args, **kwargs):
        """transformers' switch, then each checkpointed layer's function wrapped by `keep_batch_norm_statistics`."""
        from transformers.modeling_layers import GradientCheckpointingLayer

        super()._set_gradient_checkpointing(*args, **kwargs)
        for module in self.modules():
            if isinstance(module, GradientCheckpointingLayer) and hasattr(module, "_gradient_checkpointing_func"):
                module._gradient_checkpointing_func = keep_batch_norm_statistics(
                    module._gradient_checkpointing_func, module
                )

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """Like transformers', but weights missing beyond the classifier's are an error, not a random model."""
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
        build_image_processor(self.config).save_pretrained(save_directory)
        if remote_code:
            module_file = sys.modules[type(self).__module__].__file__
            for source in [module_file, *get_relative_import_files(module_file)]:
                shutil.copyfile(source, os.path.join(save_directory, os.path.basename(source)))
