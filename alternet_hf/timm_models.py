"""The zoo in timm: after `import alternet_hf`, `timm.create_model("alternet_50")` builds the zoo's
AlterNet-50 for CIFAR-100, and every other preset has its timm name.

Names follow timm's rule that an architecture name fixes the layers and a pretrained tag fixes the
data: the architectures are the reference code's model names (`alternet_50`, `resnet_50`, `vit_ti`: its
released checkpoints are `resnet_50_cifar100_*.pth.tar`, `vit_ti_cifar100_*.pth.tar`; none is a timm
name), built for 32×32 images (CIFAR stem, 4×4 attention windows, 2×2 ViT patches), and the dataset
is the tag: `alternet_50.cifar100` (the default, so `alternet_50` is the same model) and
`alternet_50.cifar10`. ImageNet's stem, windows and patches make other architectures, named with their
input size as timm does: `alternet_50_224.in1k`, `resnet_50_224.in1k`, `vit_ti_224.in1k`. Each name is
the preset `alternet_hf.create_model` builds (`alternet_50.cifar10` is `alternet-50-cifar10`), with the
same state-dict keys and shapes and the same outputs, so a folder written by `save_pretrained` (or
`alternet-train`) loads into timm with `pretrained=True,
pretrained_cfg_overlay=dict(file="<folder>/model.safetensors")`. No tag has published weights.

`TimmZooModel` gives the zoo models timm's interface: `forward` returns logits, `forward_features`,
`forward_head(pre_logits=)`, `reset_classifier`, `num_classes` / `num_features`, `feature_info`,
`forward_intermediates` (so `features_only=True` works, through timm's `FeatureGetterNet`), and timm's
`drop_rate` (dropout before the classifier), `drop_path_rate` and `in_chans` arguments. Config fields
of the zoo's configs are accepted as keyword arguments too (`num_attention_blocks=(0, 1, 3, 2)`) and
checked by `alternet_hf.create_config`.

`import alternet_hf` does not import timm (which imports every timm model file and torchvision):
`register_when_timm_is_imported` registers the models at once if timm is already imported, and
otherwise right after timm's own import finishes.
"""

import importlib.abc
import importlib.util
import sys
import warnings

import torch
from torch import nn
from torch.nn import functional as F

from .presets import ARCHITECTURES, DATASETS, DatasetSpec, create_model

DEFAULT_DATASET = "cifar100"  # the tag a bare CIFAR name (`alternet_50`) resolves to
TIMM_TAGS = {"imagenet": "in1k"}  # timm's own tag for ImageNet-1k; other datasets keep their names

# Per model type: the attribute holding the backbone, the first conv and the classifier (state-dict
# prefixes, as timm's pretrained_cfg names them) and how the head pools the backbone's output.
_FAMILIES = {
    "alternet": dict(backbone="alternet", first_conv="alternet.embedder.convolution", pool="avg"),
    "cifar_resnet": dict(backbone="resnet", first_conv="resnet.embedder.embedder.convolution", pool="avg"),
    "vit": dict(backbone="vit", first_conv="vit.embeddings.patch_embeddings.projection", pool="token"),
}
_PAPER = dict(paper_name="How Do Vision Transformers Work?", paper_ids="arXiv:2202.06709")


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


