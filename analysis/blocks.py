"""Any model as the paper's chain of tagged blocks (docs/paper.md §6): stem, conv or MLP, MSA, pool, head.

Zoo models know their blocks, `discover_blocks` finds those of `KNOWN_FAMILIES`, and any other model is described by a
`BlockAdapter`. A block that lowers the resolution is tagged `pool` whatever else it computes, as the reference
notebooks shade them ("subsampling"): such blocks cause most rises of high-frequency ΔlogA and drops of variance,
which would otherwise be counted as the convs'. `accumulate` feeds several per-block analyses from one pass.
"""

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

import alternet_hf
from alternet_hf.models.blocks import Block, BlockAdapter, hooked_states, timm_cut

from . import shared
from .shared import AnalysisResult, analysis_mode, logits_of


class UndescribedModelError(TypeError, ValueError):
    """Unknown blocks: a TypeError for Python callers, a ValueError (a user error) for the commands."""


@dataclass
class BlockRun:
    """One forward pass seen block by block: `states[i]` is the output of block `kinds[i]`."""

    states: list[torch.Tensor]
    kinds: list[str]
    logits: torch.Tensor
    num_prefix_tokens: int
    channels_last: bool = False


def _zoo_adapter(model: nn.Module) -> BlockAdapter | None:
    """The zoo's own blocks (alternet_hf.models.blocks), each module found from its branch; None outside the zoo."""
    try:
        kinds = alternet_hf.block_kinds(model)
    except TypeError:
        return None
    branches = alternet_hf.residual_branches(model)
    paths = {module: name for name, module in model.named_modules()}
    blocks = []
    for kind, branch in zip(kinds, branches):
        if branch is None:
            blocks.append(Block(kind, model, kind))
            continue
        parent = paths[branch].rpartition(".")[0]
        # A conv block's branch is its drop-path (the block is the parent); ViT's are the attention/MLP themselves.
        name = parent if paths[branch].endswith("drop_path") else paths[branch]
        blocks.append(Block(kind, model.get_submodule(name), name, branch))
    return BlockAdapter(blocks, num_prefix_tokens=1, states_of=alternet_hf.block_states)


# --- discovery of other families ---------------------------------------------------------------------


class _Describer:
    """Collects blocks of `model` by attribute path; what cannot be found is an error naming it."""

    def __init__(self, model: nn.Module, family: str, backbone: str | None = None):
        self.model, self.family, self.blocks = model, family, []
        self.paths = {module: name for name, module in model.named_modules()}
        # The task models hold the bare model under `backbone`; a bare model is its own.
        self.backbone = self.get(model, backbone) if backbone and hasattr(model, backbone) else model

    def get(self, module: nn.Module, attribute: str) -> nn.Module:
        found = getattr(module, attribute, None)
        if not isinstance(found, nn.Module):
            path = self.paths.get(module, type(module).__name__) or "the model"
            raise UndescribedModelError(
                f"{path} ({type(module).__name__}) of this {self.family} has no submodule {attribute!r}: "
                f"analysis.blocks cannot describe this variant. {_ADAPTER_HELP}"
            )
        return found

    def require(self, module: nn.Module, *class_names: str) -> None:
        if type(module).__name__ not in class_names:
            raise UndescribedModelError(
                f"{self.paths.get(module) or 'the model'} is a {type(module).__name__}; analysis.blocks describes "
                f"{self.family} blocks of class {' or '.join(class_names)} only. {_ADAPTER_HELP}"
            )

    def add(
        self, kind: str, module: nn.Module | None, branch: nn.Module | None = None, *, read: str = "output", named=None
    ) -> None:
        """A block whose state is `module`'s output (or input); `named`: the module to name it after."""
        if kind == "pool" and (module is None or isinstance(module, nn.Identity)):
            return  # a stage without downsampling
        self.blocks.append(Block(kind, module, self.paths.get(named or module, ""), branch, read))


