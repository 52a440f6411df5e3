"""A trained model's evaluation: the paper's metrics on a split of a dataset (`alternet-evaluate`), written as the
`eval_<dataset>_<split>.json` and reliability diagram that model cards read
(`alternet_hf.hub.repos.find_evaluation`)."""

import math
from pathlib import Path

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader

from ..data.augmentation import eval_transform
from ..data.collate import collate_images, with_transform
from ..data.labels import class_names_of
from ..data.rows import UnreadableRows
from ..data.sources import load_image_classification, load_image_sample, stream_image_classification
from ..models.presets import create_model
from ..training.engine import build_steps, evaluate, save_reliability_diagram
from ..utils import write_json

PERCENT_METRICS = ("accuracy", "acc_90", "unc_90", "freq_90", "iou", "iou_90")


def evaluate_model(
    model_name_or_path: str,
    source: str,
    *,
    split: str = "test",
    image_column: str | None = None,
    label_column: str | None = None,
    batch_size: int = 256,
    num_workers: int = 0,
    mixed_precision: str = "no",
    compile_mode: str | None = None,
    max_images: int | None = None,
    seed: int = 0,
    streaming: bool = False,
    unreadable: UnreadableRows | None = None,
) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """The paper's metrics of a trained model (folder or Hub id) on a split of a dataset, labels matched to the
    model's classes by name. In float32 by default: these numbers go into model cards, and bf16 logits shift NLL, ECE
    and the 90%-confidence metrics. `max_images`: a seeded sample (`data.load_image_sample`). `unreadable`: rows
    whose image cannot be read are left out and logged there, rather than stop the evaluation."""
    accelerator = Accelerator(mixed_precision=mixed_precision)
    model = create_model(model_name_or_path)
    config = model.config
    columns = dict(image_column=image_column, label_column=label_column, class_names=class_names_of(config))
    if max_images is not None:
        data = load_image_sample(source, split=split, num_images=max_images, seed=seed, **columns)
    elif streaming:
        data = stream_image_classification(source, split=split, num_classes=config.num_labels, **columns)
    else:
        data = load_image_classification(source, split=split, **columns)
    num_classes = data.features["label"].num_classes
    if num_classes > config.num_labels:
        raise ValueError(
            f"{source} has {num_classes} classes but {model_name_or_path} predicts {config.num_labels}: "
            "evaluate on the dataset the model was trained for"
        )
    transform = eval_transform(config.image_size, config.image_mean, config.image_std, normalize=False)
    data = with_transform(data, transform, source=f"{source} (split {split!r})", unreadable=unreadable)
    loader = DataLoader(
        data,
        batch_size=batch_size,
        collate_fn=collate_images,
        num_workers=num_workers,
        generator=torch.Generator().manual_seed(0),
    )
    model, loader = accelerator.prepare(model, loader)
    _, eval_step = build_steps(model, config, accelerator.device, channels_last=False, compile_mode=compile_mode)
    return evaluate(model, loader, accelerator, eval_step)


def evaluation_stem(dataset: str, split: str, sample: dict | None = None) -> str:
    """`eval_<dataset folder or Hub name>_<split>`: the name of an evaluation's files; a sample's
    (`{"num_images", "seed"}`) ends in `_sample-<N>-seed-<S>`, so that it never stands for the split's."""
    stem = f"eval_{Path(dataset).name}_{split}"
    return stem + (f"_sample-{sample['num_images']}-seed-{sample['seed']}" if sample else "")


def write_evaluation(
    output: str | Path,
    *,
    model: str,
    dataset: str,
    split: str,
    metrics: dict,
    logits: torch.Tensor,
    labels: torch.Tensor,
    mixed_precision: str = "no",
    sample: dict | None = None,
) -> Path:
    """`<output>/<evaluation_stem>.json` (undefined metrics as null) and its reliability diagram; returns the JSON."""
    stem = evaluation_stem(dataset, split, sample)
    payload = {
        "model": model,
        "dataset": dataset,
        "split": split,
        "num_images": len(labels),
        **({"sample": sample} if sample else {}),
        "mixed_precision": mixed_precision,
        "metrics": {k: v if math.isfinite(v) else None for k, v in metrics.items()},
    }
    path = write_json(Path(output) / f"{stem}.json", payload)
    save_reliability_diagram(logits, labels, path.with_name(f"{stem}_reliability.png"))
    return path


def metric_lines(metrics: dict) -> list[str]:
    """One aligned line per metric: percentages where the metric is a fraction, undefined ones said so."""
    lines = []
    for name, value in metrics.items():
        if not math.isfinite(value):
            shown = "undefined" + (" (no misclassified images)" if name == "unc_90" else "")
        elif name in PERCENT_METRICS:
            shown = f"{100 * value:.2f}%"
        else:
            shown = f"{value:.4f}"
        lines.append(f"  {name:>9}: {shown}")
    return lines
