"""The analyses of models from disk or the Hub on a dataset, as `alternet-analyze` and `alternet-compare` run them.

`analyse_model` writes each result of one model (JSON + the paper-style PNG) as soon as it is done, the Hessian
spectrum also after every minibatch, and says how long each analysis will take before it starts; `compare_models`
does so for several models and writes their comparison (`analysis.report`); `compare_stored` writes it from results
already written (`read_results`). Each split is read once whatever the number of models, and the Hessian and
landscape batches are augmented as the model was trained (`DataOptions.augmentation`).
"""

import contextlib
import dataclasses
import json
import os
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from alternet_hf.augmentation import BatchMixer, eval_transform, mix_batch, train_transform
from alternet_hf.data import (
    SAMPLE_SHUFFLE_BUFFER,
    SeededAugmentation,
    class_names_of,
    collate_images,
    load_image_classification,
    load_image_sample,
    with_transform,
)
from alternet_hf.run_lock import hold_folder

from . import robustness
from ._common import count_batches, iterate_batches
from .blocks import describe_blocks
from .claims import COMPETENCE
from .compare import RESULT_TYPES, Settings, analyse, estimate_seconds, figure_of, finite, measure_costs, summary_of
from .models import load_model
from .report import write_comparison

AUGMENTATIONS = ("model", "paper", "none")  # or the path of a training_config.json
# The fields of a training config that say how its batches were augmented (`alternet_hf.recipe.TrainingConfig`).
AUGMENTATION_FIELDS = (
    "random_crop_padding",
    "horizontal_flip",
    "rand_augment",
    "mixup_alpha",
    "cutmix_alpha",
    "label_smoothing",
)


@dataclass
class DataOptions:
    """Where the analyses' images come from and how they are batched.

    `augmentation` of the Hessian and landscape batches: "model" (the model's `training_config.json`; the
    paper's recipe where there is none), "paper", "none", or the path of a `training_config.json`. `cifar_c`:
    a CIFAR-C source (Zenodo arrays folder, parquet dataset or Hub id); without one the corruptions are
    generated from the test split.

    A split of which the analyses read N images (`max_images`, else what their settings read: `images_used`) is a
    seeded sample of N, streamed, so that the rest of a large split is never fetched; a split read whole is prepared
    on disk.
    """

    dataset: str = "digits"
    image_column: str | None = None
    label_column: str | None = None
    train_split: str = "train"
    test_split: str = "test"
    batch_size: int = 256
    augmentation: str = "model"
    cifar_c: str | None = None
    seed: int = 0
    max_images: int | None = None


def choose_device(name: str | None = None) -> torch.device:
    """`name`, else CUDA where there is one, else the CPU."""
    return torch.device(name or ("cuda" if torch.cuda.is_available() else "cpu"))


def analyse_model(
    source: str,
    analyses: Sequence[str],
    *,
    data: DataOptions,
    settings: Settings,
    device: torch.device,
    out: Path | None,
    weights: str | Path | None = None,
    scaled_down: Sequence[str] = (),
    say: Callable[[str], None] = print,
) -> dict:
    """Every analysis of `analyses` on the model `source` (see `analysis.models.load_model`), written into `out`,
    which is held while the analyses write it (one analysis per folder at a time; the model and data are loaded
    first, so that a bad input is said before the folder is claimed)."""
    torch.manual_seed(data.seed)
    loaded = load_model(source, weights=weights)
    loaded.model.to(device)
    parameters = sum(p.numel() for p in loaded.model.parameters())
    say(f"analysing {source} ({type(loaded.model).__name__}, {parameters:,} parameters) on {device}")
    meta = {"model": source, **_run_meta(data, device, scaled_down, say)}
    batches = prepare_data(loaded, data, analyses, settings, DataCache(data), device=device)
    if batches["augmentation"]:
        say(f"Hessian/landscape batches augmented as: {batches['augmentation']['source']}")
    with hold_folder(out) if out is not None else contextlib.nullcontext():
        return analyse_loaded(loaded, analyses, settings, batches, device=device, out=out, meta=meta, say=say)