def _timm_vit(model) -> BlockAdapter:
    d = _Describer(model, "timm VisionTransformer")
    d.add("stem", d.get(model, "norm_pre"))  # patches + class token + position embedding
    for block in d.get(model, "blocks"):  # x + attn(norm1 x), then + mlp(norm2 x): the MSA state enters norm2
        d.require(block, "Block")
        d.add("msa", d.get(block, "norm2"), d.get(block, "drop_path1"), read="input", named=d.get(block, "attn"))
        d.add("mlp", block, d.get(block, "drop_path2"), named=d.get(block, "mlp"))
    d.add("head", d.get(model, "norm"))
    return BlockAdapter(d.blocks, num_prefix_tokens=model.num_prefix_tokens)


def _timm_cut(model, family: str) -> BlockAdapter:
    """timm's PiT and Swin (the zoo's too), cut as the reference cuts them (`alternet_hf.models.blocks.timm_cut`)."""
    try:
        return timm_cut(model)
    except AttributeError as error:
        raise UndescribedModelError(
            f"this {family} lacks what its blocks are read from ({error}): analysis.blocks cannot describe this "
            f"variant. {_ADAPTER_HELP}"
        ) from error


def _timm_convnext(model) -> BlockAdapter:
    d = _Describer(model, "timm ConvNeXt")
    d.add("stem", d.get(model, "stem"))
    for stage in d.get(model, "stages"):
        d.add("pool", d.get(stage, "downsample"))
        for block in d.get(stage, "blocks"):
            d.require(block, "ConvNeXtBlock")
            d.add("conv", block, d.get(block, "drop_path"))
    return BlockAdapter(d.blocks, num_prefix_tokens=0)


def _timm_resnet(model) -> BlockAdapter:
    d = _Describer(model, "timm ResNet")
    d.add("stem", d.get(model, "maxpool"))
    for layer in ("layer1", "layer2", "layer3", "layer4"):
        for block in d.get(model, layer):
            d.require(block, "BasicBlock", "Bottleneck")
            # The branch ends in drop-path, else squeeze-excitation, else the last norm (None when unused).
            last_norm = "bn3" if hasattr(block, "bn3") else "bn2"
            branch = next(
                getattr(block, name)
                for name in ("drop_path", "se", last_norm)
                if getattr(block, name, None) is not None
            )
            d.add("conv", block, branch)
    return BlockAdapter(d.blocks, num_prefix_tokens=0)


def _hf_vit_like(model, backbone_name: str, family: str) -> BlockAdapter:
    """transformers' DeiT (ViT goes through the zoo): the layers' MSA residual is what enters
    layernorm_after, the MLP residual the layer's output."""
    d = _Describer(model, family, backbone_name)
    d.add("stem", d.get(d.backbone, "embeddings"))
    for layer in d.get(d.backbone, "layers"):
        attention, mlp = d.get(layer, "attention"), d.get(layer, "mlp")
        d.add("msa", d.get(layer, "layernorm_after"), attention, read="input", named=attention)
        d.add("mlp", layer, mlp, named=mlp)
    d.add("head", d.get(d.backbone, "layernorm"))
    prefix = 1 + int(getattr(d.backbone.embeddings, "distillation_token", None) is not None)
    return BlockAdapter(d.blocks, num_prefix_tokens=prefix)


def _hf_swin(model) -> BlockAdapter:
    d = _Describer(model, "transformers Swin", "swin")
    d.add("stem", d.get(d.backbone, "embeddings"))
    for stage in d.get(d.get(d.backbone, "encoder"), "layers"):
        for layer in d.get(stage, "blocks"):
            attention, mlp = d.get(layer, "attention"), d.get(layer, "mlp")
            d.add("msa", d.get(layer, "layernorm_after"), d.get(layer, "drop_path"), read="input", named=attention)
            d.add("mlp", layer, mlp, named=mlp)
        d.add("pool", getattr(stage, "downsample", None))
    d.add("head", d.get(d.backbone, "layernorm"))
    return BlockAdapter(d.blocks, num_prefix_tokens=0)


