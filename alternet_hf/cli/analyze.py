"""Run the paper's analyses on a model; write one JSON per analysis and the paper-style figures (PNG).

    alternet-analyze --model outputs/alternet-digits --out results/      # every analysis, digits
    alternet-analyze --model <org>/alternet-50-cifar100 --dataset uoft-cs/cifar100 \\
        --analyses fourier,variance,hessian,landscape,robustness,frequency-noise,lesion,cka --out results/
    alternet-analyze --model <dir> --dataset uoft-cs/cifar100 --analyses robustness --cifar-c CIFAR-100-C/
    alternet-analyze --model <dir> --analyses hessian --hessian-batches 1 --bottom-k 5 --hessian-time-limit 600
    alternet-analyze --model timm:vit_small_patch16_224.augreg_in21k_ft_in1k --dataset ILSVRC/imagenet-1k \
        --test-split validation --analyses fourier,variance --max-images 512
    alternet-analyze --model timm/resnet50.a1_in1k --analyses probe --out probe/   # the Space's Any model tab

Amounts fit the device: a GPU runs the paper's, a CPU fewer (each flag's help gives both; the run says which), and
every analysis prints a time estimate first. Hessian spectra and landscapes read training batches augmented as the
model was trained (--augmentation to choose); the other analyses the clean test split, robustness CIFAR-C from
--cifar-c or generated on the fly. The Hessian spectrum is written after every minibatch (--hessian-time-limit).
A Hub id is checked before its weights are fetched, as the Space checks a visitor's (no remote code, safetensors,
ALTERNET_MAX_PARAMETERS; docs/release.md); `probe` runs only when named and reads no dataset.
"""

import argparse
import dataclasses
import math
import types
import typing
from pathlib import Path

from alternet_hf.cli.common import command, make_parser, model_source, output_folder, positive_int


def any_model(text: str) -> str:
    """argparse type of `--model`: `timm:<name>`, or what `model_source` accepts."""
    if text.startswith("timm:"):
        if text == "timm:":
            raise argparse.ArgumentTypeError("name the timm model, e.g. timm:resnet50")
        return text
    return model_source(text)


def augmentation_source(text: str) -> str:
    """argparse type of `--augmentation`: checked before any model is loaded."""
    from analysis.registry import AUGMENTATIONS

    if text not in AUGMENTATIONS and not Path(text).is_file():
        raise argparse.ArgumentTypeError(
            f"takes {', '.join(AUGMENTATIONS)} or a training_config.json file, not {text!r}"
        )
    return text


def existing_path(text: str) -> Path:
    path = Path(text)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"there is no weights file or folder {text}")
    return path


def comma_list(text: str) -> list[str]:
    """The items of a comma-separated list, blanks left out."""
    return [item.strip() for item in text.split(",") if item.strip()]


def named_list(text: str) -> list[tuple[str | None, str]]:
    """`[name=]value,...` as (name, value) pairs; the name is None where the item has no `=`."""
    pairs = [item.partition("=") for item in comma_list(text)]
    return [(name, value) if sep else (None, name) for name, sep, value in pairs]


def analyses_list(text: str) -> list[str]:
    """argparse type of `--analyses`: known names, comma-separated."""
    from analysis.registry import ANALYSES

    requested = comma_list(text)
    unknown = sorted(set(requested) - set(ANALYSES))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown analyses {unknown}; choose from {', '.join(ANALYSES)}")
    return requested


def _comma_separated(kind: type):
    def parse(text: str) -> tuple:
        try:
            return tuple(map(kind, comma_list(text)))
        except ValueError:
            raise argparse.ArgumentTypeError(f"takes comma-separated {kind.__name__} values, not {text!r}") from None

    return parse


def _flag_type(annotation):
    """argparse type of a `Settings` field: its type without None; a tuple as comma-separated values."""
    kind = annotation
    if isinstance(annotation, types.UnionType):  # `int | None`
        kind = next(kind for kind in typing.get_args(annotation) if kind is not type(None))
    if typing.get_origin(kind) is tuple:
        return _comma_separated(typing.get_args(kind)[0])
    return kind


