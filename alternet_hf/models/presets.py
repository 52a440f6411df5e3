"""Named presets of the zoo: `<architecture>-<dataset>`, the names of the Hub repos.

Each architecture is one entry of `ARCHITECTURES`, its family's builder with the fields of its size; each dataset
fixes the labels, image size and normalisation. The names are known without importing torch or transformers (a
command checks `--model` at once); building a preset imports them.
"""

from __future__ import annotations

import difflib
import os
import types
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from ..utils import damaged_model_file

if TYPE_CHECKING:
    from torch import nn
    from transformers import PretrainedConfig, PreTrainedModel, ViTConfig

    from .configuration_alternet import AlterNetConfig
    from .configuration_cifar_resnet import CifarResNetConfig


@dataclass(frozen=True)
class DatasetSpec:
    """What a preset takes from its dataset."""

    num_labels: int
    image_size: int
    image_mean: tuple[float, float, float]
    image_std: tuple[float, float, float]

    @property
    def is_small(self) -> bool:
        """32×32 data: CIFAR stem, 4×4 attention windows, 2×2 ViT patches."""
        return self.image_size <= 64

    def config_fields(self) -> dict:
        """The fields of every preset's config that the dataset fixes."""
        return dict(
            num_labels=self.num_labels,
            image_size=self.image_size,
            image_mean=list(self.image_mean),
            image_std=list(self.image_std),
        )


