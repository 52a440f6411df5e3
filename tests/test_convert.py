"""Converters: reference-layout checkpoints give the reference's outputs, and bad files fail clearly."""

import pytest
import timm
import torch
from commands import run_command
from conftest import installed_command
from reference_forward import (
    alternet_forward,
    reference_alternet_state_dict,
    reference_resnet_state_dict,
    resnet_forward,
)
from transformers import AutoModelForImageClassification

import alternet_hf
from alternet_hf.hub.convert import reference_state_dict, save_reference_checkpoint


def _save(tmp_path, state_dict, name="model.pth.tar"):
    path = tmp_path / name
    torch.save({"name": "reference", "state_dict": state_dict}, path)
    return path


def _float64(state_dict: dict) -> dict:
    """The reference's computation in float64: a check of the function itself, free of float32's summation order
    (which differs between memory layouts, and which random weights amplify)."""
    return {key: value.double() if value.is_floating_point() else value for key, value in state_dict.items()}


@pytest.mark.parametrize(
    "preset, depths, expansion, num_classes",
    [
        ("resnet-50-cifar100", (3, 4, 6, 3), 4, 100),  # the released checkpoint's architecture
        ("resnet-18-cifar10", (2, 2, 2, 2), 1, 10),  # basic blocks
    ],
)
def test_resnet_matches_the_reference_computation(tmp_path, preset, depths, expansion, num_classes):
    state_dict = reference_resnet_state_dict(depths, (64, 128, 256, 512), expansion=expansion, num_classes=num_classes)
    model = alternet_hf.convert_original_checkpoint(_save(tmp_path, state_dict), preset)
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(model.double()(x).logits, resnet_forward(_float64(state_dict), x))


@pytest.mark.parametrize(
    "preset, depths, expansion, msa_blocks",
    [
        ("alternet-50-cifar100", (2, 2, 4, 4), 4, (0, 1, 2, 2)),  # the code's alternating c3, shortened
        ("alternet-18-cifar10", (2, 2, 2, 2), 1, (0, 1, 1, 1)),
    ],
)
def test_alternet_matches_the_reference_computation(tmp_path, preset, depths, expansion, msa_blocks):
    state_dict = reference_alternet_state_dict(
        depths, (16, 32, 64, 128), expansion, msa_blocks, heads=(1, 2, 2, 4), num_classes=7, head_dim=16, stem=16
    )
    model = alternet_hf.convert_original_checkpoint(
        _save(tmp_path, state_dict),
        preset,
        depths=list(depths),
        embedding_size=16,
        hidden_sizes=[16 * expansion * 2**i for i in range(4)],
        num_attention_heads=[1, 2, 2, 4],
        attention_head_dim=16,
        num_labels=7,
    )
    assert model.config.num_attention_blocks == list(msa_blocks)  # read from the checkpoint
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    model = model.double()
    with torch.no_grad():
        expected = alternet_forward(_float64(state_dict), x, head_dim=16)
        for attn_implementation in ("eager", "sdpa"):  # the reference's explicit softmax, and the default kernel
            model.set_attn_implementation(attn_implementation)
            torch.testing.assert_close(model(x).logits, expected, msg=attn_implementation)


def test_vit_matches_timm(tmp_path):
    reference = timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=2, num_classes=100, qkv_bias=False
    ).eval()
    path = _save(tmp_path, reference.state_dict())
    model = alternet_hf.convert_original_checkpoint(path, "vit-ti-cifar100")
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(x).logits, reference(x), rtol=1e-5, atol=1e-5)


def _equal_state_dicts(ours: dict, theirs: dict) -> None:
    assert sorted(ours) == sorted(theirs)
    for key, value in theirs.items():
        assert torch.equal(ours[key], value), key


