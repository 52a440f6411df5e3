"""Speed on this machine, one subcommand per measurement (the figures and their machines: docs/benchmarks.md).

python scripts/benchmark.py throughput  # the three zoo models, batch 32, eager: images/s, forward and a step
python scripts/benchmark.py throughput --batch-sizes 256 1024 --compile both --dtype bfloat16  # on a GPU
python scripts/benchmark.py training --models alternet-50-cifar100 --batch-sizes 96 --num-workers 8
python scripts/benchmark.py data --models alternet-50-cifar100  # CPU ms per image, one loader worker
python scripts/benchmark.py data --streaming  # the same, prepared split against a stream of parquet files
python scripts/benchmark.py reference --reference-dir how-do-vits-work/  # AlterNet-50 vs the reference code's
python scripts/benchmark.py evaluation --models pit-ti-cifar100 --batch-sizes 64 --compile both
python scripts/benchmark.py finetune --models alternet-50-cifar100 outputs/alternet-digits --seeds 0 1 2
python scripts/benchmark.py any-model  # the Space's Any model tab: ResNet-50 analysed, then a cached answer
python scripts/benchmark.py atlas  # alternet-atlas over six untrained ImageNet classifiers: models per hour, a refresh
python scripts/benchmark.py hessian --model outputs/alternet-digits  # analysis.hessian against PyHessian, one batch
"""

import argparse
import importlib.util
import itertools
import os
import tempfile
from dataclasses import asdict, is_dataclass
from pathlib import Path

from alternet_hf.cli.common import CommandError, command, make_parser, positive_int
from alternet_hf.utils import write_json

DTYPES = ("float32", "bfloat16", "float16")
DEFAULT_MODELS = ("alternet-50-cifar100", "resnet-50-cifar100", "vit-ti-cifar100")
# timm architectures and one transformers model (zoo_benchmark.hub_cache.TRANSFORMERS_MODELS), one of each family
# the probe knows but PiT, all at 224 px.
ATLAS_MODELS = (
    "resnet50",
    "convnext_tiny",
    "vit_small_patch16_224",
    "deit_small_patch16_224",
    "swin_tiny_patch4_window7_224",
    "vit-small-patch16-224",
)
COMPILED = {"no": [False], "yes": [True], "both": [False, True]}  # --compile: eager, compiled or both, per run


def _models(parser, default=DEFAULT_MODELS, what: str = "zoo presets"):
    shown = " ".join(default) if default else "none: name them"
    parser.add_argument("--models", nargs="+", default=list(default) or None, help=f"{what} (default: {shown})")


def _compile(parser, default: str | None = "no", help: str = "time torch.compile'd models too (compiling untimed)"):
    parser.add_argument("--compile", choices=list(COMPILED), default=default, help=help)


def _throughput(parser):
    _models(parser)
    parser.add_argument("--batch-sizes", nargs="+", type=positive_int, default=[32])
    parser.add_argument(
        "--modes", nargs="+", default=["forward", "forward+backward"], choices=["forward", "forward+backward"]
    )
    _compile(parser)
    parser.add_argument("--dtype", choices=DTYPES, nargs="+", default=["float32"], help="autocast dtypes")
    parser.add_argument("--iterations", type=positive_int, default=5)
    parser.add_argument("--warmup", type=int, default=2)


def _run_throughput(args, benchmark, tables):
    import torch

    over = {
        "name": args.models,
        "batch_size": args.batch_sizes,
        "mode": args.modes,
        "compiled": COMPILED[args.compile],
        "dtype": [getattr(torch, dtype) for dtype in args.dtype],
    }
    rows = sweep(
        benchmark.measure_throughput,
        over,
        bar="benchmark",
        device=args.device,
        warmup=args.warmup,
        iterations=args.iterations,
    )
    return rows, tables.throughput_table(rows)