def compare_models(
    specs: Sequence[tuple[str, str]],
    analyses: Sequence[str],
    *,
    data: DataOptions,
    settings: Settings,
    device: torch.device,
    results_dir: Path,
    comparison_dir: Path,
    weights: dict[str, Path] | None = None,
    image_size: int | None = None,
    scaled_down: Sequence[str] = (),
    competence: float = COMPETENCE,
    say: Callable[[str], None] = print,
) -> dict:
    """Analyse every model of `specs` ([(name, source)]) into `results_dir/<name>/` (as `analyse_model` writes),
    then write the comparison into `comparison_dir` (models below `competence` × chance accuracy named as near
    chance); both folders are held for the run. Returns the written paths (`analysis.report`)."""
    with hold_folder(results_dir), hold_folder(comparison_dir):  # one comparison per folder at a time
        torch.manual_seed(data.seed)
        run_meta = _run_meta(data, device, scaled_down, say)
        cache, results, summaries = DataCache(data), {}, {}
        for name, source in specs:
            loaded = load_model(source, name=name, weights=(weights or {}).get(name), image_size=image_size)
            loaded.model.to(device)
            batches = prepare_data(loaded, data, analyses, settings, cache, device=device)
            augmentation = batches["augmentation"]
            say(
                f"{name}: {type(loaded.model).__name__} from {source}, {loaded.image_size}×{loaded.image_size} inputs"
                + (f"; Hessian/landscape batches augmented as {augmentation['source']}" if augmentation else "")
            )
            meta = {"model": source, **run_meta}
            results[name] = analyse_loaded(
                loaded, analyses, settings, batches, device=device, out=results_dir / name, meta=meta, say=say
            )
            summaries[name] = model_summary(loaded, source, augmentation)
            loaded.model.cpu()
        return write_comparison_of(results, summaries, data, settings, device, comparison_dir, scaled_down, competence)


def compare_stored(
    specs: Sequence[tuple[str, str]],
    *,
    data: DataOptions,
    settings: Settings,
    device: torch.device,
    results_dir: Path,
    comparison_dir: Path,
    image_size: int | None = None,
    scaled_down: Sequence[str] = (),
    competence: float = COMPETENCE,
    pending: Sequence[str] = (),
) -> dict:
    """The comparison of `compare_models` from results already written (by `analyse_model` or `compare_models`)
    into `results_dir/<name>/`, without running an analysis again: what a resumed release does after analysing
    each model in its own step. The models are loaded for their block summaries only. `pending`: models of the
    line-up not compared yet (a release still to train them), named in the report."""
    results, summaries = {}, {}
    for name, source in specs:
        folder = results_dir / name
        results[name] = read_results(folder)
        loaded = load_model(source, name=name, image_size=image_size)
        stored = [json.loads(p.read_text()) for a in ("hessian", "landscape") if (p := folder / f"{a}.json").is_file()]
        summaries[name] = model_summary(loaded, source, stored[0].get("augmentation") if stored else None)
    return write_comparison_of(
        results, summaries, data, settings, device, comparison_dir, scaled_down, competence, pending=pending
    )


def _run_meta(data: DataOptions, device, scaled_down: Sequence[str], say) -> dict:
    """What every result of a run says of it (the model's source aside), once the scaling is said."""
    if scaled_down:
        say(f"on a CPU, scaled down from the paper's amounts (pass the flags to change): {'; '.join(scaled_down)}")
    return {"dataset": data.dataset, "device": str(device), "scaled_down": list(scaled_down)}


def model_summary(loaded, source: str, augmentation: dict | None) -> dict:
    """What the report says of one model (`analysis.compare.summary_of` and where it came from)."""
    return {
        **summary_of(loaded.model),
        "source": source,
        "augmentation": augmentation,
        "image_size": loaded.image_size,
        "preprocessing_note": loaded.preprocessing_note,
    }


