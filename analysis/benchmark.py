"""Speed measurements of the analyses (`scripts/benchmark.py --corruptions / --hessian`), not tests."""

import time

import numpy as np
import torch

from .corruptions import CORRUPTIONS, corrupt


def corruption_speed(
    *,
    num_images: int = 1000,
    severity: int = 3,
    corruptions=CORRUPTIONS,
    image_size: int = 32,
    repeats: int = 3,
    device=None,
) -> list[dict]:
    """Images/s of our batched corruptions against per-image NumPy ones (`imagecorruptions`) on the
    same images, one corruption at a time. `imagecorruptions` uses ImageNet-C severities (the work per
    image is alike) and is optional: without it, or where it fails, its column is None with the reason."""
    try:
        from imagecorruptions import corrupt as numpy_corrupt
    except ImportError as error:  # not a dependency: it pins old scikit-image/NumPy behaviour
        numpy_corrupt, missing = None, f"imagecorruptions not importable ({error}); pip install imagecorruptions"
    device = torch.device(device or "cpu")
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (num_images, 3, image_size, image_size), dtype=torch.uint8, generator=generator)
    batch = images.to(device)
    rows = []
    for name in corruptions:
        seconds = []
        for _ in range(repeats + 1):  # the first run warms up allocator and kernels; the best of the rest counts
            start = time.perf_counter()
            corrupt(batch, name, severity, generator=torch.Generator(device=device).manual_seed(0))
            if device.type == "cuda":
                torch.cuda.synchronize()
            seconds.append(time.perf_counter() - start)
        ours = num_images / min(seconds[1:])
        theirs, note = None, missing if numpy_corrupt is None else None
        if numpy_corrupt is not None:
            arrays = images.permute(0, 2, 3, 1).numpy()
            try:
                start = time.perf_counter()
                for array in arrays:
                    numpy_corrupt(array, corruption_name=name, severity=severity)
                theirs = num_images / (time.perf_counter() - start)
            except Exception as error:  # report the reference tool's failure, keep measuring the rest
                note = f"imagecorruptions failed: {type(error).__name__}: {error}"
        rows.append(
            {
                "corruption": name,
                "images": num_images,
                "device": str(device),
                "ours_images_per_s": ours,
                "numpy_images_per_s": theirs,
                "speedup": ours / theirs if theirs else None,
                "note": note,
            }
        )
    return rows


def _first_within(history: np.ndarray, reference: float, tolerance: float) -> int | None:
    """Products (1-based) after which every later estimate is within `tolerance` of `reference`."""
    bad = np.flatnonzero(np.abs(history - reference) > tolerance * abs(reference))
    first = 0 if len(bad) == 0 else bad[-1] + 1
    return int(first + 1) if first < len(history) else None


def hessian_convergence(
    name: str = "alternet-18-cifar100",
    *,
    dataset: str = "digits",
    batch_size: int = 32,
    tolerance: float = 0.01,
    max_steps: int = 100,
    seed: int = 0,
    device=None,
) -> dict:
    """Hessian-vector products Lanczos and power iteration need for the top eigenvalue to `tolerance`.

    Both run on the same model (a preset, folder or Hub id) and the first `batch_size` training images of
    `dataset`; the
    reference value is Lanczos run to a 1e-6 residual bound. Also reports the products each method
    spends under its own stopping rule (Lanczos: residual bound 1e-2·|λ|; power iteration:
    PyHessian's relative change 1e-3).
    """
    import alternet_hf
    from alternet_hf.data import load_image_classification
    from alternet_hf.recipe import eval_transform

    from . import hessian

    torch.manual_seed(seed)
    model = alternet_hf.create_model(name).to(device or "cpu")
    config = model.config
    images = load_image_classification(dataset, split="train").select(range(batch_size))
    transform = eval_transform(config.image_size, config.image_mean, config.image_std)
    batch = (torch.stack([transform(image) for image in images["image"]]), torch.tensor(images["label"]))
    start = time.perf_counter()
    reference = hessian.top_eigenvalues(model, batch, tol=1e-6, max_steps=max_steps, seed=seed)
    seconds_per_hvp = (time.perf_counter() - start) / reference.num_hvps
    power = hessian.power_iteration(model, batch, tol=0.0, max_steps=max_steps, seed=seed)
    lanczos_stop = hessian.top_eigenvalues(model, batch, tol=1e-2, max_steps=max_steps, seed=seed)
    power_stop = hessian.power_iteration(model, batch, tol=1e-3, max_steps=max_steps, seed=seed)
    top = float(reference.eigenvalues[0])
    return {
        "model": name,
        "dataset": dataset,
        "batch_size": batch_size,
        "device": str(device or "cpu"),
        "top_eigenvalue": top,
        "tolerance": tolerance,
        "lanczos_hvps_to_tolerance": _first_within(reference.history, top, tolerance),
        "power_hvps_to_tolerance": _first_within(power.history, top, tolerance),
        "lanczos_hvps_own_stop": lanczos_stop.num_hvps,
        "lanczos_error_own_stop": float(abs(lanczos_stop.eigenvalues[0] - top) / abs(top)),
        "power_hvps_own_stop": power_stop.num_hvps,
        "power_error_own_stop": float(abs(power_stop.eigenvalues[0] - top) / abs(top)),
        "seconds_per_hvp": seconds_per_hvp,
    }