def add_analysis_arguments(parser: argparse.ArgumentParser, **defaults) -> None:
    """The options of the analyses themselves, shared by alternet-analyze, -compare and -reproduce: the data, and
    one flag per field of `analysis.registry.Settings` (its name, type and help), left unset unless given so that
    `Settings.for_device` can scale what was not given to the device; `defaults` are a command's own."""
    from analysis.registry import ANALYSES, PAPER_ANALYSES, Settings

    parser.add_argument("--dataset", default="digits", help="'digits', a Hub id, or a local folder/parquet file")
    parser.add_argument("--image-column")
    parser.add_argument("--label-column")
    parser.add_argument("--train-split", default="train")
    parser.add_argument("--test-split", default="test")
    parser.add_argument(
        "--analyses",
        type=analyses_list,
        default=list(PAPER_ANALYSES),
        help=f"from {','.join(ANALYSES)} (default: the paper's, {','.join(PAPER_ANALYSES)})",
    )
    parser.add_argument("--batch-size", type=int, default=256, help="evaluation batch size")
    parser.add_argument(
        "--max-images",
        type=positive_int,
        help="a seeded sample of this many images of each split, streamed, every one of them analysed unless "
        "--max-batches says otherwise (default: as many as the analyses read: with --max-batches and on a CPU a "
        "streamed sample too, else the whole split, prepared on disk)",
    )
    parser.add_argument(
        "--augmentation",
        default="model",
        type=augmentation_source,
        help="augmentation of the Hessian and landscape batches: 'model' (its training_config.json; the paper's "
        "recipe where there is none), 'paper', 'none', or a training_config.json file",
    )
    parser.add_argument("--cifar-c", help="CIFAR-C source: Zenodo arrays folder, parquet dataset or Hub id")
    parser.add_argument("--device", help="default: cuda if available, else cpu")
    paper = Settings()
    for field in dataclasses.fields(Settings):
        shown = _shown(defaults.get(field.name, getattr(paper, field.name)))
        if field.name in Settings.CPU_AMOUNTS and field.name not in defaults:
            shown = f"{shown} on a GPU (the paper's), {_shown(Settings.CPU_AMOUNTS[field.name])} on a CPU"
        parser.add_argument(
            f"--{field.name.replace('_', '-')}",
            type=_flag_type(field.type),
            choices=field.metadata["choices"],
            default=defaults.get(field.name),
            help=f"{field.metadata['help']} (default: {shown})",
        )


def _shown(value) -> str:
    return ",".join(map(str, value)) if isinstance(value, tuple) else str(value)


def build_parser() -> argparse.ArgumentParser:
    parser = make_parser(__doc__)
    parser.add_argument(
        "--model",
        required=True,
        type=any_model,
        help="a preset name (random weights), a folder, a Hub id, or timm:<name> (--weights, else from the Hub)",
    )
    parser.add_argument("--weights", type=existing_path, help="a timm model's weights: a file or a folder holding one")
    parser.add_argument("--revision", help="of a Hub id: a branch, tag or commit sha (default: its main branch)")
    parser.add_argument("--out", type=output_folder, default=Path("results"), help="folder for JSON and PNG files")
    add_analysis_arguments(parser)
    return parser


def settings_from_args(args, device):
    """`analysis.registry.Settings` for `device` from the flags given; and the notes on what was scaled."""
    from analysis.registry import Settings

    given = {field.name: getattr(args, field.name) for field in dataclasses.fields(Settings)}
    if args.max_images is not None and args.max_batches is None:  # every image of the sample is read
        given["max_batches"] = math.ceil(args.max_images / args.batch_size)
    if given["max_batches"] is not None and args.corruption_images is None and not args.cifar_c:
        given["corruption_images"] = min(given["max_batches"] * args.batch_size, args.max_images or math.inf)
    settings, notes = Settings.for_device(device, **given)
    settings.check(getattr(args, "analyses", None))  # alternet-reproduce runs every analysis
    return settings, notes


def run_options(args) -> dict:
    """What every analysis command passes on to `analysis.runner` from its flags: the data (`DataOptions`, of the
    flags of the same names), the settings scaled to the device, and the notes on what was scaled down (figures
    drawn off screen from here on)."""
    for kind in ("cpu", "cuda"):  # amounts at odds are said before torch is imported, whichever device runs
        settings_from_args(args, kind)
    import matplotlib

    matplotlib.use("Agg")
    from analysis.inputs import DataOptions, choose_device

    device = choose_device(args.device)
    settings, notes = settings_from_args(args, device)
    flags = {field.name: getattr(args, field.name) for field in dataclasses.fields(DataOptions)}
    data = DataOptions(**{**flags, "seed": settings.seed})
    return dict(data=data, settings=settings, device=device, scaled_down=notes)


@command
def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    options = run_options(args)
    from analysis.runner import analyse_model

    analyse_model(args.model, args.analyses, out=args.out, weights=args.weights, revision=args.revision, **options)
    print(f"wrote {', '.join(f'{n}.json/.png' for n in args.analyses)} to {args.out}/")


if __name__ == "__main__":
    main()
