"""Every zoo model as a sequence of tagged blocks, the view all of the paper's analyses take.

One state per block: the stem output, every residual block's output, the head input. AlterNet and
the CIFAR ResNet return these as `output_hidden_states` and name their kinds with `block_kinds()`;
for transformers' ViT each layer is two blocks (the attention residual, then the MLP residual),
read with hooks because its hidden states only hold whole layers. PiT and Swin, timm's own modules
(`timm_families`), are cut as the reference cuts them (`timm_cut`), read with hooks too; `analysis.blocks`
describes timm's own PiT and Swin with the same cut.
"""

from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedModel, ViTForImageClassification, ViTModel

from .modeling_common import DropPath, linear_drop_path_rates
from .timm_families import is_timm_wrapper

BLOCK_KINDS = ("stem", "conv", "msa", "mlp", "pool", "head")


def _vit_backbone(model: nn.Module) -> ViTModel | None:
    if isinstance(model, ViTForImageClassification):
        return model.vit
    return model if isinstance(model, ViTModel) else None


def block_kinds(model: PreTrainedModel) -> list[str]:
    """The kind of each block (one of `BLOCK_KINDS`), aligned with `block_states`."""
    if is_timm_wrapper(model):
        return [block.kind for block in timm_cut(model.timm_model).blocks]
    vit = _vit_backbone(model)
    if vit is not None:
        return ["stem"] + ["msa", "mlp"] * vit.config.num_hidden_layers + ["head"]
    if hasattr(model, "block_kinds"):
        return model.block_kinds()
    raise TypeError(f"{type(model).__name__} is not a zoo model: no block kinds known for it")


def block_states(model: PreTrainedModel, pixel_values: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Run `model` once; return the output of every block (see `block_kinds`) and the logits.

    ViT states keep the CLS token: `(batch, 1 + patches, hidden)`; conv models give `(batch, C, H, W)`.
    """
    if is_timm_wrapper(model):
        return _hooked_states(model, pixel_values, timm_cut(model.timm_model).blocks)
    vit = _vit_backbone(model)
    if vit is None:
        outputs = model(pixel_values, output_hidden_states=True, return_dict=True)
        return list(outputs.hidden_states), _logits_or_features(outputs)

    blocks = [HookedBlock("stem", vit.embeddings)]
    for layer in vit.layers:
        blocks.append(HookedBlock("msa", layer.layernorm_after, read="input"))  # after the MSA residual
        blocks.append(HookedBlock("mlp", layer))  # after the MLP residual
    blocks.append(HookedBlock("head", vit.layernorm))
    return _hooked_states(model, pixel_values, blocks)


@dataclass(frozen=True)
class HookedBlock:
    """A block read with a hook: its `kind`, the `module` whose output (`read="output"`; its first element if a
    tuple) or first input (`read="input"`) is the block's state, the module whose output is its residual
    `branch` (None: stem, pool, head), and the module to `name` it after in reports (default `module`)."""

    kind: str
    module: nn.Module
    branch: nn.Module | None = None
    read: str = "output"
    named: nn.Module | None = None


@dataclass(frozen=True)
class TimmCut:
    blocks: list[HookedBlock]
    num_prefix_tokens: int  # class tokens ahead of the patch tokens in token states
    channels_last: bool  # 4-D states are (B, H, W, C)


def timm_cut(model: nn.Module) -> TimmCut:
    """timm's `PoolingVisionTransformer` or `SwinTransformer` cut as the reference cuts PiT and Swin (its README):
    the embedded patches; each layer's attention residual (the state entering `norm2`) and MLP residual; PiT's
    pooling layers and Swin's patch mergings as pools; the final norm as the head. Raises `TypeError` for other
    models and `AttributeError` naming what a variant lacks."""
    kind = type(model).__name__
    if kind not in ("PoolingVisionTransformer", "SwinTransformer"):
        raise TypeError(f"{kind} is neither timm's PoolingVisionTransformer nor its SwinTransformer")
    pit = kind == "PoolingVisionTransformer"
    blocks = [HookedBlock("stem", model.pos_drop if pit else model.patch_embed)]
    for stage in model.transformers if pit else model.layers:
        pool = stage.pool if pit else stage.downsample
        if pool is not None and not isinstance(pool, nn.Identity):  # a stage that does not downsample
            blocks.append(HookedBlock("pool", pool))
        for layer in stage.blocks:
            blocks.append(HookedBlock("msa", layer.norm2, layer.drop_path1, read="input", named=layer.attn))
            blocks.append(HookedBlock("mlp", layer, layer.drop_path2, named=layer.mlp))
    blocks.append(HookedBlock("head", model.norm))
    return TimmCut(blocks, num_prefix_tokens=model.cls_token.shape[1] if pit else 0, channels_last=not pit)


def _hooked_states(model: nn.Module, pixel_values: torch.Tensor, blocks: list[HookedBlock]):
    """Run `model` once; return the state of every block (read by hooks) and the logits."""
    states: list[torch.Tensor] = []

    def record(block: HookedBlock):
        def hook(module, args, output=None):
            value = args[0] if block.read == "input" else output
            states.append(value[0] if isinstance(value, (tuple, list)) else value)

        return hook

    handles = [
        block.module.register_forward_pre_hook(record(block))
        if block.read == "input"
        else block.module.register_forward_hook(record(block))
        for block in blocks
    ]
    try:
        outputs = model(pixel_values, return_dict=True)
    finally:
        for handle in handles:
            handle.remove()
    if len(states) != len(blocks):
        raise RuntimeError(f"{len(states)} block states from {len(blocks)} blocks: a block ran more than once or not")
    return states, _logits_or_features(outputs)


def residual_branches(model: PreTrainedModel) -> list[nn.Module | None]:
    """The module whose output is each block's residual branch, aligned with `block_kinds` (None where a
    block has no residual, i.e. stem and head). Zeroing one's output removes that block's branch and
    leaves the shortcut: the lesion study's "identity in place of the residual branch".
    """
    if is_timm_wrapper(model):
        return [block.branch for block in timm_cut(model.timm_model).blocks]
    vit = _vit_backbone(model)
    if vit is not None:
        # ViTAttention returns (output, weights); a lesion hook replaces only the output.
        return [None] + [branch for layer in vit.layers for branch in (layer.attention, layer.mlp)] + [None]
    encoder = getattr(model.base_model, "encoder", None)
    if encoder is None or not hasattr(encoder, "blocks"):
        raise TypeError(f"{type(model).__name__} is not a zoo model: no residual branches known for it")
    return [None] + [block.drop_path for block in encoder.blocks()] + [None]


def add_vit_stochastic_depth(model: nn.Module) -> nn.Module:
    """Give transformers' ViT, which has none, the paper's stochastic depth (docs/paper.md §4), from
    `config.drop_path_rate`: in training, layer i of L drops each sample's attention and MLP branches
    with probability rate·i/(L-1), as the reference ViT and our AlterNet do. A `DropPath` child on each
    branch, applied by a forward hook, so weights, state dict and inference stay transformers' own."""
    vit = _vit_backbone(model)
    rate = getattr(model.config, "drop_path_rate", 0.0)
    if vit is None or not rate:
        return model
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"ViTConfig.drop_path_rate must be in [0, 1), got {rate!r}")
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


def _logits_or_features(outputs) -> torch.Tensor:
    return outputs["logits"] if "logits" in outputs else outputs["last_hidden_state"]
