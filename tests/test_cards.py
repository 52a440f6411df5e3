"""The cards come from their templates (`alternet_hf/hub/templates/`, `ModelCard.from_template` and
`DatasetCard.from_template`) and are byte for byte the cards written before the templates existed, for the release's
five models in each case the release meets (trained here, converted with the reported numbers and CIFAR-100-C,
converted with the authors' numbers only) and for CIFAR-100-C: tests/data/cards/ holds those, as the release wrote
them. A deliberate change of a card regenerates them (`python tests/test_cards.py tests/data/cards`)."""

import json
import sys
from pathlib import Path

import torch
from conftest import TINY

import alternet_hf
from alternet_hf.data.cifar_c import CORRUPTIONS
from alternet_hf.hub.cifar100c import hub_dataset_card
from alternet_hf.hub.repos import build_model_card

GOLDEN = Path(__file__).with_name("data") / "cards"
PRESETS = ("alternet-50-cifar100", "resnet-50-cifar100", "vit-ti-cifar100", "pit-ti-cifar100", "swin-ti-cifar100")
METRICS = dict(
    accuracy=0.8123, nll=0.71, ece=0.034, acc_90=0.9, unc_90=0.5, freq_90=0.2, iou=0.6, iou_90=0.7, brier=0.3
)
ROBUSTNESS = {
    "mean_accuracy": 0.51,
    "mean_nll": 2.1,
    "mean_ece": 0.12,
    "repo_id": "org/cifar100-c",
    "accuracy": [[0.5, 0.45, 0.4, 0.35, 0.3], [0.6, 0.55, 0.5, 0.45, 0.4]],
    "corruptions": ["fog", "snow"],
    "severities": [1, 2, 3, 4, 5],
    "images_per_set": 100,
    "set_size": 400,
    "mean_accuracy_standard_error": 0.01,
    "plan": {"per_class": 1},
}
FILE = dict(file="resnet_50_cifar100_691cc9a9e4.pth.tar", url="https://example.org/f", size=12345, sha256="ab" * 32)


def write_cards(folder: Path, work: Path) -> list[str]:
    """Every card of the cases above into `folder` (tiny models saved under `work`); their file names."""
    names = []
    for preset in PRESETS:
        torch.manual_seed(0)
        model = alternet_hf.create_model(preset, **TINY[preset])
        model.save_pretrained(work / preset)
        if preset == "alternet-50-cifar100":  # trained here: its recipe, recorded with a path of its machine
            training = {"dataset": "/data/c100", "epochs": 2, "output_dir": "x", "learning_rate": 0.001}
            (work / preset / "training_config.json").write_text(json.dumps(training))
        provenance = dict(FILE, preset=preset, converter="alternet-hf 0.1.0")
        cases = {
            "trained": {},
            "converted": dict(
                robustness=ROBUSTNESS,
                figures={"Reliability": "figures/r.png", "Fourier": "figures/f.png"},
                provenance=provenance,
                reported={"by": "the paper", "top1": 82.5, "cifar100c_mean": 51.2},
                evaluated_on="one NVIDIA H200",
                dataset_aliases={"/data/c100": "uoft-cs/cifar100"},
            ),
            "authors-numbers": dict(provenance=provenance, reported={"by": "the authors", "top1": 80.0}),
        }
        for case, options in cases.items():
            card = build_model_card(
                model, f"org/{preset}", METRICS, "uoft-cs/cifar100", "test", work / preset, **options
            )
            names.append(f"{preset}-{case}.md")
            card.save(folder / names[-1])
    hub_dataset_card("org/cifar100-c", CORRUPTIONS, 10_000).save(folder / "cifar100-c.md")
    hub_dataset_card("someone/c", ["snow", "contrast"], 20).save(folder / "cifar100-c-two-corruptions.md")
    return [*names, "cifar100-c.md", "cifar100-c-two-corruptions.md"]


def test_the_cards_from_the_templates_are_the_cards_of_before(tmp_path):
    names = write_cards(tmp_path, tmp_path / "models")
    assert sorted(names) == sorted(path.name for path in GOLDEN.glob("*.md"))
    for name in names:
        assert (tmp_path / name).read_bytes() == (GOLDEN / name).read_bytes(), name


if __name__ == "__main__":
    import tempfile

    sys.path.insert(0, str(Path(__file__).parent))
    with tempfile.TemporaryDirectory() as work:
        Path(sys.argv[1]).mkdir(parents=True, exist_ok=True)
        print("\n".join(write_cards(Path(sys.argv[1]), Path(work))))
