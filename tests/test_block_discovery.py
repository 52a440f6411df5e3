"""Blocks found automatically on randomly initialised small timm and transformers models of every family
analysed: the kinds and their counts, states that equal the models' own intermediate outputs, residual
branches the lesion study can remove, and the error that shows the adapter to write for anything else."""

import pytest
import timm
import torch
import transformers
from torch import nn

from analysis.blocks import (
    BlockAdapter,
    UndescribedModelError,
    as_feature_map,
    block_kinds,
    describe_blocks,
    residual_branches,
    run_blocks,
)
from analysis.lesion import lesion_study

IMAGES = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))


VIT = dict(img_size=32, patch_size=8, depth=2, embed_dim=24, num_heads=2, num_classes=5)
TIMM_MODELS = {
    "resnet": lambda: timm.create_model("resnet18", num_classes=5, layers=[1, 1, 1, 1], channels=[8, 8, 16, 16]),
    "resnet-bottleneck": lambda: timm.create_model(
        "resnet50", num_classes=5, layers=[1, 2, 1, 1], channels=[4, 4, 8, 8]
    ),
    "vit": lambda: timm.create_model("vit_tiny_patch16_224", **VIT),
    "deit-distilled": lambda: timm.create_model("deit_tiny_distilled_patch16_224", **VIT),
    "swin": lambda: timm.create_model(
        "swin_tiny_patch4_window7_224",
        img_size=32,
        window_size=4,
        embed_dim=8,
        depths=(1, 2),
        num_heads=(1, 2),
        num_classes=5,
    ),
    "convnext": lambda: timm.create_model("convnext_atto", depths=(1, 1, 2, 1), dims=(8, 8, 16, 16), num_classes=5),
    "pit": lambda: timm.create_model(
        "pit_ti_224", img_size=32, patch_size=4, stride=2, depth=(1, 2), heads=(1, 2), base_dims=(8, 8), num_classes=5
    ),
}
HF_VIT = dict(
    image_size=32,
    patch_size=8,
    hidden_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=32,
    num_labels=5,
)
TRANSFORMERS_MODELS = {
    "resnet": lambda: transformers.ResNetForImageClassification(
        transformers.ResNetConfig(
            embedding_size=8, hidden_sizes=[8, 16], depths=[1, 2], layer_type="bottleneck", num_labels=5
        )
    ),
    "vit": lambda: transformers.ViTForImageClassification(transformers.ViTConfig(**HF_VIT)),
    "deit": lambda: transformers.DeiTForImageClassification(transformers.DeiTConfig(**HF_VIT)),
    "swin": lambda: transformers.SwinForImageClassification(
        transformers.SwinConfig(
            image_size=32, patch_size=2, embed_dim=8, depths=[1, 2], num_heads=[1, 2], window_size=4, num_labels=5
        )
    ),
    "convnext": lambda: transformers.ConvNextForImageClassification(
        transformers.ConvNextConfig(hidden_sizes=[8, 16], depths=[1, 2], num_stages=2, num_labels=5)
    ),
}


# (kinds, the number of prefix tokens, the intermediate outputs of the model's own API the states must match)
TIMM_EXPECTED = {
    "resnet": (["stem", "conv", "pool", "pool", "pool"], 0),
    "resnet-bottleneck": (["stem", "conv", "pool", "conv", "pool", "pool"], 0),
    "vit": (["stem", "msa", "mlp", "msa", "mlp", "head"], 1),
    "deit-distilled": (["stem", "msa", "mlp", "msa", "mlp", "head"], 2),
    "swin": (["stem", "msa", "mlp", "pool", "msa", "mlp", "msa", "mlp", "head"], 0),
    "convnext": (["stem", "conv", "pool", "conv", "pool", "conv", "conv", "pool", "conv"], 0),
    "pit": (["stem", "msa", "mlp", "pool", "msa", "mlp", "msa", "mlp", "head"], 1),  # the reference's cut
}
TRANSFORMERS_EXPECTED = {
    "resnet": (["stem", "conv", "pool", "conv"], 0),
    "vit": (["stem", "msa", "mlp", "msa", "mlp", "head"], 1),
    "deit": (["stem", "msa", "mlp", "msa", "mlp", "head"], 2),
    "swin": (["stem", "msa", "mlp", "pool", "msa", "mlp", "msa", "mlp", "head"], 0),
    "convnext": (["stem", "conv", "pool", "conv", "conv"], 0),
}


def check_family(model: nn.Module, kinds: list[str], prefix: int):
    model.eval()
    adapter = describe_blocks(model)
    assert adapter.kinds == kinds == block_kinds(model)
    assert adapter.num_prefix_tokens == prefix
    assert all(adapter.names) and len(set(adapter.names)) == len(kinds)
    with torch.no_grad():
        run = run_blocks(model, IMAGES)
        logits = model(IMAGES)
    logits = logits if isinstance(logits, torch.Tensor) else logits.logits
    torch.testing.assert_close(run.logits, logits)  # the hooks change nothing
    maps = [as_feature_map(s, run.num_prefix_tokens, channels_last=run.channels_last) for s in run.states]
    if type(model).__name__ == "PoolingVisionTransformer":  # PiT's head is its class token alone: no map
        assert maps[-1] is None
        maps, kinds = maps[:-1], kinds[:-1]
    assert all(m is not None and m.ndim == 4 and m.shape[0] == 2 for m in maps)
    sides = [m.shape[-1] for m in maps]
    for index, kind in enumerate(kinds[1:], start=1):  # `pool` exactly where the map shrinks
        assert (kind == "pool") == (sides[index] < sides[index - 1]), (index, kind, sides)
    branches = residual_branches(model)
    assert all(
        (branch is None) == (kind in ("stem", "head")) for kind, branch in zip(kinds, branches) if kind != "pool"
    )
    return run, maps


