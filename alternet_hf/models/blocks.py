"""Every zoo model as a sequence of tagged blocks, the view all of the paper's analyses take.

One state per block: the stem output, every residual block's output, the head input (docs/models.md). AlterNet and
the CIFAR ResNet return these as `output_hidden_states`; ViT, PiT and Swin are read with hooks. `Block` and
`BlockAdapter` are the one description of a model's blocks, for the zoo and for any other model (`analysis.blocks`).
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import torch
from torch import nn
from transformers import PreTrainedModel, ViTForImageClassification, ViTModel

from .timm_families import is_timm_wrapper

BLOCK_KINDS = ("stem", "conv", "msa", "mlp", "pool", "head")


def vit_backbone(model: nn.Module) -> ViTModel | None:
    if isinstance(model, ViTForImageClassification):
        return model.vit
    return model if isinstance(model, ViTModel) else None


def block_kinds(model: PreTrainedModel) -> list[str]:
    """The kind of each block (one of `BLOCK_KINDS`), aligned with `block_states`."""
    blocks = _hooked_blocks(model)
    if blocks is not None:
        return [block.kind for block in blocks]
    if hasattr(model, "block_kinds"):
        return model.block_kinds()
    raise TypeError(f"{type(model).__name__} is not a zoo model: no block kinds known for it")


def block_states(model: PreTrainedModel, pixel_values: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Run `model` once; return the output of every block (see `block_kinds`) and the logits. ViT states keep the
    CLS token: `(batch, 1 + patches, hidden)`; conv models give `(batch, C, H, W)`."""
    blocks = _hooked_blocks(model)
    if blocks is None:
        outputs = model(pixel_values, output_hidden_states=True, return_dict=True)
        states = list(outputs.hidden_states)
    else:
        states, outputs = hooked_states(model, pixel_values, blocks, return_dict=True)
    return states, outputs["logits"] if "logits" in outputs else outputs["last_hidden_state"]


STATE_READS = ("output", "input")


@dataclass(frozen=True)
class Block:
    """One block: its `kind`, the `module` whose output (its first element if a tuple) or, `read="input"`, whose
    first input is the block's state, its `name` (the module's path, for reports), and the module whose output is
    its residual branch (None: nothing to remove, as for a stem, a head or a pooling layer)."""

    kind: str
    module: nn.Module
    name: str = ""
    residual_branch: nn.Module | None = None
    read: str = "output"

    def __post_init__(self):
        if self.kind not in BLOCK_KINDS:
            raise ValueError(f"block kind {self.kind!r} is not one of {BLOCK_KINDS}")
        if not isinstance(self.module, nn.Module):
            raise TypeError(f"block {self.kind!r} must be an nn.Module, not {type(self.module).__name__}")
        if self.read not in STATE_READS:
            raise ValueError(f"Block.read must be one of {STATE_READS}, not {self.read!r}")


@dataclass
class BlockAdapter:
    """The blocks of a model, in forward order.

    `blocks` holds `Block`s or `(kind, module)` pairs. `residual_branches`, aligned with `blocks` (None where a block
    has none), lets the lesion study remove branches. `num_prefix_tokens`: class/distillation tokens ahead of the
    patch tokens in token states. `channels_last`: 4-D states are (B, H, W, C), as in timm's Swin. `states_of(model,
    inputs) -> (states, logits)` replaces the hooks where a model returns its states itself.
    """

    blocks: Sequence[Block | tuple[str, nn.Module]]
    residual_branches: Sequence[nn.Module | None] | None = None
    num_prefix_tokens: int = 1
    channels_last: bool = False
    states_of: Callable | None = field(default=None, repr=False)

    def __post_init__(self):
        blocks = [entry if isinstance(entry, Block) else Block(*entry) for entry in self.blocks]
        if self.residual_branches is not None:
            if len(self.residual_branches) != len(blocks):
                raise ValueError(
                    f"residual_branches has {len(self.residual_branches)} entries for {len(blocks)} blocks"
                )
            blocks = [replace(b, residual_branch=r) for b, r in zip(blocks, self.residual_branches)]
        self.blocks = blocks

    @property
    def kinds(self) -> list[str]:
        return [block.kind for block in self.blocks]

    @property
    def names(self) -> list[str]:
        return [block.name or f"block {i}" for i, block in enumerate(self.blocks)]

    @property
    def has_residual_branches(self) -> bool:
        return any(block.residual_branch is not None for block in self.blocks)


