"""AlterNet specifics: windowed attention, padding, the relative-position table, and bad input."""

import pytest
import torch
from conftest import TINY
from safetensors import SafetensorError
from safetensors.torch import save_file
from transformers import AutoModelForImageClassification
from upstream import raises_from, versions

import alternet_hf
from alternet_hf.models.modeling_alternet import AlterNetWindowAttention
from alternet_hf.models.modeling_common import DropPath, add_residual


def tiny_alternet(**overrides):
    return alternet_hf.create_model("alternet-50-cifar100", **{**TINY["alternet-50-cifar100"], **overrides}).eval()


def test_relative_position_bias_convention():
    attention = AlterNetWindowAttention(4, 4, num_heads=1, head_dim=4, window_size=3)
    table = torch.arange(25.0).view(5, 5)
    bias = table.flatten()[attention.relative_position_index]
    # query (0, 0) = token 0, key (1, 2) = token 5: table[1 - 0 + 2, 2 - 0 + 2]
    assert bias[0, 5] == table[3, 4]
    assert bias[5, 0] == table[1, 0]
    assert torch.equal(torch.diagonal(bias), torch.full((9,), table[2, 2].item()))


def test_attention_implementations_switch_and_agree(tmp_path):
    """`attn_implementation="sdpa"` (the default) and `"eager"`, chosen at load or switched later, give the same
    output; the eager path is the one that returns attention weights (`output_attentions=True` takes it)."""
    model = tiny_alternet()
    assert model.config._attn_implementation == "sdpa"
    model.save_pretrained(tmp_path)
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        expected = model(x).logits
        for implementation in ("eager", "sdpa"):
            loaded = AutoModelForImageClassification.from_pretrained(tmp_path, attn_implementation=implementation)
            assert loaded.config._attn_implementation == implementation
            assert loaded.alternet.config._attn_implementation == implementation
            torch.testing.assert_close(loaded.eval()(x).logits, expected, rtol=1e-5, atol=1e-5)
            model.set_attn_implementation(implementation)
            assert model.alternet.config._attn_implementation == implementation
            torch.testing.assert_close(model(x).logits, expected, rtol=1e-5, atol=1e-5)
        explicit = model(x, output_attentions=True)
    torch.testing.assert_close(explicit.logits, expected, rtol=1e-5, atol=1e-5)
    assert len(explicit.attentions) == 2  # one per MSA block
    weights = explicit.attentions[0]  # stage 2: 8×8 map, 4 windows of 4×4, 2 heads
    assert weights.shape == (2, 4, 2, 16, 16)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 2, 16))
    assert "attn_implementation" not in (tmp_path / "config.json").read_text()
    # Flash and flex attention, which the zoo does not declare, are refused by transformers and change nothing.
    with raises_from(ValueError, "transformers"):
        model.set_attn_implementation("flash_attention_2")
    assert model.alternet.config._attn_implementation == "sdpa"
    with raises_from(ValueError, "transformers"):
        AutoModelForImageClassification.from_pretrained(tmp_path, attn_implementation="flex_attention")


def test_sdpa_and_eager_agree_on_padded_windows_and_their_gradients():
    model = tiny_alternet(drop_path_rate=0.0).train()
    x = torch.randn(3, 3, 20, 20)  # stage 2 is 10×10: padded windows, masked per window across the batch
    gradients = {}
    for implementation in ("eager", "sdpa"):
        model.zero_grad()
        model.set_attn_implementation(implementation)
        logits = model(x).logits
        logits.square().sum().backward()
        gradients[implementation] = (logits.detach(), [p.grad.clone() for p in model.parameters()])
    torch.testing.assert_close(gradients["sdpa"][0], gradients["eager"][0], rtol=1e-5, atol=1e-5)
    for sdpa, eager in zip(gradients["sdpa"][1], gradients["eager"][1]):
        torch.testing.assert_close(sdpa, eager, rtol=1e-4, atol=1e-5)


def test_maps_the_window_does_not_divide_are_padded_and_masked():
    model = tiny_alternet()
    x = torch.randn(2, 3, 20, 20)  # stage 2 is 10×10: windows of 4 need 2 rows/cols of padding
    with torch.no_grad():
        outputs = model(x, output_attentions=True)
    assert torch.isfinite(outputs.logits).all()
    weights = outputs.attentions[0]  # (2, 9 windows, heads, 16, 16)
    assert weights.shape[1] == 9
    # The last window row/column holds 2 real positions of 4: padded keys get exactly zero weight.
    last_window = weights[:, -1].reshape(2, 2, 16, 4, 4)
    assert torch.all(last_window[..., 2:, :] == 0) and torch.all(last_window[..., :, 2:] == 0)


def test_padding_equals_cropping_when_the_map_is_divisible():
    """A padded-and-masked window computes what an unpadded window of the same real positions would."""
    attention = AlterNetWindowAttention(8, 8, num_heads=2, head_dim=4, window_size=4).eval()
    torch.nn.init.normal_(attention.relative_position_bias_table, std=0.5)
    x = torch.randn(1, 8, 4, 4)
    full, _ = attention(x)
    cropped, _ = attention(x[:, :, :3, :3])  # 3×3 map padded to one 4×4 window
    small = AlterNetWindowAttention(8, 8, num_heads=2, head_dim=4, window_size=3).eval()
    small.load_state_dict(
        {**attention.state_dict(), "relative_position_bias_table": attention.relative_position_bias_table[1:6, 1:6]}
    )
    expected, _ = small(x[:, :, :3, :3])
    torch.testing.assert_close(cropped, expected, rtol=1e-5, atol=1e-5)
    assert full.shape == (1, 8, 4, 4)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_attention_hands_back_the_layout_it_was_given(attn_implementation):
    """The context comes back in the input map's layout (the residual sum then adds like to like), and both layouts
    compute the same thing, padded windows included."""
    attention = AlterNetWindowAttention(8, 8, num_heads=2, head_dim=4, window_size=4).eval()
    torch.nn.init.normal_(attention.relative_position_bias_table, std=0.5)
    x = torch.randn(2, 8, 6, 7, dtype=torch.float64)  # 2×2 windows, both sides padded
    attention.double()
    with torch.no_grad():
        contiguous, _ = attention(x, attn_implementation)
        channels_last, _ = attention(x.contiguous(memory_format=torch.channels_last), attn_implementation)
    assert contiguous.is_contiguous() and channels_last.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(channels_last, contiguous)


