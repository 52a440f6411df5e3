"""Converters from the reference code's checkpoints (`xxxnell/how-do-vits-work`) to the zoo's models.

The reference saves `{"name": ..., "state_dict": ...}` (no `module.` prefix) in `.pth.tar` files: its ResNet and
AlterNet keys follow `models/resnet.py` and `models/alternet.py`, its ViT, PiT and Swin are timm 0.5.4's. Each key is
renamed by the rules below; a key no rule claims, a model weight no key fills, or a shape that differs is an error.
docs/models.md lists what timm changed since 0.5.4.
"""

import re
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import PreTrainedModel

from ..models.presets import create_model

Rules = list[tuple[str, str | Callable[[re.Match], str]]]


def _stage_block(prefix: str) -> Callable[[re.Match], str]:
    # `layer1.0.` is stage 0, block 0: the reference numbers stages from 1 (`layer0` is its stem).
    return lambda m: f"{prefix}.encoder.stages.{int(m[1]) - 1}.layers.{m[2]}."


ALTERNET_RULES: Rules = [
    (r"^layer0\.layer0\.0\.", "alternet.embedder.convolution."),
    (r"^classifier\.0\.bn\.", "alternet.norm."),
    (r"^classifier\.0\.dense\.", "classifier."),
    (r"^layer([1-9])\.(\d+)\.", _stage_block("alternet")),
    (r"\.bn\.", ".norm1."),  # conv blocks' pre-activation BN; MSA blocks already say `norm1`
    (r"\.shortcut\.0\.", ".shortcut."),
    (r"\.conv2\.0\.", ".norm2."),
    (r"\.conv2\.2\.", ".conv2."),
    (r"\.conv3\.0\.", ".norm3."),
    (r"\.conv3\.2\.", ".conv3."),
    (r"\.attn\.pos_embedding$", ".attention.relative_position_bias_table"),
    (r"\.attn\.attn\.to_q\.", ".attention.query."),
    (r"\.attn\.attn\.to_kv\.", ".attention.key_value."),
    (r"\.attn\.attn\.to_out\.0\.", ".attention.output."),
]

RESNET_RULES: Rules = [
    (r"^layer0\.0\.", "resnet.embedder.embedder.convolution."),
    (r"^layer0\.1\.", "resnet.embedder.embedder.normalization."),
    (r"^classifier\.0\.dense\.", "classifier."),
    (r"^layer([1-9])\.(\d+)\.", _stage_block("resnet")),
    (r"\.shortcut\.0\.", ".shortcut.convolution."),
    (r"\.shortcut\.1\.", ".shortcut.normalization."),
    (r"\.conv([123])\.([01])\.", lambda m: f".layer.{int(m[1]) - 1}.{('convolution', 'normalization')[int(m[2])]}."),
]

VIT_RULES: Rules = [
    (r"^cls_token$", "vit.embeddings.cls_token"),
    (r"^pos_embed$", "vit.embeddings.position_embeddings"),
    (r"^patch_embed\.proj\.", "vit.embeddings.patch_embeddings.projection."),
    (r"^norm\.", "vit.layernorm."),
    (r"^head\.", "classifier."),
    (r"^blocks\.(\d+)\.", lambda m: f"vit.layers.{m[1]}."),
    (r"\.norm1\.", ".layernorm_before."),
    (r"\.norm2\.", ".layernorm_after."),
    (r"\.attn\.proj\.", ".attention.o_proj."),
    # `.mlp.fc1.` / `.mlp.fc2.` keep their names; `attn.qkv` is split in `_split_qkv`.
]

PIT_RULES: Rules = [
    (r"^transformers\.(\d+)\.pool\.", lambda m: f"transformers.{int(m[1]) + 1}.pool."),
    (r"^", "timm_model."),
]

SWIN_RULES: Rules = [
    (r"^layers\.(\d+)\.downsample\.", lambda m: f"layers.{int(m[1]) + 1}.downsample."),
    (r"^head\.", "head.fc."),
    (r"^", "timm_model."),
]
# Buffers timm 0.5.4 saved and today's timm computes (non-persistent): checked equal, then dropped.
COMPUTED_BUFFERS = re.compile(r"\.(relative_position_index|attn_mask)$")

