"""The offline mini-zoo: train a small ResNet, ViT and AlterNet on the embedded digits with one recipe, run
every analysis on each, compare them and write the report: the paper's claims checked on a CPU in minutes.

    alternet-reproduce --quick --out tiny-zoo/   # tiny models, one epoch, the smallest analyses

Without --quick the models train until competent and every analysis runs at the device's amounts. --out holds
models/<family>/, results/<family>/ and comparison/ (a run of fewer families or analyses compares into a folder beside
it that names them); a finished model there with the same training settings is reused, an interrupted one resumed,
one trained otherwise is an error. The analysis options are alternet-compare's.
"""

import argparse
import sys
from pathlib import Path

from alternet_hf.cli.analyze import add_analysis_arguments, comma_list, run_options
from alternet_hf.cli.common import CommandError, command, make_parser, output_folder

# The same names as alternet_hf.apps.minizoo's (a test keeps them equal), read before the analyses load.
FAMILIES = ("resnet", "vit", "alternet")
# --quick: the data batch of the smallest analyses (their amounts are analysis.registry.Settings.QUICK_AMOUNTS).
QUICK_BATCH_SIZE = 64


def build_parser() -> argparse.ArgumentParser:
    parser = make_parser(__doc__)
    parser.add_argument("--out", type=output_folder, default=Path("outputs/mini-zoo"), help="default: outputs/mini-zoo")
    parser.add_argument(
        "--epochs", type=int, help="training epochs of every model (default: 6 for the CNNs, 30 for the ViT; 1 quick)"
    )
    parser.add_argument("--families", default=",".join(FAMILIES), help=f"comma-separated, from {','.join(FAMILIES)}")
    parser.add_argument("--quick", action="store_true", help="tiny models, one epoch, the smallest analyses")
    add_analysis_arguments(parser, landscape_protocol="reference")
    parser.set_defaults(image_size=None)
    return parser


@command
def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    families = comma_list(args.families)
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown or not families:
        raise CommandError(f"unknown families {unknown}; choose from {', '.join(FAMILIES)}")
    if args.epochs is not None and args.epochs < 1:
        raise CommandError(f"--epochs must be at least 1, not {args.epochs}")
    if args.quick:
        _apply_quick(args, argv)
    options = run_options(args)
    from alternet_hf.apps.minizoo import reproduce
    from alternet_hf.cli.compare import print_verdicts

    written = reproduce(
        args.out,
        families,
        epochs=args.epochs,
        quick=args.quick,
        analyses=args.analyses,
        image_size=args.image_size,
        **options,
    )
    print_verdicts(written["json"])
    print(
        f"mini-zoo in {args.out}/: models/, results/, {written['report'].parent.name}/report.md "
        f"(training {written['training_minutes']:.1f} min, analyses "
        f"{written['minutes'] - written['training_minutes']:.1f} min)"
    )


def _apply_quick(args, argv) -> None:
    """--quick sets the smallest analyses for every analysis flag not typed."""
    from analysis.registry import Settings

    quick = {"batch_size": QUICK_BATCH_SIZE, **Settings.QUICK_AMOUNTS}
    typed = {token.split("=")[0] for token in (sys.argv[1:] if argv is None else argv) if token.startswith("--")}
    for key, value in quick.items():
        if "--" + key.replace("_", "-") not in typed:
            setattr(args, key, value)


if __name__ == "__main__":
    main()
