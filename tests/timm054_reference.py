"""Run under timm 0.5.4 (`upstream.side_installed("timm", "0.5.4")` first on PYTHONPATH), in its own process:
writes what the reference's PiT-Ti and Swin-Ti files hold and compute, for tests/test_convert_timm054.py.

    python tests/timm054_reference.py OUT
    python tests/timm054_reference.py --load FILE NAME OUT   # FILE into timm 0.5.4's NAME, strictly: OUT's logits

For each model, built as the reference's README builds it with timm 0.5.4 and given random weights (biases and
norms too, so that every key matters): `<name>.pth.tar` saved as the reference saves checkpoints
(`{"name": ..., "state_dict": ...}`), and `<name>.expected.pt` with an input, the logits, and the state after each
block of the reference's decomposition (README, "model → blocks") with the block kinds. The decomposition is
computed here from timm 0.5.4's modules, step by step as the README cuts them, not by the zoo's code.
"""

import copy
import sys
from pathlib import Path

import timm
import torch
from torch import nn

assert timm.__version__ == "0.5.4", f"run this under timm 0.5.4, not {timm.__version__} ({timm.__file__})"


def randomise(model: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.ndim == 1:  # biases and norms: away from 0 and 1
                parameter.copy_(torch.randn_like(parameter) * 0.2 + (1.0 if "norm" in name else 0.0))
            else:
                parameter.copy_(torch.randn_like(parameter) * parameter.shape[-1] ** -0.5)
    return model.eval()


def pit_blocks(model, x):
    """Patch embedding with the class token, each layer's attention and MLP residuals, pools, classifier."""
    kinds, states = [], []

    def record(kind, state):
        kinds.append(kind)
        states.append(state)

    maps = model.pos_drop(model.patch_embed(x) + model.pos_embed)
    cls = model.cls_token.expand(x.shape[0], -1, -1)
    tokens = torch.cat([cls, maps.flatten(2).transpose(1, 2)], dim=1)
    record("stem", tokens)
    for stage in model.transformers:
        for block in stage.blocks:
            tokens = tokens + block.attn(block.norm1(tokens))
            record("msa", tokens)
            tokens = tokens + block.mlp(block.norm2(tokens))
            record("mlp", tokens)
        if stage.pool is not None:
            cls, patches = tokens[:, :1], tokens[:, 1:]
            side = int(patches.shape[1] ** 0.5)
            grid = patches.transpose(1, 2).reshape(x.shape[0], -1, side, side)
            grid, cls = stage.pool(grid, cls)
            tokens = torch.cat([cls, grid.flatten(2).transpose(1, 2)], dim=1)
            record("pool", tokens)
    logits = model.head(model.norm(tokens[:, 0]))
    record("head", logits)
    return kinds, states, logits


def swin_blocks(model, x):
    """Patch embedding, each block's attention residual (the block run without its MLP, as the README does) and
    MLP residual, patch mergings, classifier."""
    kinds, states = [], []

    def record(kind, state):
        kinds.append(kind)
        states.append(state)

    tokens = model.pos_drop(model.patch_embed(x))
    record("stem", tokens)
    for layer in model.layers:
        for block in layer.blocks:
            attention_only = copy.deepcopy(block)
            attention_only.mlp, attention_only.norm2 = nn.Identity(), nn.Identity()
            tokens = attention_only(tokens) / 2  # without an MLP the block adds its input to itself
            record("msa", tokens)
            tokens = tokens + block.mlp(block.norm2(tokens))
            record("mlp", tokens)
        if layer.downsample is not None:
            tokens = layer.downsample(tokens)
            record("pool", tokens)
    logits = model.head(model.norm(tokens).mean(dim=1))
    record("head", logits)
    return kinds, states, logits


MODELS = {
    "pit_ti": (
        lambda: timm.models.pit.PoolingVisionTransformer(
            num_classes=100,
            img_size=32,
            patch_size=2,
            stride=1,
            base_dims=[32, 32, 32],
            depth=[2, 6, 4],
            heads=[2, 4, 8],
            mlp_ratio=4,
        ),
        pit_blocks,
    ),
    "swin_ti": (
        lambda: timm.models.swin_transformer.SwinTransformer(
            num_classes=100,
            img_size=32,
            patch_size=1,
            window_size=4,
            embed_dim=96,
            depths=(2, 2, 6, 2),
            num_heads=(3, 6, 12, 24),
            qkv_bias=False,
        ),
        swin_blocks,
    ),
}


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, (build, blocks) in MODELS.items():
        model = randomise(build())
        torch.save({"name": name, "state_dict": model.state_dict()}, out / f"{name}.pth.tar")
        x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            kinds, states, logits = blocks(model, x)
            torch.testing.assert_close(logits, model(x))  # the decomposition computes the model
        torch.save(dict(input=x, logits=logits, kinds=kinds, states=states), out / f"{name}.expected.pt")
        print(f"{name}: {sum(p.numel() for p in model.parameters()):,} parameters, {len(kinds)} blocks")


def load(file: Path, name: str, out: Path) -> None:
    """A file written elsewhere (the zoo's way back to the reference's layout) loaded into timm 0.5.4's own module
    with every key and shape as that module has them; the logits of the input of `<name>.expected.pt` beside OUT."""
    build, _ = MODELS[name]
    model = build().eval()
    model.load_state_dict(torch.load(file, map_location="cpu")["state_dict"], strict=True)
    expected = torch.load(out.parent / f"{name}.expected.pt")
    with torch.no_grad():
        torch.save(model(expected["input"]), out)


if __name__ == "__main__":
    if sys.argv[1] == "--load":
        load(Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4]))
    else:
        main(Path(sys.argv[1]))
