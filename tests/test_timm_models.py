"""The zoo in timm: every preset has a timm name, and timm's model builds the zoo's model (same state dict, same
outputs) with timm's interface: features_only, data config, classifier reset, local pretrained files, training."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import TINY

import alternet_hf
from alternet_hf.models.presets import ARCHITECTURES, DATASETS, TIMM_ARCHITECTURES
from alternet_hf.models.timm_models import register_models, timm_name

timm = pytest.importorskip("timm")
register_models()  # no-op when timm was imported after alternet_hf (then the import hook did it)

# timm name -> the zoo preset of TINY it builds (alternet-18-cifar10 via its tag)
NAMES = {
    "alternet_50": "alternet-50-cifar100",
    "alternet_18.cifar10": "alternet-18-cifar10",
    "resnet_50": "resnet-50-cifar100",
    "vit_ti": "vit-ti-cifar100",
}
ROOT = Path(__file__).parents[1]


def tiny_timm(name: str, **kwargs):
    overrides = dict(TINY[NAMES[name]])
    num_classes = overrides.pop("num_labels")
    return timm.create_model(name, **{"num_classes": num_classes, **overrides, **kwargs})


def tiny_zoo(name: str):
    return alternet_hf.create_model(NAMES[name], **TINY[NAMES[name]])


def images(batch=3, channels=3, size=16):
    return torch.randn(batch, channels, size, size, generator=torch.Generator().manual_seed(0))


def test_every_preset_has_a_timm_name_with_its_data_config():
    names = timm.list_models(module="timm_models", include_tags=True)
    # PiT and Swin for ImageNet are timm's own pit_ti_224 and swin_tiny_patch4_window7_224
    presets = [(a, d) for a in ARCHITECTURES for d in DATASETS if a not in TIMM_ARCHITECTURES or d != "imagenet"]
    expected = {timm_name(arch, dataset) for arch, dataset in presets}
    assert set(names) == expected and len(expected) == len(alternet_hf.list_models()) - len(TIMM_ARCHITECTURES)
    assert {"alternet_50.cifar100", "alternet_50.cifar10", "alternet_50_224.in1k", "vit_ti.cifar100"} <= expected
    assert {"pit_ti.cifar100", "swin_ti.cifar10"} <= expected
    timm_own = ("resnet", "vision_transformer", "pit", "swin_transformer")
    assert not set(names) & {name for module in timm_own for name in timm.list_models(module=module)}
    for arch, dataset in presets:
        spec = DATASETS[dataset]
        cfg = timm.get_pretrained_cfg(timm_name(arch, dataset))
        assert cfg.num_classes == spec.num_labels and cfg.input_size == (3, spec.image_size, spec.image_size)
        assert cfg.mean == spec.image_mean and cfg.std == spec.image_std and not cfg.has_weights
        head = {"pit-ti": "head", "swin-ti": "head.fc"}.get(arch, "classifier")
        assert cfg.classifier == head
    # a bare CIFAR name is CIFAR-100, timm's default tag
    assert timm.get_pretrained_cfg("alternet_50").tag == "cifar100"


@pytest.mark.parametrize("name", NAMES)
def test_timm_builds_the_zoo_model(name):
    model, zoo = tiny_timm(name).eval(), tiny_zoo(name).eval()
    ours, theirs = model.state_dict(), zoo.state_dict()
    assert list(ours) == list(theirs) and all(ours[k].shape == theirs[k].shape for k in ours)
    zoo.load_state_dict(ours)
    x = images()
    with torch.no_grad():
        expected = zoo(x, output_hidden_states=True)
        assert torch.equal(model(x), expected.logits)
        pooled = model.forward_head(model.forward_features(x), pre_logits=True)
        assert torch.equal(zoo.classifier(pooled), expected.logits)
    # the pretrained_cfg names the zoo model's first conv and classifier
    assert isinstance(model.get_submodule(model.pretrained_cfg["first_conv"]), torch.nn.Conv2d)
    assert model.get_submodule(model.pretrained_cfg["classifier"]) is model.get_classifier()
    assert model.num_classes == 5 and model.get_classifier().out_features == 5


def test_every_architecture_builds_in_timm_with_the_presets_layout():
    # every family and stem at full size (ImageNet's too), compared on the parameter shapes only
    for timm_arch, preset in (("alternet_18_224", "alternet-18-imagenet"), ("vit_ti", "vit-ti-cifar100")):
        model, zoo = timm.create_model(timm_arch), alternet_hf.create_model(preset)
        assert {k: v.shape for k, v in model.state_dict().items()} == {k: v.shape for k, v in zoo.state_dict().items()}
        assert model.num_classes == zoo.config.num_labels


@pytest.mark.parametrize("name", ["alternet_50", "resnet_50", "vit_ti"])
def test_features_only(name):
    features = tiny_timm(name, features_only=True).eval()
    zoo = tiny_zoo(name).eval()
    weights = {key.removeprefix("model."): value for key, value in features.state_dict().items()}  # timm's wrapper
    assert not any(key.startswith("classifier") for key in weights)  # a feature extractor has no classifier
    assert not zoo.load_state_dict(weights, strict=False).unexpected_keys
    x = images(size=16)
    with torch.no_grad():
        maps = features(x)
        states = alternet_hf.block_states(zoo, x)[0]
    config = zoo.config
    if name == "vit_ti":  # one level per layer, tokens as maps without CLS
        assert features.feature_info.channels() == [24, 24] and features.feature_info.reduction() == [4, 4]
        assert [tuple(m.shape) for m in maps] == [(3, 24, 4, 4)] * 2
        assert torch.equal(maps[-1].flatten(2).transpose(1, 2), states[-2][:, 1:])  # after the last MLP residual
    else:  # the stem, then every stage
        assert features.feature_info.channels() == [config.embedding_size, *config.hidden_sizes]
        assert features.feature_info.reduction() == [1, 1, 2, 4][: len(maps)]
        sizes = [16, 16, 8, 4][: len(maps)]
        assert [tuple(m.shape) for m in maps] == [(3, c, s, s) for c, s in zip(features.feature_info.channels(), sizes)]
        stage_ends = torch.tensor([len(stage.layers) for stage in zoo.base_model.encoder.stages]).cumsum(0)
        assert torch.equal(maps[0], states[0])
        assert all(torch.equal(m, states[end]) for m, end in zip(maps[1:], stage_ends.tolist()))
    last = timm.create_model(
        name, features_only=True, out_indices=(-1,), **{k: v for k, v in TINY[NAMES[name]].items() if k != "num_labels"}
    )
    assert len(last.feature_info.channels()) == 1 and last.feature_info.channels()[0] == maps[-1].shape[1]


@pytest.mark.parametrize("name", ["alternet_50", "vit_ti"])
def test_forward_intermediates_with_the_final_norm_ends_at_forward_features(name):
    model = tiny_timm(name).eval()
    x = images()
    with torch.no_grad():
        final, levels = model.forward_intermediates(x, indices=1, norm=True, output_fmt="NCHW")
        assert torch.equal(final, model.forward_features(x))
        if name == "vit_ti":
            tokens = model.forward_intermediates(x, indices=1, norm=True, output_fmt="NLC", intermediates_only=True)
            assert torch.equal(tokens[0], final[:, 1:])
            assert torch.equal(levels[0], tokens[0].transpose(1, 2).reshape(3, 24, 4, 4))
        else:
            assert torch.equal(levels[0], final)
    with pytest.raises(ValueError, match="output_fmt='NHWC' is not available"):
        model.forward_intermediates(x, output_fmt="NHWC")


def test_timm_data_config_is_the_datasets(photo):
    from timm.data import create_transform, resolve_data_config

    overrides = {k: v for k, v in TINY["alternet-18-cifar10"].items() if k != "num_labels"}
    config = resolve_data_config({}, model=timm.create_model("alternet_18", **overrides))
    spec = DATASETS["cifar100"]
    assert config["input_size"] == (3, 32, 32) and config["mean"] == spec.image_mean and config["std"] == spec.image_std
    tensor = create_transform(**config)(photo)
    processor = alternet_hf.build_image_processor(alternet_hf.create_config("alternet-18-cifar100"))
    expected = processor(photo, return_tensors="pt")["pixel_values"][0]
    assert tensor.shape == expected.shape == (3, 32, 32)
    assert (tensor - expected).abs().mean() < 0.02  # the same resize and normalisation, by two libraries
    assert resolve_data_config({}, model=tiny_timm("alternet_18.cifar10"))["mean"] == DATASETS["cifar10"].image_mean
    assert timm.get_pretrained_cfg("vit_ti_224.in1k").input_size == (3, 224, 224)


def test_classifier_reset_channels_and_stochastic_depth():
    model = tiny_timm("alternet_50", drop_path_rate=0.3, in_chans=1)
    assert model.config.num_channels == 1 and model(images(channels=1)).shape == (3, 5)
    rates = [block.drop_path.rate for block in model.alternet.encoder.blocks()]
    assert rates[-1] == pytest.approx(0.3) and rates[0] == 0
    model.reset_classifier(7)
    assert model.num_classes == 7 and model(images(channels=1)).shape == (3, 7)
    model.reset_classifier(0)
    assert model(images(channels=1)).shape == (3, model.num_features)
    model.reset_classifier(0, global_pool="")
    assert model(images(channels=1)).shape == (3, model.num_features, 4, 4)
    vit = tiny_timm("vit_ti", drop_path_rate=0.2)
    assert vit.vit.layers[-1].mlp.drop_path.rate == pytest.approx(0.2)
    # timm's other pools: average and max side by side doubles the head's input
    model.reset_classifier(3, global_pool="catavgmax")
    features = model.forward_features(images(channels=1))
    pooled = torch.cat([features.mean((2, 3)), features.amax((2, 3))], dim=1)
    torch.testing.assert_close(model.forward_head(features, pre_logits=True), pooled)
    assert model.head_hidden_size == 2 * model.num_features and model(images(channels=1)).shape == (3, 3)
    with pytest.raises(ValueError, match="global_pool='map' is not available.*'avg'"):
        model.reset_classifier(3, global_pool="map")
    vit.reset_classifier(0, "avg")  # the mean of the patch tokens, without CLS
    tokens = vit.forward_features(images())
    torch.testing.assert_close(vit.forward_head(tokens), tokens[:, 1:].mean(1))


def test_a_timm_training_step():
    from timm.data import Mixup
    from timm.loss import SoftTargetCrossEntropy
    from timm.optim import create_optimizer_v2
    from timm.utils import ModelEmaV3

    for name in NAMES:
        model = tiny_timm(name, drop_rate=0.1, drop_path_rate=0.1).train()
        optimizer = create_optimizer_v2(model, "adamw", lr=1e-3, weight_decay=0.05)
        ema = ModelEmaV3(model, decay=0.9)
        mixup = Mixup(mixup_alpha=1.0, cutmix_alpha=0.8, label_smoothing=0.1, num_classes=5)
        x, y = mixup(images(batch=4), torch.tensor([0, 1, 2, 3]))
        before = [p.detach().clone() for p in model.parameters()]
        loss = SoftTargetCrossEntropy()(model(x), y)
        loss.backward()
        assert all(p.grad is not None for p in model.parameters())
        optimizer.step()
        ema.update(model)
        assert torch.isfinite(loss) and all(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_pretrained_from_a_saved_zoo_folder(tmp_path):
    zoo = tiny_zoo("alternet_50").eval()
    zoo(images())  # a step of BN statistics, so buffers differ from a fresh model's
    zoo.save_pretrained(tmp_path)
    overrides = {k: v for k, v in TINY["alternet-50-cifar100"].items() if k != "num_labels"}
    file = str(tmp_path / "model.safetensors")
    model = timm.create_model(
        "alternet_50",
        pretrained=True,
        num_classes=5,
        pretrained_cfg_overlay=dict(file=file, num_classes=5),
        **overrides,
    ).eval()
    with torch.no_grad():
        assert torch.equal(model(images()), zoo.eval()(images()).logits)
    # a new head for another label count keeps the backbone (timm drops the classifier's weights)
    other = timm.create_model(
        "alternet_50", pretrained=True, num_classes=3, pretrained_cfg_overlay=dict(file=file), **overrides
    ).eval()
    with torch.no_grad():
        assert torch.equal(other.forward_features(images()), model.forward_features(images()))
    # grey images: timm sums the first conv over the channels
    grey = timm.create_model(
        "alternet_50", pretrained=True, in_chans=1, pretrained_cfg_overlay=dict(file=file, num_classes=5), **overrides
    )
    summed = zoo.alternet.embedder.convolution.weight.sum(dim=1, keepdim=True)
    assert torch.equal(grey.alternet.embedder.convolution.weight, summed)


def test_pretrained_from_a_saved_vit_folder(tmp_path):
    """transformers 5 writes ViT weights under their old names (`encoder.layer.0.attention.attention.query`) and
    renames them as it loads; timm's loader gets the same renamings, so the folder loads in both."""
    zoo = alternet_hf.create_model("vit-ti-cifar100", **TINY["vit-ti-cifar100"]).eval()
    zoo.save_pretrained(tmp_path)
    overrides = {k: v for k, v in TINY["vit-ti-cifar100"].items() if k != "num_labels"}
    num_classes = zoo.config.num_labels
    model = timm.create_model(
        "vit_ti",
        pretrained=True,
        num_classes=num_classes,
        pretrained_cfg_overlay=dict(file=str(tmp_path / "model.safetensors"), num_classes=num_classes),
        **overrides,
    ).eval()
    with torch.no_grad():
        torch.testing.assert_close(model(images()), zoo(images()).logits)


