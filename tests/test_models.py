"""The presets: parameter counts against the reference, layouts, every name builds, fields validated.

The contract every family keeps (forward, loss, save/load, Trainer, export, ...) is in test_model_contract.py.
"""

import sys

import pytest
import torch
from conftest import TINY

import alternet_hf


def tiny_batch(model, batch_size=3):
    size = model.config.image_size
    return torch.randn(batch_size, 3, size, size), torch.arange(batch_size) % model.config.num_labels


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


@pytest.mark.parametrize(
    "preset, field, value, message",
    [
        ("alternet-50-cifar100", "depths", [10**6, 2, 2], r"AlterNetConfig.depths\[0\] must be .* \[1, 256\]"),
        ("alternet-50-cifar100", "hidden_sizes", [16, 32, 10**6], r"hidden_sizes\[2\]"),
        ("alternet-50-cifar100", "window_size", 1000, "window_size"),
        ("resnet-50-cifar100", "depths", [2, 10**6], r"CifarResNetConfig.depths\[1\]"),
        ("resnet-50-cifar100", "depths", [1] * 9, "1 to 8 stages"),
        ("resnet-50-cifar100", "embedding_size", 0, "embedding_size"),
        ("vit-ti-cifar100", "num_hidden_layers", 0, r"ViTConfig.num_hidden_layers must be an integer in \[1, 256\]"),
        ("vit-ti-cifar100", "num_hidden_layers", 10**6, "num_hidden_layers"),
        ("vit-ti-cifar100", "patch_size", 0, "ViTConfig.patch_size"),
        ("vit-ti-cifar100", "patch_size", 32, "patch_size=32 is larger than image_size=16"),
        ("vit-ti-cifar100", "num_attention_heads", 5, "hidden_size=24 is not divisible by num_attention_heads=5"),
        ("vit-ti-cifar100", "hidden_size", 10**6, "ViTConfig.hidden_size"),
        ("vit-ti-cifar100", "hidden_dropout_prob", 1.5, "hidden_dropout_prob"),
    ],
)
def test_absurd_sizes_fail_at_once_naming_the_field(preset, field, value, message):
    """Fields are checked before anything is built: no minutes of building a million blocks, no ZeroDivisionError."""
    with pytest.raises(ValueError, match=message):
        alternet_hf.create_model(preset, **{**TINY[preset], field: value})


def test_the_largest_presets_are_within_the_limits():
    for name in ("alternet-152-imagenet", "resnet-152-imagenet", "vit-b-imagenet"):
        assert alternet_hf.create_config(name, num_labels=10).num_labels == 10


def test_overrides_of_a_loaded_model_are_config_fields_only(tmp_path):
    """A shared JSON of model overrides must not turn on `trust_remote_code` (it would run the folder's code)."""
    alternet_hf.create_model("resnet-50-cifar100", **TINY["resnet-50-cifar100"]).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"\['trust_remote_code'\] are not fields"):
        alternet_hf.create_model(str(tmp_path), trust_remote_code=True)
    with pytest.raises(ValueError, match="not fields"):
        alternet_hf.create_model(str(tmp_path), num_labels=3, device_map="auto")
    assert alternet_hf.create_model(str(tmp_path), drop_path_rate=0.1).config.drop_path_rate == 0.1


@pytest.mark.parametrize("preset", ["alternet-50-cifar100", "resnet-50-cifar100"])
def test_cnns_compute_in_channels_last_on_the_cpu_whatever_the_input(preset):
    """oneDNN's direct layout: a batch of contiguous images is computed as channels-last (`compute_layout`), to the
    same logits, and the feature maps say so; a batch too small to gain keeps its layout. In float64, where the
    summation order leaves no trace."""
    from alternet_hf.models.modeling_common import CHANNELS_LAST_MIN_BATCH

    model = alternet_hf.create_model(preset, **TINY[preset]).double().eval()
    images, _ = tiny_batch(model, batch_size=CHANNELS_LAST_MIN_BATCH)
    images = images.double()
    with torch.no_grad():
        contiguous = model(images, output_hidden_states=True)
        channels_last = model(images.contiguous(memory_format=torch.channels_last))
        small = model(images[:1], output_hidden_states=True)
    assert all(state.is_contiguous(memory_format=torch.channels_last) for state in contiguous.hidden_states)
    torch.testing.assert_close(contiguous.logits, channels_last.logits)
    assert all(state.is_contiguous() for state in small.hidden_states)
    torch.testing.assert_close(small.logits, contiguous.logits[:1])


