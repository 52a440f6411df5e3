"""PiT-Ti and Swin-Ti, the reference's other released CIFAR-100 models: timm's own modules in transformers'
`TimmWrapperForImageClassification`, as timm models live on the Hub.

A zoo config names timm's architecture and keeps the reference's CIFAR arguments (its README; docs/paper.md §1) in
`model_args`, which both timm and transformers read from `config.json`, so a saved folder loads without `alternet_hf`
(docs/models.md). The zoo adds what it adds to transformers' ViT (`presets._finish`): its loss, its input checks and
weights saved under timm's own names. The image processor is the one transformers makes for every timm folder, from
`pretrained_cfg`, so no `preprocessor_config.json` is written.
"""

import inspect

import torch
from transformers import PreTrainedModel

from .modeling_common import check_pixel_values, close_match_hints

# The reference's CIFAR arguments for timm's architectures (timm's ImageNet defaults otherwise).
FAMILIES = {
    "pit": dict(
        architecture="pit_ti_224",
        module="timm.models.pit",
        class_name="PoolingVisionTransformer",
        factory="_create_pit",  # timm's builder for the class: its checkpoint filter and feature settings
        cifar_args=dict(patch_size=2, stride=1, base_dims=[32, 32, 32], depth=[2, 6, 4], heads=[2, 4, 8], mlp_ratio=4),
        first_conv="patch_embed.conv",
        classifier="head",
    ),
    "swin": dict(
        architecture="swin_tiny_patch4_window7_224",
        module="timm.models.swin_transformer",
        class_name="SwinTransformer",
        factory="_create_swin_transformer",
        cifar_args=dict(
            patch_size=1, window_size=4, embed_dim=96, depths=[2, 2, 6, 2], num_heads=[3, 6, 12, 24], qkv_bias=False
        ),
        first_conv="patch_embed.proj",
        classifier="head.fc",
    ),
}
# The zoo's preprocessing in timm's terms (resize the whole image to size×size, bilinear), and the paper, for every
# pretrained cfg (`timm_models` too).
SQUASH_RESIZE = dict(crop_pct=1.0, crop_mode="squash", interpolation="bilinear")
PAPER_CFG = dict(paper_name="How Do Vision Transformers Work?", paper_ids="arXiv:2202.06709")
# Fields of the zoo's config that timm takes under its own names; the rest of an override goes to timm as is.
TIMM_NAMES = {"image_size": "img_size", "num_channels": "in_chans"}
CONFIG_FIELDS = ("num_labels", "id2label", "label2id", "problem_type", "image_mean", "image_std")


def family_of(config) -> str | None:
    """`"pit"` or `"swin"` for a zoo config of those families, None otherwise (a timm model from the Hub too)."""
    if getattr(config, "model_type", None) != "timm_wrapper" or not hasattr(config, "image_size"):
        return None
    return next((name for name, family in FAMILIES.items() if family["architecture"] == config.architecture), None)