def write_comparison_of(
    results: dict,
    summaries: dict,
    data: DataOptions,
    settings: Settings,
    device,
    comparison_dir: Path,
    scaled_down: Sequence[str],
    competence: float,
    *,
    pending: Sequence[str] = (),
) -> dict:
    """`analysis.report.write_comparison` with the run's settings as its meta and notes (what `compare_models` and
    `compare_stored` pass, in their order)."""
    meta = {
        "dataset": data.dataset,
        "device": str(device),
        "settings": settings.to_dict(),
        "landscape_protocol": settings.landscape_protocol,
        "augmentation": {name: (s["augmentation"] or {}).get("source") for name, s in summaries.items()},
    }
    notes = [
        f"landscape: the {settings.landscape_protocol} protocol; L2 term: {settings.penalty}, weight decay "
        f"{settings.weight_decay} (the same in the Hessian)"
    ]
    if scaled_down:
        notes.append(f"scaled down for a CPU: {'; '.join(scaled_down)}")
    if pending:
        meta["pending"] = list(pending)
        notes.append(f"not compared yet (their weights are still to be trained): {', '.join(pending)}")
    return write_comparison(comparison_dir, results, summaries, meta=meta, notes=notes, competence=competence)


def augmentation_of(choice: str, loaded) -> dict:
    """The augmentation of the Hessian and landscape batches, with where it came from (`source`)."""
    from alternet_hf.recipe import PAPER_RECIPE

    if choice == "model" and loaded.training_config is not None:
        fields, source = loaded.training_config, str(loaded.training_config_path)
    elif choice == "model":
        fields, source = PAPER_RECIPE, "the paper's recipe (the model has no training_config.json)"
    elif choice == "paper":
        fields, source = PAPER_RECIPE, "the paper's recipe"
    elif choice == "none":
        fields, source = {}, "none"
    elif Path(choice).is_file():
        fields, source = json.loads(Path(choice).read_text()), choice
    else:
        raise ValueError(
            f"augmentation takes {', '.join(AUGMENTATIONS)} or a training_config.json file, not {choice!r}"
        )
    values = {name: fields.get(name) for name in AUGMENTATION_FIELDS}
    return {"source": source} | {k: v if v or k == "rand_augment" else 0 for k, v in values.items()}


class MixedBatches:
    """The batches of `loader` mixed (Mixup/CutMix) and label-smoothed as in training (the engine's draws, seeded
    per batch so every pass gives the same), as `(inputs, targets)`; targets stay class indices where the
    training recipe had neither."""

    def __init__(self, loader, augmentation: dict, num_labels: int, image_size: int, seed: int):
        self.loader, self.num_labels = loader, num_labels
        self.smoothing = augmentation["label_smoothing"] or 0.0
        mixing = {key: augmentation[key] for key in ("mixup_alpha", "cutmix_alpha")}
        self.mixer = BatchMixer(**mixing, image_size=image_size, seed=seed) if any(mixing.values()) else None

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
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

    def __init__(self, options: DataOptions):
        self.options, self.splits = options, {}

    def split(self, name: str, class_names, num_images: int | None = None):
        """The split `name`, or a seeded sample of `num_images` of it (`DataOptions`)."""
        options, key = self.options, (name, tuple(class_names) if class_names else None, num_images)
        if key not in self.splits:
            load = load_image_classification if num_images is None else load_image_sample
            sample = {} if num_images is None else dict(num_images=num_images, seed=options.seed)
            columns = dict(image_column=options.image_column, label_column=options.label_column)
            self.splits[key] = load(options.dataset, split=name, **sample, **columns, class_names=class_names)
        return self.splits[key]


def images_used(options: DataOptions, analyses, settings: Settings) -> dict[str, int | None]:
    """How many images of the test and the training split `analyses` read (None: all of it)."""
    if options.max_images is not None:
        return {"test": options.max_images, "train": options.max_images}
    test = [settings.max_batches * options.batch_size if settings.max_batches is not None else None]
    if "robustness" in analyses and not options.cifar_c:  # the generated CIFAR-C corrupts test images
        test.append(settings.corruption_images)
    train = [settings.hessian_batches * ("hessian" in analyses), settings.landscape_batches * ("landscape" in analyses)]
    return {
        "test": None if None in test else max(test),
        "train": settings.train_batch_size * max(train) if max(train) else None,
    }


def _loader(dataset, transform, batch_size: int, *, shuffle: bool, seed: int, drop_last: bool = False):
    return torch.utils.data.DataLoader(
        with_transform(dataset, transform),
        batch_size=batch_size,
        shuffle=shuffle,
        drop_last=drop_last,
        generator=torch.Generator().manual_seed(seed),
        collate_fn=collate_images,
    )


