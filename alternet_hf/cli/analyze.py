"""Run the paper's analyses on a model; write one JSON per analysis and the paper-style figures (PNG).

    alternet-analyze --model outputs/alternet-digits --out results/      # every analysis, digits
    alternet-analyze --model <org>/alternet-50-cifar100 --dataset uoft-cs/cifar100 \\
        --analyses fourier,variance,hessian,landscape,robustness,frequency-noise,lesion,cka --out results/
    alternet-analyze --model <dir> --dataset uoft-cs/cifar100 --analyses robustness --cifar-c CIFAR-100-C/
    alternet-analyze --model <dir> --analyses hessian --hessian-batches 1 --bottom-k 5 --hessian-time-limit 600

Amounts fit the device: a GPU runs the paper's (10 Hessian minibatches, 100 Lanczos steps, a 21×21
landscape, every CIFAR-C set of the whole test split); a CPU runs fewer and says which, and every
analysis prints a time estimate before it starts. Hessian spectra and loss landscapes use augmented
training batches, by default augmented as the model was trained (its training_config.json, Mixup and
label smoothing included; the paper's recipe where there is none; --augmentation to choose), and NLL +
one L2 term (--penalty, --weight-decay) for both. The other analyses use the clean test split.
Robustness reads CIFAR-C from --cifar-c (the Zenodo arrays folder, a parquet dataset or a Hub id) or,
without it, generates the 15 corruptions on the fly from the test split. The Hessian spectrum is
written after every minibatch, so a run stopped by --hessian-time-limit (or killed) keeps what it found.
"""

import argparse
from pathlib import Path

from alternet_hf.cli._common import command, make_parser, model_source

# The same names as analysis.compare.ANALYSES and analysis.runner.AUGMENTATIONS (a test keeps them equal;
# importing those modules here would load the analyses before the arguments are read).
ANALYSES = ("fourier", "variance", "hessian", "landscape", "robustness", "frequency-noise", "lesion", "cka")
AUGMENTATIONS = ("model", "paper", "none")


def any_model(text: str) -> str:
    """argparse type of `--model`: `timm:<name>`, or what `model_source` accepts."""
    if text.startswith("timm:"):
        if text == "timm:":
            raise argparse.ArgumentTypeError("name the timm model, e.g. timm:resnet50")
        return text
    return model_source(text)


def augmentation_source(text: str) -> str:
    """argparse type of `--augmentation`: checked before any model is loaded."""
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


def analyses_list(text: str) -> list[str]:
    """argparse type of `--analyses`: known names, comma-separated."""
    requested = [name.strip() for name in text.split(",") if name.strip()]
    unknown = sorted(set(requested) - set(ANALYSES))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown analyses {unknown}; choose from {', '.join(ANALYSES)}")
    return requested