def timm_settings(family: str, data, **overrides) -> dict:
    """The fields of a PiT or Swin preset's config for `data` (a `presets.DatasetSpec`): `architecture`, `model_args`,
    `pretrained_cfg` and the zoo's fields; `overrides` are zoo fields or timm's arguments. Plain values, so that
    registering the timm names (while timm imports) needs no config class."""
    spec = FAMILIES[family]
    fields = dict(data.config_fields(), num_channels=3)
    model_args = dict(spec["cifar_args"]) if data.is_small else {}
    for key, value in overrides.items():
        if key in fields or key in CONFIG_FIELDS:
            fields[key] = value
        else:
            model_args[key] = value
    _check_model_args(family, model_args)
    model_args.update(img_size=fields["image_size"], in_chans=fields["num_channels"])
    size = fields["image_size"]
    if family == "swin":  # the feature map the head pools: patches, halved by each stage's merging
        stride = model_args.get("patch_size", 4) * 2 ** (len(model_args.get("depths", (2, 2, 6, 2))) - 1)
        pool_size = [size // stride] * 2
    else:
        pool_size = None  # PiT pools its class token
    pretrained_cfg = dict(
        input_size=[fields["num_channels"], size, size],  # lists, as config.json gives them back
        pool_size=pool_size,
        fixed_input_size=True,
        **SQUASH_RESIZE,
        mean=list(fields["image_mean"]),
        std=list(fields["image_std"]),
        first_conv=spec["first_conv"],
        classifier=spec["classifier"],
        **PAPER_CFG,
    )
    return dict(architecture=spec["architecture"], model_args=model_args, pretrained_cfg=pretrained_cfg, **fields)


def timm_config(family: str, data, **overrides):
    """The `TimmWrapperConfig` of a PiT or Swin preset (see `timm_settings`)."""
    from transformers import TimmWrapperConfig  # imports timm, which `import alternet_hf` does not

    return TimmWrapperConfig(**timm_settings(family, data, **overrides))


def _check_model_args(family: str, model_args: dict) -> None:
    """Unknown arguments of timm's class are a `ValueError` naming them, before anything is built."""
    import importlib

    spec = FAMILIES[family]
    cls = getattr(importlib.import_module(spec["module"]), spec["class_name"])
    set_by_the_zoo = ("self", "kwargs", "num_classes", *TIMM_NAMES.values())
    known = [name for name in inspect.signature(cls.__init__).parameters if name not in set_by_the_zoo]
    unknown = [key for key in model_args if key not in known]
    if unknown:
        raise ValueError(
            f"{spec['class_name']} (timm) has no argument(s) {unknown}; a {family} preset takes the zoo's fields "
            f"({', '.join((*TIMM_NAMES, *CONFIG_FIELDS))}) and timm's arguments ({', '.join(known)})"
            + close_match_hints(unknown, known)
        )


def timm_family_model(family: str, data, name: str, pretrained: bool, **kwargs) -> torch.nn.Module:
    """timm's own PiT or Swin module for `data`, built by timm's factory under the registered `name`."""
    import importlib

    spec = FAMILIES[family]
    factory = getattr(importlib.import_module(spec["module"]), spec["factory"])
    return factory(name, pretrained, **{**timm_settings(family, data)["model_args"], **kwargs})


def classifier_prefix(model: PreTrainedModel) -> str:
    """The state-dict prefix of the classifier: `classifier.` for the zoo's other families."""
    family = family_of(model.config)
    return f"timm_model.{FAMILIES[family]['classifier']}." if family else "classifier."


def save_with_timm_names(self, save_directory, *args, state_dict=None, **kwargs):
    """transformers' `save_pretrained` of a `TimmWrapperForImageClassification`, with the weights under timm's names
    (no `timm_model.` prefix): what timm's own Hub folders hold, and what both timm and transformers load."""
    state_dict = self.state_dict() if state_dict is None else state_dict
    state_dict = {key.removeprefix("timm_model."): value for key, value in state_dict.items()}
    type(self).save_pretrained(self, save_directory, *args, state_dict=state_dict, **kwargs)


def check_fixed_size_pixels(module, args, kwargs):
    """The zoo's input checks, then the images in the model's dtype, as the zoo's other models take them."""
    config = module.config
    size = config.image_size
    pixel_values = check_pixel_values(
        args[0] if args else kwargs.get("pixel_values"),
        num_channels=config.num_channels,
        image_size=size,
        min_size=1,
        dtype=next(module.parameters()).dtype,
    )
    if tuple(pixel_values.shape[-2:]) != (size, size):
        height, width = pixel_values.shape[-2:]
        raise ValueError(
            f"pixel_values of size {height}×{width}: this {config.architecture} model takes {size}×{size} images "
            "only (its position embeddings and windows are fixed): resize them, as its image processor does"
        )
    if args:
        return (pixel_values, *args[1:]), kwargs
    return args, {**kwargs, "pixel_values": pixel_values}


def is_timm_wrapper(model) -> bool:
    """Whether `model` is a zoo PiT or Swin: timm's module in transformers' TimmWrapper, with the zoo's config."""
    return isinstance(getattr(model, "timm_model", None), torch.nn.Module) and family_of(model.config) is not None
