"""Compare models the way the paper does: every analysis on each model, the paper's figures with all models
in one plot, one JSON with every number, and a report that decides each claim of the paper on these models.

    alternet-compare --models alternet=outputs/alternet-digits,resnet=resnet-18-cifar10 --analyses fourier,variance
    alternet-compare --paper --out paper-comparison/   # the paper's line-up from the zoo's Hub repos, on CIFAR-100
    alternet-compare --paper converted/ --out paper-comparison/   # from folders named by preset (converted/<preset>)

--paper (the default without --models) compares the paper's five models for CIFAR-100, from the Hub repos of an
organisation (default alternet-hf) or from a folder of folders named by preset, on uoft-cs/cifar100 unless --dataset
says otherwise. A model of --models is a zoo preset or folder, a transformers model (folder or Hub id) or a timm model
`timm:<name>` (its weights read from --weights, offline, else from the Hub), optionally named (`name=source`).

Written to --out: <name>/ with each model's results as alternet-analyze writes them, comparison.json, the figures
and report.md. Amounts fit the device, as in alternet-analyze.
"""

import argparse
import json
import re
from pathlib import Path

from alternet_hf.cli.analyze import add_analysis_arguments, any_model, existing_path, named_list, run_options
from alternet_hf.cli.common import CommandError, command, make_parser, output_folder

TIMM_PREFIX = "timm:"


def model_specs(text: str) -> list[tuple[str, str]]:
    """argparse type of `--models`: `[name=]source,...` -> [(name, source)], names unique."""
    specs = []
    for name, source in named_list(text):
        source = any_model(source)  # a clear error for a missing folder or an unknown preset
        name = name or source.removeprefix(TIMM_PREFIX).rstrip("/").rsplit("/", 1)[-1]
        if not re.fullmatch(r"[\w.+-]+", name):
            raise argparse.ArgumentTypeError(f"model name {name!r} must be letters, digits, '.', '-', '+' or '_'")
        specs.append((name, source))
    if not specs:
        raise argparse.ArgumentTypeError("name at least one model: --models name=source,...")
    names = [name for name, _ in specs]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise argparse.ArgumentTypeError(f"model names {repeated} are used twice: name them, e.g. a=...,b=...")
    return specs


def weight_paths(text: str) -> list[tuple[str | None, Path]]:
    """argparse type of `--weights`: `[name=]path,...`; every path must exist."""
    return [(name, existing_path(path)) for name, path in named_list(text)]


def assign_weights(specs: list[tuple[str, str]], weights: list[tuple[str | None, Path]] | None) -> dict[str, Path]:
    """{model name: weights path}: named entries by name, the others in the order of the timm models."""
    weights, timm_names = weights or [], [name for name, source in specs if source.startswith(TIMM_PREFIX)]
    assigned = {name: path for name, path in weights if name is not None}
    for name in assigned:
        if name not in dict(specs):
            raise CommandError(f"--weights names {name!r}, which is not among --models ({', '.join(dict(specs))})")
        if name not in timm_names:
            raise CommandError(f"--weights {name}=...: {name} is not a timm model; only timm models take weights")
    unnamed = [path for name, path in weights if name is None]
    waiting = [name for name in timm_names if name not in assigned]
    if len(unnamed) > len(waiting):
        raise CommandError(f"{len(unnamed)} unnamed --weights for {len(waiting)} timm models without weights")
    assigned.update(zip(waiting, unnamed))
    return assigned


def paper_models(source: str) -> list[tuple[str, str]]:
    """The paper's line-up (`alternet_hf.models.presets.PAPER_MODELS`) as (name, source): from a folder of preset-named
    folders (also under its `models/`, as scripts/release.py lays them out), else from a Hub organisation."""
    from alternet_hf.models.presets import PAPER_MODELS, display_name

    folder = Path(source)
    if folder.is_dir():
        roots = [folder, folder / "models"]
        found = {p: next((r / p for r in roots if (r / p / "config.json").is_file()), None) for p in PAPER_MODELS}
        missing = [preset for preset, path in found.items() if path is None]
        if missing:
            raise CommandError(
                f"{folder} lacks the paper's {', '.join(missing)}: put one folder per model there, named by preset "
                "(alternet-convert <reference .pth.tar> <preset> <folder>/<preset>, or alternet-train --recipe paper "
                "--model <preset> --output-dir <folder>/<preset>), or name the models with --models"
            )
        return [(display_name(preset), str(path)) for preset, path in found.items()]
    if not re.fullmatch(r"[\w.-]+", source):
        raise CommandError(f"--paper takes a Hub organisation or a folder of model folders; {source!r} is neither")
    return [(display_name(preset), f"{source}/{preset}") for preset in PAPER_MODELS]


def build_parser() -> argparse.ArgumentParser:
    from alternet_hf.models.presets import HUB_ORGANISATION

    parser = make_parser(__doc__)
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument("--models", type=model_specs, help="[name=]source,... (see above)")
    chosen.add_argument(
        "--paper",
        nargs="?",
        const=HUB_ORGANISATION,
        metavar="ORG_OR_FOLDER",
        help=f"the paper's five models from a Hub organisation (default {HUB_ORGANISATION}) or a folder (see above)",
    )
    parser.add_argument("--weights", type=weight_paths, help="weights of timm models: [name=]file-or-folder,...")
    parser.add_argument("--image-size", type=int, help="resize inputs to this size for every model")
    parser.add_argument("--out", type=output_folder, default=Path("comparison"), help="results, figures, report")
    parser.add_argument(
        "--competence",
        type=float,
        default=2.0,  # analysis.claims.COMPETENCE (the command parses before the analyses load)
        help="name models whose accuracy is below this multiple of chance as near chance in the report",
    )
    add_analysis_arguments(parser, landscape_protocol="reference")
    parser.set_defaults(dataset=None)  # digits, or CIFAR-100 for --paper
    return parser


@command
def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    from alternet_hf.models.presets import HUB_ORGANISATION

    paper = args.models is None
    if paper:
        args.models = paper_models(args.paper or HUB_ORGANISATION)
    if args.dataset is None:
        args.dataset = "uoft-cs/cifar100" if paper else "digits"
    weights = assign_weights(args.models, args.weights)
    options = run_options(args)
    from analysis.runner import compare_models

    written = compare_models(
        args.models,
        args.analyses,
        results_dir=args.out,
        comparison_dir=args.out,
        weights=weights,
        image_size=args.image_size,
        competence=args.competence,
        **options,
    )
    print_verdicts(written["json"])
    print(
        f"wrote {written['report']}, {written['json'].name} and {len(written) - 2} figures; per-model results in "
        f"{args.out}/<name>/"
    )


def print_verdicts(comparison_json: Path) -> None:
    for claim in json.loads(comparison_json.read_text())["claims"]:
        weak = claim.get("below_competence")
        caveat = f" (rests on {', '.join(weak)}, near chance)" if weak else ""
        print(f"  {claim['verdict']:>14}: {claim['statement']}{caveat}")


if __name__ == "__main__":
    main()
