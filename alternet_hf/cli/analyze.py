"""Run the paper's analyses on a model; write one JSON per analysis and the paper-style figures (PNG).

    alternet-analyze --model outputs/alternet-digits                     # every analysis, digits
    alternet-analyze --model <org>/alternet-50-cifar100 --dataset uoft-cs/cifar100 \\
        --analyses fourier,variance,hessian,landscape,robustness,frequency-noise,lesion,cka --out results/
    alternet-analyze --model <dir> --dataset uoft-cs/cifar100 --analyses robustness --cifar-c CIFAR-100-C/

Hessian spectra and loss landscapes use augmented training batches (random crop, flip, RandAugment as
in the paper's recipe) and NLL + L2; the other analyses use the clean test split. Robustness reads
CIFAR-C from --cifar-c (the Zenodo arrays folder, a parquet dataset or a Hub id) or, without it,
generates the 15 corruptions on the fly from the test split.
"""

import argparse
import json
import math
from pathlib import Path

from alternet_hf.cli._common import CommandError, command, make_parser, model_source

ANALYSES = ("fourier", "variance", "hessian", "landscape", "robustness", "frequency-noise", "lesion", "cka")


def build_parser() -> argparse.ArgumentParser:
    parser = make_parser(__doc__)
    parser.add_argument(
        "--model", required=True, type=model_source, help="a preset name (random weights), a folder or a Hub id"
    )
    parser.add_argument("--dataset", default="digits", help="'digits', a Hub id, or a local folder/parquet file")
    parser.add_argument("--image-column")
    parser.add_argument("--label-column")
    parser.add_argument("--train-split", default="train")
    parser.add_argument("--test-split", default="test")
    parser.add_argument("--analyses", default=",".join(ANALYSES), help=f"comma-separated, from {','.join(ANALYSES)}")
    parser.add_argument("--out", type=Path, default=Path("results"), help="folder for JSON and PNG files")
    parser.add_argument("--batch-size", type=int, default=256, help="evaluation batch size")
    parser.add_argument(
        "--max-batches", type=int,
        help="test batches per analysis (default: the whole split); generated CIFAR-C corrupts that many "
        "batches' images, a --cifar-c source is always read whole",
    )  # fmt: skip
    parser.add_argument("--train-batch-size", type=int, default=96, help="minibatch of Hessian and landscape")
    parser.add_argument("--hessian-batches", type=int, default=10, help="minibatches in the max-eigenvalue spectrum")
    parser.add_argument("--top-k", type=int, default=5, help="Hessian eigenvalues per minibatch")
    parser.add_argument("--landscape-points", type=int, default=21, help="grid points per direction (odd)")
    parser.add_argument("--landscape-batches", type=int, default=1, help="training minibatches per grid point")
    parser.add_argument(
        "--landscape-penalty", choices=["reference", "squared"], default="reference",
        help="the landscape's L2 term: the reference's wd·Σ‖p‖, or ½·wd·‖w‖²",
    )  # fmt: skip
    parser.add_argument("--weight-decay", type=float, default=0.05, help="L2 coefficient of the Hessian/landscape loss")
    parser.add_argument(
        "--batchnorm", choices=["train", "eval"], default="train", help="BatchNorm mode for Hessian and landscape"
    )
    parser.add_argument("--cifar-c", help="CIFAR-C source: Zenodo arrays folder, parquet dataset or Hub id")
    parser.add_argument("--corruptions", help="comma-separated (default: all 15 CIFAR-C corruptions)")
    parser.add_argument("--severities", help="comma-separated (default: 1,2,3,4,5)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", help="default: cuda if available, else cpu")
    return parser


def _loader(dataset, transform, batch_size: int, *, shuffle: bool, seed: int):
    import torch

    from alternet_hf.data import collate_images, with_transform

    generator = torch.Generator().manual_seed(seed)
    return torch.utils.data.DataLoader(
        with_transform(dataset, transform),
        batch_size=batch_size,
        shuffle=shuffle,
        generator=generator,
        collate_fn=collate_images,
    )


def _save(out: Path, name: str, result, figure, meta: dict) -> None:
    import matplotlib.pyplot as plt

    payload = {**meta, "analysis": name, "result": _finite(result.to_dict())}
    (out / f"{name}.json").write_text(json.dumps(payload, indent=2))
    figure.savefig(out / f"{name}.png", dpi=130)
    plt.close(figure)


