"""The offline mini-zoo: a small ResNet, ViT and AlterNet trained on the embedded digits with one recipe, analysed
and compared (`alternet-reproduce`; docs/analyses.md gives the output folder's layout): the paper's claims checked
on a CPU. A model already trained with the same settings is reused, one with other settings never overwritten.
"""

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from analysis.inputs import DataOptions
from analysis.registry import ANALYSES, PAPER_ANALYSES, Settings
from analysis.runner import compare_models

from ..training.recipe import DEFAULT_MODEL, DEFAULT_MODEL_OVERRIDES, TrainingConfig

FAMILIES = ("resnet", "vit", "alternet")
# Small members of each family at comparable size (docs/analyses.md): the AlterNet is the first run's, the ResNet the
# same skeleton without MSAs at the width that gives it as many parameters, the ViT on 8x8 patches (16 tokens).
SMALL = {
    "resnet": ("resnet-18-cifar10", dict(hidden_sizes=[24, 48, 96, 192], embedding_size=24)),
    "vit": (
        "vit-ti-cifar10",
        dict(hidden_size=160, num_hidden_layers=6, num_attention_heads=4, intermediate_size=320, patch_size=8),
    ),
    "alternet": (DEFAULT_MODEL, DEFAULT_MODEL_OVERRIDES),
}
# The epochs each family needs to be competent (>= 90% on the hold-out): the ViT, without convolutions' locality,
# learns from the digits far slower.
EPOCHS = {"resnet": 6, "vit": 30, "alternet": 6}
TINY = {
    "resnet": ("resnet-18-cifar10", dict(hidden_sizes=[8, 16, 16, 32], embedding_size=8, depths=[1, 1, 1, 1])),
    "vit": (
        "vit-ti-cifar10",
        dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, patch_size=8),
    ),
    "alternet": (
        "alternet-18-cifar10",
        dict(
            hidden_sizes=[8, 16, 16, 32],
            embedding_size=8,
            depths=[1, 2, 2, 2],
            num_attention_heads=[1, 1, 1, 1],
            attention_head_dim=8,
        ),
    ),
}


def training_config(family: str, out: Path, *, epochs: int | None, quick: bool):
    """The one recipe (the offline first run's) for every family, for the family's `EPOCHS` (`epochs` when given)."""
    preset, overrides = (TINY if quick else SMALL)[family]
    fields = dict(
        model=preset,
        model_overrides={**overrides, "drop_path_rate": 0.0},
        output_dir=str(out / "models" / family),
        epochs=epochs or (1 if quick else EPOCHS[family]),
    )
    return TrainingConfig(**fields)


def train_family(config, say=print):
    """Train (or reuse, or resume) one model; returns its folder."""
    from ..training.engine import changed_settings, train

    folder = Path(config.output_dir)
    saved = folder / "training_config.json"
    if saved.is_file():
        # What defines the model; where it was written and how fast it ran do not (a moved folder is reused).
        changed = changed_settings(json.loads(saved.read_text()), config)
        if changed:
            details = ", ".join(f"{key} {before!r} -> {now!r}" for key, (before, now) in changed.items())
            raise FileExistsError(
                f"{folder} holds a model trained with other settings ({details}); choose another --out or delete it"
            )
        if (folder / "config.json").is_file() and (folder / "history.json").is_file():
            say(f"{folder}: already trained with these settings, reused")
            return folder
    train(config, resume=True)
    return folder


def comparison_dir(out: Path, families: Sequence[str], analyses: Sequence[str]) -> Path:
    """Where a run's comparison goes: `out/comparison` for every family and analysis, else a folder beside it that
    names the run (`comparison-resnet-vit-fourier-lesion`), never over the whole zoo's report."""
    parts = [] if set(families) == set(FAMILIES) else [f for f in FAMILIES if f in families]
    parts += [] if set(analyses) == set(PAPER_ANALYSES) else [a for a in ANALYSES if a in analyses]
    return Path(out) / "-".join(["comparison", *parts])


def reproduce(
    out: Path,
    families: Sequence[str] = FAMILIES,
    *,
    epochs: int | None = None,
    quick: bool = False,
    analyses: Sequence[str],
    data: DataOptions,
    settings: Settings,
    device,
    image_size: int | None = None,
    scaled_down: Sequence[str] = (),
    say: Callable[[str], None] = print,
) -> dict:
    """Train (or reuse) each family into `out/models`, analyse into `out/results` and compare into `comparison_dir`;
    returns the written paths of the comparison, with the minutes spent training and in all."""
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown or not families:
        raise ValueError(f"unknown families {unknown}; choose from {', '.join(FAMILIES)}")
    started = time.perf_counter()
    trained = {}
    for family in families:
        config = training_config(family, out, epochs=epochs, quick=quick)
        say(f"--- {family}: {config.model} with {config.model_overrides}, {config.epochs} epochs")
        trained[family] = train_family(config, say=say)
    training_seconds = time.perf_counter() - started
    written = compare_models(
        [(family, str(folder)) for family, folder in trained.items()],
        analyses,
        data=data,
        settings=settings,
        device=device,
        results_dir=out / "results",
        comparison_dir=comparison_dir(out, families, analyses),
        image_size=image_size,
        scaled_down=scaled_down,
        say=say,
    )
    return {**written, "training_minutes": training_seconds / 60, "minutes": (time.perf_counter() - started) / 60}
