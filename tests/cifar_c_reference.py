"""Statistics of the reference's CIFAR-C corruptions on fixed photographs: the golden values that
test_corruptions compares ours with (tests/data/cifar_c_reference_statistics.json).

Not a test: run by hand where the reference's dependencies are installed, with a local copy of the reference
(hendrycks/robustness, ImageNet-C/create_c/make_cifar_c.py; not shipped here) and its frost photographs:

    apt-get install libmagickwand-6.q16-6 && pip install wand opencv-python-headless
    python tests/cifar_c_reference.py --reference make_cifar_c.py --frost-dir <folder of frost1.png …> \\
        --out tests/data/cifar_c_reference_statistics.json

The reference's corruption functions run as released, each on one PIL image and drawing from NumPy's global
RNG, followed by its `np.uint8(...)`, for several seeds. Four names its 2019 libraries had and today's lack are
restored for the run only: `np.float_`, `np.fromstring`'s binary mode, `skimage.filters.gaussian(multichannel=)`
(the fog and glass blur use them) and the import path `scipy.ndimage.interpolation` (still there, deprecated).
"""

import argparse
import contextlib
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parents[1]))
from alternet_hf.data.cifar_c.corruptions import CORRUPTIONS, SEVERITIES, corruption_statistics  # noqa: E402

PHOTOGRAPHS = ("astronaut", "chelsea", "coffee", "rocket", "stereo_motorcycle")  # scikit-image's colour photos
GOLDEN = Path(__file__).parent / "data" / "cifar_c_reference_statistics.json"


def photographs() -> torch.Tensor:
    """150 CIFAR-like 32×32 photographs, uint8 (N, 3, 32, 32): from each of five scikit-image photographs,
    the centred square and the squares of 2×2, 3×3 and 4×4 grids over it, each shrunk with Pillow's BOX filter."""
    from PIL import Image
    from skimage import data

    images = []
    for name in PHOTOGRAPHS:
        photo = getattr(data, name)()
        photo = Image.fromarray(photo[0] if isinstance(photo, tuple) else photo)  # the motorcycle's left view
        side = min(photo.size)
        left, top = (photo.width - side) // 2, (photo.height - side) // 2
        for grid in (1, 2, 3, 4):
            step = side // grid
            for row in range(grid):
                for col in range(grid):
                    box = (left + col * step, top + row * step, left + (col + 1) * step, top + (row + 1) * step)
                    images.append(np.asarray(photo.resize((32, 32), Image.Resampling.BOX, box=box)))
    return torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).contiguous()


@contextlib.contextmanager
def _libraries_as_in_2019():
    import skimage.filters

    original_gaussian, original_fromstring = skimage.filters.gaussian, np.fromstring

    def gaussian(image, *args, multichannel=None, **kwargs):
        if multichannel:
            kwargs.setdefault("channel_axis", -1)
        return original_gaussian(image, *args, **kwargs)

    def fromstring(string, dtype=float, count=-1, *, sep=""):
        return np.frombuffer(string, dtype, count) if sep == "" else original_fromstring(string, dtype, count, sep=sep)

    had_float_ = "float_" in np.__dict__
    np.float_ = np.float64
    np.fromstring = fromstring
    skimage.filters.gaussian = gaussian
    try:
        yield gaussian
    finally:
        skimage.filters.gaussian, np.fromstring = original_gaussian, original_fromstring
        if not had_float_:
            del np.float_


def reference_functions(path: str | Path, gaussian) -> dict:
    """The corruption functions of the reference file (its code up to the dataset loop, which is not run)."""
    source = Path(path).read_text()
    source = source[: source.index("# /////////////// End Distortions ///////////////")]
    namespace = {"__name__": "make_cifar_c"}
    exec(compile(source, str(path), "exec"), namespace)
    namespace["gaussian"] = gaussian  # the name it imported before the shim could apply
    return {name: namespace[name] for name in CORRUPTIONS}


def reference_statistics(reference: str | Path, frost_dir: str | Path, seeds: int = 4) -> dict:
    """{corruption: {severity: {statistic: [mean over seeds, standard deviation over seeds]}}}."""
    from PIL import Image

    clean = photographs()
    pil_images = [Image.fromarray(image) for image in clean.permute(0, 2, 3, 1).numpy()]
    reference, here = Path(reference).resolve(), os.getcwd()
    table = {}
    os.chdir(frost_dir)  # it opens './frost1.png' etc.
    try:
        with _libraries_as_in_2019() as gaussian:
            functions = reference_functions(reference, gaussian)
            for name in CORRUPTIONS:
                table[name] = {}
                for severity in SEVERITIES:
                    runs = []
                    for seed in range(seeds):
                        np.random.seed(seed)
                        corrupted = np.stack([np.uint8(functions[name](image, severity)) for image in pil_images])
                        runs.append(corruption_statistics(clean, torch.from_numpy(corrupted).permute(0, 3, 1, 2)))
                    table[name][str(severity)] = {
                        key: [float(np.mean([run[key] for run in runs])), float(np.std([run[key] for run in runs]))]
                        for key in runs[0]
                    }
                print(name, "done", file=sys.stderr)
    finally:
        os.chdir(here)
    return table


def _versions() -> dict:
    import cv2
    import PIL
    import scipy
    import skimage
    from wand.version import MAGICK_VERSION

    return dict(
        python=platform.python_version(),
        numpy=np.__version__,
        scipy=scipy.__version__,
        skimage=skimage.__version__,
        opencv=cv2.__version__,
        pillow=PIL.__version__,
        imagemagick=MAGICK_VERSION,
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", required=True, help="a local copy of make_cifar_c.py")
    parser.add_argument("--frost-dir", required=True, help="the folder of its frost1.png … frost5.jpg")
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--out", default=str(GOLDEN))
    args = parser.parse_args(argv)
    start = time.perf_counter()
    statistics = reference_statistics(args.reference, args.frost_dir, args.seeds)
    result = dict(
        about="Statistics (alternet_hf.data.cifar_c.corruptions.corruption_statistics) of make_cifar_c.py's "
        "corruptions of tests/cifar_c_reference.py's 150 photographs, uint8 output as released; [mean, std] over seeds",
        reference="hendrycks/robustness ImageNet-C/create_c/make_cifar_c.py with its frost1.png … frost5.jpg",
        seeds=args.seeds,
        num_images=len(photographs()),
        versions=_versions(),
        seconds=round(time.perf_counter() - start),
        statistics=statistics,
    )
    write_golden(result, args.out)
    print(f"wrote {args.out}", file=sys.stderr)


def write_golden(result: dict, path: str | Path) -> None:
    """JSON with one line per corruption and severity, values rounded to 1e-7 (4e-5 of a level)."""
    statistics = result["statistics"]
    text = json.dumps({**result, "statistics": "@"}, indent=1)
    lines = []
    for name, severities in statistics.items():
        rows = [
            f'   "{severity}": ' + json.dumps({key: [round(v, 7) for v in pair] for key, pair in row.items()})
            for severity, row in severities.items()
        ]
        lines.append(f'  "{name}": {{\n' + ",\n".join(rows) + "\n  }")
    text = text.replace('"@"', "{\n" + ",\n".join(lines) + "\n }")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(text + "\n")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