# What a user imports after `import alternet_hf`, and the zoo's own model-building path: transformers' layers import
# its Auto classes midway, while the zoo's model files (which import those layers) are still half-built.
REGISTRATION_ORDERS = {
    "Auto classes first": "",
    "the zoo's model file first": "import alternet_hf.models.modeling_alternet",
    "a transformers model first": "from transformers import ViTForImageClassification",
}  # transformers imported before the zoo registers at once: test_training.py imports them in that order


def test_callbacks_waiting_for_one_module_all_run_once_it_is_imported(tmp_path, monkeypatch):
    """Two callbacks waiting for the same module (as the Auto classes' registration waits for each model module): one
    waiting finder between them, both called in order once the module has run, the finder gone from `sys.meta_path`;
    two finders would ask each other for the module's spec without end."""
    import sys

    from alternet_hf.utils import when_imported

    (tmp_path / "waited_for_module.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    called = []
    when_imported("waited_for_module", lambda: called.append("first"))
    when_imported("waited_for_module", lambda: called.append("second"))
    import waited_for_module

    assert waited_for_module.VALUE == 1 and called == ["first", "second"]
    assert not [finder for finder in sys.meta_path if getattr(finder, "name", None) == "waited_for_module"]
    when_imported("waited_for_module", lambda: called.append("now"))  # already imported: called at once
    assert called == ["first", "second", "now"]


def test_import_alternet_hf_is_instant_and_registers_before_any_from_pretrained(tmp_path):
    """`import alternet_hf` imports neither torch nor transformers, and still every Auto class (and timm) finds the
    zoo's models, whatever is imported next; each order in a fresh interpreter, as a user's script starts."""
    from commands import start_command

    folders = {name: tmp_path / name for name in ("alternet-18-cifar10", "resnet-50-cifar100")}
    for name, folder in folders.items():
        alternet_hf.create_model(name, **TINY[name]).save_pretrained(folder)
    scripts = {}
    for order, first in REGISTRATION_ORDERS.items():
        lines = [
            "import sys",
            "import alternet_hf",
            "print(sorted({'torch', 'transformers'} & set(sys.modules)))",
            first,
        ]
        lines += [
            "from transformers import AutoConfig, AutoModel, AutoModelForImageClassification as Classifier",
            f"for folder in {[str(f) for f in folders.values()]!r}:",
            "    loaded = [Auto.from_pretrained(folder) for Auto in (AutoConfig, AutoModel, Classifier)]",
            "    print(*(type(x).__name__ for x in loaded))",
        ]
        if not first:  # and the pipeline, which imports the Auto classes itself
            lines += [
                "from transformers import pipeline",
                f"print(type(pipeline('image-classification', model={str(folders['alternet-18-cifar10'])!r}).model)"
                ".__name__)",
            ]
        if order == "a transformers model first":  # transformers looked for timm without importing it
            lines += ["import timm", "print(type(timm.create_model('alternet_18')).__name__)"]
        scripts[order] = "\n".join(lines)
    processes = {
        order: start_command([sys.executable, "-W", "error::UserWarning", "-c", code], cwd=tmp_path, warm=False)
        for order, code in scripts.items()
    }
    for order, process in processes.items():
        stdout, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, (order, stderr[-3000:])
        lines = stdout.splitlines()
        assert lines[0] == "[]", order
        assert lines[1:3] == [
            "AlterNetConfig AlterNetModel AlterNetForImageClassification",
            "CifarResNetConfig CifarResNetModel CifarResNetForImageClassification",
        ], (order, stdout, stderr[-2000:])
        last = {
            "Auto classes first": ["AlterNetForImageClassification"],
            "a transformers model first": ["TimmZooModel"],
        }
        assert lines[3:] == last.get(order, []), order