def timm_cut(model: nn.Module) -> BlockAdapter:
    """timm's `PoolingVisionTransformer` or `SwinTransformer` cut as the reference cuts PiT and Swin (its README):
    the embedded patches; each layer's attention residual (the state entering `norm2`) and MLP residual; PiT's
    pooling layers and Swin's patch mergings as pools; the final norm as the head. Raises `TypeError` for other
    models and `AttributeError` naming what a variant lacks. A subclass is cut as its timm base class."""
    timm_bases = {cls.__name__ for cls in type(model).__mro__ if cls.__module__.startswith("timm.")}
    if not timm_bases & {"PoolingVisionTransformer", "SwinTransformer"}:
        raise TypeError(f"{type(model).__name__} is neither timm's PoolingVisionTransformer nor its SwinTransformer")
    pit = "PoolingVisionTransformer" in timm_bases
    paths = {module: name for name, module in model.named_modules()}

    def block(kind, module, branch=None, read="output", named=None):
        return Block(kind, module, paths.get(named or module, ""), branch, read)

    blocks = [block("stem", model.pos_drop if pit else model.patch_embed)]
    for stage in model.transformers if pit else model.layers:
        pool = stage.pool if pit else stage.downsample
        if pool is not None and not isinstance(pool, nn.Identity):  # a stage that does not downsample
            blocks.append(block("pool", pool))
        for layer in stage.blocks:
            blocks.append(block("msa", layer.norm2, layer.drop_path1, read="input", named=layer.attn))
            blocks.append(block("mlp", layer, layer.drop_path2, named=layer.mlp))
    blocks.append(block("head", model.norm))
    return BlockAdapter(blocks, num_prefix_tokens=model.cls_token.shape[1] if pit else 0, channels_last=not pit)


def hooked_states(model: nn.Module, inputs: torch.Tensor, blocks: Sequence[Block], **options) -> tuple[list, object]:
    """Run `model(inputs, **options)` once; return every block's state, read by hooks, and the model's outputs."""
    states: list = [None] * len(blocks)
    calls = [0] * len(blocks)

    def recorder(index: int, read: str):
        def record(module, args, output=None):
            value = args[0] if read == "input" else output
            states[index] = value[0] if isinstance(value, (tuple, list)) else value
            calls[index] += 1

        return record

    handles = [
        block.module.register_forward_pre_hook(recorder(i, block.read))
        if block.read == "input"
        else block.module.register_forward_hook(recorder(i, block.read))
        for i, block in enumerate(blocks)
    ]
    try:
        outputs = model(inputs, **options)
    finally:
        for handle in handles:
            handle.remove()
    wrong = [block.name or f"block {i}" for i, (block, count) in enumerate(zip(blocks, calls)) if count != 1]
    if wrong:
        raise RuntimeError(f"every block must run exactly once per forward pass; these did not: {wrong}")
    return states, outputs


def residual_branches(model: PreTrainedModel) -> list[nn.Module | None]:
    """The module whose output is each block's residual branch, aligned with `block_kinds` (None for stem and head):
    zeroing its output leaves the shortcut, the lesion study's "identity in place of the residual branch"."""
    blocks = _hooked_blocks(model)
    if blocks is not None:
        return [block.residual_branch for block in blocks]
    encoder = getattr(model.base_model, "encoder", None)
    if encoder is None or not hasattr(encoder, "blocks"):
        raise TypeError(f"{type(model).__name__} is not a zoo model: no residual branches known for it")
    return [None] + [block.drop_path for block in encoder.blocks()] + [None]


def _hooked_blocks(model: PreTrainedModel) -> list[Block] | None:
    """The blocks of the models whose states are read with hooks (PiT, Swin, ViT), or None for the zoo's own."""
    if is_timm_wrapper(model):
        return timm_cut(model.timm_model).blocks
    vit = vit_backbone(model)
    if vit is None:
        return None
    blocks = [Block("stem", vit.embeddings)]
    for layer in vit.layers:  # the MSA residual (entering `layernorm_after`), then the MLP residual
        # ViTAttention returns (output, weights); a lesion hook replaces only the output.
        blocks.append(Block("msa", layer.layernorm_after, residual_branch=layer.attention, read="input"))
        blocks.append(Block("mlp", layer, residual_branch=layer.mlp))
    return blocks + [Block("head", vit.layernorm)]