def _training(parser):
    _models(parser)
    parser.add_argument("--batch-sizes", nargs="+", type=positive_int, default=[32])
    _compile(parser, None, "time compiled runs, eager ones or both (default: the engine's choice, compiled on CUDA)")
    parser.add_argument("--training-images", type=positive_int, default=960, help="training images per epoch")
    parser.add_argument("--training-epochs", type=positive_int, default=2, help="epochs of each run")
    parser.add_argument("--num-workers", type=int, default=2, help="data-loading processes")


def _run_training(args, benchmark, tables):
    compiled = [None] if args.compile is None else COMPILED[args.compile]  # None: the engine's choice
    over = {"name": args.models, "batch_size": args.batch_sizes, "compiled": compiled}
    rows = sweep(
        benchmark.measure_training_run,
        over,
        epochs=args.training_epochs,
        images=args.training_images,
        num_workers=args.num_workers,
    )
    return rows, "\n\n".join(map(tables.training_run_lines, rows))


def _data(parser):
    _models(parser)
    parser.add_argument(
        "--streaming", action="store_true", help="also read the images as alternet-train --streaming does"
    )
    parser.add_argument("--training-images", type=positive_int, default=960, help="images of the split timed")
    parser.add_argument("--repeats", type=positive_int, default=5)


def _run_data(args, benchmark, tables):
    over = {"name": args.models, "streaming": (False, True) if args.streaming else (False,)}
    rows = sweep(benchmark.measure_data_path, over, images=args.training_images, repeats=args.repeats)
    return rows, "\n".join(map(tables.data_path_line, rows))


def _reference(parser):
    parser.add_argument(
        "--reference-dir",
        type=Path,
        required=True,
        help="a checkout of xxxnell/how-do-vits-work: AlterNet-50 raced against its, both given each memory format, "
        "by wall and CPU time (forward and forward+backward at --batch-size, inference at --inference-batch-sizes)",
    )
    parser.add_argument("--batch-size", type=positive_int, default=32)
    parser.add_argument("--inference-batch-sizes", type=positive_int, nargs="+", default=[1, 256])
    parser.add_argument("--repeats", type=positive_int, default=5)


def _run_reference(args, benchmark, tables):
    rows = benchmark.race_reference(
        args.reference_dir,
        batch_size=args.batch_size,
        inference_batch_sizes=tuple(args.inference_batch_sizes),
        repeats=args.repeats,
    )
    return rows, tables.reference_race_table(rows)


def _evaluation(parser):
    _models(parser)
    parser.add_argument("--batch-sizes", nargs="+", type=positive_int, default=[32])
    _compile(parser)
    parser.add_argument(
        "--dtype", choices=DTYPES, nargs="+", default=["float32"], help="float32 and/or bfloat16 (autocast)"
    )
    parser.add_argument("--iterations", type=positive_int, default=5)


def _run_evaluation(args, benchmark, tables):
    if set(args.dtype) - {"float32", "bfloat16"}:
        raise CommandError("evaluation runs in float32 and/or bf16 autocast: give --dtype float32 bfloat16")
    variants = list(itertools.product(COMPILED[args.compile], [dtype == "bfloat16" for dtype in args.dtype]))
    over = {"name": args.models, "batch_size": args.batch_sizes}
    runs = sweep(
        benchmark.evaluation_throughput,
        over,
        bar="evaluation",
        variants=variants,
        device=args.device,
        repeats=args.iterations,
    )
    rows = [row for run in runs for row in run]
    return rows, tables.evaluation_table(rows)