FAMILY_RULES = {
    "alternet": ALTERNET_RULES,
    "resnet": RESNET_RULES,
    "vit": VIT_RULES,
    "pit": PIT_RULES,
    "swin": SWIN_RULES,
}


# The way back, zoo key -> reference key (`reference_state_dict`): each family's rules above undone, in reverse order.
TO_REFERENCE_RULES: dict[str, Rules] = {
    "resnet": [
        (
            r"\.layer\.([012])\.(convolution|normalization)\.",
            lambda m: f".conv{int(m[1]) + 1}.{0 if m[2] == 'convolution' else 1}.",
        ),
        (r"\.shortcut\.convolution\.", ".shortcut.0."),
        (r"\.shortcut\.normalization\.", ".shortcut.1."),
        (r"^resnet\.encoder\.stages\.(\d+)\.layers\.(\d+)\.", lambda m: f"layer{int(m[1]) + 1}.{m[2]}."),
        (r"^classifier\.", "classifier.0.dense."),
        (r"^resnet\.embedder\.embedder\.convolution\.", "layer0.0."),
        (r"^resnet\.embedder\.embedder\.normalization\.", "layer0.1."),
    ],
    "vit": [
        (r"\.attention\.o_proj\.", ".attn.proj."),
        (r"\.layernorm_after\.", ".norm2."),
        (r"\.layernorm_before\.", ".norm1."),
        (r"^vit\.layers\.(\d+)\.", lambda m: f"blocks.{m[1]}."),
        (r"^classifier\.", "head."),
        (r"^vit\.layernorm\.", "norm."),
        (r"^vit\.embeddings\.patch_embeddings\.projection\.", "patch_embed.proj."),
        (r"^vit\.embeddings\.position_embeddings$", "pos_embed"),
        (r"^vit\.embeddings\.cls_token$", "cls_token"),
    ],
    "pit": [
        (r"^timm_model\.", ""),
        (r"^transformers\.(\d+)\.pool\.", lambda m: f"transformers.{int(m[1]) - 1}.pool."),
    ],
    "swin": [
        (r"^timm_model\.", ""),
        (r"^head\.fc\.", "head."),
        (r"^layers\.(\d+)\.downsample\.", lambda m: f"layers.{int(m[1]) - 1}.downsample."),
    ],
}


def rename_keys(state_dict: dict[str, torch.Tensor], rules: Rules) -> dict[str, torch.Tensor]:
    """Apply every matching rule to every key, in order."""
    renamed = {}
    for key, value in state_dict.items():
        new_key = key
        for pattern, replacement in rules:
            new_key = re.sub(pattern, replacement, new_key)
        renamed[new_key] = value
    return renamed