def _finite(value):
    """JSON has no NaN: write null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list):
        return [_finite(v) for v in value]
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return value


@command
def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch
    from tqdm import tqdm

    import alternet_hf
    from alternet_hf.data import SeededAugmentation, class_names_of, load_image_classification
    from alternet_hf.recipe import eval_transform, train_transform
    from analysis import cka, fourier, hessian, landscape, lesion, robustness, variance
    from analysis.corruptions import CORRUPTIONS, SEVERITIES

    requested = [name.strip() for name in args.analyses.split(",") if name.strip()]
    unknown = sorted(set(requested) - set(ANALYSES))
    if unknown:
        raise CommandError(f"unknown analyses {unknown}; choose from {', '.join(ANALYSES)}")
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.manual_seed(args.seed)

    model = alternet_hf.create_model(args.model).to(device)
    config = model.config
    size, mean, std = config.image_size, config.image_mean, config.image_std
    columns = dict(image_column=args.image_column, label_column=args.label_column, class_names=class_names_of(config))
    test_set = load_image_classification(args.dataset, split=args.test_split, **columns)
    test_loader = _loader(test_set, eval_transform(size, mean, std), args.batch_size, shuffle=False, seed=args.seed)
    if {"hessian", "landscape"} & set(requested):
        train_set = load_image_classification(args.dataset, split=args.train_split, **columns)
        augment = SeededAugmentation(
            train_transform(size, mean, std, crop_padding=4, horizontal_flip=0.5, rand_augment="rand-m9-n2-mstd1.0"),
            args.seed,
        )

        def train_loader():
            # A fresh loader per analysis: each sees the same shuffled, augmented batches whatever ran before.
            return _loader(train_set, augment, args.train_batch_size, shuffle=True, seed=args.seed)

    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"model": args.model, "dataset": args.dataset, "device": str(device)}
    print(f"analysing {args.model} ({type(model).__name__}, {model.num_parameters():,} parameters) on {device}")
    written = []
    for name in tqdm(requested, desc="analyses", unit="analysis"):
        common = dict(device=device, progress=True)
        if name == "fourier":
            result = fourier.fourier_log_amplitude(model, test_loader, max_batches=args.max_batches, **common)
            figure, axes = plt.subplots(1, 2, figsize=(10, 3.5), constrained_layout=True)
            fourier.plot_fourier_curves(result, ax=axes[0])
            fourier.plot_fourier(result, ax=axes[1])
        elif name == "variance":
            result = variance.feature_map_variance(model, test_loader, max_batches=args.max_batches, **common)
            figure = variance.plot_variance(result).figure
        elif name == "hessian":
            result = hessian.max_eigenvalue_spectrum(
                model, train_loader(), top_k=args.top_k, weight_decay=args.weight_decay, batchnorm=args.batchnorm,
                max_batches=args.hessian_batches, seed=args.seed, **common,
            )  # fmt: skip
            figure = hessian.plot_spectrum(result).figure
        elif name == "landscape":
            result = landscape.loss_landscape(
                model, train_loader(), num_points=args.landscape_points, weight_decay=args.weight_decay,
                penalty=args.landscape_penalty, batchnorm=args.batchnorm, max_batches=args.landscape_batches,
                seed=args.seed, **common,
            )  # fmt: skip
            figure = plt.figure(figsize=(10, 4), constrained_layout=True)
            landscape.plot_landscape(result, figure.add_subplot(1, 2, 1), kind="contour")
            landscape.plot_landscape(result, figure.add_subplot(1, 2, 2, projection="3d"), kind="surface")
        elif name == "robustness":
            if args.cifar_c:
                source = robustness.load_corruption_source(args.cifar_c)
            else:
                clean = test_set
                if args.max_batches is not None:
                    clean = test_set.select(range(min(len(test_set), args.max_batches * args.batch_size)))
                source = robustness.GeneratedCorruptions.from_dataset(clean, seed=args.seed, device=device)
            result = robustness.evaluate_corruptions(
                model, source, corruptions=args.corruptions.split(",") if args.corruptions else CORRUPTIONS,
                severities=[int(s) for s in args.severities.split(",")] if args.severities else SEVERITIES,
                batch_size=args.batch_size, **common,
            )  # fmt: skip
            figure = robustness.plot_corruptions(result).figure
        elif name == "frequency-noise":
            result = robustness.frequency_noise(
                model, test_loader, max_batches=args.max_batches, seed=args.seed, **common
            )
            figure = robustness.plot_frequency_noise(result).figure
        elif name == "lesion":
            result = lesion.lesion_study(model, test_loader, max_batches=args.max_batches, **common)
            figure = lesion.plot_lesion(result).figure
        elif name == "cka":
            result = cka.cka(model, test_loader, max_batches=args.max_batches, **common)
            figure = cka.plot_cka(result).figure
        _save(args.out, name, result, figure, meta)
        written.append(name)
        tqdm.write(_summary(name, result))
    print(f"wrote {', '.join(f'{n}.json/.png' for n in written)} to {args.out}/")


def _summary(name: str, result) -> str:
    """One line per analysis for the terminal."""
    import numpy as np

    if name == "fourier":
        return (
            f"fourier: ΔlogA at π from {result.high_frequency[1]:.2f} (stem) to {result.high_frequency[-1]:.2f} (head)"
        )
    if name == "variance":
        return f"variance: {result.variance[1]:.3g} (stem) to {result.variance[-1]:.3g} (head)"
    if name == "hessian":
        top = result.eigenvalues[:, 0]
        smallest = result.eigenvalues.min()
        return f"hessian: top eigenvalue per batch {np.median(top):.4g} (median), smallest of the top-k {smallest:.4g}"
    if name == "landscape":
        centre = result.loss[(len(result.coordinates) // 2,) * result.loss.ndim]
        return f"landscape: loss {centre:.4f} at the trained weights, max {result.loss.max():.4f} on the grid"
    if name == "robustness":
        accuracy = 100 * result.mean_accuracy
        return f"robustness: mean accuracy {accuracy:.2f}%, NLL {result.mean_nll:.3f}, ECE {result.mean_ece:.3f}"
    if name == "frequency-noise":
        deltas = " ".join(f"{100 * d:+.1f}" for d in result.delta_accuracy)
        band = f"{result.frequencies.min():.1f}…{result.frequencies.max():.1f}π"
        return f"frequency-noise: Δaccuracy (%) at {band}: {deltas}"
    if name == "lesion":
        drop = 100 * np.nanmax(result.accuracy_drop)
        return f"lesion: baseline accuracy {100 * result.baseline_accuracy:.2f}%, largest drop {drop:.2f} points"
    return f"cka: {result.similarity.shape[0]}×{result.similarity.shape[1]} similarity matrix"


if __name__ == "__main__":
    main()