def _finetune(parser):
    _models(parser, default=(), what="presets (trained from scratch) and/or folders of trained models (fine-tuned)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])


def _run_finetune(args, benchmark, tables):
    if not args.models:
        raise CommandError(
            "finetune needs --models: presets (trained from scratch) and/or folders of trained models (fine-tuned), "
            "e.g. --models alternet-50-cifar100 outputs/alternet-digits"
        )
    if importlib.util.find_spec("skimage") is None:
        raise CommandError("finetune reads scikit-image's photographs: pip install scikit-image")
    from zoo_benchmark.finetuning import finetune_accuracy, write_faces_dataset

    with tempfile.TemporaryDirectory(prefix="alternet-finetune-benchmark-") as work:
        faces = write_faces_dataset(Path(work) / "faces")
        over = {"model": args.models, "seed": args.seeds}
        rows = sweep(finetune_accuracy, over, bar="fine-tuning", dataset=faces, runs=Path(work) / "runs")
    return rows, tables.finetune_table(rows)


def _any_model(parser):
    _models(parser, default=("resnet50",), what="timm architectures")
    parser.add_argument("--repeats", type=positive_int, default=2, help="cached answers timed (the best is kept)")


def _run_any_model(args, benchmark, tables):
    import timm

    from zoo_benchmark.any_model import any_model_speed

    unknown = [name for name in args.models if not timm.is_model(name)]
    if unknown:
        raise CommandError(f"timm has no architecture {', '.join(unknown)} (`timm.list_models('*name*')` lists them)")

    rows = [any_model_speed(args.workdir, architecture=name, repeats=args.repeats) for name in args.models]
    return rows, tables.any_model_table(rows)


def _atlas(parser):
    _models(parser, default=ATLAS_MODELS, what="timm architectures and/or hub_cache.TRANSFORMERS_MODELS' names")
    parser.add_argument("--seed", type=int, default=0, help="seed of the untrained weights")
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="an empty folder to keep the Hub cache, the answers and the atlas in (default: a temporary one, removed)",
    )


def _run_atlas(args, benchmark, tables):
    import timm

    from zoo_benchmark.atlas import atlas_speed
    from zoo_benchmark.hub_cache import TRANSFORMERS_MODELS

    unknown = [name for name in args.models if name not in TRANSFORMERS_MODELS and not timm.is_model(name)]
    if unknown:
        raise CommandError(
            f"neither timm nor zoo_benchmark.hub_cache has {', '.join(unknown)} (timm's: `timm.list_models('*name*')`; "
            f"transformers': {', '.join(TRANSFORMERS_MODELS)})"
        )
    if any(Path(args.workdir).iterdir()):  # an atlas there would make every model "unchanged"
        raise CommandError(f"--workdir {args.workdir} is not empty: name a new or empty folder")
    found = atlas_speed(args.workdir, models=list(dict.fromkeys(args.models)), seed=args.seed)
    return [found], tables.atlas_table(found)


def _hessian(parser):
    parser.add_argument("--model", default="outputs/alternet-digits", help="a zoo preset or model folder")
    parser.add_argument("--dataset", default="digits", help="its first --batch-size training images, evaluated")
    parser.add_argument("--batch-size", type=positive_int, default=64)
    parser.add_argument("--top-n", type=positive_int, default=3, help="eigenvalues of the second row")
    parser.add_argument("--density-steps", type=positive_int, default=32, help="Lanczos steps of one SLQ vector")
    parser.add_argument("--trace-rtol", type=float, default=1e-2, help="our trace's stop: 95%% half-width / trace")
    parser.add_argument("--threads", type=positive_int, default=None, help="torch's CPU threads (default: as set)")
    parser.add_argument(
        "--peer-folder",
        type=Path,
        default=None,
        help="where PyHessian is installed from the package index (default: a temporary folder)",
    )
    parser.add_argument("--without-peer", action="store_true", help="ours alone (no install): the peer reads 'not run'")


def _run_hessian(args, benchmark, tables):
    from zoo_benchmark.hessian_peer import compare_with_peer

    folder = None if args.without_peer else (args.peer_folder or Path(args.workdir) / "pyhessian")
    found = compare_with_peer(
        args.model,
        peer_folder=folder,
        dataset=args.dataset,
        batch_size=args.batch_size,
        top_n=args.top_n,
        density_steps=args.density_steps,
        trace_rtol=args.trace_rtol,
        threads=args.threads,
    )
    return [found], tables.hessian_peer_table(found)


