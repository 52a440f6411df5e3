"""The offline mini-zoo: train a small ResNet, ViT and AlterNet on the embedded digits with one recipe, run
every analysis on each, compare them and write the report: the paper's claims checked on a CPU in minutes.

    alternet-reproduce --quick --out tiny-zoo/   # tiny models, one epoch, the smallest analyses (about a minute)

Without --quick (the default --out is outputs/mini-zoo) the small models train for the recipe's 6 epochs
(--epochs to change) and every analysis runs at the device's amounts: minutes on a CPU.

Layout of --out: models/<family>/ (model folders as alternet-train writes them), results/<family>/ (each
analysis as alternet-analyze writes it) and comparison/ (comparison.json, figures, report.md), for the
families resnet, vit and alternet. A finished model already in models/<family>/ with the same training
settings is reused (an interrupted one resumes); one trained with other settings is an error, never
overwritten. The analysis options are alternet-compare's.
"""

import argparse
import json
import sys
import time
from pathlib import Path

from alternet_hf.cli._common import CommandError, command, make_parser
from alternet_hf.cli.analyze import add_analysis_arguments

FAMILIES = ("resnet", "vit", "alternet")
# Small members of each family (a few hundred thousand to 1.5 M parameters); the AlterNet is the first
# run's (`alternet-train` with no arguments), the ResNet the same skeleton without MSAs at half its width.
SMALL = {
    "resnet": ("resnet-18-cifar10", dict(hidden_sizes=[16, 32, 64, 128], embedding_size=16)),
    "vit": (
        "vit-ti-cifar10",
        dict(hidden_size=96, num_hidden_layers=4, num_attention_heads=3, intermediate_size=192, patch_size=4),
    ),  # fmt: skip
    "alternet": (
        "alternet-18-cifar10",
        dict(
            hidden_sizes=[32, 64, 128, 256], embedding_size=32, num_attention_heads=[1, 2, 4, 4], attention_head_dim=32
        ),
    ),  # fmt: skip
}
TINY = {
    "resnet": ("resnet-18-cifar10", dict(hidden_sizes=[8, 16, 16, 32], embedding_size=8, depths=[1, 1, 1, 1])),
    "vit": (
        "vit-ti-cifar10",
        dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, patch_size=8),
    ),  # fmt: skip
    "alternet": (
        "alternet-18-cifar10",
        dict(
            hidden_sizes=[8, 16, 16, 32],
            embedding_size=8,
            depths=[1, 2, 2, 2],
            num_attention_heads=[1, 1, 1, 1],
            attention_head_dim=8,
        ),
    ),  # fmt: skip
}
# The smallest analyses that still exercise every path (--quick); flags given explicitly win.
QUICK_ANALYSES = dict(
    batch_size=64, max_batches=1, train_batch_size=16, hessian_batches=1, top_k=1, bottom_k=1, lanczos_steps=4,
    density_vectors=0, landscape_points=3, corruptions="gaussian_noise,fog", severities="3", corruption_images=32,
)  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = make_parser(__doc__)
    parser.add_argument("--out", type=Path, default=Path("outputs/mini-zoo"), help="folder of the mini-zoo")
    parser.add_argument("--epochs", type=int, help="training epochs of each model (default: the recipe's 6; 1 quick)")
    parser.add_argument("--families", default=",".join(FAMILIES), help=f"comma-separated, from {','.join(FAMILIES)}")
    parser.add_argument("--quick", action="store_true", help="tiny models, one epoch, the smallest analyses")
    add_analysis_arguments(parser)
    parser.set_defaults(landscape_protocol="reference", image_size=None)
    return parser


def training_config(family: str, out: Path, *, epochs: int | None, quick: bool):
    """The one recipe (the offline first run's: AdamW, crop, 6 epochs on digits) for every family."""
    from alternet_hf.recipe import TrainingConfig

    preset, overrides = (TINY if quick else SMALL)[family]
    fields = dict(
        model=preset, model_overrides={**overrides, "drop_path_rate": 0.0}, output_dir=str(out / "models" / family)
    )
    if epochs is not None or quick:
        fields["epochs"] = epochs or 1
    return TrainingConfig(**fields)


def train_family(config, say=print):
    """Train (or reuse, or resume) one model; returns its folder."""
    from alternet_hf.training import RESUMABLE_CHANGES, train

    folder = Path(config.output_dir)
    saved = folder / "training_config.json"
    if saved.is_file():
        before = json.loads(saved.read_text())
        now = json.loads(json.dumps(config.to_dict()))
        # What defines the model; where it was written and how fast it ran do not (a moved folder is reused).
        changed = [key for key in now if key not in RESUMABLE_CHANGES and before.get(key) != now[key]]
        if changed:
            details = ", ".join(f"{key} {before.get(key)!r} -> {now[key]!r}" for key in changed)
            raise CommandError(
                f"{folder} holds a model trained with other settings ({details}); choose another --out or delete it"
            )
        if (folder / "config.json").is_file() and (folder / "history.json").is_file():
            say(f"{folder}: already trained with these settings, reused")
            return folder
    train(config, resume=True)
    return folder


@command
def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    families = [name.strip() for name in args.families.split(",") if name.strip()]
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown or not families:
        raise CommandError(f"unknown families {unknown}; choose from {', '.join(FAMILIES)}")
    if args.epochs is not None and args.epochs < 1:
        raise CommandError(f"--epochs must be at least 1, not {args.epochs}")
    if args.quick:
        _apply_quick(args, argv)
    import matplotlib

    matplotlib.use("Agg")
    from alternet_hf.cli.compare import print_verdicts, run_comparison

    started = time.perf_counter()
    trained = {}
    for family in families:
        config = training_config(family, args.out, epochs=args.epochs, quick=args.quick)
        print(f"--- {family}: {config.model} with {config.model_overrides}, {config.epochs} epochs")
        trained[family] = train_family(config)
    training_seconds = time.perf_counter() - started
    specs = [(family, str(folder)) for family, folder in trained.items()]
    written = run_comparison(specs, args, results_dir=args.out / "results", comparison_dir=args.out / "comparison")
    total = time.perf_counter() - started
    print_verdicts(written["json"])
    print(
        f"mini-zoo in {args.out}/: models/, results/, comparison/report.md "
        f"(training {training_seconds / 60:.1f} min, analyses {(total - training_seconds) / 60:.1f} min)"
    )


def _apply_quick(args, argv) -> None:
    """--quick sets the smallest analyses for every analysis flag not typed."""
    typed = {token.split("=")[0] for token in (sys.argv[1:] if argv is None else argv) if token.startswith("--")}
    for key, value in QUICK_ANALYSES.items():
        if "--" + key.replace("_", "-") not in typed:
            setattr(args, key, value)


if __name__ == "__main__":
    main()