def _pretrained_cfg(config, spec: DatasetSpec) -> dict:
    family = _FAMILIES[config.model_type]
    size = spec.image_size
    pool_size = None if config.model_type == "vit" else (size // _feature_reductions(config)[-1],) * 2
    return dict(
        num_classes=spec.num_labels,
        input_size=(config.num_channels, size, size),
        pool_size=pool_size,
        # the saved image processor's preprocessing: resize the whole image to size×size, bilinear
        crop_pct=1.0,
        crop_mode="squash",
        interpolation="bilinear",
        mean=tuple(spec.image_mean),
        std=tuple(spec.image_std),
        first_conv=family["first_conv"],
        classifier="classifier",
        **_PAPER,
    )


class TimmZooModel(nn.Module):
    """A zoo model (`alternet_hf.create_model(preset)`) behind timm's model interface.

    The zoo model's own modules are this module's children under the same names, so the state dict is
    the zoo model's key for key and the computation is its own; only the pooling and classifier of the
    head run here, as `forward_head`. `global_pool` is the model's own (`"avg"` for the CNNs, `"token"`:
    the CLS token, for ViT) or `""` (no pooling: `forward_head` returns the feature map or tokens).
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
        **config_overrides,
    ):
        super().__init__()
        for field, argument in (("num_labels", "num_classes"), ("num_channels", "in_chans")):
            if field in config_overrides:
                raise ValueError(f"{field} is timm's {argument} here: pass {argument}={config_overrides[field]!r}")
        if drop_path_rate is not None:  # otherwise the preset's own rate (the paper's 0.1 for AlterNet)
            config_overrides["drop_path_rate"] = drop_path_rate
        model = create_model(preset, num_labels=num_classes, num_channels=in_chans, **config_overrides)
        for name, child in model.named_children():
            self.add_module(name, child)
        self.config = model.config
        family = _FAMILIES[self.config.model_type]
        self.backbone_name = family["backbone"]
        self.default_pool = family["pool"]
        self.num_classes = num_classes
        self.drop_rate = drop_rate
        self.global_pool = self._check_pool(self.default_pool if global_pool is None else global_pool)
        self.num_features = self.head_hidden_size = (
            self.config.hidden_size if self.config.model_type == "vit" else self.config.hidden_sizes[-1]
        )
        channels = (
            [self.config.hidden_size] * self.config.num_hidden_layers
            if self.config.model_type == "vit"
            else [self.config.embedding_size, *self.config.hidden_sizes]
        )
        self.feature_info = [
            dict(num_chs=chs, reduction=reduction, module=module)
            for chs, reduction, module in zip(channels, _feature_reductions(self.config), self._feature_modules())
        ]

    @property
    def backbone(self) -> nn.Module:
        return getattr(self, self.backbone_name)

    def _feature_modules(self) -> list[str]:
        if self.config.model_type == "vit":
            return [f"vit.layers.{i}" for i in range(self.config.num_hidden_layers)]
        prefix = self.backbone_name
        return [f"{prefix}.embedder"] + [f"{prefix}.encoder.stages.{i}" for i in range(len(self.config.hidden_sizes))]

    def _check_pool(self, global_pool: str) -> str:
        if global_pool not in (self.default_pool, ""):
            raise ValueError(
                f"global_pool={global_pool!r} is not available for {self.config.model_type}: use "
                f"{self.default_pool!r} (the model's own pooling) or '' (none)"
            )
        return global_pool

    def get_classifier(self) -> nn.Module:
        return self.classifier

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        """A new, randomly initialised classifier for `num_classes` (0: none, the model returns pooled features)."""
        if global_pool is not None:
            self.global_pool = self._check_pool(global_pool)
        self.num_classes = num_classes
        weight = self.classifier.weight if isinstance(self.classifier, nn.Linear) else None
        factory = dict(device=weight.device, dtype=weight.dtype) if weight is not None else {}
        self.classifier = nn.Linear(self.num_features, num_classes, **factory) if num_classes > 0 else nn.Identity()
        if num_classes > 0:
            self.config.num_labels = num_classes

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        if enable:
            raise NotImplementedError(f"gradient checkpointing is not implemented for the zoo's {type(self).__name__}")

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """The backbone's output: the normalised feature map (B, C, H, W) for the CNNs, the normalised
        tokens with CLS first (B, 1 + patches, D) for ViT."""
        return self.backbone(x, return_dict=True).last_hidden_state

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        if self.global_pool == "avg":
            x = F.adaptive_avg_pool2d(x, 1).flatten(1)  # the zoo model's nn.AdaptiveAvgPool2d(1)
        elif self.global_pool == "token":
            x = x[:, 0]
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
        """timm's feature API: the outputs of the feature levels `indices` (the last n for an int, all for
        None; see `feature_info`), and unless `intermediates_only` also `forward_features(x)`.

        The levels are the zoo model's `output_hidden_states` at the end of the stem and of each stage (CNNs)
        or of each layer (ViT). `norm=True` applies the model's final norm (AlterNet: BN + ReLU on the last
        stage; ViT: the LayerNorm on every layer); the post-activation ResNet has none. ViT tokens come as
        maps (B, D, H/p, W/p) without CLS, or with `output_fmt="NLC"` as (B, patches, D). The whole
        backbone always runs: `stop_early` is accepted for timm's sake and changes nothing.
        """
        from timm.models._features import feature_take_indices

        is_vit = self.config.model_type == "vit"
        if output_fmt not in (("NCHW", "NLC") if is_vit else ("NCHW",)):
            raise ValueError(f"output_fmt={output_fmt!r} is not available for {self.config.model_type}")
        take, _ = feature_take_indices(len(self.feature_info), indices)
        outputs = self.backbone(x, output_hidden_states=True, return_dict=True)
        states = outputs.hidden_states
        if is_vit:
            levels = list(states[1:])  # after each layer, before the final LayerNorm
            if norm:
                levels = [self.vit.layernorm(state) for state in levels]
            patch = self.config.patch_size
            height, width = x.shape[-2] // patch, x.shape[-1] // patch
            levels = [state[:, 1:] for state in levels]  # drop CLS
            if output_fmt == "NCHW":
                levels = [state.transpose(1, 2).reshape(len(state), -1, height, width) for state in levels]
        else:
            stage_lengths = [len(stage.layers) for stage in self.backbone.encoder.stages]
            ends = [0] + [sum(stage_lengths[: i + 1]) for i in range(len(stage_lengths))]
            levels = [states[end] for end in ends]
            if norm:
                levels[-1] = states[-1]  # the head input: AlterNet's final BN + ReLU, ResNet's last block
        intermediates = [levels[i] for i in take]
        return intermediates if intermediates_only else (outputs.last_hidden_state, intermediates)

    def prune_intermediate_layers(
        self, indices: int | list[int] = 1, prune_norm: bool = False, prune_head: bool = True
    ) -> list[int]:
        """timm's hook for `features_only`: removes the classifier (with `prune_head`) and returns the absolute
        feature indices. The backbone is kept whole so the state dict stays the zoo model's."""
        from timm.models._features import feature_take_indices

        take, _ = feature_take_indices(len(self.feature_info), indices)
        if prune_head:
            self.reset_classifier(0)
        return take


