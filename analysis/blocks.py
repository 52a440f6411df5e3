"""Any model as the paper's sequence of tagged blocks (PAPER.md §6): stem, conv or MLP, MSA, pool, head.

Zoo models know their blocks (`alternet_hf.block_kinds`, `block_states`, `residual_branches`);
any other model — a timm or transformers network — is described by a `BlockAdapter` that names the
modules whose outputs are the block states. Token states lose their prefix (CLS) tokens and become
square feature maps before spatial analyses.
"""

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import nn

import alternet_hf
from alternet_hf.blocks import BLOCK_KINDS

from . import _common
from ._common import analysis_mode, logits_of, resolve_device


@dataclass
class BlockAdapter:
    """The blocks of a model that is not a zoo model.

    `blocks` lists `(kind, module)` pairs in forward order; each module's output (its first element if
    a tuple) is that block's state. `residual_branches`, aligned with `blocks` (None where a block has
    no residual branch), lets the lesion study remove branches. `num_prefix_tokens` is the number of
    class/register tokens ahead of the patch tokens in token states.

    Example for a timm ViT: `BlockAdapter([("stem", m.patch_embed)] + [("mlp", b) for b in m.blocks])`.
    """

    blocks: Sequence[tuple[str, nn.Module]]
    residual_branches: Sequence[nn.Module | None] | None = None
    num_prefix_tokens: int = 1

    def __post_init__(self):
        for kind, module in self.blocks:
            if kind not in BLOCK_KINDS:
                raise ValueError(f"block kind {kind!r} is not one of {BLOCK_KINDS}")
            if not isinstance(module, nn.Module):
                raise TypeError(f"block {kind!r} must be an nn.Module, not {type(module).__name__}")
        if self.residual_branches is not None and len(self.residual_branches) != len(self.blocks):
            raise ValueError(
                f"residual_branches has {len(self.residual_branches)} entries for {len(self.blocks)} blocks"
            )


@dataclass
class BlockRun:
    """One forward pass seen block by block: `states[i]` is the output of block `kinds[i]`."""

    states: list[torch.Tensor]
    kinds: list[str]
    logits: torch.Tensor
    num_prefix_tokens: int


def _is_zoo_model(model: nn.Module) -> bool:
    try:
        alternet_hf.block_kinds(model)
    except TypeError:
        return False
    return True


def _require_adapter(model: nn.Module, adapter: BlockAdapter | None) -> BlockAdapter | None:
    if adapter is None and not _is_zoo_model(model):
        raise TypeError(
            f"{type(model).__name__} is not a zoo model; describe its blocks with "
            "analysis.blocks.BlockAdapter([(kind, module), ...]) and pass adapter=..."
        )
    return adapter


def block_kinds(model: nn.Module, adapter: BlockAdapter | None = None) -> list[str]:
    """The kind of each block, aligned with `run_blocks(...).states`."""
    if _require_adapter(model, adapter) is not None:
        return [kind for kind, _ in adapter.blocks]
    return alternet_hf.block_kinds(model)


def run_blocks(model: nn.Module, inputs: torch.Tensor, adapter: BlockAdapter | None = None) -> BlockRun:
    """Run `model` once on `inputs` and return every block's output with its kind and the logits."""
    if _require_adapter(model, adapter) is None:
        states, logits = alternet_hf.block_states(model, inputs)
        return BlockRun(states, alternet_hf.block_kinds(model), logits, num_prefix_tokens=1)

    states: list[torch.Tensor] = []
    record = lambda module, args, output: states.append(output[0] if isinstance(output, (tuple, list)) else output)
    handles = [module.register_forward_hook(record) for _, module in adapter.blocks]
    try:
        logits = logits_of(model(inputs))
    finally:
        for handle in handles:
            handle.remove()
    if len(states) != len(adapter.blocks):
        raise RuntimeError(f"the adapter names {len(adapter.blocks)} blocks but {len(states)} of them ran once each")
    return BlockRun(states, [kind for kind, _ in adapter.blocks], logits, adapter.num_prefix_tokens)


def residual_branches(model: nn.Module, adapter: BlockAdapter | None = None) -> list[nn.Module | None]:
    """The residual-branch module of each block (None where there is none), for the lesion study."""
    if _require_adapter(model, adapter) is None:
        return alternet_hf.residual_branches(model)
    if adapter.residual_branches is None:
        raise ValueError("this BlockAdapter names no residual_branches; give them to run a lesion study")
    return list(adapter.residual_branches)


def as_feature_map(state: torch.Tensor, num_prefix_tokens: int = 1) -> torch.Tensor | None:
    """A block state as a (batch, channels, height, width) map, or None if it has no spatial layout.

    Token states (batch, tokens, dim) drop their prefix tokens; the rest must form a square grid.
    """
    if state.ndim == 4:
        return state
    if state.ndim != 3:
        return None
    tokens = state[:, num_prefix_tokens:]
    side = math.isqrt(tokens.shape[1])
    if side * side != tokens.shape[1]:
        raise ValueError(
            f"{tokens.shape[1]} tokens after {num_prefix_tokens} prefix tokens do not form a square grid; "
            "set num_prefix_tokens on the BlockAdapter"
        )
    return tokens.transpose(1, 2).reshape(state.shape[0], state.shape[2], side, side)


def feature_maps_by_batch(
    model: nn.Module,
    data,
    *,
    adapter: BlockAdapter | None = None,
    max_batches: int | None = None,
    device: str | torch.device | None = None,
    progress: bool = False,
    desc: str = "blocks",
) -> Iterator[tuple[list[str], list[torch.Tensor | None]]]:
    """For each batch of `data` (inputs, a batch `(inputs, targets)` or a DataLoader), in eval mode:
    the kinds `["input", *block kinds]` and the input with every block output as (B, C, H, W) maps
    (None for a state without spatial layout). The spatial analyses are reductions of this stream."""
    device = resolve_device(model, device)
    batches = _common.iterate_inputs(data, max_batches=max_batches)
    total = _common.count_batches(data, max_batches)
    with analysis_mode(model, device=device), torch.no_grad():
        for inputs in _common.progress(batches, enabled=progress, total=total, desc=desc, unit="batch"):
            inputs = inputs.to(device)
            run = run_blocks(model, inputs, adapter)
            yield ["input", *run.kinds], [inputs] + [as_feature_map(s, run.num_prefix_tokens) for s in run.states]
