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
import json
import os
from pathlib import Path

from alternet_hf.cli._common import CommandError, command, make_parser, model_source

# The same names as analysis.compare.ANALYSES (a test keeps them equal; importing it here would load torch).
ANALYSES = ("fourier", "variance", "hessian", "landscape", "robustness", "frequency-noise", "lesion", "cka")
AUGMENTATIONS = ("model", "paper", "none")
AUGMENTATION_FIELDS = (
    "random_crop_padding", "horizontal_flip", "rand_augment", "mixup_alpha", "cutmix_alpha", "label_smoothing",
)  # fmt: skip


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
        "--augmentation", default="model", type=augmentation_source,
        help="augmentation of the Hessian and landscape batches: 'model' (its training_config.json; the paper's "
        "recipe where there is none), 'paper', 'none', or a training_config.json file",
    )  # fmt: skip
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
        "--landscape-protocol", choices=["filter", "reference"], default="filter",
        help="'filter': Li et al.'s per-filter directions, BatchNorm in train mode; 'reference': the paper's code "
        "(directions normalised over dim 0, BatchNorm in eval mode)",
    )  # fmt: skip
    parser.add_argument(
        "--penalty", choices=["reference", "squared"], default="reference",
        help="the L2 term of Hessian and landscape: the reference's wd·Σ‖p‖, or ½·wd·‖w‖²",
    )  # fmt: skip
    parser.add_argument("--weight-decay", type=float, default=0.05, help="L2 coefficient of the Hessian/landscape loss")
    parser.add_argument(
        "--batchnorm", choices=["train", "eval"],
        help="BatchNorm mode of the Hessian (default train) and of the landscape (default: its protocol's)",
    )  # fmt: skip
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
        "--model", required=True, type=any_model,
        help="a preset name (random weights), a folder, a Hub id, or timm:<name> (--weights, else from the Hub)",
    )  # fmt: skip
    parser.add_argument("--weights", type=existing_path, help="a timm model's weights: a file or a folder holding one")
    parser.add_argument("--out", type=Path, default=Path("results"), help="folder for JSON and PNG files")
    add_analysis_arguments(parser)
    return parser


def settings_from_args(args, device):
    """`analysis.compare.Settings` for `device` from the flags given; and the notes on what was scaled."""
    from analysis.compare import Settings

    given = dict(
        max_batches=args.max_batches, train_batch_size=args.train_batch_size, hessian_batches=args.hessian_batches,
        top_k=args.top_k, bottom_k=args.bottom_k, lanczos_steps=args.lanczos_steps,
        hessian_time_limit=args.hessian_time_limit, density_vectors=args.density_vectors,
        density_steps=args.density_steps, weight_decay=args.weight_decay,
        penalty=args.penalty, hessian_batchnorm=args.batchnorm, landscape_batchnorm=args.batchnorm,
        landscape_points=args.landscape_points,
        landscape_batches=args.landscape_batches, landscape_protocol=args.landscape_protocol,
        corruptions=tuple(args.corruptions.split(",")) if args.corruptions else None,
        severities=tuple(int(s) for s in args.severities.split(",")) if args.severities else None,
        corruption_images=args.corruption_images, seed=args.seed,
    )  # fmt: skip
    if args.max_batches is not None and args.corruption_images is None and not args.cifar_c:
        given["corruption_images"] = args.max_batches * args.batch_size  # what --max-batches always meant for it
    settings, notes = Settings.for_device(device, **given)
    if settings.landscape_points % 2 == 0:
        odd = "--landscape-points must be odd (the grid's centre is the trained weights)"
        raise CommandError(f"{odd}, not {settings.landscape_points}")
    if settings.lanczos_steps < settings.top_k + settings.bottom_k:
        raise CommandError(
            f"--lanczos-steps {settings.lanczos_steps} cannot find --top-k {settings.top_k} + --bottom-k "
            f"{settings.bottom_k} eigenvalues; raise it or ask for fewer"
        )
    return settings, notes


def augmentation_of(choice: str, loaded) -> dict:
    """The augmentation of the Hessian and landscape batches, with where it came from (`source`)."""
    from alternet_hf.recipe import PAPER_RECIPE

    if choice == "model":
        if loaded.training_config is not None:
            fields, source = loaded.training_config, str(loaded.training_config_path)
        else:
            fields, source = PAPER_RECIPE, "the paper's recipe (the model has no training_config.json)"
    elif choice == "paper":
        fields, source = PAPER_RECIPE, "the paper's recipe"
    elif choice == "none":
        fields, source = {}, "none"
    else:  # a file, checked by `augmentation_source`
        fields, source = json.loads(Path(choice).read_text()), choice
    found = {name: fields.get(name) for name in AUGMENTATION_FIELDS}
    return {
        "source": source,
        **{name: value if value or name == "rand_augment" else 0 for name, value in found.items()},
    }


