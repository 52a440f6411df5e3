"""`alternet-finetune`'s defaults on real photographs (scikit-image's LFW subset: faces or not): held-out accuracy
over seeds, from a preset (trained from scratch) and from trained weights (fine-tuned)."""

import time
from pathlib import Path

FACES_CLASSES = ("face", "not-face")
FACES_TEST_PER_CLASS = 20


def write_faces_dataset(folder: Path) -> Path:
    """The faces subset as `data/{train,test}-00000-of-00001.parquet` (columns image, label) in `folder`."""
    import datasets
    import numpy as np
    from PIL import Image
    from skimage import data

    from .engine import write_parquet_split

    faces = data.lfw_subset()  # (200, 25, 25) floats in [0, 1]: 100 faces, then 100 other photographs
    labels = np.repeat([0, 1], len(faces) // 2)
    rows = np.random.default_rng(0).permutation(len(faces))
    test = np.sort(np.concatenate([rows[labels[rows] == k][:FACES_TEST_PER_CLASS] for k in (0, 1)]))
    train = np.setdiff1d(np.arange(len(faces)), test)
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=FACES_CLASSES)})
    for split, chosen in (("train", train), ("test", test)):
        images = [
            Image.fromarray((255 * faces[i]).round().astype(np.uint8))
            .convert("RGB")
            .resize((32, 32), Image.Resampling.BICUBIC)
            for i in chosen
        ]
        written = datasets.Dataset.from_dict({"image": images, "label": labels[chosen].tolist()}, features=features)
        write_parquet_split(written, folder, split)
    return Path(folder)


def finetune_accuracy(model: str, dataset: Path, runs: Path, *, seed: int) -> dict:
    """One `finetune` with its defaults, into `runs`/<model>-<seed>: held-out accuracy before and after, the defaults
    used, wall time."""
    from alternet_hf.training.finetuning import finetune

    lines = []
    started = time.perf_counter()
    out = runs / f"{Path(model).name}-{seed}"
    result = finetune(model, str(dataset), out, seed=seed, overwrite=True, say=lines.append)
    return {
        "model": model,
        "dataset": f"scikit-image's LFW subset, {' or '.join(FACES_CLASSES)}",
        "images": {split: _rows(dataset, split) for split in ("train", "test")},
        "weights": "none (from scratch)" if result.from_scratch else "trained",
        "seed": seed,
        "accuracy_before": result.metrics_before["eval_accuracy"],
        "accuracy": result.metrics_after["eval_accuracy"],
        "epochs": result.epochs,
        "learning_rate": result.learning_rate,
        "seconds": time.perf_counter() - started,
        "said": lines,
    }


def _rows(dataset: Path, split: str) -> int:
    import pyarrow.parquet as pq

    return pq.ParquetFile(dataset / "data" / f"{split}-00000-of-00001.parquet").metadata.num_rows