def test_the_way_back_writes_the_reference_layouts(tmp_path):
    """`reference_state_dict` of a converted model is the file it came from, key for key and bit for bit: the
    ResNet in the reference code's layout (as `reference_forward` writes it, independently of the zoo) and the ViT
    in timm's."""
    resnet = reference_resnet_state_dict((3, 4, 6, 3), (64, 128, 256, 512), expansion=4, num_classes=100)
    model = alternet_hf.convert_original_checkpoint(_save(tmp_path, resnet), "resnet-50-cifar100")
    _equal_state_dicts(reference_state_dict(model, "resnet"), resnet)
    vit = timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=2, num_classes=100, qkv_bias=False
    ).state_dict()
    model = alternet_hf.convert_original_checkpoint(_save(tmp_path, vit, "vit.pth.tar"), "vit-ti-cifar100")
    _equal_state_dicts(reference_state_dict(model, "vit"), vit)
    path = save_reference_checkpoint(model, "vit", tmp_path / "again.pth.tar", name="vit_ti")
    assert torch.load(path, weights_only=True)["name"] == "vit_ti"
    with pytest.raises(ValueError, match="no reference layout"):
        reference_state_dict(model, "alternet")


def test_leftover_and_missing_keys_are_errors(tmp_path):
    state_dict = reference_resnet_state_dict((2, 2, 2, 2), (64, 128, 256, 512), expansion=1, num_classes=10)
    extra = {**state_dict, "layer5.0.conv1.0.weight": torch.zeros(1)}
    with pytest.raises(ValueError, match="fit no model weight"):
        alternet_hf.convert_original_checkpoint(_save(tmp_path, extra), "resnet-18-cifar10")
    missing = {k: v for k, v in state_dict.items() if not k.startswith("layer4.1.")}
    with pytest.raises(ValueError, match="not in the checkpoint"):
        alternet_hf.convert_original_checkpoint(_save(tmp_path, missing), "resnet-18-cifar10")
    with pytest.raises(ValueError, match="shapes differ"):
        alternet_hf.convert_original_checkpoint(_save(tmp_path, state_dict), "resnet-18-cifar100")


def test_corrupt_and_truncated_files_fail_clearly(tmp_path):
    state_dict = reference_resnet_state_dict((2, 2, 2, 2), (64, 128, 256, 512), expansion=1, num_classes=10)
    path = _save(tmp_path, state_dict)
    truncated = tmp_path / "truncated.pth.tar"
    truncated.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(ValueError, match="not a readable PyTorch checkpoint"):
        alternet_hf.convert_original_checkpoint(truncated, "resnet-18-cifar10")
    garbage = tmp_path / "garbage.pth.tar"
    garbage.write_bytes(b"this is not a checkpoint")
    with pytest.raises(ValueError, match="not a readable PyTorch checkpoint: it is no checkpoint at all"):
        alternet_hf.convert_original_checkpoint(garbage, "resnet-18-cifar10")
    with pytest.raises(FileNotFoundError):
        alternet_hf.convert_original_checkpoint(tmp_path / "absent.pth.tar", "resnet-18-cifar10")
    with pytest.raises(ValueError, match="no converter"):
        alternet_hf.convert_original_checkpoint(path, "deit-s-cifar100")


@pytest.mark.commands
def test_command_line_writes_a_loadable_folder(tmp_path):
    state_dict = reference_resnet_state_dict((2, 2, 2, 2), (64, 128, 256, 512), expansion=1, num_classes=10)
    path, out = _save(tmp_path, state_dict), tmp_path / "converted"
    result = run_command(
        [installed_command("alternet-convert"), str(path), "resnet-18-cifar10", str(out)],
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    model = AutoModelForImageClassification.from_pretrained(out).eval()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(x).logits, resnet_forward(state_dict, x), rtol=1e-4, atol=1e-4)


@pytest.mark.commands
def test_command_line_says_a_garbage_file_is_no_checkpoint_at_all(tmp_path):
    """Seven bytes of text are not a checkpoint holding something unsafe: the command says what the file is."""
    (tmp_path / "garbage.pth.tar").write_bytes(b"garbage")
    result = run_command(
        [installed_command("alternet-convert"), "garbage.pth.tar", "resnet-18-cifar10", "converted"], cwd=tmp_path
    )
    assert result.returncode == 2 and "it is no checkpoint at all (7 bytes" in result.stderr, result.stderr
    assert "beyond tensors" not in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "converted").exists()