def _hf_convnext(model) -> BlockAdapter:
    d = _Describer(model, "transformers ConvNext", "convnext")
    d.add("stem", d.get(d.backbone, "embeddings"))
    for stage in d.get(d.get(d.backbone, "encoder"), "stages"):
        downsampling = d.get(stage, "downsampling_layer")  # a ModuleList its stage runs in turn
        if len(downsampling):
            d.add("pool", downsampling[-1], named=downsampling)
        for layer in d.get(stage, "layers"):
            d.add("conv", layer, d.get(layer, "drop_path"))
    return BlockAdapter(d.blocks, num_prefix_tokens=0)


def _hf_resnet(model) -> BlockAdapter:
    d = _Describer(model, "transformers ResNet", "resnet")
    d.add("stem", d.get(d.backbone, "embedder"))
    for stage in d.get(d.get(d.backbone, "encoder"), "stages"):
        for layer in d.get(stage, "layers"):
            d.add("conv", layer, d.get(layer, "layer"))
    return BlockAdapter(d.blocks, num_prefix_tokens=0)


# (module the class lives in, class names, describer): the model's class, or its nearest base, that matches.
DISCOVERERS: list[tuple[str, tuple[str, ...], Callable[[nn.Module], BlockAdapter]]] = [
    ("timm.models.vision_transformer", ("VisionTransformer",), _timm_vit),  # also DeiT's subclass
    ("timm.models.pit", ("PoolingVisionTransformer",), lambda m: _timm_cut(m, "timm PoolingVisionTransformer")),
    ("timm.models.swin_transformer", ("SwinTransformer",), lambda m: _timm_cut(m, "timm SwinTransformer")),
    ("timm.models.convnext", ("ConvNeXt",), _timm_convnext),
    ("timm.models.resnet", ("ResNet",), _timm_resnet),
    (
        "transformers.models.deit",
        ("DeiTModel", "DeiTForImageClassification", "DeiTForImageClassificationWithTeacher"),
        lambda m: _hf_vit_like(m, "deit", "transformers DeiT"),
    ),
    ("transformers.models.swin", ("SwinModel", "SwinForImageClassification"), _hf_swin),
    ("transformers.models.convnext", ("ConvNextModel", "ConvNextForImageClassification"), _hf_convnext),
    ("transformers.models.resnet", ("ResNetModel", "ResNetForImageClassification"), _hf_resnet),
]

KNOWN_FAMILIES = (
    "the zoo's AlterNet, ResNet, ViT, PiT and Swin; timm's ResNet, VisionTransformer (ViT, DeiT), SwinTransformer, "
    "ConvNeXt and PoolingVisionTransformer (PiT); transformers' ResNet, ViT, DeiT, Swin and ConvNext"
)
_ADAPTER_HELP = (
    "Describe its blocks in forward order and pass adapter=...:\n\n"
    "    from analysis.blocks import Block, BlockAdapter\n"
    "    adapter = BlockAdapter(\n"
    '        [("stem", model.stem), ("conv", model.stage1[0]), ..., ("msa", model.stage4[1]), ("head", model.norm)],\n'
    "        residual_branches=[None, model.stage1[0].<branch>, ..., None],  # for the lesion study\n"
    "        num_prefix_tokens=1,  # class tokens ahead of the patch tokens in token states (0 if none)\n"
    "    )\n\n"
    '(Block("msa", module, read="input") reads a state where it enters a module, e.g. a residual sum.)'
)


def _wrapped_zoo_adapter(model: nn.Module) -> BlockAdapter | None:
    """A zoo backbone behind timm's interface (`model.backbone`, `model.forward_head`), as the zoo's timm
    models are: the zoo's blocks, the logits from the wrapper's own head on the last state."""
    backbone = getattr(model, "backbone", None)
    adapter = _zoo_adapter(backbone) if isinstance(backbone, nn.Module) and hasattr(model, "forward_head") else None

    def states_of(wrapper, inputs):
        states, _ = alternet_hf.block_states(wrapper.backbone, inputs)
        return states, wrapper.forward_head(states[-1])

    return None if adapter is None else replace(adapter, states_of=states_of)