class MixedBatches:
    """The batches of `loader` mixed (Mixup/CutMix) and label-smoothed as in training (the engine's draws, seeded
    per batch so every pass gives the same), as `(inputs, targets)`; targets stay class indices where the
    training recipe had neither."""

    def __init__(self, loader, augmentation: dict, num_labels: int, image_size: int, seed: int):
        from alternet_hf.augmentation import BatchMixer

        self.loader, self.num_labels = loader, num_labels
        self.smoothing = augmentation["label_smoothing"] or 0.0
        self.mixer = None
        if augmentation["mixup_alpha"] or augmentation["cutmix_alpha"]:
            self.mixer = BatchMixer(
                mixup_alpha=augmentation["mixup_alpha"], cutmix_alpha=augmentation["cutmix_alpha"],
                image_size=image_size, seed=seed,
            )  # fmt: skip

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        import torch

        from alternet_hf.augmentation import mix_batch

        for index, batch in enumerate(self.loader):
            inputs, targets = batch["pixel_values"], batch["labels"]
            if self.mixer is not None:
                inputs, targets = mix_batch(inputs, targets, self.mixer.parameters(0, index), self.num_labels)
            if self.smoothing:
                if not targets.is_floating_point():
                    targets = torch.nn.functional.one_hot(targets, self.num_labels).float()
                targets = targets * (1 - self.smoothing) + self.smoothing / self.num_labels
            yield inputs, targets


class DataCache:
    """Each split of the dataset is read once, whatever the number of models."""

    def __init__(self, args):
        self.args, self.splits = args, {}

    def split(self, name: str, class_names):
        from alternet_hf.data import load_image_classification

        key = (name, tuple(class_names) if class_names else None)
        if key not in self.splits:
            self.splits[key] = load_image_classification(
                self.args.dataset, split=name, image_column=self.args.image_column,
                label_column=self.args.label_column, class_names=class_names,
            )  # fmt: skip
        return self.splits[key]


def _loader(dataset, transform, batch_size: int, *, shuffle: bool, seed: int, drop_last: bool = False):
    import torch

    from alternet_hf.data import collate_images, with_transform

    return torch.utils.data.DataLoader(
        with_transform(dataset, transform), batch_size=batch_size, shuffle=shuffle, drop_last=drop_last,
        generator=torch.Generator().manual_seed(seed), collate_fn=collate_images,
    )  # fmt: skip


class TestBatches:
    """A test loader as `(inputs, targets)` batches."""

    def __init__(self, loader):
        self.loader = loader

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        for batch in self.loader:
            yield batch["pixel_values"], batch["labels"]


def prepare_data(loaded, args, requested, settings, cache: DataCache) -> dict:
    """Test batches, a factory of augmented training batches, the CIFAR-C source and the augmentation
    used, for one loaded model (`analysis.models.LoadedModel`)."""
    from alternet_hf.augmentation import eval_transform, train_transform
    from alternet_hf.data import SeededAugmentation, class_names_of
    from analysis import robustness

    size, mean, std = loaded.image_size, loaded.image_mean, loaded.image_std
    names = class_names_of(getattr(loaded.model, "config", None))
    test_set = cache.split(args.test_split, names)
    data = {"test": TestBatches(_loader(test_set, eval_transform(size, mean, std), args.batch_size, shuffle=False,
                                        seed=args.seed))}  # fmt: skip
    data["train"], data["augmentation"], data["corruptions"] = None, None, None
    if {"hessian", "landscape"} & set(requested):
        augmentation = augmentation_of(args.augmentation, loaded)
        batch_size = settings.train_batch_size
        if (augmentation["mixup_alpha"] or augmentation["cutmix_alpha"]) and batch_size % 2:
            raise CommandError(f"Mixup/CutMix pair images: --train-batch-size must be even, not {batch_size}")
        train_set = cache.split(args.train_split, names)
        transform = SeededAugmentation(
            train_transform(size, mean, std, crop_padding=augmentation["random_crop_padding"],
                            horizontal_flip=augmentation["horizontal_flip"],
                            rand_augment=augmentation["rand_augment"] or None),
            args.seed,
        )  # fmt: skip

        def train():
            # A fresh loader per analysis: each sees the same shuffled, augmented batches whatever ran before.
            loader = _loader(train_set, transform, batch_size, shuffle=True, seed=args.seed, drop_last=True)
            return MixedBatches(loader, augmentation, loaded.num_labels, size, args.seed)

        if len(train_set) < batch_size:
            raise CommandError(f"{len(train_set)} training images are fewer than --train-batch-size {batch_size}")
        data["train"], data["augmentation"] = train, augmentation
    if "robustness" in requested:
        if args.cifar_c:
            data["corruptions"] = robustness.load_corruption_source(args.cifar_c)
        else:
            clean = test_set
            if settings.corruption_images is not None:
                clean = test_set.select(range(min(len(test_set), settings.corruption_images)))
            data["corruptions"] = robustness.GeneratedCorruptions.from_dataset(
                clean, seed=args.seed, device=args.device_
            )
    return data