def _split_qkv(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """timm fuses q, k, v into one `(3·dim, dim)` projection; transformers keeps three."""
    out = {}
    for key, value in state_dict.items():
        if ".attn.qkv." in key:
            for name, part in zip(("q_proj", "k_proj", "v_proj"), value.chunk(3, dim=0)):
                out[key.replace(".attn.qkv.", f".attention.{name}.")] = part
        else:
            out[key] = value
    return out


def _merge_qkv(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """transformers' three q, k, v projections fused back into timm's one (`_split_qkv` undone)."""
    out = {}
    for key, value in state_dict.items():
        if ".attention.q_proj." in key:
            parts = [state_dict[key.replace(".q_proj.", f".{name}.")] for name in ("q_proj", "k_proj", "v_proj")]
            out[key.replace(".attention.q_proj.", ".attn.qkv.")] = torch.cat(parts, dim=0)
        elif ".attention.k_proj." not in key and ".attention.v_proj." not in key:
            out[key] = value
    return out


def _drop_computed_buffers(state_dict: dict[str, torch.Tensor], model: PreTrainedModel) -> dict[str, torch.Tensor]:
    """Drop the buffers the model computes itself (`COMPUTED_BUFFERS`), once checked equal to the file's."""
    buffers = dict(model.named_buffers())
    kept = {}
    for key, value in state_dict.items():
        if not COMPUTED_BUFFERS.search(key) or key in model.state_dict():
            kept[key] = value
            continue
        own = buffers.get(key)
        if own is None:  # not this model's buffer: reported with the other keys that fit nothing
            kept[key] = value
        elif own.shape != value.shape or not torch.equal(own.to(value.dtype), value):
            raise ValueError(
                f"the checkpoint's {key} ({tuple(value.shape)}) is not what the model computes "
                f"({tuple(own.shape)}, or other values): the window size or image size differs; check the preset "
                "and its overrides"
            )
    return kept


ZIP_MAGIC, PICKLE_MAGIC = b"PK\x03\x04", b"\x80"


def load_original_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of a reference checkpoint, loaded safely (`weights_only=True`), with clear errors."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    with path.open("rb") as file:
        head = file.read(4)
    if not head.startswith((ZIP_MAGIC, PICKLE_MAGIC)):  # torch.save writes a zip archive, older torch a pickle
        size = path.stat().st_size
        raise ValueError(
            f"{path} is not a readable PyTorch checkpoint: it is no checkpoint at all ({size:,} bytes, neither a "
            "zip archive nor a pickle, as torch.save writes them); download it again (reference files end in .pth.tar)"
        )
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # truncated zip, pickle with code, not a torch file at all
        first_line = re.sub(r"\x1b\[[0-9;]*m", "", str(error)).strip().splitlines()[0] if str(error).strip() else ""
        if "weights only load failed" in first_line.lower():
            raise ValueError(
                f"{path} is not a readable PyTorch checkpoint: it holds Python objects beyond tensors, which a safe "
                "load (torch.load with weights_only=True) refuses to run; the reference's files hold tensors only"
            ) from error
        raise ValueError(
            f"{path} is not a readable PyTorch checkpoint ({type(error).__name__}: {first_line}); "
            "download it again (reference files end in .pth.tar)"
        ) from error
    state_dict = checkpoint.get("state_dict", checkpoint) if isinstance(checkpoint, dict) else None
    if not isinstance(state_dict, dict) or not all(isinstance(v, torch.Tensor) for v in state_dict.values()):
        raise ValueError(f"{path} holds no state dict: expected a dict of tensors, or one under 'state_dict'")
    return {key.removeprefix("module."): value for key, value in state_dict.items()}


def _infer_alternet_overrides(state_dict: dict[str, torch.Tensor]) -> dict:
    """Layout and window size as the checkpoint has them (the reference's default differs from the paper's)."""
    msa_blocks: dict[int, int] = {}
    window_size = None
    for key, value in state_dict.items():
        match = re.match(r"^layer([1-9])\.\d+\.attn\.pos_embedding$", key)
        if match:
            msa_blocks[int(match[1])] = msa_blocks.get(int(match[1]), 0) + 1
            window_size = (value.shape[0] + 1) // 2
    num_stages = 1 + max(int(m[1]) for key in state_dict if (m := re.match(r"^layer([1-9])\.", key)))
    overrides = {"num_attention_blocks": [msa_blocks.get(stage, 0) for stage in range(1, num_stages)]}
    if window_size is not None:
        overrides["window_size"] = window_size
    return overrides


# A key only each family's reference checkpoints hold.
FAMILY_SIGNATURES = {
    "alternet": r"^layer0\.layer0\.0\.weight$",
    "resnet": r"^layer0\.0\.weight$",
    "vit": r"^blocks\.0\.attn\.qkv\.weight$",
    "pit": r"^transformers\.0\.blocks\.0\.attn\.qkv\.weight$",
    "swin": r"^layers\.0\.blocks\.0\.attn\.relative_position_bias_table$",
}


def guess_family(state_dict: dict[str, torch.Tensor]) -> str | None:
    """The zoo family whose reference checkpoints have this file's keys, for the error a wrong preset gets."""
    for family, signature in FAMILY_SIGNATURES.items():
        if any(re.match(signature, key) for key in state_dict):
            return family
    return None


def convert_state_dict(
    state_dict: dict[str, torch.Tensor], model: PreTrainedModel, family: str
) -> dict[str, torch.Tensor]:
    """Rename a reference state dict for `model`, checking that every key and shape is accounted for."""
    converted = rename_keys(state_dict, FAMILY_RULES[family])
    if family == "vit":
        converted = _split_qkv(converted)
    converted = _drop_computed_buffers(converted, model)
    expected = model.state_dict()
    unclaimed = sorted(set(converted) - set(expected))
    missing = sorted(set(expected) - set(converted))
    wrong_shape = [
        f"{key}: checkpoint {tuple(value.shape)} vs model {tuple(expected[key].shape)}"
        for key, value in converted.items()
        if key in expected and value.shape != expected[key].shape
    ]
    problems = []
    if unclaimed:
        problems.append(f"{len(unclaimed)} checkpoint keys fit no model weight, e.g. {unclaimed[:5]}")
    if missing:
        problems.append(f"{len(missing)} model weights are not in the checkpoint, e.g. {missing[:5]}")
    if wrong_shape:
        problems.append(f"{len(wrong_shape)} shapes differ, e.g. {wrong_shape[:3]}")
    if problems:
        found = guess_family(state_dict)
        hint = (
            f" The file looks like a reference {found} checkpoint: convert it with a {found}-* preset."
            if found not in (None, family)
            else " Check the preset (size, dataset) and pass config overrides such as num_labels."
        )
        raise ValueError("the checkpoint does not match the model: " + "; ".join(problems) + "." + hint)
    return converted


def reference_state_dict(model: PreTrainedModel, family: str) -> dict[str, torch.Tensor]:
    """The state dict the reference code would save for `model` (a zoo ResNet, ViT, PiT or Swin): the converters
    run backwards, with the buffers timm 0.5.4 saved and today's timm computes put back for Swin (the release
    rehearsal's stand-ins for the reference's files)."""
    if family not in TO_REFERENCE_RULES:
        raise ValueError(f"no reference layout for {family!r}: one of {sorted(TO_REFERENCE_RULES)}")
    state_dict = {key: value.detach().cpu().clone() for key, value in model.state_dict().items()}
    if family == "vit":
        state_dict = _merge_qkv(state_dict)
    if family == "swin":  # non-persistent today: the module's own values, as the file of timm 0.5.4 held them
        computed = {k: v for k, v in model.named_buffers() if COMPUTED_BUFFERS.search(k) and k not in state_dict}
        state_dict |= {key: value.detach().cpu().clone() for key, value in computed.items()}
    return rename_keys(state_dict, TO_REFERENCE_RULES[family])


def save_reference_checkpoint(model: PreTrainedModel, family: str, path: str | Path, name: str) -> Path:
    """`model` written as the reference saves checkpoints: `{"name": name, "state_dict": ...}` in a `.pth.tar`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"name": name, "state_dict": reference_state_dict(model, family)}, path)
    return path


def convert_original_checkpoint(path: str | Path, preset: str, **config_overrides) -> PreTrainedModel:
    """A zoo model (`preset`, e.g. `"resnet-50-cifar100"`) in eval mode, holding the weights of a reference
    checkpoint; for AlterNet the attention layout and window size are read from the checkpoint unless overridden."""
    family = preset.split("-", 1)[0]
    if family not in FAMILY_RULES:
        raise ValueError(f"no converter for {preset!r}: the preset must start with one of {sorted(FAMILY_RULES)}")
    state_dict = load_original_state_dict(path)
    if family == "alternet":
        config_overrides = {**_infer_alternet_overrides(state_dict), **config_overrides}
    model = create_model(preset, **config_overrides)
    model.load_state_dict(convert_state_dict(state_dict, model, family), strict=True)
    return model.eval()