def prepare_data(loaded, options: DataOptions, analyses, settings: Settings, cache: DataCache, *, device) -> dict:
    """Test batches, a factory of augmented training batches, the CIFAR-C source and the augmentation
    used, for one loaded model (`analysis.models.LoadedModel`)."""
    size, mean, std = loaded.image_size, loaded.image_mean, loaded.image_std
    names = class_names_of(getattr(loaded.model, "config", None))
    used = images_used(options, analyses, settings)
    test_set = cache.split(options.test_split, names, used["test"])
    test = _loader(test_set, eval_transform(size, mean, std), options.batch_size, shuffle=False, seed=options.seed)
    data = {"test": test, "train": None, "augmentation": None, "corruptions": None, "images": {"test": len(test_set)}}
    if {"hessian", "landscape"} & set(analyses):
        augmentation = augmentation_of(options.augmentation, loaded)
        batch_size = settings.train_batch_size
        if (augmentation["mixup_alpha"] or augmentation["cutmix_alpha"]) and batch_size % 2:
            raise ValueError(
                f"Mixup/CutMix pair images: the training batch size (--train-batch-size) must be even, not {batch_size}"
            )
        train_set = cache.split(options.train_split, names, used["train"])
        data["images"]["train"] = len(train_set)
        if len(train_set) < batch_size:
            raise ValueError(
                f"{len(train_set)} training images are fewer than the training batch size (--train-batch-size) "
                f"{batch_size}"
            )
        transform = SeededAugmentation(
            train_transform(
                size,
                mean,
                std,
                crop_padding=augmentation["random_crop_padding"],
                horizontal_flip=augmentation["horizontal_flip"],
                rand_augment=augmentation["rand_augment"] or None,
            ),
            options.seed,
        )

        def train():
            # A fresh loader per analysis: each sees the same shuffled, augmented batches whatever ran before.
            loader = _loader(train_set, transform, batch_size, shuffle=True, seed=options.seed, drop_last=True)
            return MixedBatches(loader, augmentation, loaded.num_labels, size, options.seed)

        data["train"], data["augmentation"] = train, augmentation
    sampled = [split for split, count in used.items() if count is not None and split in data["images"]]
    if sampled:  # what a result needs to say to be drawn again
        data["images"]["sample"] = {"splits": sampled, "seed": options.seed, "shuffle_buffer": SAMPLE_SHUFFLE_BUFFER}
    if "robustness" in analyses:
        if options.cifar_c:
            data["corruptions"] = robustness.load_corruption_source(options.cifar_c)
        else:
            clean = test_set
            if settings.corruption_images is not None:
                clean = test_set.select(range(min(len(test_set), settings.corruption_images)))
            data["corruptions"] = robustness.GeneratedCorruptions.from_dataset(
                clean,
                seed=options.seed,
                device=device,
                name=f"the {options.test_split} split of {options.dataset}, corrupted by analysis.corruptions",
            )
    return data


