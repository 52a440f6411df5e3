"""Speed of the analyses: CIFAR-C generation against per-image NumPy (`imagecorruptions`), Hessian-vector products of
Lanczos against power iteration, and the per-block statistics from one pass against separate passes and the
reference notebooks' formulas."""

import contextlib
import time
from unittest import mock

import numpy as np
import torch

from alternet_hf.data.cifar_c import CORRUPTIONS
from alternet_hf.data.cifar_c.corruptions import corrupt

from .timing import timed, torch_threads


@contextlib.contextmanager
def _imagecorruptions_on_current_libraries(module):
    """imagecorruptions 1.1.2 predates NumPy 2 (`np.float_`, used by fog) and scikit-image 0.19
    (`gaussian(multichannel=...)`, used by glass blur). Restore both names while it is timed, then undo."""
    original_gaussian = module.gaussian

    def gaussian(image, *args, multichannel=None, **kwargs):
        if multichannel:
            kwargs.setdefault("channel_axis", -1)
        return original_gaussian(image, *args, **kwargs)

    with mock.patch.object(module, "gaussian", gaussian), mock.patch.object(np, "float_", np.float64, create=True):
        yield


def corruption_speed(
    num_images: int = 1000,
    severity: int = 3,
    corruptions=CORRUPTIONS,
    device=None,
    *,
    image_size: int = 32,
    repeats: int = 3,
    num_threads: int | None = None,
) -> list[dict]:
    """Images/s of our batched corruptions (the best of `repeats`, on `device`, default CPU) against the per-image
    NumPy ones of the optional `imagecorruptions` (ImageNet-C severities: alike work, not the same), on the same
    random uint8 images; one dict per corruption, `note` saying why theirs is missing."""
    try:
        import imagecorruptions
        import imagecorruptions.corruptions
    except ImportError as error:
        imagecorruptions, missing = None, f"imagecorruptions not importable ({error}): pip install imagecorruptions"
    device = torch.device(device or "cpu")
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (num_images, 3, image_size, image_size), dtype=torch.uint8, generator=generator)
    batch = images.to(device)
    arrays = images.permute(0, 2, 3, 1).numpy()  # (N, H, W, 3) uint8, the package's layout
    rows = []
    for name in corruptions:
        with torch_threads(num_threads):
            seconds = timed(
                lambda name=name: corrupt(
                    batch, name, severity, generator=torch.Generator(device=device).manual_seed(0)
                ),
                repeats,
                device=device,
            )
            used_threads = torch.get_num_threads()
        ours = num_images / min(seconds)
        theirs, note = None, missing if imagecorruptions is None else None
        if imagecorruptions is not None:
            np.random.seed(0)  # the package draws from NumPy's global RNG
            try:
                with _imagecorruptions_on_current_libraries(imagecorruptions.corruptions):
                    imagecorruptions.corrupt(arrays[0], corruption_name=name, severity=severity)
                    start = time.perf_counter()
                    for array in arrays:
                        imagecorruptions.corrupt(array, corruption_name=name, severity=severity)
                    theirs = num_images / (time.perf_counter() - start)
            except Exception as error:  # report the package's failure, keep measuring the rest
                note = f"imagecorruptions failed: {type(error).__name__}: {error}"
        rows.append(
            {
                "corruption": name,
                "severity": severity,
                "images": num_images,
                "image_size": image_size,
                "device": str(device),
                "torch_threads": used_threads if device.type == "cpu" else None,
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
    **overrides,
) -> dict:
    """Hessian-vector products Lanczos and power iteration need for the top eigenvalue of `name` on `batch_size`
    training images, to `tolerance` of the truth (Lanczos to a 1e-6 residual bound), and under their own stop rules."""
    from analysis import hessian

    torch.manual_seed(seed)
    model, batch = _model_and_images(name, dataset, "train", batch_size, device, overrides)
    start = time.perf_counter()
    reference = hessian.top_eigenvalues(model, batch, tol=1e-6, lanczos_steps=max_steps, seed=seed)
    seconds_per_hvp = (time.perf_counter() - start) / reference.num_hvps
    power = hessian.power_iteration(model, batch, tol=0.0, max_steps=max_steps, seed=seed)
    lanczos_stop = hessian.top_eigenvalues(model, batch, tol=1e-2, lanczos_steps=max_steps, seed=seed)
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


def _model_and_images(name: str, dataset: str, split: str, count: int, device, overrides: dict):
    """(model, (images, labels)): `name` on `device` (default CPU), the first `count` images of `split` evaluated."""
    import alternet_hf
    from alternet_hf.data.augmentation import eval_transform
    from alternet_hf.data.sources import load_image_classification

    model = alternet_hf.create_model(name, **overrides).to(device or "cpu")
    config = model.config
    rows = load_image_classification(dataset, split=split).select(range(count))
    transform = eval_transform(config.image_size, config.image_mean, config.image_std)
    return model, (torch.stack([transform(image) for image in rows["image"]]), torch.tensor(rows["label"]))


def _reference_notebook_statistics(maps: list[torch.Tensor]) -> None:
    """The reference notebooks' Fourier and variance computation on given maps (how-do-vits-work's
    `fourier_analysis.ipynb` and `featuremap_variance.ipynb`, rewritten): what one pass is measured against."""
    for latent in maps:
        spectrum = torch.fft.fft2(latent).abs().add(1e-6).log()
        height, width = latent.shape[-2:]
        spectrum = torch.roll(spectrum, shifts=(height // 2, width // 2), dims=(2, 3)).mean(dim=(0, 1))
        curve = spectrum.diag()[height // 2 :]
        (curve - curve[0]).tolist()
        latent.var(dim=[-1, -2]).mean(dim=[0, 1]).item()


def per_block_speed(
    name: str = "alternet-18-cifar10",
    *,
    dataset: str = "digits",
    num_images: int = 256,
    batch_size: int = 128,
    repeats: int = 3,
    device=None,
    **overrides,
) -> dict:
    """Seconds (best of `repeats`) for Fourier ΔlogA and feature-map variance of `name` on `num_images` test images: a
    pass each, both from one pass (`analysis.blocks.accumulate`), and the reference notebooks' formulas on its maps."""
    from analysis.blocks import accumulate, block_batches
    from analysis.fourier import FourierAccumulator, fourier_log_amplitude
    from analysis.variance import VarianceAccumulator, feature_map_variance

    model, (images, _) = _model_and_images(name, dataset, "test", num_images, device, overrides)
    loader = [(batch, torch.zeros(len(batch))) for batch in images.split(batch_size)]

    def separately():
        fourier_log_amplitude(model, loader, device=device)
        feature_map_variance(model, loader, device=device)

    def together():
        accumulate(model, loader, [FourierAccumulator(), VarianceAccumulator()], device=device)

    def reference():
        for batch in block_batches(model, loader, device=device):
            _reference_notebook_statistics([m.cpu() for m in batch.maps if m is not None])

    runs = {"separate_passes": separately, "one_pass": together, "reference_notebook": reference}
    seconds = {key: min(timed(run, repeats)) for key, run in runs.items()}
    return {
        "model": name,
        "images": num_images,
        "device": str(device or "cpu"),
        **{f"{key}_s": value for key, value in seconds.items()},
        "separate_over_one_pass": seconds["separate_passes"] / seconds["one_pass"],
        "one_pass_over_reference": seconds["one_pass"] / seconds["reference_notebook"],
    }