def test_mistakes_say_what_to_do():
    with pytest.raises(ValueError, match="publishes no timm weights.*pretrained_cfg_overlay=dict\\(file="):
        timm.create_model("alternet_18", pretrained=True)
    with pytest.raises(FileNotFoundError):  # a weights file named in a pretrained_cfg dict is looked for
        timm.create_model("alternet_18", pretrained=True, pretrained_cfg=dict(file="missing.safetensors"))
    with pytest.raises(ValueError, match="alternet_18 has no tag 'cifar1000'; its tags are cifar100, cifar10"):
        timm.create_model("alternet_18.cifar1000")
    with pytest.raises(ValueError, match="alternet_18 has no tag 'in1k'"):
        timm.create_model("alternet_18", pretrained_cfg=dict(tag="in1k"))
    # an argument the model does not take is a TypeError, as for timm's own models
    with pytest.raises(TypeError, match="unexpected.*'num_atention_blocks'.*did you mean 'num_attention_blocks'"):
        timm.create_model("alternet_18", num_atention_blocks=(0, 1, 1, 1))
    with pytest.raises(TypeError, match="num_labels is timm's num_classes"):
        timm.create_model("alternet_18", num_labels=3)
    with pytest.raises(ValueError, match="global_pool='catavgmax' is not available for vit") as error:
        timm.create_model("vit_ti", global_pool="catavgmax")
    assert isinstance(error.value, AssertionError)  # what timm's tooling catches for a pool a model lacks
    with pytest.raises(ValueError, match="img_size=\\(32, 48\\).*square"):
        timm.create_model("vit_ti", img_size=(32, 48))


def test_import_alternet_hf_leaves_timm_unimported_and_registers_when_it_is():
    code = (
        "import sys, alternet_hf\n"
        "assert 'timm' not in sys.modules, 'import alternet_hf imported timm'\n"
        "import timm\n"
        "model = timm.create_model('resnet_18.cifar10', embedding_size=4, hidden_sizes=[4, 4, 4, 4])\n"
        "assert model.num_classes == 10 and type(timm.models).__name__ == 'module'\n"
        "assert type(sys.modules['timm'].__spec__.loader).__name__ == 'SourceFileLoader'\n"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert completed.returncode == 0, completed.stderr
    assert "Warning" not in completed.stderr
