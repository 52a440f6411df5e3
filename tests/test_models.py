"""The shared model contract, run on a tiny configuration of every family (transformers' ModelTesterMixin idea)."""

import copy
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import TINY
from torch.utils.data import SequentialSampler
from transformers import (
    AutoConfig,
    AutoImageProcessor,
    AutoModel,
    AutoModelForImageClassification,
    Trainer,
    TrainingArguments,
    pipeline,
)

import alternet_hf

PRESETS = list(TINY)


def tiny_model(preset: str):
    return alternet_hf.create_model(preset, **TINY[preset])


def tiny_batch(model, batch_size=3):
    size = model.config.image_size
    return torch.randn(batch_size, 3, size, size), torch.arange(batch_size) % model.config.num_labels


@pytest.mark.parametrize("preset", PRESETS)
def test_forward_shapes_and_loss(preset):
    model = tiny_model(preset)
    pixel_values, labels = tiny_batch(model)
    outputs = model(pixel_values, labels=labels)
    assert outputs.logits.shape == (3, 5)
    assert outputs.loss.ndim == 0 and torch.isfinite(outputs.loss)
    expected = torch.nn.functional.cross_entropy(outputs.logits, labels)
    torch.testing.assert_close(outputs.loss, expected)
    loss, logits = model(pixel_values, labels=labels, return_dict=False)[:2]
    assert logits.shape == (3, 5) and loss.ndim == 0


