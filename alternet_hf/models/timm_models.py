"""The zoo in timm: after `import alternet_hf`, `timm.create_model("alternet_50")` builds the zoo's
AlterNet-50 for CIFAR-100, and every other preset has its timm name.

Names follow timm's rule that an architecture fixes the layers and a pretrained tag the data: the reference code's
model names, tagged with the dataset (docs/models.md, "In timm", lists them and the interface `TimmZooModel` gives).
PiT-Ti and Swin-Ti are timm's own classes (`timm_families`). `import alternet_hf` does not import timm:
`register_models` runs once timm is imported.
"""

import contextlib

import torch
from torch import nn
from torch.nn import functional as F

from .modeling_common import check_pixel_values, close_match_hints, compute_layout
from .presets import ARCHITECTURES, DATASETS, TIMM_ARCHITECTURES, DatasetSpec, build_preset, create_config
from .timm_families import PAPER_CFG, SQUASH_RESIZE, timm_family_model, timm_settings

# One call each in an fx graph: fx cannot branch on a traced tensor's shape or device.
torch.fx.wrap("check_pixel_values")
torch.fx.wrap("compute_layout")

DEFAULT_DATASET = "cifar100"  # the tag a bare CIFAR name (`alternet_50`) resolves to
TIMM_TAGS = {"imagenet": "in1k"}  # timm's own tag for ImageNet-1k; other datasets keep their names

# Per model type: the attribute holding the backbone, the first conv and the classifier (state-dict
# prefixes, as timm's pretrained_cfg names them) and how the head pools the backbone's output.
_FAMILIES = {
    "alternet": dict(backbone="alternet", first_conv="alternet.embedder.convolution", pool="avg"),
    "cifar_resnet": dict(backbone="resnet", first_conv="resnet.embedder.embedder.convolution", pool="avg"),
    "vit": dict(backbone="vit", first_conv="vit.embeddings.patch_embeddings.projection", pool="token"),
}


# Config fields that timm's models take under timm's own names.
TIMM_ARGUMENTS = {"num_labels": "num_classes", "num_channels": "in_chans"}


def timm_name(architecture: str, dataset: str) -> str:
    """The timm name (architecture.tag) of the preset `<architecture>-<dataset>`."""
    spec = DATASETS[dataset]
    arch = architecture.replace("-", "_") + ("" if spec.is_small else f"_{spec.image_size}")
    return f"{arch}.{TIMM_TAGS.get(dataset, dataset)}"


def _feature_reductions(config) -> list[int]:
    """Output stride of each feature level: the stem, then every stage (CNNs); every layer (ViT)."""
    if config.model_type == "vit":
        return [config.patch_size] * config.num_hidden_layers
    stem = 1 if config.stem_type == "cifar" else 4
    return [stem] + [stem * 2**i for i in range(len(config.hidden_sizes))]


def _timm_family_cfg(family: str, spec: DatasetSpec) -> dict:
    """PiT, Swin: the pretrained cfg their zoo config holds, with timm's tuples."""
    cfg = timm_settings(family, spec)["pretrained_cfg"]
    tuples = {key: tuple(cfg[key]) for key in ("input_size", "pool_size", "mean", "std") if cfg[key]}
    return {**cfg, **tuples, "num_classes": spec.num_labels}