# name: (what it measures, its arguments, how it runs)
SUBCOMMANDS = {
    "throughput": (
        "images/s of zoo presets: bare forward and forward+backward steps, eager and compiled",
        _throughput,
        _run_throughput,
    ),
    "training": (
        "alternet-train end to end: paper recipe, loader workers, evaluation and a checkpoint every epoch",
        _training,
        _run_training,
    ),
    "data": ("CPU time per image of the training data path, as one loader worker", _data, _run_data),
    "reference": (
        "AlterNet-50 against the reference code's own, same inputs and memory formats",
        _reference,
        _run_reference,
    ),
    "evaluation": (
        "images/s (and per core) of the release's CIFAR-100-C pass, uint8 images normalised on the device",
        _evaluation,
        _run_evaluation,
    ),
    "finetune": (
        "held-out accuracy of alternet-finetune with its defaults on real photographs (scikit-image's LFW "
        "subset: faces or not), from a preset or a model folder, per seed",
        _finetune,
        _run_finetune,
    ),
    "any-model": (
        "seconds of the Space's Any model tab for timm architectures, untrained, in timm's Hub format, "
        "already in the cache: the first answer, and a cached one with its figures",
        _any_model,
        _run_any_model,
    ),
    "atlas": (
        "models per hour of alternet-atlas over ImageNet classifiers, untrained, saved as their Hub repos hold them, "
        "already in the cache; then a refresh of the same, unchanged commits",
        _atlas,
        _run_atlas,
    ),
    "hessian": (
        "analysis.hessian against PyHessian (installed into a side folder at run time) on one model and batch: "
        "eigenvalues, trace and density, each tool's values, Hessian-vector products and seconds",
        _hessian,
        _run_hessian,
    ),
}


def build_parser():
    parser = make_parser(__doc__)
    measurements = parser.add_subparsers(dest="measurement", required=True, metavar="{" + ",".join(SUBCOMMANDS) + "}")
    for name, (help, add_arguments, _) in SUBCOMMANDS.items():
        sub = measurements.add_parser(name, help=help, description=help)
        add_arguments(sub)
        sub.add_argument("--device", default=None, help="default: cuda if available, else cpu")
        sub.add_argument("--output", type=Path, default=None, help="also write the results as JSON here")
    return parser


def sweep(measure, over: dict, *, bar: str | None = None, **fixed) -> list:
    """`measure(**fixed)` at every combination of the values `over` lists per keyword (the last varies fastest), behind
    a progress bar of runs named `bar` where one is named."""
    from tqdm import tqdm

    runs = list(itertools.product(*over.values()))
    return [measure(**dict(zip(over, run)), **fixed) for run in (tqdm(runs, desc=bar, unit="run") if bar else runs)]


@command
def main(argv: list[str] | None = None) -> None:
    args: argparse.Namespace = build_parser().parse_args(argv)
    with tempfile.TemporaryDirectory(prefix=f"alternet-{args.measurement}-") as scratch:
        workdir = args.workdir = str(Path(getattr(args, "workdir", None) or scratch).resolve())  # atlas: --workdir
        Path(workdir).mkdir(parents=True, exist_ok=True)
        if args.measurement == "any-model":  # read by huggingface_hub when imported: the weights local, the Hub off
            os.environ |= {"HF_HUB_OFFLINE": "1", "ALTERNET_MODEL_CACHE": str(Path(workdir) / "hub")}
        if args.measurement == "atlas":  # the same, and the answers cached afresh: no cache of this user's is read
            hf_home = Path(workdir) / "hf"
            os.environ |= {
                "HF_HUB_OFFLINE": "1",
                "HF_HOME": str(hf_home),
                "ALTERNET_MODEL_CACHE": str(hf_home / "hub"),
                "ALTERNET_SPACE_CACHE": str(Path(workdir) / "answers"),
            }
        import zoo_benchmark as benchmark
        from zoo_benchmark import tables

        rows, report = SUBCOMMANDS[args.measurement][2](args, benchmark, tables)
    print(f"\n{report}")
    if args.output:
        write_json(args.output, [asdict(row) if is_dataclass(row) else row for row in rows])
        print(f"\nwrote {args.output}")


if __name__ == "__main__":
    main()