def _timm_wrapper_adapter(model: nn.Module) -> BlockAdapter | None:
    """A timm model in transformers' `TimmWrapperForImageClassification` (the zoo's PiT and Swin, or any timm
    model loaded from the Hub by transformers): the wrapped model's blocks, with their paths in the wrapper."""
    inner = getattr(model, "timm_model", None)
    if not isinstance(inner, nn.Module) or getattr(model.config, "model_type", None) != "timm_wrapper":
        return None
    adapter = discover_blocks(inner)
    return replace(adapter, blocks=[replace(b, name=f"timm_model.{b.name}" if b.name else "") for b in adapter.blocks])


def discover_blocks(model: nn.Module) -> BlockAdapter:
    """The blocks of a zoo, timm or transformers model of a known family; a clear error otherwise."""
    for adapter_of in (_timm_wrapper_adapter, _zoo_adapter, _wrapped_zoo_adapter):
        adapter = adapter_of(model)
        if adapter is not None:
            return adapter
    for cls in type(model).__mro__:  # a subclass of a known family is described as that family
        for module_name, class_names, describe in DISCOVERERS:
            if cls.__module__.startswith(module_name) and cls.__name__ in class_names:
                return describe(model)
    children = ", ".join(f"{name} ({type(child).__name__})" for name, child in list(model.named_children())[:12])
    raise UndescribedModelError(
        f"cannot find the blocks of {type(model).__name__} ({type(model).__module__}): analyses know "
        f"{KNOWN_FAMILIES}. {_ADAPTER_HELP}\nIts top-level modules: {children or 'none'}."
    )


def reduces_resolution(module: nn.Module) -> bool:
    """Whether a block lowers the resolution: a convolution or pooling inside it has a stride above 1."""
    strides = (m.stride for m in module.modules() if isinstance(m, (nn.Conv2d, nn.MaxPool2d, nn.AvgPool2d)))
    return any(max(stride if isinstance(stride, tuple) else (stride,)) > 1 for stride in strides)


def describe_blocks(model: nn.Module, adapter: BlockAdapter | None = None) -> BlockAdapter:
    """The adapter to analyse `model` with (given, else discovered), resolution-lowering blocks tagged `pool`."""
    adapter = adapter if adapter is not None else discover_blocks(model)
    blocks = [
        replace(block, kind="pool")
        if block.kind in ("conv", "mlp", "msa") and block.module is not model and reduces_resolution(block.module)
        else block
        for block in adapter.blocks
    ]
    return replace(adapter, blocks=blocks, residual_branches=None)


def block_kinds(model: nn.Module, adapter: BlockAdapter | None = None) -> list[str]:
    """The kind of each block, aligned with `run_blocks(...).states` (`pool` for those that downsample)."""
    return describe_blocks(model, adapter).kinds


def run_blocks(model: nn.Module, inputs: torch.Tensor, adapter: BlockAdapter | None = None) -> BlockRun:
    """Run `model` once on `inputs` and return every block's output with its kind and the logits."""
    adapter = describe_blocks(model, adapter)
    if adapter.states_of is not None:
        states, logits = adapter.states_of(model, inputs)
    else:
        states, outputs = hooked_states(model, inputs, adapter.blocks)
        logits = logits_of(outputs)
    return BlockRun(list(states), adapter.kinds, logits, adapter.num_prefix_tokens, adapter.channels_last)


def residual_branches(model: nn.Module, adapter: BlockAdapter | None = None) -> list[nn.Module | None]:
    """The residual-branch module of each block (None where there is none), for the lesion study."""
    adapter = describe_blocks(model, adapter)
    if not adapter.has_residual_branches:
        raise ValueError("this BlockAdapter names no residual_branches; give them to run a lesion study")
    return [block.residual_branch for block in adapter.blocks]