def _pretrained_cfg(config, spec: DatasetSpec) -> dict:
    family = _FAMILIES[config.model_type]
    size = spec.image_size
    pool_size = None if config.model_type == "vit" else (size // _feature_reductions(config)[-1],) * 2
    return dict(
        num_classes=spec.num_labels,
        input_size=(config.num_channels, size, size),
        pool_size=pool_size,
        **SQUASH_RESIZE,  # the saved image processor's preprocessing
        mean=tuple(spec.image_mean),
        std=tuple(spec.image_std),
        first_conv=family["first_conv"],
        classifier="classifier",
        # ViT's position embeddings fix its input size: timm's tooling then keeps it (and passes img_size)
        **(dict(fixed_input_size=True) if config.model_type == "vit" else {}),
        **PAPER_CFG,
    )


class UnsupportedPoolError(ValueError, AssertionError):
    """A `global_pool` the model cannot take: a `ValueError` as the zoo's other input errors, and an `AssertionError`
    as timm's own families raise (what timm's tooling catches)."""


_POOLS = {"cnn": ("avg", "max", "avgmax", "catavgmax", ""), "vit": ("token", "avg", "max", "avgmax", "")}


class TimmZooModel(nn.Module):
    """A zoo model (`alternet_hf.create_model(preset)`) behind timm's model interface: its modules are this module's
    children under the same names, walked as its forward does, so that timm's feature API can stop or cut them. The
    head is timm's, and so are the conventions where timm and transformers differ.
    """

    def __init__(
        self,
        preset: str,
        *,
        num_classes: int,
        in_chans: int = 3,
        drop_rate: float = 0.0,
        drop_path_rate: float | None = None,
        global_pool: str | None = None,
        img_size: int | tuple[int, int] | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        **config_fields,
    ):
        super().__init__()
        self._check_config_fields(preset, config_fields)
        if drop_path_rate is not None:  # otherwise the preset's own rate (the paper's 0.1 for AlterNet)
            config_fields["drop_path_rate"] = drop_path_rate
        if img_size is not None:  # timm's name for image_size, which it passes to fixed-size models from the cfg
            config_fields.setdefault("image_size", _square_size(img_size))  # so an image_size given wins
        with torch.device(device) if device is not None else contextlib.nullcontext():
            model = build_preset(preset, num_labels=num_classes, num_channels=in_chans, **config_fields)
        if device is not None or dtype is not None:
            model.to(device=device, dtype=dtype)
        for name, child in model.named_children():
            self.add_module(name, child)
        self.config = model.config
        self.checkpoint_renamings = _checkpoint_renamings(model)
        self.is_vit = self.config.model_type == "vit"
        family = _FAMILIES[self.config.model_type]
        self.backbone_name = family["backbone"]
        self.first_conv = family["first_conv"]
        self.num_classes = num_classes
        self.in_chans = in_chans
        self.drop_rate = drop_rate
        self.grad_checkpointing = False
        self.num_features = self.config.hidden_size if self.is_vit else self.config.hidden_sizes[-1]
        self.global_pool = self._check_pool(family["pool"] if global_pool is None else global_pool)
        self.head_hidden_size = self._pooled_width()
        if self.head_hidden_size != self.num_features:  # catavgmax: the zoo model's head took one pool only
            self.classifier = self._new_classifier()
        channels = (
            [self.config.hidden_size] * self.config.num_hidden_layers
            if self.is_vit
            else [self.config.embedding_size, *self.config.hidden_sizes]
        )
        self.feature_info = [
            dict(num_chs=chs, reduction=reduction, module=module)
            for chs, reduction, module in zip(channels, _feature_reductions(self.config), self._feature_modules())
        ]

    @staticmethod
    def _check_config_fields(preset: str, fields: dict) -> None:
        for field, argument in TIMM_ARGUMENTS.items():
            if field in fields:
                raise TypeError(f"{field} is timm's {argument} here: pass {argument}={fields[field]!r}")
        config = create_config(preset)
        known = config.to_dict()
        unknown = [key for key in fields if key not in known]
        if unknown:
            raise TypeError(
                f"{preset} got unexpected keyword argument(s) {unknown}: it takes timm's arguments (num_classes, "
                f"in_chans, drop_rate, drop_path_rate, global_pool, img_size, device, dtype) and the fields of "
                f"{type(config).__name__}" + close_match_hints(unknown, known)
            )

    @property
    def backbone(self) -> nn.Module:
        return getattr(self, self.backbone_name)

    def _feature_modules(self) -> list[str]:
        if self.is_vit:
            return [f"vit.layers.{i}" for i in range(self.config.num_hidden_layers)]
        prefix = self.backbone_name
        return [f"{prefix}.embedder"] + [f"{prefix}.encoder.stages.{i}" for i in range(len(self.config.hidden_sizes))]

    def _check_pool(self, global_pool: str) -> str:
        allowed = _POOLS["vit" if self.is_vit else "cnn"]
        if global_pool not in allowed:
            raise UnsupportedPoolError(
                f"global_pool={global_pool!r} is not available for {self.config.model_type}: use one of "
                f"{', '.join(repr(pool) for pool in allowed)} ('' for none)"
            )
        return global_pool

    def _pooled_width(self) -> int:
        return self.num_features * (2 if self.global_pool == "catavgmax" else 1)

    def _device_dtype(self) -> dict:
        parameter = next(self.parameters(), None)  # the model's, as timm's get_device_dtype: the head may be gone
        return {} if parameter is None else dict(device=parameter.device, dtype=parameter.dtype)

    def _new_classifier(self) -> nn.Module:
        if self.num_classes <= 0:
            return nn.Identity()
        return nn.Linear(self.head_hidden_size, self.num_classes, **self._device_dtype()).train(self.training)

    def get_classifier(self) -> nn.Module:
        return self.classifier

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        """A new, randomly initialised classifier for `num_classes` (0: none, the model returns pooled features),
        on the model's device and dtype, in its train/eval mode; `global_pool` None keeps the pooling."""
        if global_pool is not None:
            self.global_pool = self._check_pool(global_pool)
        self.num_classes = num_classes
        self.head_hidden_size = self._pooled_width()
        self.classifier = self._new_classifier()
        if num_classes > 0:
            self.config.num_labels = num_classes

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """The zoo model's gradient checkpointing, block by block (batch-norm statistics counted once)."""
        self.grad_checkpointing = enable
        if enable:
            self.backbone.activation_checkpointing_enable()
        else:
            self.backbone.activation_checkpointing_disable()

    # ---- the backbone, walked as the zoo model's forward does ----------------------------------------------

    def _stem(self, x: torch.Tensor) -> torch.Tensor:
        x = check_pixel_values(
            x,
            num_channels=self.in_chans,
            image_size=self.config.image_size,
            min_size=self.config.patch_size if self.is_vit else getattr(self.backbone, "total_stride", 1),
            dtype=self.get_submodule(self.first_conv).weight.dtype,
        )
        return self.vit.embeddings(x) if self.is_vit else self.backbone.embedder(compute_layout(x))  # as the zoo model

    def _stages(self) -> list:
        """The blocks between feature levels: after level 0 (the stem) for the CNNs, from the start for ViT."""
        if self.is_vit:
            return [[layer] for layer in self.vit.layers]
        return [stage.layers for stage in self.backbone.encoder.stages]

    def _block(self, block: nn.Module, x: torch.Tensor) -> torch.Tensor:
        if self.config.model_type == "alternet":
            return block(x, self.config._attn_implementation)[0]
        return block(x)

    def _final_norm(self, x: torch.Tensor) -> torch.Tensor:
        if self.is_vit:
            return self.vit.layernorm(x)
        if self.config.model_type == "alternet":  # pre-activation: normalise before the head
            return self.alternet.activation(self.alternet.norm(x))
        return x  # the post-activation ResNet ends in its last block

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """The backbone's normalised output: (B, C, H, W) for the CNNs, (B, 1 + patches, D) with CLS first for ViT."""
        x = self._stem(x)
        for blocks in self._stages():
            for block in blocks:
                x = self._block(block, x)
        return self._final_norm(x)

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        from timm.layers import global_pool_nlc, select_adaptive_pool2d  # timm's own pooling, as its models pool

        if self.is_vit:
            x = global_pool_nlc(x, self.global_pool, num_prefix_tokens=1)  # "token": CLS; others skip it
        elif self.global_pool:
            x = select_adaptive_pool2d(x, self.global_pool).flatten(1)
        x = F.dropout(x, p=self.drop_rate, training=self.training) if self.drop_rate else x
        return x if pre_logits else self.classifier(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    def forward_intermediates(
        self,
        x: torch.Tensor,
        indices: int | list[int] | None = None,
        norm: bool = False,
        stop_early: bool = False,
        output_fmt: str = "NCHW",
        intermediates_only: bool = False,
    ):
        """timm's feature API: the outputs of the feature levels `indices` (the last n for an int, all for None; see
        `feature_info`), and unless `intermediates_only` also the final features. `norm=True` applies the model's
        final norm (AlterNet: on the last stage; ViT: on every layer). ViT tokens come as maps (B, D, H/p, W/p)
        without CLS, or with `output_fmt="NLC"` as (B, patches, D). `stop_early` runs the blocks up to the last level
        asked for only; the final features are then those of that level.
        """
        from timm.models._features import feature_take_indices

        if output_fmt not in (("NCHW", "NLC") if self.is_vit else ("NCHW",)):
            raise ValueError(f"output_fmt={output_fmt!r} is not available for {self.config.model_type}")
        take, max_index = feature_take_indices(len(self.feature_info), indices)
        height, width = x.shape[-2:]
        stages = self._stages()
        first = 0 if self.is_vit else 1  # the level after stages[0]
        last = len(stages) - 1 + first
        if stop_early:
            stages = stages[: max_index + 1 - first]
        intermediates = []
        x = self._stem(x)
        if not self.is_vit and 0 in take:
            intermediates.append(x)
        level = first - 1
        for level, blocks in enumerate(stages, start=first):
            for block in blocks:
                x = self._block(block, x)
            if level in take:
                normalised = norm and (self.is_vit or level == last)
                intermediates.append(self._final_norm(x) if normalised else x)
        if self.is_vit:
            patch = self.config.patch_size
            intermediates = [state[:, 1:] for state in intermediates]  # drop CLS
            if output_fmt == "NCHW":
                intermediates = [
                    state.transpose(1, 2).reshape(state.shape[0], -1, height // patch, width // patch)
                    for state in intermediates
                ]
        if intermediates_only:
            return intermediates
        return (self._final_norm(x) if self.is_vit or level == last else x), intermediates

    def prune_intermediate_layers(
        self, indices: int | list[int] = 1, prune_norm: bool = False, prune_head: bool = True
    ) -> list[int]:
        """Drop the blocks after the last feature level in `indices` (timm's hook for `features_only`); with
        `prune_norm` also the final norm, with `prune_head` the pooling and classifier. Returns the absolute feature
        indices. As in timm's ResNetV2, cutting a CNN before its last stage also drops its final norm and the head.
        """
        from timm.models._features import feature_take_indices

        take, max_index = feature_take_indices(len(self.feature_info), indices)
        if self.is_vit:
            self.vit.layers = self.vit.layers[: max_index + 1]
            if prune_norm:
                self.vit.layernorm = nn.Identity()
            if prune_head:
                self.reset_classifier(0, "")
            return take
        stages = self.backbone.encoder.stages
        prune_end = max_index < len(stages)
        if (prune_norm or prune_end) and self.config.model_type == "alternet":
            self.alternet.norm, self.alternet.activation = nn.Identity(), nn.Identity()
        self.backbone.encoder.stages = stages[:max_index]
        if prune_end:
            self.num_features = self.feature_info[max_index]["num_chs"]
        if prune_head or prune_end:
            self.reset_classifier(0, "")
        return take


def _square_size(img_size: int | tuple[int, int]) -> int:
    height, width = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
    if height != width:
        raise ValueError(f"img_size={img_size!r}: the zoo's models take square images; give one side")
    return int(height)


_ENTRYPOINTS: dict[str, tuple[str, dict[str, str]]] = {}  # timm architecture -> (zoo architecture, tag -> dataset)
default_cfgs = {}  # read by timm's `register_model`


def _tags_by_architecture() -> dict[str, tuple[str, dict[str, str]]]:
    names: dict[str, tuple[str, dict[str, str]]] = {}
    datasets = sorted(DATASETS, key=lambda name: name != DEFAULT_DATASET)  # timm's default tag comes first
    for architecture in ARCHITECTURES:
        for dataset in datasets:
            if architecture in TIMM_ARCHITECTURES and not DATASETS[dataset].is_small:
                continue  # timm's own pit_ti_224 and swin_tiny_patch4_window7_224
            arch, tag = timm_name(architecture, dataset).split(".")
            names.setdefault(arch, (architecture, {}))[1][tag] = dataset
    return names


def _checkpoint_renamings(model) -> list:
    """transformers' renamings from a checkpoint's names to `model`'s (ViT files keep `encoder.layer.N.attention.
    attention.query`, which transformers 5 renames to `layers.N.attention.q_proj` as it loads)."""
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import WeightRenaming

    return [r for r in get_model_conversion_mapping(model) if isinstance(r, WeightRenaming)]


def checkpoint_filter_fn(state_dict: dict, model: TimmZooModel) -> dict:
    """timm's hook between a weights file and `load_state_dict`: a file written by `save_pretrained` gets the
    renamings transformers applies when it loads one, so timm loads what transformers does."""
    from transformers.core_model_loading import rename_source_key

    if set(state_dict) <= set(model.state_dict()):
        return state_dict
    return {rename_source_key(key, model.checkpoint_renamings, [])[0]: value for key, value in state_dict.items()}


def _entrypoint(name: str, architecture: str, datasets: dict[str, str]):
    default_tag = next(iter(datasets))

    def create(pretrained: bool = False, **kwargs) -> TimmZooModel:
        from timm.models import build_model_with_cfg

        cfg = kwargs.get("pretrained_cfg")  # a tag, a dict or a PretrainedCfg
        tag = cfg if isinstance(cfg, str) else cfg.get("tag") if isinstance(cfg, dict) else getattr(cfg, "tag", None)
        tag = tag or default_tag
        if tag not in datasets:
            raise ValueError(f"{name} has no tag {tag!r}; its tags are {', '.join(datasets)}")
        given = {**(cfg if isinstance(cfg, dict) else {}), **(kwargs.get("pretrained_cfg_overlay") or {})}
        if pretrained and not any(given.get(key) for key in ("file", "state_dict", "url", "hf_hub_id")):
            raise ValueError(
                f"{name}: the zoo publishes no timm weights; load a model saved by save_pretrained or "
                "alternet-train with pretrained_cfg_overlay=dict(file='<folder>/model.safetensors')"
            )
        preset = f"{architecture}-{datasets[tag]}"
        if architecture in TIMM_ARCHITECTURES:  # PiT, Swin: timm's own classes
            return timm_family_model(
                TIMM_ARCHITECTURES[architecture], DATASETS[datasets[tag]], name, pretrained, **kwargs
            )
        config = ARCHITECTURES[architecture](DATASETS[datasets[tag]])
        # features_only: as timm's own families, every level of a CNN (stem and stages) and ViT's last 3 layers
        if config.model_type == "vit":
            levels = min(3, kwargs.get("num_hidden_layers", config.num_hidden_layers))
        else:
            levels = tuple(range(1 + len(kwargs.get("hidden_sizes", config.hidden_sizes))))
        feature_cfg = dict(feature_cls="getter", out_indices=levels)
        return build_model_with_cfg(
            TimmZooModel,
            name,
            pretrained,
            feature_cfg=feature_cfg,
            pretrained_filter_fn=checkpoint_filter_fn,
            preset=preset,
            **kwargs,
        )

    create.__name__ = create.__qualname__ = name
    create.__module__ = __name__
    create.__doc__ = f"The zoo's {architecture} for timm; tags (datasets): {', '.join(datasets)}."
    return create


def register_models() -> list[str]:
    """Register every zoo architecture with timm (once) and return the timm names with their tags."""
    from timm.layers import register_notrace_module
    from timm.models import generate_default_cfgs, register_model
    from transformers.models.vit.modeling_vit import ViTAttention, ViTEmbeddings, ViTMLP

    from .modeling_alternet import AlterNetWindowAttention

    if not _ENTRYPOINTS:
        # One call each in an fx graph, as timm's windowed models: these branch on or unpack the traced shape, and
        # ViT's attention and MLP carry the zoo's stochastic depth as forward hooks (run only on whole-module calls).
        for module in (AlterNetWindowAttention, ViTEmbeddings, ViTAttention, ViTMLP):
            register_notrace_module(module)
        cfgs = {}
        for arch, (architecture, datasets) in _tags_by_architecture().items():
            for tag, dataset in datasets.items():
                spec = DATASETS[dataset]
                if architecture in TIMM_ARCHITECTURES:
                    cfgs[f"{arch}.{tag}"] = _timm_family_cfg(TIMM_ARCHITECTURES[architecture], spec)
                else:
                    cfgs[f"{arch}.{tag}"] = _pretrained_cfg(ARCHITECTURES[architecture](spec), spec)
            _ENTRYPOINTS[arch] = (architecture, datasets)
        default_cfgs.update(generate_default_cfgs(cfgs))
        for arch, (architecture, datasets) in _ENTRYPOINTS.items():
            entrypoint = _entrypoint(arch, architecture, datasets)
            globals()[arch] = entrypoint  # a module-level entrypoint, as timm's own model files have
            register_model(entrypoint)
    return [f"{arch}.{tag}" for arch, (_, datasets) in _ENTRYPOINTS.items() for tag in datasets]