def analyse_loaded(
    loaded, analyses, settings: Settings, data: dict, *, device, out: Path | None, meta: dict, say=print
) -> dict:
    """Run `analyses` on one loaded model with time estimates; write each result (JSON + PNG) into `out`
    as soon as it is done, the Hessian spectrum also after every minibatch. Returns {analysis: result}."""
    import matplotlib.pyplot as plt

    adapter = describe_blocks(loaded.model)
    test_batch = next(iterate_batches(data["test"]))  # the loader's dict as (inputs, targets)
    train_batch = next(iter(data["train"]())) if data["train"] else None
    hessian = settings if "hessian" in analyses else None
    costs = measure_costs(loaded.model, test_batch=test_batch, train_batch=train_batch, hessian=hessian, device=device)
    estimates = estimate_seconds(
        analyses,
        costs,
        settings,
        test_batches=count_batches(data["test"], settings.max_batches),
        num_branches=sum(b.residual_branch is not None for b in adapter.blocks),
        corruption_images=len(data["corruptions"].images) if hasattr(data["corruptions"], "images") else None,
    )
    total = sum(seconds for seconds, _ in estimates.values())
    say(f"{loaded.name}: all analyses about {_duration(total)} on {device}")

    def on_start(name):
        if name in estimates:
            seconds, how = estimates[name]
            say(f"{loaded.name}: {name}: about {_duration(seconds)} ({how})")

    def meta_of(name, partial=False):
        extra = {"images": data["images"]}
        if name in ("hessian", "landscape"):
            extra |= {"augmentation": data["augmentation"], "train_batch_size": settings.train_batch_size}
        return {**meta, **extra, "settings": settings.to_dict(), "partial": partial}

    def on_partial(name, partial):
        if out is not None:
            write_result(out, name, partial, meta_of(name, partial=True))

    def on_result(name, result):
        say(f"{loaded.name}: {summary_line(name, result)}")
        if out is not None:
            figure = figure_of(name, result)
            write_result(out, name, result, meta_of(name), figure)
            plt.close(figure)

    results = analyse(
        loaded.model,
        analyses,
        test_data=data["test"],
        train_data=data["train"],
        corruption_source=data["corruptions"],
        settings=settings,
        adapter=adapter,
        image_size=loaded.image_size,
        image_mean=loaded.image_mean,
        image_std=loaded.image_std,
        device=device,
        progress=True,
        on_partial=on_partial,
        on_start=on_start,
        on_result=on_result,
    )
    if out is not None and "accuracy" in results:  # the clean accuracy of the per-block pass: what claims weigh
        write_result(out, "accuracy", results["accuracy"], meta_of("accuracy"))
    return results


def write_result(out: Path, name: str, result, meta: dict, figure=None) -> None:
    """`<out>/<name>.json` ({..meta, "analysis", "result"}) written atomically, and `<name>.png`."""
    out.mkdir(parents=True, exist_ok=True)
    payload = {**meta, "analysis": name, "result": finite(result.to_dict())}
    partial = out / f".{name}.json.partial"
    partial.write_text(json.dumps(payload, indent=2))
    os.replace(partial, out / f"{name}.json")
    if figure is not None:
        figure.savefig(out / f"{name}.png", dpi=130)


def read_result(path: Path):
    """The result `write_result` wrote to `path`, as its class again: arrays as numpy arrays of the shapes the
    file holds (nulls, JSON's NaN, as NaN; an empty matrix as shape (0, 0))."""
    payload = json.loads(Path(path).read_text())
    if payload.get("partial"):
        raise ValueError(f"{path} holds a partial result (the analysis was interrupted): run the analysis again")
    kind = RESULT_TYPES[payload["analysis"]]
    hints, values = typing.get_type_hints(kind), payload["result"]
    fields = {}
    for f in [f for f in dataclasses.fields(kind) if f.name in values]:
        value, allowed = values[f.name], (hints[f.name], *typing.get_args(hints[f.name]))
        if value is not None and np.ndarray in allowed:
            value = np.asarray(value)
            if value.dtype == object:  # nulls (NaN written to JSON) in an array of numbers
                value = np.asarray(values[f.name], dtype=float)
            if value.size == 0 and f.default_factory is not dataclasses.MISSING:
                value = value.reshape(f.default_factory().shape)
        elif value is None and float in allowed:
            value = float("nan")
        fields[f.name] = value
    return kind(**fields)


def read_results(folder: Path) -> dict:
    """Every complete result in `folder` (`<analysis>.json`), by analysis."""
    return {path.stem: read_result(path) for path in sorted(Path(folder).glob("*.json")) if path.stem in RESULT_TYPES}


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def summary_line(name: str, result) -> str:
    """One line per analysis for the terminal."""

    def last(values) -> tuple[float, str]:
        """The last block with a feature map (PiT's head is its class token alone: no map, NaN)."""
        values = np.asarray(values, dtype=float)
        index = max(i for i in range(len(values)) if np.isfinite(values[i]) or i == 1)
        return values[index], result.kinds[index]

    if name == "fourier":
        value, kind = last(result.high_frequency)
        start = result.high_frequency[1]
        return f"fourier: ΔlogA at π from {start:.2f} (stem) to {value:.2f} ({kind}, the last with a map)"
    if name == "variance":
        value, kind = last(result.variance)
        return f"variance: {result.variance[1]:.3g} (stem) to {value:.3g} ({kind}, the last with a map)"
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
