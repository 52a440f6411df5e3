"""Small local stand-ins for what the README's commands name: an image folder, the CIFAR-100-C arrays, the
reference's released checkpoints. `build(folder)` writes them and `placeholders.json`, the map from each
README placeholder to its stand-in (used by test_readme.py, which runs `python tests/readme_data.py FOLDER`)."""

import json
import re
from pathlib import Path

import torch
from reference_forward import reference_alternet_state_dict, reference_resnet_state_dict


def image_folder(root: Path, *, train: int = 100, test: int = 40) -> Path:
    """The embedded digits as an image folder: train/<class>/*.png and test/<class>/*.png."""
    from alternet_hf.data.sources import load_image_classification

    for split, count in (("train", train), ("test", test)):
        for i, row in enumerate(load_image_classification("digits", split=split).select(range(count))):
            folder = root / split / str(row["label"])
            folder.mkdir(parents=True, exist_ok=True)
            row["image"].save(folder / f"{i}.png")
    return root


def zenodo_arrays(root: Path, *, images: int = 16) -> Path:
    """The released CIFAR-100-C layout (labels.npy, <corruption>.npy) for a few digits, every corruption."""
    from alternet_hf.data.cifar_c import sources as corruption_sources
    from alternet_hf.data.sources import load_image_classification

    clean = load_image_classification("digits", split="test").select(range(images))
    source = corruption_sources.GeneratedCorruptions.from_dataset(clean, seed=0)
    return corruption_sources.save_as_arrays(source, root)


def reference_checkpoints(root: Path) -> dict[str, str]:
    """Checkpoints in the layouts the reference released (see docs/paper.md §3), with random weights."""
    import timm

    root.mkdir(parents=True, exist_ok=True)
    resnet = reference_resnet_state_dict((3, 4, 6, 3), (64, 128, 256, 512), expansion=4, num_classes=100)
    vit = timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=2, num_classes=100, qkv_bias=False
    ).state_dict()
    alternet = reference_alternet_state_dict(
        (3, 4, 6, 4), (64, 128, 256, 512), 4, (0, 1, 1, 2), heads=(3, 6, 12, 24), num_classes=100
    )
    pit = timm054_layout(timm.create_model("pit_ti_224", num_classes=100, img_size=32, patch_size=2, stride=1))
    swin = timm054_layout(
        timm.create_model(
            "swin_tiny_patch4_window7_224", num_classes=100, img_size=32, patch_size=1, window_size=4, qkv_bias=False
        )
    )
    files = {
        "resnet_50_cifar100_691cc9a9e4.pth.tar": resnet,
        "vit_ti_cifar100_9857b21357.pth.tar": vit,
        "pit_ti_cifar100_0645889efb.pth.tar": pit,
        "swin_ti_cifar100_ec2894492b.pth.tar": swin,
        "my_alternet.pth.tar": alternet,
    }
    for name, state_dict in files.items():
        torch.save({"state_dict": state_dict}, root / name)
    return {name: str(root / name) for name in files}


def timm054_layout(model) -> dict:
    """A PiT or Swin of today's timm in the layout timm 0.5.4 saved (the reference's files): pools and patch
    mergings closing their stage, Swin's `head` and its computed buffers saved. Stand-ins for the README's
    commands; tests/test_convert_timm054.py converts files written by timm 0.5.4 itself."""
    state = {}
    for key, value in model.state_dict().items():
        key = re.sub(r"^transformers\.(\d+)\.pool\.", lambda m: f"transformers.{int(m[1]) - 1}.pool.", key)
        key = re.sub(r"^layers\.(\d+)\.downsample\.", lambda m: f"layers.{int(m[1]) - 1}.downsample.", key)
        state[re.sub(r"^head\.fc\.", "head.", key)] = value
    for key, value in model.named_buffers():
        if key.endswith(("relative_position_index", "attn_mask")):
            state[key] = value
    return state


# What timm's validate.py and train.py do to build their model (timm's own `ParseKwargs` for --model-kwargs, then
# `timm.create_model`), without their data and without importing alternet_hf, as those scripts do not: the docs and
# cards run them through a one-line wrapper that imports it first. With an `input.pt` beside it, it prints the
# model's outputs on it as JSON (tests/test_push_to_hub.py compares them).
TIMM_VALIDATE_STAND_IN = """
import argparse, json, os, timm, torch
from timm.utils import ParseKwargs
parser = argparse.ArgumentParser()
parser.add_argument("--model")
parser.add_argument("--pretrained", action="store_true")
parser.add_argument("--model-kwargs", nargs="*", default={}, action=ParseKwargs)
args, _ = parser.parse_known_args()
model = timm.create_model(args.model, pretrained=args.pretrained, **args.model_kwargs).eval()
print(f"{args.model}: {sum(p.numel() for p in model.parameters()):,} parameters, pretrained weights loaded")
if os.path.exists("input.pt"):
    with torch.no_grad():
        print(json.dumps(model(torch.load("input.pt", weights_only=True)).tolist()))
"""


def timm_validate_stand_in(root: Path) -> dict[str, str]:
    """A stand-in for timm's validate.py and the released AlterNet-50's weights the docs' timm line reads."""
    import alternet_hf

    root.mkdir(parents=True, exist_ok=True)
    (root / "validate.py").write_text(TIMM_VALIDATE_STAND_IN)
    alternet_hf.create_model("alternet-50-cifar100").save_pretrained(root / "alternet-50-cifar100-weights")
    weights = "alternet-50-cifar100-weights/model.safetensors"
    return {" validate.py": f" {root / 'validate.py'}", weights: str(root / weights)}


def build(folder: str) -> None:
    root = Path(folder)
    placeholders = {
        "<org>": "alternet-test",
        "<dir>": "outputs/alternet-digits",
        "path/to/imagefolder": str(image_folder(root / "imagefolder")),
        "CIFAR-100-C/": str(zenodo_arrays(root / "CIFAR-100-C")) + "/",
        **reference_checkpoints(root / "checkpoints"),
        "my_run.json": str(root / "my_run.json"),
        **timm_validate_stand_in(root / "timm"),
    }
    (root / "my_run.json").write_text(json.dumps({"model": "resnet-18-cifar10", "dataset": "uoft-cs/cifar10"}))
    (root / "placeholders.json").write_text(json.dumps(placeholders, indent=2))


if __name__ == "__main__":
    import sys

    build(sys.argv[1])