DATASETS = {
    "cifar10": DatasetSpec(10, 32, (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": DatasetSpec(100, 32, (0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761)),
    "imagenet": DatasetSpec(1000, 224, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
}


def _alternet(data: DatasetSpec, **fields) -> AlterNetConfig:
    from .configuration_alternet import AlterNetConfig

    stem = dict(stem_type="cifar", window_size=4) if data.is_small else dict(stem_type="imagenet", window_size=7)
    return AlterNetConfig(**stem, **data.config_fields(), **fields)


def _resnet(data: DatasetSpec, **fields) -> CifarResNetConfig:
    from .configuration_cifar_resnet import CifarResNetConfig

    return CifarResNetConfig(stem_type="cifar" if data.is_small else "imagenet", **data.config_fields(), **fields)


# transformers' ViTConfig checks none of these; a typo would divide by zero or build for minutes. Upper bounds
# far beyond any published ViT (ViT-22B: width 6144, MLP 24576, 48 layers, 48 heads).
VIT_FIELD_LIMITS = dict(
    num_channels=1024,
    image_size=8192,
    patch_size=8192,
    hidden_size=16384,
    num_hidden_layers=256,
    num_attention_heads=256,
    intermediate_size=65536,
)


def validate_vit_config(config: ViTConfig) -> None:
    """Raise `ValueError` naming the first field of a ViT configuration that cannot describe a ViT."""
    from .configuration_common import check_rates, check_sizes

    check_sizes(config, VIT_FIELD_LIMITS)
    if config.patch_size > config.image_size:
        raise ValueError(f"ViTConfig.patch_size={config.patch_size} is larger than image_size={config.image_size}")
    if config.hidden_size % config.num_attention_heads:
        raise ValueError(
            f"ViTConfig.hidden_size={config.hidden_size} is not divisible by "
            f"num_attention_heads={config.num_attention_heads}"
        )
    # drop_path_rate, which transformers' ViT lacks, is checked where it is added (`add_vit_stochastic_depth`).
    check_rates(config, "hidden_dropout_prob", "attention_probs_dropout_prob")


def _vit(data: DatasetSpec, **fields) -> ViTConfig:
    from transformers import ViTConfig

    # timm's ViT (the reference's): exact GELU, LayerNorm eps 1e-6, no qkv bias, CLS pooling; stochastic
    # depth (off by default, as in timm) is ours, added by `add_vit_stochastic_depth`.
    return ViTConfig(
        patch_size=2 if data.is_small else 16,
        hidden_act="gelu",
        layer_norm_eps=1e-6,
        qkv_bias=False,
        drop_path_rate=0.0,
        **data.config_fields(),
        **fields,
    )


def _timm(family: str, data: DatasetSpec, **overrides) -> PretrainedConfig:
    """timm's PiT-Ti or Swin-T; for 32×32 images the reference's arguments (`timm_families.FAMILIES`): PiT's 2×2
    patches at stride 1 (31×31 tokens in the first stage), Swin's patch 1, 4×4 windows and no qkv bias."""
    from .timm_families import timm_config

    return timm_config(family, data, **overrides)


BASIC = dict(block_type="basic", hidden_sizes=(64, 128, 256, 512))
BOTTLENECK = dict(block_type="bottleneck", hidden_sizes=(256, 512, 1024, 2048))
TIMM_ARCHITECTURES = {"pit-ti": "pit", "swin-ti": "swin"}  # timm's modules (timm_families), not ours

# Each architecture: its family's builder with the fields of its size, called with a `DatasetSpec`.
ARCHITECTURES: dict[str, Callable[..., PretrainedConfig]] = {
    "alternet-18": partial(_alternet, **BASIC, depths=(2, 2, 2, 2), num_attention_blocks=(0, 1, 1, 1)),
    "alternet-34": partial(_alternet, **BASIC, depths=(3, 4, 6, 4), num_attention_blocks=(0, 1, 3, 2)),
    # The paper's layout (c2 CCCM, c3 CCCCCM, c4 CMCM); pass `num_attention_blocks=(0, 1, 3, 2)` for the code's.
    "alternet-50": partial(_alternet, **BOTTLENECK, depths=(3, 4, 6, 4), num_attention_blocks=(0, 1, 1, 2)),
    "alternet-101": partial(_alternet, **BOTTLENECK, depths=(3, 4, 23, 4), num_attention_blocks=(0, 1, 3, 2)),
    "alternet-152": partial(_alternet, **BOTTLENECK, depths=(3, 8, 36, 4), num_attention_blocks=(0, 1, 3, 2)),
    "resnet-18": partial(_resnet, **BASIC, depths=(2, 2, 2, 2)),
    "resnet-34": partial(_resnet, **BASIC, depths=(3, 4, 6, 3)),
    "resnet-50": partial(_resnet, **BOTTLENECK, depths=(3, 4, 6, 3)),
    "resnet-101": partial(_resnet, **BOTTLENECK, depths=(3, 4, 23, 3)),
    "resnet-152": partial(_resnet, **BOTTLENECK, depths=(3, 8, 36, 3)),
    "vit-ti": partial(_vit, hidden_size=192, num_hidden_layers=12, num_attention_heads=3, intermediate_size=768),
    "vit-s": partial(_vit, hidden_size=384, num_hidden_layers=12, num_attention_heads=6, intermediate_size=1536),
    "vit-b": partial(_vit, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
    **{architecture: partial(_timm, family) for architecture, family in TIMM_ARCHITECTURES.items()},
}


# The models the paper compares (its Fig. 1 and the reference's released CIFAR-100 checkpoints, with AlterNet).
PAPER_MODELS = ("resnet-50-cifar100", "vit-ti-cifar100", "pit-ti-cifar100", "swin-ti-cifar100", "alternet-50-cifar100")
HUB_ORGANISATION = "alternet-hf"  # where the zoo publishes its models
FAMILY_NAMES = {"alternet": "AlterNet", "resnet": "ResNet", "vit": "ViT", "pit": "PiT", "swin": "Swin"}


def display_name(preset: str) -> str:
    """`alternet-50-cifar100` -> `AlterNet-50`, `vit-ti-cifar100` -> `ViT-Ti`: the names of the Space and reports."""
    family, size = preset.split("-")[:2]
    return f"{FAMILY_NAMES.get(family, family)}-{size.title()}"


def list_models(pattern: str | None = None) -> list[str]:
    """Every preset name, optionally only those containing `pattern` (e.g. `"cifar100"`, `"alternet"`)."""
    names = [f"{arch}-{dataset}" for arch in ARCHITECTURES for dataset in DATASETS]
    return sorted(name for name in names if pattern is None or pattern in name)


def create_config(name: str, **overrides) -> PretrainedConfig:
    """The configuration of a preset, with fields overridden (validated by the config class)."""
    from transformers import ViTConfig

    from .modeling_common import close_match_hints

    for dataset, spec in DATASETS.items():
        arch = name.removesuffix(f"-{dataset}")
        if arch != name and arch in ARCHITECTURES:
            if arch in TIMM_ARCHITECTURES:  # fields and timm arguments, checked against timm's class
                return ARCHITECTURES[arch](spec, **overrides)
            config = ARCHITECTURES[arch](spec)
            unknown = [key for key in overrides if not hasattr(config, key)]
            if unknown:
                hints = close_match_hints(unknown, list(config.to_dict()))
                raise ValueError(f"{type(config).__name__} has no field(s) {unknown}{hints}")
            fields = config.to_dict()
            if "num_labels" in overrides:  # new label count: the preset's label names no longer apply
                for key in ("id2label", "label2id"):
                    fields.pop(key, None)
            config = type(config).from_dict({**fields, **overrides}) if overrides else config
            if isinstance(config, ViTConfig):  # ours validate themselves
                validate_vit_config(config)
            return config
    raise ValueError(unknown_preset_message(name))


def unknown_preset_message(name: str) -> str:
    close = difflib.get_close_matches(name, list_models(), n=3, cutoff=0.6)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return (
        f"Unknown model {name!r}: not a preset, a local directory, nor a Hub id (owner/name).{hint} "
        "alternet_hf.list_models() lists the presets."
    )


def loads_weights(name: str) -> bool:
    """Whether `create_model(name)` loads trained weights (a folder or a Hub id), rather than building a preset. A
    preset's name is the preset unless a saved model of that name is at hand (a folder with its `config.json`), not
    where some other folder has that name (`hf download ... --local-dir <preset>`)."""
    if name in list_models():
        return os.path.isfile(os.path.join(name, "config.json"))
    return os.path.isdir(name) or "/" in name


def create_model(name: str, *, num_labels: int | None = None, **overrides) -> PreTrainedModel:
    """A randomly initialised preset, or a model loaded from a directory or Hub id.

    For a loaded model, `num_labels` replaces the classifier where the count differs, and `overrides` go to
    `from_pretrained` as config fields; an override that reshapes the backbone is an error, not a silently
    re-initialised layer.
    """
    from transformers import AutoModelForImageClassification

    from .timm_families import classifier_prefix

    if loads_weights(name):
        problem = os.path.isdir(name) and damaged_model_file(name)
        if problem:
            raise ValueError(problem)
        _check_config_fields(name, overrides)
        if num_labels is None:
            return _finish(AutoModelForImageClassification.from_pretrained(name, **overrides))
        labels = {i: f"LABEL_{i}" for i in range(num_labels)}  # num_labels first: timm configs read it before id2label
        overrides.update(num_labels=num_labels, id2label=labels, label2id={v: k for k, v in labels.items()})
        model, info = AutoModelForImageClassification.from_pretrained(
            name, output_loading_info=True, ignore_mismatched_sizes=True, **overrides
        )
        changed = [key for key, *_ in info["mismatched_keys"]] + [*info["missing_keys"], *info["unexpected_keys"]]
        changed = sorted(key for key in changed if not key.startswith(classifier_prefix(model)))
        if changed:
            asked = sorted(set(overrides) - {"num_labels", "id2label", "label2id"})
            raise ValueError(
                f"{name}: with the overrides {asked}, pretrained weights no longer fit the model "
                f"({', '.join(changed[:5])}...); a loaded model keeps its architecture: drop those overrides"
            )
        return _finish(model)
    return build_preset(name, **overrides, **({} if num_labels is None else {"num_labels": num_labels}))


def build_preset(name: str, **overrides) -> PreTrainedModel:
    """The preset `name`, randomly initialised, even where a saved model of that name is at hand (timm builds presets
    by name)."""
    from transformers import AutoModelForImageClassification

    return _finish(AutoModelForImageClassification.from_config(create_config(name, **overrides)))


def create_classifier(name: str, class_names: list[str], **overrides) -> PreTrainedModel:
    """`create_model` with a classifier for `class_names` (a loaded model's replaced where the count differs), its
    labels named after them: the model a training or fine-tuning run starts from."""
    model = create_model(name, num_labels=len(class_names), **overrides)
    model.config.id2label = dict(enumerate(class_names))
    model.config.label2id = {label: i for i, label in enumerate(class_names)}
    return model


def _check_config_fields(name: str, overrides: dict) -> None:
    """Overrides of a loaded model must be config fields, never a loading option such as `trust_remote_code`."""
    if not overrides:
        return
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(name)
    unknown = sorted(key for key in overrides if not hasattr(config, key))
    if unknown:
        raise ValueError(
            f"{unknown} are not fields of {name}'s {type(config).__name__}: model overrides set configuration "
            "fields only (loading options such as trust_remote_code are refused)"
        )


def _finish(model: PreTrainedModel) -> PreTrainedModel:
    """Give transformers' ViT and the `TimmWrapperForImageClassification` holding PiT and Swin what the zoo's classes
    have by definition: the zoo's loss (`accepts_loss_kwargs = False`: the `Trainer` averages micro-batch losses), its
    input checks, ViT's stochastic depth, and a `save_pretrained` that also writes the image processor (ViT) or uses
    timm's weight names (PiT, Swin). Attached at every build and load, so that folders load without alternet_hf."""
    from .modeling_common import ZooModelMixin, image_classification_loss
    from .timm_families import check_fixed_size_pixels, is_timm_wrapper, save_with_timm_names

    if isinstance(model, ZooModelMixin):
        return model
    wraps_timm = is_timm_wrapper(model)
    model.loss_function, model.accepts_loss_kwargs = image_classification_loss, False
    model.register_forward_pre_hook(check_fixed_size_pixels if wraps_timm else _check_vit_pixels, with_kwargs=True)
    model.save_pretrained = types.MethodType(save_with_timm_names if wraps_timm else _save_with_image_processor, model)
    return add_vit_stochastic_depth(model)  # nothing to add without a ViT backbone


def _check_vit_pixels(module, args, kwargs):
    import torch

    from .modeling_common import check_pixel_batch

    pixel_values = args[0] if args else kwargs.get("pixel_values")
    if isinstance(pixel_values, torch.Tensor):
        check_pixel_batch(pixel_values)


def _save_with_image_processor(self, save_directory, *args, **kwargs):
    """transformers' `save_pretrained`, then the image processor beside the weights, as the zoo's classes save."""
    from .modeling_common import build_image_processor

    type(self).save_pretrained(self, save_directory, *args, **kwargs)
    if kwargs.get("is_main_process", True):
        build_image_processor(self.config).save_pretrained(save_directory)


def add_vit_stochastic_depth(model: nn.Module) -> nn.Module:
    """Give transformers' ViT, which has none, the paper's stochastic depth from `config.drop_path_rate` (rates
    rising linearly with depth, as the reference's): a `DropPath` child on each attention and MLP branch, applied by
    a forward hook, so that weights, state dict and inference stay transformers' own."""
    from .blocks import vit_backbone
    from .configuration_common import check_rates
    from .modeling_common import DropPath, linear_drop_path_rates

    vit = vit_backbone(model)
    rate = getattr(model.config, "drop_path_rate", 0.0)
    if vit is None or not rate:
        return model
    check_rates(model.config, "drop_path_rate")
    rates = linear_drop_path_rates(rate, len(vit.layers))
    for layer, layer_rate in zip(vit.layers, rates):
        for branch in (layer.attention, layer.mlp):
            if not hasattr(branch, "drop_path"):
                branch.drop_path = DropPath(layer_rate)
                branch.register_forward_hook(_drop_branch)
    return model


def _drop_branch(module: nn.Module, args, output):
    if isinstance(output, tuple):  # ViTAttention returns (output, attention weights)
        return (module.drop_path(output[0]), *output[1:])
    return module.drop_path(output)