_ENTRYPOINTS: dict[str, tuple[str, dict[str, str]]] = {}  # timm architecture -> (zoo architecture, tag -> dataset)
default_cfgs = {}  # read by timm's `register_model`


def _tags_by_architecture() -> dict[str, tuple[str, dict[str, str]]]:
    names: dict[str, tuple[str, dict[str, str]]] = {}
    datasets = sorted(DATASETS, key=lambda name: name != DEFAULT_DATASET)  # timm's default tag comes first
    for architecture in ARCHITECTURES:
        for dataset in datasets:
            arch, tag = timm_name(architecture, dataset).split(".")
            names.setdefault(arch, (architecture, {}))[1][tag] = dataset
    return names


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
        # The getter calls `prune_intermediate_layers` first, which turns out_indices=None into every level.
        feature_cfg = dict(feature_cls="getter", out_indices=None)
        preset = f"{architecture}-{datasets[tag]}"
        return build_model_with_cfg(TimmZooModel, name, pretrained, feature_cfg=feature_cfg, preset=preset, **kwargs)

    create.__name__ = create.__qualname__ = name
    create.__module__ = __name__
    create.__doc__ = f"The zoo's {architecture} for timm; tags (datasets): {', '.join(datasets)}."
    return create


def register_models() -> list[str]:
    """Register every zoo architecture with timm's registry (once; later calls change nothing) and
    return the timm names with their tags."""
    from timm.models import generate_default_cfgs, register_model

    if not _ENTRYPOINTS:
        cfgs = {}
        for arch, (architecture, datasets) in _tags_by_architecture().items():
            for tag, dataset in datasets.items():
                spec = DATASETS[dataset]
                cfgs[f"{arch}.{tag}"] = _pretrained_cfg(ARCHITECTURES[architecture](spec), spec)
            _ENTRYPOINTS[arch] = (architecture, datasets)
        default_cfgs.update(generate_default_cfgs(cfgs))
        for arch, (architecture, datasets) in _ENTRYPOINTS.items():
            entrypoint = _entrypoint(arch, architecture, datasets)
            globals()[arch] = entrypoint  # a module-level entrypoint, as timm's own model files have
            register_model(entrypoint)
    return [f"{arch}.{tag}" for arch, (_, datasets) in _ENTRYPOINTS.items() for tag in datasets]


class _RegisterAfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Runs `register_models` right after `import timm` completes: a one-shot finder that lets the normal
    finders locate timm and wraps the loader they return."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "timm":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("timm")
        if spec is not None and spec.loader is not None:
            self.loader, spec.loader = spec.loader, self
        return spec

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__spec__.loader = module.__loader__ = self.loader  # timm sees its own loader
        self.loader.exec_module(module)
        _register_or_warn()


def _register_or_warn() -> None:
    try:
        register_models()
    except Exception as error:  # a timm release we do not fit must break neither `import timm` nor ours
        warnings.warn(f"alternet_hf could not register its models with timm: {error!r}", stacklevel=3)


def register_when_timm_is_imported() -> None:
    """Register the zoo with timm now if timm is imported, else as soon as it is."""
    if "timm" in sys.modules:
        _register_or_warn()
    elif not any(isinstance(finder, _RegisterAfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _RegisterAfterImport())