@pytest.mark.parametrize("preset", PRESETS)
def test_every_parameter_gets_a_gradient(preset):
    model = tiny_model(preset)
    pixel_values, labels = tiny_batch(model)
    model(pixel_values, labels=labels).loss.backward()
    without = [name for name, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert without == []


@pytest.mark.parametrize("preset", PRESETS)
def test_save_and_load_give_bit_exact_logits(preset, tmp_path):
    model = tiny_model(preset)
    model.train()
    model(tiny_batch(model)[0])  # move BN statistics away from their initial values
    model.eval()
    model.save_pretrained(tmp_path)
    assert {"config.json", "model.safetensors", "preprocessor_config.json"} <= set(os.listdir(tmp_path))
    loaded = AutoModelForImageClassification.from_pretrained(tmp_path).eval()
    assert type(loaded) is type(model)
    pixel_values = tiny_batch(model)[0]
    with torch.no_grad():
        assert torch.equal(model(pixel_values).logits, loaded(pixel_values).logits)
    processor = AutoImageProcessor.from_pretrained(tmp_path)
    assert list(processor.image_mean) == pytest.approx(model.config.image_mean)


@pytest.mark.parametrize("preset", PRESETS)
def test_config_round_trip(preset, tmp_path):
    config = tiny_model(preset).config
    config.save_pretrained(tmp_path)
    reloaded = AutoConfig.from_pretrained(tmp_path)
    assert type(reloaded) is type(config)
    drop = {"_name_or_path"}
    assert {k: v for k, v in reloaded.to_dict().items() if k not in drop} == {
        k: v for k, v in config.to_dict().items() if k not in drop
    }


@pytest.mark.parametrize("preset", PRESETS)
def test_one_hidden_state_per_block_with_kinds(preset):
    model = tiny_model(preset).eval()
    kinds = alternet_hf.block_kinds(model)
    pixel_values = tiny_batch(model)[0]
    states, logits = alternet_hf.block_states(model, pixel_values)
    assert len(states) == len(kinds)
    assert kinds[0] == "stem" and kinds[-1] == "head"
    assert set(kinds) <= set(alternet_hf.BLOCK_KINDS)
    assert all(state.shape[0] == 3 for state in states)
    torch.testing.assert_close(logits, model(pixel_values).logits)
    config = model.config
    if preset.startswith("vit"):
        assert kinds[1:-1] == ["msa", "mlp"] * config.num_hidden_layers
        assert all(state.shape == (3, 1 + (16 // 4) ** 2, 24) for state in states)
    else:
        assert len(states) == sum(config.depths) + 2
        expected_msa = sum(getattr(config, "num_attention_blocks", [0]))
        assert kinds.count("msa") == expected_msa


@pytest.mark.parametrize("preset", PRESETS)
def test_auto_classes(preset):
    config = tiny_model(preset).config
    assert type(AutoConfig.for_model(config.model_type)) is type(config)
    base = AutoModel.from_config(config)
    classifier = AutoModelForImageClassification.from_config(config)
    assert base.main_input_name == classifier.main_input_name == "pixel_values"
    assert type(classifier) is type(tiny_model(preset))


@pytest.mark.parametrize("preset", PRESETS)
def test_pipeline_on_a_real_photo(preset, tmp_path, photo):
    tiny_model(preset).save_pretrained(tmp_path)
    classify = pipeline("image-classification", model=str(tmp_path))
    predictions = classify(photo, top_k=3)
    assert len(predictions) == 3
    assert all(0.0 <= p["score"] <= 1.0 for p in predictions)
    assert predictions[0]["score"] >= predictions[-1]["score"]
    assert classify(photo.convert("L"))  # grayscale photos work too


@pytest.mark.parametrize("preset", PRESETS)
def test_mismatched_head_is_freshly_initialised(preset, tmp_path):
    tiny_model(preset).save_pretrained(tmp_path)
    model = AutoModelForImageClassification.from_pretrained(tmp_path, num_labels=7, ignore_mismatched_sizes=True)
    weight, bias = model.classifier.weight, model.classifier.bias
    assert weight.shape[0] == 7 and torch.isfinite(weight).all() and torch.isfinite(bias).all()
    # torch's default Linear init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) — neither zeros nor garbage.
    bound = 1 / weight.shape[1] ** 0.5
    assert 0 < weight.abs().max() <= bound + 1e-6 and weight.std() > bound / 10
    again = alternet_hf.create_model(str(tmp_path), num_labels=7)
    assert again.config.num_labels == 7 and len(again.config.id2label) == 7


class _SequentialTrainer(Trainer):
    """Fixed sample order, so the run can be replayed by hand."""

    def _get_train_sampler(self, *args, **kwargs):
        return SequentialSampler(self.train_dataset)


def _train(model, data, tmp_path, *, batch_size, accumulation):
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=accumulation,
        max_steps=2,
        learning_rate=0.1,
        optim="sgd",
        lr_scheduler_type="constant",
        max_grad_norm=0.0,
        weight_decay=0.0,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        dataloader_num_workers=0,
        seed=0,
        disable_tqdm=True,
    )
    _SequentialTrainer(model=model, args=args, train_dataset=data).train()
    return model


@pytest.mark.parametrize("preset", PRESETS)
def test_trainer_gradient_accumulation(preset, tmp_path):
    model = tiny_model(preset)
    for module in model.modules():  # stochastic depth off: the replay below must see the same network
        if isinstance(module, alternet_hf.modeling_common.DropPath):
            module.rate = 0.0
    pixel_values, labels = tiny_batch(model, batch_size=8)
    data = [{"pixel_values": x, "labels": y} for x, y in zip(pixel_values, labels)]

    trained = _train(copy.deepcopy(model), data, tmp_path, batch_size=2, accumulation=2)

    # Replay: each step averages the losses of two micro-batches of 2, then one SGD step.
    replay = copy.deepcopy(model).train()
    optimizer = torch.optim.SGD(replay.parameters(), lr=0.1)
    for step in range(2):
        optimizer.zero_grad()
        for micro in range(2):
            start = 4 * step + 2 * micro
            (replay(pixel_values[start : start + 2], labels=labels[start : start + 2]).loss / 2).backward()
        optimizer.step()
    for (name, a), b in zip(trained.state_dict().items(), replay.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)

    if preset.startswith("vit"):  # no batch statistics: accumulation equals the doubled batch exactly
        doubled = _train(copy.deepcopy(model), data, tmp_path, batch_size=4, accumulation=1)
        for (name, a), b in zip(trained.state_dict().items(), doubled.state_dict().values()):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("preset", [p for p in PRESETS if not p.startswith("vit")])
def test_loads_with_remote_code_without_the_package(preset, tmp_path):
    model = tiny_model(preset).eval()
    model.save_pretrained(tmp_path, remote_code=True)
    config = json.loads((tmp_path / "config.json").read_text())
    assert set(config["auto_map"]) == {"AutoConfig", "AutoModel", "AutoModelForImageClassification"}
    assert "auto_map" not in model.config.to_dict()  # the live config is left as it was
    pixel_values = tiny_batch(model)[0]
    torch.save(pixel_values, tmp_path / "input.pt")
    with torch.no_grad():
        torch.save(model(pixel_values).logits, tmp_path / "expected.pt")
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["alternet_hf"] = None  # any import of the package fails
        import torch
        from transformers import AutoModelForImageClassification, pipeline
        model = AutoModelForImageClassification.from_pretrained({str(tmp_path)!r}, trust_remote_code=True).eval()
        assert "alternet_hf" not in type(model).__module__, type(model).__module__
        with torch.no_grad():
            logits = model(torch.load({str(tmp_path / "input.pt")!r}, weights_only=True)).logits
        assert torch.equal(logits, torch.load({str(tmp_path / "expected.pt")!r}, weights_only=True))
        print("remote code OK")
        """
    )
    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules"), "PYTHONPATH": ""}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "remote code OK" in result.stdout


@pytest.mark.parametrize(
    "preset, expected",
    [
        ("alternet-50-cifar100", 33_012_840),
        ("resnet-50-cifar100", 23_705_252),
        ("vit-ti-cifar100", 5_403_172),
    ],
)
def test_parameter_counts_match_the_reference(preset, expected):
    model = alternet_hf.create_model(preset)
    assert sum(p.numel() for p in model.parameters()) == expected


def test_reference_code_layout_parameter_count():
    model = alternet_hf.create_model("alternet-50-cifar100", num_attention_blocks=[0, 1, 3, 2])
    assert sum(p.numel() for p in model.parameters()) == 34_062_538
    assert model.config.stage_layouts()[2] == ["conv", "msa"] * 3


def test_paper_layout_of_alternet_50():
    layouts = alternet_hf.create_config("alternet-50-cifar100").stage_layouts()
    short = ["".join(kind[0].upper() for kind in stage) for stage in layouts]
    assert short == ["CCC", "CCCM", "CCCCCM", "CMCM"]


def test_every_preset_builds_a_config():
    names = alternet_hf.list_models()
    assert {"alternet-50-cifar100", "resnet-50-cifar100", "vit-ti-cifar100", "alternet-18-cifar10"} <= set(names)
    for name in names:
        config = alternet_hf.create_config(name)
        assert config.num_labels == {"cifar10": 10, "cifar100": 100, "imagenet": 1000}[name.rsplit("-", 1)[1]]


def test_imagenet_preset_runs_at_224():
    model = alternet_hf.create_model(
        "alternet-18-imagenet",
        num_labels=3,
        hidden_sizes=[8, 16, 32, 64],
        embedding_size=8,
        num_attention_heads=[1, 1, 1, 1],
        attention_head_dim=4,
    ).eval()
    with torch.no_grad():
        assert model(torch.randn(1, 3, 224, 224)).logits.shape == (1, 3)


def test_vit_stochastic_depth(tmp_path):
    """transformers' ViT gets the paper's stochastic depth from config.drop_path_rate: per-sample branch
    drops in training, rising linearly with depth, nothing in eval, nothing in the weights."""
    model = alternet_hf.create_model("vit-ti-cifar100", **{**TINY["vit-ti-cifar100"], "drop_path_rate": 0.5})
    layers = model.vit.layers
    assert [layer.mlp.drop_path.rate for layer in layers] == [0.0, 0.5]
    pixel_values, labels = tiny_batch(model, batch_size=64)
    model.train()
    torch.manual_seed(0)
    drops = []
    record = lambda module, args, output: drops.append((output == 0).flatten(1).all(-1))  # noqa: E731
    hook = layers[-1].mlp.register_forward_hook(record)
    model(pixel_values)
    hook.remove()
    dropped = drops[0].float().mean().item()
    assert 0.25 < dropped < 0.75  # about half the samples lose the last MLP branch
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(pixel_values).logits, model(pixel_values).logits)
    model.save_pretrained(tmp_path / "vit")
    reloaded = alternet_hf.create_model(str(tmp_path / "vit"))
    plain = alternet_hf.create_model("vit-ti-cifar100", **TINY["vit-ti-cifar100"])
    assert reloaded.state_dict().keys() == plain.state_dict().keys()  # no new weights: transformers' own
    assert reloaded.vit.layers[-1].attention.drop_path.rate == 0.5  # read back from the config
    with pytest.raises(ValueError, match="drop_path_rate must be in"):
        alternet_hf.create_model("vit-ti-cifar100", **{**TINY["vit-ti-cifar100"], "drop_path_rate": 1.0})