def as_feature_map(
    state: torch.Tensor, num_prefix_tokens: int = 1, *, channels_last: bool = False
) -> torch.Tensor | None:
    """A block state as a (batch, channels, height, width) map, None without spatial layout; token states (batch,
    tokens, dim) drop their prefix tokens, and the rest must form a square grid."""
    if state.ndim == 4:
        return state.permute(0, 3, 1, 2) if channels_last else state
    if state.ndim != 3:
        return None
    tokens = state[:, num_prefix_tokens:]
    side = math.isqrt(tokens.shape[1])
    if side == 0:
        return None
    if side * side != tokens.shape[1]:
        raise ValueError(
            f"{tokens.shape[1]} tokens after {num_prefix_tokens} prefix tokens do not form a square grid; "
            "set num_prefix_tokens on the BlockAdapter"
        )
    return tokens.transpose(1, 2).reshape(state.shape[0], state.shape[2], side, side)


# --- one pass, many analyses -------------------------------------------------------------------------


@dataclass
class BlockBatch:
    """One batch seen block by block: `kinds`/`names` start with the input; `maps[i]` is state i as a
    (B, C, H, W) map (None without spatial layout), `states` the blocks' raw outputs (no input)."""

    kinds: list[str]
    names: list[str]
    maps: list[torch.Tensor | None]
    states: list[torch.Tensor]
    logits: torch.Tensor
    targets: torch.Tensor | None


def block_batches(
    model: nn.Module,
    data,
    *,
    adapter: BlockAdapter | None = None,
    max_batches: int | None = None,
    device: str | torch.device | None = None,
    progress: bool = False,
    desc: str = "blocks",
) -> Iterator[BlockBatch]:
    """For each batch of `data` (inputs, a batch `(inputs, targets)` or a DataLoader), in eval mode and
    without gradients: the input and every block's state. The per-block analyses reduce this stream."""
    adapter = describe_blocks(model, adapter)
    kinds, names = ["input", *adapter.kinds], ["input", *adapter.names]
    batches = shared.batches(
        data, max_batches=max_batches, enabled=progress, desc=desc, iterate=shared.iterate_inputs_and_targets
    )
    with analysis_mode(model, device=device) as device, torch.no_grad():
        for inputs, targets in batches:
            inputs = inputs.to(device)
            run = run_blocks(model, inputs, adapter)
            maps = [as_feature_map(s, run.num_prefix_tokens, channels_last=run.channels_last) for s in run.states]
            yield BlockBatch(kinds, names, [inputs, *maps], run.states, run.logits, targets)


def accumulate(model: nn.Module, data, accumulators: Sequence, **options) -> list:
    """The results of the accumulators (`update(batch)`, then `result()`) fed by one pass of `block_batches`."""
    batch = None
    for batch in block_batches(model, data, **options):
        for accumulator in accumulators:
            accumulator.update(batch)
    if batch is None:
        raise ValueError("the data gave no batches")
    return [accumulator.result() for accumulator in accumulators]


@dataclass
class AccuracyResult(AnalysisResult):
    """Accuracy and mean NLL of the clean test data, from the per-block pass."""

    accuracy: float
    nll: float
    num_samples: int


class AccuracyAccumulator:
    """The clean accuracy of the batches the per-block pass reads (what the claims weigh); `add` takes any others."""

    def __init__(self):
        self.correct, self.nll, self.count = 0, 0.0, 0

    def update(self, batch) -> None:
        if batch.targets is not None:
            self.add(batch.logits, batch.targets)

    def add(self, outputs, targets: torch.Tensor) -> None:
        logits = logits_of(outputs).double()
        targets = targets.to(logits.device)
        self.correct += (logits.argmax(-1) == targets).sum().item()
        self.nll += F.cross_entropy(logits, targets, reduction="sum").item()
        self.count += len(targets)

    def result(self) -> AccuracyResult | None:
        return AccuracyResult(self.correct / self.count, self.nll / self.count, self.count) if self.count else None
