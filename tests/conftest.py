import os
import shutil
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach a hub
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# Tests run beside each other (pytest-xdist) and beside the commands they start: OpenMP threads that spin while
# they wait burn the cores the others need (on two cores, a third more CPU time for the same suite). Read by
# libgomp when torch loads, so set before it is imported, here and in every command a test starts.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# One OpenMP thread per worker: two workers on two cores already keep both busy, and two threads each only make them
# take turns (docs/benchmarks.md, "The test suite"). A test may give a command it runs alone more, in its env.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

# Tiny versions of each family: every code path of the full models, in milliseconds on a CPU.
TINY = {
    "alternet-50-cifar100": dict(
        embedding_size=8,
        depths=[1, 2, 2],
        hidden_sizes=[16, 32, 64],
        num_attention_blocks=[0, 1, 1],
        num_attention_heads=[1, 2, 2],
        attention_head_dim=8,
        image_size=16,
        num_labels=5,
    ),
    "alternet-18-cifar10": dict(
        embedding_size=8,
        depths=[1, 2],
        hidden_sizes=[8, 16],
        num_attention_blocks=[0, 1],
        num_attention_heads=[1, 2],
        attention_head_dim=4,
        image_size=16,
        num_labels=5,
    ),
    "resnet-50-cifar100": dict(embedding_size=8, depths=[1, 2], hidden_sizes=[16, 32], image_size=16, num_labels=5),
    "vit-ti-cifar100": dict(
        hidden_size=24,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=48,
        image_size=16,
        patch_size=4,
        num_labels=5,
    ),
    # timm's arguments (model_args) beside the zoo's fields: two stages each, so pools and shifted windows run
    "pit-ti-cifar100": dict(
        base_dims=[8, 8], depth=[1, 1], heads=[1, 2], patch_size=4, stride=2, image_size=16, num_labels=5
    ),
    "swin-ti-cifar100": dict(
        embed_dim=8,
        depths=[1, 2],
        num_heads=[1, 2],
        window_size=2,
        patch_size=2,
        drop_path_rate=0.0,
        image_size=16,
        num_labels=5,
    ),
}


# The slowest files, slowest first (their times: docs/benchmarks.md, "The test suite"), then the rest in the
# order found: `--dist loadfile` hands files out in this order (`--no-loadscope-reorder`), so the long ones start at
# once and the short ones fill in beside them, instead of a long file starting late while the other worker idles.
SLOWEST_FILES = (
    "test_release.py",
    "test_readme.py",
    "test_training.py",
    "test_device_check.py",
    "test_timm_contract.py",
    "test_streaming.py",
    "test_model_contract.py",
    "test_same_seed.py",
    "test_convert_timm054.py",
    "test_space.py",
    "test_buildup.py",
    "test_reproduce_command.py",
)


def pytest_collection_modifyitems(config, items):
    first = {name: rank for rank, name in enumerate(SLOWEST_FILES)}
    items.sort(key=lambda item: first.get(item.path.name, len(first)))  # stable: the rest keep their order


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def photo() -> Image.Image:
    """A real photograph (scikit-image's astronaut, 512×512 RGB)."""
    from skimage import data

    return Image.fromarray(np.asarray(data.astronaut()))


def installed_command(name: str) -> str:
    """The path of an installed console script (setup.cfg), as a user's shell would find it in this venv."""
    path = Path(sys.executable).parent / name
    found = str(path) if path.exists() else shutil.which(name)
    assert found, f"the command {name} is not installed: pip install -e . (setup.cfg [options.entry_points])"
    return found


SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"  # the maintainer's tools, run from the clone
sys.path.insert(0, str(SCRIPTS))  # their modules (zoo_release, zoo_benchmark), imported by the tests


def tool_command(name: str) -> list[str]:
    """`python scripts/<name>.py`, as a maintainer runs a tool from the clone."""
    return [sys.executable, str(SCRIPTS / f"{name}.py")]


def tool_names() -> list[str]:
    return sorted(path.stem for path in SCRIPTS.glob("*.py"))


def command_names() -> list[str]:
    """Every console script that setup.cfg installs."""
    setup = (Path(__file__).resolve().parents[1] / "setup.cfg").read_text()
    return [line.split("=")[0].strip() for line in setup.splitlines() if "= alternet_hf.cli." in line]


@pytest.fixture
def tiny_dataset(tmp_path) -> str:
    """`write_tiny_dataset` into the test's folder."""
    return write_tiny_dataset(tmp_path / "data")


def write_tiny_dataset(folder: Path) -> str:
    """A local dataset in the real schema (`save_to_disk`): 32 training and 20 test images (random pixels) of 4
    classes; its path."""
    from datasets import ClassLabel, Dataset, DatasetDict, Features
    from datasets import Image as ImageFeature

    features = Features({"image": ImageFeature(), "label": ClassLabel(names=["a", "b", "c", "d"])})
    rng = np.random.default_rng(0)
    splits = {
        split: Dataset.from_dict(
            {
                "image": [Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)) for _ in range(n)],
                "label": [i % 4 for i in range(n)],
            },
            features,
        )
        for split, n in (("train", 32), ("test", 20))
    }
    DatasetDict(splits).save_to_disk(str(folder))
    return str(folder)


class Filter(nn.Module):
    """A fixed depthwise 3×3 filter with circular padding: an exact frequency response (tests of the analyses)."""

    def __init__(self, kernel):
        super().__init__()
        self.register_buffer("kernel", torch.tensor(kernel, dtype=torch.float32).expand(3, 1, 3, 3).clone())

    def forward(self, x):
        return F.conv2d(F.pad(x, (1, 1, 1, 1), mode="circular"), self.kernel, groups=3)


IDENTITY = [[0, 0, 0], [0, 1, 0], [0, 0, 0]]
BOX_BLUR = [[1 / 9] * 3] * 3  # low-pass
LAPLACIAN = [[0, -1, 0], [-1, 4, -1], [0, -1, 0]]  # high-pass
