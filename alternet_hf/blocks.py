"""Every zoo model as a sequence of tagged blocks, the view all of the paper's analyses take.

One state per block: the stem output, every residual block's output, the head input. AlterNet and
the CIFAR ResNet return these as `output_hidden_states` and name their kinds with `block_kinds()`;
for transformers' ViT each layer is two blocks (the attention residual, then the MLP residual),
read with hooks because its hidden states only hold whole layers. PiT and Swin, timm's own modules
(`timm_families`), are cut as the reference cuts them by `analysis.blocks`, which describes timm's families.
"""

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
        from analysis.blocks import block_kinds as timm_block_kinds

        return timm_block_kinds(model)
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
        from analysis.blocks import run_blocks

        run = run_blocks(model, pixel_values)
        return run.states, run.logits
    vit = _vit_backbone(model)
    if vit is None:
        outputs = model(pixel_values, output_hidden_states=True, return_dict=True)
        return list(outputs.hidden_states), _logits_or_features(outputs)

    states: list[torch.Tensor] = []
    record_output = lambda module, args, output: states.append(output)  # noqa: E731
    record_input = lambda module, args: states.append(args[0])  # noqa: E731
    handles = [vit.embeddings.register_forward_hook(record_output)]
    for layer in vit.layers:
        handles.append(layer.layernorm_after.register_forward_pre_hook(record_input))  # after the MSA residual
        handles.append(layer.register_forward_hook(record_output))  # after the MLP residual
    handles.append(vit.layernorm.register_forward_hook(record_output))
    try:
        outputs = model(pixel_values, return_dict=True)
    finally:
        for handle in handles:
            handle.remove()
    return states, _logits_or_features(outputs)


def residual_branches(model: PreTrainedModel) -> list[nn.Module | None]:
    """The module whose output is each block's residual branch, aligned with `block_kinds` (None where a
    block has no residual, i.e. stem and head). Zeroing one's output removes that block's branch and
    leaves the shortcut: the lesion study's "identity in place of the residual branch".
    """
    if is_timm_wrapper(model):
        from analysis.blocks import residual_branches as timm_residual_branches

        return timm_residual_branches(model)
    vit = _vit_backbone(model)
    if vit is not None:
        # ViTAttention returns (output, weights); a lesion hook replaces only the output.
        return [None] + [branch for layer in vit.layers for branch in (layer.attention, layer.mlp)] + [None]
    encoder = getattr(model.base_model, "encoder", None)
    if encoder is None or not hasattr(encoder, "blocks"):
        raise TypeError(f"{type(model).__name__} is not a zoo model: no residual branches known for it")
    return [None] + [block.drop_path for block in encoder.blocks()] + [None]


def add_vit_stochastic_depth(model: nn.Module) -> nn.Module:
    """Give transformers' ViT, which has none, the paper's stochastic depth (PAPER.md §4), from
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