def test_relative_position_index_is_rebuilt_after_from_pretrained(tmp_path):
    model = tiny_alternet()
    model.save_pretrained(tmp_path)
    loaded = AutoModelForImageClassification.from_pretrained(tmp_path)
    for original, reloaded in zip(model.modules(), loaded.modules()):
        if isinstance(original, AlterNetWindowAttention):
            assert reloaded.relative_position_index.device.type == "cpu"
            assert torch.equal(original.relative_position_index, reloaded.relative_position_index)
            assert torch.equal(original.relative_position_bias_table, reloaded.relative_position_bias_table)


def test_drop_path_rates_rise_linearly():
    model = alternet_hf.create_model("alternet-50-cifar100")
    rates = [block.drop_path.rate for block in model.alternet.encoder.blocks()]
    assert len(rates) == 17 and rates[0] == 0.0 and rates[-1] == pytest.approx(0.1)
    assert rates[8] == pytest.approx(0.1 * 8 / 16)


def test_fused_stochastic_depth_is_the_plain_sum_and_hooks_see_the_branch():
    """`add_residual` (one fused multiply-add in training) equals `shortcut + drop_path(residual)` with the same
    random draws, in value and gradient; with a hook on the module (the lesion study's) it takes the plain way."""
    drop_path = DropPath(0.5).train()
    shortcut, residual = torch.randn(8, 4, 3, 3), torch.randn(8, 4, 3, 3, requires_grad=True)
    torch.manual_seed(1)
    fused = add_residual(drop_path, shortcut, residual)
    (grad_fused,) = torch.autograd.grad(fused.square().sum(), residual)
    torch.manual_seed(1)
    plain = shortcut + drop_path(residual)
    (grad_plain,) = torch.autograd.grad(plain.square().sum(), residual)
    torch.testing.assert_close(fused, plain)
    torch.testing.assert_close(grad_fused, grad_plain)
    assert 0 < (fused == shortcut).all(dim=(1, 2, 3)).sum() < 8  # some samples dropped, some kept
    handle = drop_path.register_forward_hook(lambda module, args, output: torch.zeros_like(output))
    assert torch.equal(add_residual(drop_path, shortcut, residual), shortcut)  # the hook zeroed the branch
    handle.remove()
    assert torch.equal(add_residual(drop_path.eval(), shortcut, residual), shortcut + residual)


@pytest.mark.parametrize("preset", ["alternet-50-cifar100", "resnet-50-cifar100"])
def test_bad_inputs_fail_with_a_clear_message(preset):
    model = alternet_hf.create_model(preset, **TINY[preset])
    with pytest.raises(ValueError, match="channels"):
        model(torch.randn(1, 1, 16, 16))
    with pytest.raises(ValueError, match="shape"):
        model(torch.randn(3, 16, 16))


def test_images_smaller_than_the_network_stride_are_refused():
    model = tiny_alternet()  # 3 stages: total stride 4
    with pytest.raises(ValueError, match="smaller than"):
        model(torch.randn(1, 3, 2, 2))
    assert model(torch.randn(1, 3, 4, 4)).logits.shape == (1, 5)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("depths", [3, -1, 2], r"depths\[1\]"),
        ("num_attention_blocks", [0, 3, 1], r"num_attention_blocks\[1\]"),
        ("hidden_sizes", [16, 30, 64], r"hidden_sizes\[1\]"),
        ("num_attention_heads", [1, 2], "num_attention_heads has 2 entries"),
        ("block_type", "wide", "block_type"),
        ("window_size", 0, "window_size"),
        ("drop_path_rate", 1.5, "drop_path_rate"),
    ],
)
def test_invalid_config_values_name_the_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        alternet_hf.create_model("alternet-50-cifar100", **{**TINY["alternet-50-cifar100"], field: value})


def test_unknown_names_get_suggestions():
    with pytest.raises(ValueError, match="Did you mean 'alternet-50-cifar100'"):
        alternet_hf.create_model("alternet50-cifar100")
    with pytest.raises(ValueError, match="did you mean 'drop_path_rate'"):
        alternet_hf.create_model("alternet-50-cifar100", drop_path=0.2)


def test_corrupt_weights_file_fails_clearly(tmp_path):
    model = tiny_alternet()
    model.save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:200])
    with raises_from(Exception, "safetensors", "transformers") as error:
        AutoModelForImageClassification.from_pretrained(tmp_path)
    chain = [error.value]  # safetensors' own error, or one raised from it
    while chain[-1].__cause__ or chain[-1].__context__:
        chain.append(chain[-1].__cause__ or chain[-1].__context__)
    assert any(isinstance(cause, SafetensorError) for cause in chain), (
        f"{versions('safetensors', 'transformers')} fail otherwise on a cut weights file: {error.value!r}"
    )
    save_file({"unrelated": torch.zeros(2)}, weights)
    with pytest.raises(ValueError, match="the checkpoint lacks"):
        AutoModelForImageClassification.from_pretrained(tmp_path)