def analyse_loaded(loaded, args, requested, settings, data, *, out: Path | None, meta: dict, say=print) -> dict:
    """Run `requested` on one loaded model with time estimates; write each result (JSON + PNG) into `out`
    as soon as it is done, the Hessian spectrum also after every minibatch. Returns {analysis: result}."""
    import matplotlib.pyplot as plt

    from analysis.blocks import describe_blocks
    from analysis.compare import Preprocessing, analyse, estimate_seconds, figure_of, measure_costs

    adapter = describe_blocks(loaded.model)
    test_batch = next(iter(data["test"]))
    train_batch = next(iter(data["train"]())) if data["train"] else None
    costs = measure_costs(loaded.model, test_batch=test_batch, train_batch=train_batch, device=args.device_)
    test_batches = len(data["test"]) if settings.max_batches is None else min(len(data["test"]), settings.max_batches)
    estimates = estimate_seconds(
        requested, costs, settings, test_batches=test_batches,
        num_branches=sum(b.residual_branch is not None for b in adapter.blocks),
        corruption_images=len(data["corruptions"].images) if hasattr(data["corruptions"], "images") else None,
    )  # fmt: skip
    total = sum(seconds for seconds, _ in estimates.values())
    say(f"{loaded.name}: all analyses about {_duration(total)} on {args.device_}")

    def on_start(name):
        if name in estimates:
            seconds, how = estimates[name]
            say(f"{loaded.name}: {name}: about {_duration(seconds)} ({how})")

    def meta_of(name):
        extra = {}
        if name in ("hessian", "landscape"):
            extra["augmentation"] = data["augmentation"]
            extra["train_batch_size"] = settings.train_batch_size
        return {**meta, **extra, "settings": settings.to_dict()}

    def on_partial(name, partial):
        if out is not None:
            write_result(out, name, partial, {**meta_of(name), "partial": True})

    def on_result(name, result):
        say(f"{loaded.name}: {summary_line(name, result)}")
        if out is not None:
            figure = figure_of(name, result)
            write_result(out, name, result, {**meta_of(name), "partial": False}, figure)
            plt.close(figure)

    return analyse(
        loaded.model, requested, test_data=data["test"], train_data=data["train"],
        corruption_source=data["corruptions"], settings=settings, adapter=adapter,
        preprocessing=Preprocessing(loaded.image_size, loaded.image_mean, loaded.image_std), device=args.device_,
        progress=True, on_partial=on_partial, on_start=on_start, on_result=on_result,
    )  # fmt: skip


def write_result(out: Path, name: str, result, meta: dict, figure=None) -> None:
    """`<out>/<name>.json` ({..meta, "analysis", "result"}) written atomically, and `<name>.png`."""
    from analysis.compare import finite

    out.mkdir(parents=True, exist_ok=True)
    payload = {**meta, "analysis": name, "result": finite(result.to_dict())}
    partial = out / f".{name}.json.partial"
    partial.write_text(json.dumps(payload, indent=2))
    os.replace(partial, out / f"{name}.json")
    if figure is not None:
        figure.savefig(out / f"{name}.png", dpi=130)


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def choose_device(name: str | None):
    import torch

    return torch.device(name or ("cuda" if torch.cuda.is_available() else "cpu"))


@command
def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import torch

    from analysis.models import load_model

    args.device_ = choose_device(args.device)
    torch.manual_seed(args.seed)
    settings, notes = settings_from_args(args, args.device_)
    loaded = load_model(args.model, weights=args.weights)
    loaded.model.to(args.device_)
    parameters = sum(p.numel() for p in loaded.model.parameters())
    print(f"analysing {args.model} ({type(loaded.model).__name__}, {parameters:,} parameters) on {args.device_}")
    if notes:
        print(f"on a CPU, scaled down from the paper's amounts (pass the flags to change): {'; '.join(notes)}")
    data = prepare_data(loaded, args, args.analyses, settings, DataCache(args))
    if data["augmentation"]:
        print(f"Hessian/landscape batches augmented as: {data['augmentation']['source']}")
    meta = {"model": args.model, "dataset": args.dataset, "device": str(args.device_), "scaled_down": notes}
    analyse_loaded(loaded, args, args.analyses, settings, data, out=args.out, meta=meta)
    print(f"wrote {', '.join(f'{n}.json/.png' for n in args.analyses)} to {args.out}/")


def summary_line(name: str, result) -> str:
    """One line per analysis for the terminal."""
    import numpy as np

    if name == "fourier":
        return (
            f"fourier: ΔlogA at π from {result.high_frequency[1]:.2f} (stem) to {result.high_frequency[-1]:.2f} (last)"
        )
    if name == "variance":
        return f"variance: {result.variance[1]:.3g} (stem) to {result.variance[-1]:.3g} (last)"
    if name == "hessian":
        top = np.median(result.eigenvalues[:, 0])
        text = f"hessian: top eigenvalue per minibatch {top:.4g} (median of {len(result.eigenvalues)})"
        if np.size(result.smallest_eigenvalues):
            text += f", most negative {np.median(result.smallest_eigenvalues[:, 0]):.4g}"
        return text + ("" if result.complete else " (stopped at the time limit)")
    if name == "landscape":
        centre = result.loss[(len(result.coordinates) // 2,) * result.loss.ndim]
        return (
            f"landscape ({result.protocol} protocol): loss {centre:.4f} at the trained weights, "
            f"max {result.loss.max():.4f} on the grid"
        )
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