def stage_ends(kinds: list[str]) -> list[int]:
    return [i for i, k in enumerate(kinds) if k != "head" and (i + 1 == len(kinds) or kinds[i + 1] in ("pool", "head"))]


@pytest.mark.parametrize("family", sorted(TIMM_EXPECTED))
def test_timm_families(family):
    model = TIMM_MODELS[family]()
    kinds, prefix = TIMM_EXPECTED[family]
    _, maps = check_family(model, kinds, prefix)
    # Where a stage ends, the state is what timm's own forward_intermediates returns for it (as NCHW maps).
    with torch.no_grad():
        _, intermediates = model.forward_intermediates(IMAGES, norm=False)
    if family.startswith("resnet"):
        intermediates = intermediates[1:]  # timm's first one is the stem before its max-pool
    ends = [maps[i] for i in stage_ends(kinds)]
    if family.startswith(("vit", "deit")):
        ends = [m for m, k in zip(maps, kinds) if k == "mlp"]  # every block ends a "stage" of a ViT
    assert len(ends) == len(intermediates)
    for found, expected in zip(ends, intermediates):
        torch.testing.assert_close(found, expected)


@pytest.mark.parametrize("family", sorted(TRANSFORMERS_EXPECTED))
def test_transformers_families(family):
    model = TRANSFORMERS_MODELS[family]()
    kinds, prefix = TRANSFORMERS_EXPECTED[family]
    run, maps = check_family(model, kinds, prefix)
    with torch.no_grad():
        hidden = model(IMAGES, output_hidden_states=True).hidden_states
    if family in ("vit", "deit"):  # embeddings, then every layer: our stem and MLP residuals
        expected = [hidden[0]] + list(hidden[1:])
        found = [run.states[0]] + [s for s, k in zip(run.states, kinds) if k == "mlp"]
        for a, b in zip(found, expected):
            torch.testing.assert_close(a, b)
    else:  # embeddings, then every stage's output
        ends = stage_ends(kinds)
        if family == "swin":  # transformers' Swin merges patches at the end of a stage, and reports after that
            ends = [i for i, k in enumerate(kinds) if k == "pool"] + ends[-1:]
        assert len(hidden) == 1 + len(ends)
        for index, state in zip([0, *ends], hidden):
            torch.testing.assert_close(maps[index], as_feature_map(state, 0) if state.ndim == 3 else state)


def test_lesion_removes_discovered_branches():
    model = TIMM_MODELS["vit"]().eval()
    inputs, targets = IMAGES, torch.tensor([1, 3])
    result = lesion_study(model, (inputs, targets))
    assert result.kinds == TIMM_EXPECTED["vit"][0]
    block = model.blocks[0]
    with torch.no_grad():  # removing block 0's attention by hand: x + mlp(x) instead of the whole block
        x = model.norm_pre(model._pos_embed(model.patch_embed(inputs)))
        x = x + block.mlp(block.norm2(x))
        x = model.blocks[1](x)
        expected = model.forward_head(model.norm(x))
    nll = torch.nn.functional.cross_entropy(expected.double(), targets).item()
    assert result.nll[1] == pytest.approx(nll, rel=1e-5)


def test_an_unknown_model_gets_the_adapter_to_write():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten())
    with pytest.raises(UndescribedModelError) as error:
        block_kinds(model)
    message = str(error.value)
    assert "cannot find the blocks of Sequential" in message and "BlockAdapter(" in message
    assert "0 (Conv2d), 1 (Flatten)" in message and "timm" in message
    assert isinstance(error.value, TypeError) and isinstance(error.value, ValueError)
    adapter = BlockAdapter([("stem", model[0])])
    assert block_kinds(model, adapter) == ["stem"]


def test_an_unknown_variant_of_a_known_family_names_the_module():
    from timm.models.vision_transformer import ResPostBlock, VisionTransformer

    model = VisionTransformer(img_size=32, patch_size=8, depth=1, embed_dim=16, num_heads=2, block_fn=ResPostBlock)
    with pytest.raises(UndescribedModelError, match=r"(?s)blocks\.0 is a ResPostBlock.*BlockAdapter"):
        describe_blocks(model)


@pytest.mark.parametrize("family", ["pit", "swin"])
def test_a_subclass_of_timms_pit_or_swin_is_cut_as_its_base_class(family):
    model = TIMM_MODELS[family]()
    model.__class__ = type(f"My{type(model).__name__}", (type(model),), {})  # e.g. a user's model with a new forward
    assert describe_blocks(model).kinds == TIMM_EXPECTED[family][0]


def test_a_zoo_backbone_behind_timms_interface():
    """As the zoo's timm models wrap it: the backbone's blocks, the logits of the wrapper's own head."""
    from conftest import TINY

    import alternet_hf

    class Wrapper(nn.Module):
        def __init__(self):
            super().__init__()
            zoo = alternet_hf.create_model("alternet-50-cifar100", **TINY["alternet-50-cifar100"])
            self.alternet, self.classifier = zoo.alternet, zoo.classifier

        @property
        def backbone(self):
            return self.alternet

        def forward_head(self, features):
            return self.classifier(features.mean(dim=(2, 3)))

        def forward(self, x):
            return self.forward_head(self.alternet(x).last_hidden_state)

    model = Wrapper().eval()
    inputs = torch.randn(2, 3, 16, 16)
    run = run_blocks(model, inputs)
    assert run.kinds == ["stem", "conv", "pool", "msa", "pool", "msa", "head"]
    with torch.no_grad():
        torch.testing.assert_close(run.logits, model(inputs))
    assert lesion_study(model, (inputs, torch.tensor([0, 1]))).kinds == run.kinds