def add_analysis_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the analyses themselves, shared by alternet-analyze, -compare and -reproduce."""
    scaled = "(default: the paper's on a GPU, fewer on a CPU)"
    parser.add_argument("--dataset", default="digits", help="'digits', a Hub id, or a local folder/parquet file")
    parser.add_argument("--image-column")
    parser.add_argument("--label-column")
    parser.add_argument("--train-split", default="train")
    parser.add_argument("--test-split", default="test")
    parser.add_argument("--analyses", type=analyses_list, default=list(ANALYSES), help=f"from {','.join(ANALYSES)}")
    parser.add_argument("--batch-size", type=int, default=256, help="evaluation batch size")
    parser.add_argument("--max-batches", type=int, help="test batches per analysis (default: the whole split)")
    parser.add_argument("--train-batch-size", type=int, help=f"minibatch of Hessian and landscape {scaled}")
    parser.add_argument(
        "--augmentation",
        default="model",
        type=augmentation_source,
        help="augmentation of the Hessian and landscape batches: 'model' (its training_config.json; the paper's "
        "recipe where there is none), 'paper', 'none', or a training_config.json file",
    )
    parser.add_argument("--hessian-batches", type=int, help=f"minibatches in the max-eigenvalue spectrum {scaled}")
    parser.add_argument("--top-k", type=int, default=5, help="largest Hessian eigenvalues per minibatch")
    parser.add_argument(
        "--bottom-k", type=int, default=5, help="most negative Hessian eigenvalues per minibatch (0: largest only)"
    )
    parser.add_argument("--lanczos-steps", type=int, help=f"Lanczos steps per minibatch at most {scaled}")
    parser.add_argument("--density-vectors", type=int, help=f"SLQ vectors of the Hessian density, 0 for none {scaled}")
    parser.add_argument("--density-steps", type=int, help=f"Lanczos steps per SLQ vector {scaled}")
    parser.add_argument(
        "--hessian-time-limit", type=float, help="seconds; the spectrum stops there, keeping the finished minibatches"
    )
    parser.add_argument("--landscape-points", type=int, help=f"grid points per direction (odd) {scaled}")
    parser.add_argument("--landscape-batches", type=int, default=1, help="training minibatches per grid point")
    parser.add_argument(
        "--landscape-protocol",
        choices=["filter", "reference"],
        default="filter",
        help="'filter': Li et al.'s per-filter directions, BatchNorm in train mode; 'reference': the paper's code "
        "(directions normalised over dim 0, BatchNorm in eval mode)",
    )
    parser.add_argument(
        "--penalty",
        choices=["reference", "squared"],
        default="reference",
        help="the L2 term of Hessian and landscape: the reference's wd·Σ‖p‖, or ½·wd·‖w‖²",
    )
    parser.add_argument("--weight-decay", type=float, default=0.05, help="L2 coefficient of the Hessian/landscape loss")
    parser.add_argument(
        "--batchnorm",
        choices=["train", "eval"],
        help="BatchNorm mode of the Hessian (default train) and of the landscape (default: its protocol's)",
    )
    parser.add_argument("--cifar-c", help="CIFAR-C source: Zenodo arrays folder, parquet dataset or Hub id")
    parser.add_argument("--corruptions", help="comma-separated (default: all 15 CIFAR-C corruptions)")
    parser.add_argument("--severities", help=f"comma-separated {scaled}")
    parser.add_argument(
        "--corruption-images", type=int, help=f"clean test images corrupted for generated CIFAR-C {scaled}"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", help="default: cuda if available, else cpu")


def build_parser() -> argparse.ArgumentParser:
    parser = make_parser(__doc__)
    parser.add_argument(
        "--model",
        required=True,
        type=any_model,
        help="a preset name (random weights), a folder, a Hub id, or timm:<name> (--weights, else from the Hub)",
    )
    parser.add_argument("--weights", type=existing_path, help="a timm model's weights: a file or a folder holding one")
    parser.add_argument("--out", type=Path, default=Path("results"), help="folder for JSON and PNG files")
    add_analysis_arguments(parser)
    return parser


def settings_from_args(args, device):
    """`analysis.compare.Settings` for `device` from the flags given; and the notes on what was scaled."""
    from analysis.compare import Settings

    given = dict(
        max_batches=args.max_batches,
        train_batch_size=args.train_batch_size,
        hessian_batches=args.hessian_batches,
        top_k=args.top_k,
        bottom_k=args.bottom_k,
        lanczos_steps=args.lanczos_steps,
        hessian_time_limit=args.hessian_time_limit,
        density_vectors=args.density_vectors,
        density_steps=args.density_steps,
        weight_decay=args.weight_decay,
        penalty=args.penalty,
        hessian_batchnorm=args.batchnorm,
        landscape_batchnorm=args.batchnorm,
        landscape_points=args.landscape_points,
        landscape_batches=args.landscape_batches,
        landscape_protocol=args.landscape_protocol,
        corruptions=tuple(args.corruptions.split(",")) if args.corruptions else None,
        severities=tuple(int(s) for s in args.severities.split(",")) if args.severities else None,
        corruption_images=args.corruption_images,
        seed=args.seed,
    )
    if args.max_batches is not None and args.corruption_images is None and not args.cifar_c:
        given["corruption_images"] = args.max_batches * args.batch_size  # what --max-batches always meant for it
    settings, notes = Settings.for_device(device, **given)
    settings.check()
    return settings, notes


def data_options(args):
    """`analysis.runner.DataOptions` from the flags."""
    from analysis.runner import DataOptions

    return DataOptions(
        dataset=args.dataset,
        image_column=args.image_column,
        label_column=args.label_column,
        train_split=args.train_split,
        test_split=args.test_split,
        batch_size=args.batch_size,
        augmentation=args.augmentation,
        cifar_c=args.cifar_c,
        seed=args.seed,
    )


@command
def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    from analysis.runner import analyse_model, choose_device

    device = choose_device(args.device)
    settings, notes = settings_from_args(args, device)
    analyse_model(
        args.model,
        args.analyses,
        data=data_options(args),
        settings=settings,
        device=device,
        out=args.out,
        weights=args.weights,
        scaled_down=notes,
    )
    print(f"wrote {', '.join(f'{n}.json/.png' for n in args.analyses)} to {args.out}/")


if __name__ == "__main__":
    main()
