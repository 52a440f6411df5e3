"""Speed on this machine: images/s of zoo presets (bare forward and forward+backward steps, eager and compiled), or
one of the modes below, each timing one part of the zoo (the figures and their machines: docs/benchmarks.md).

    python scripts/benchmark.py  # the three zoo models, batch 32, eager
    python scripts/benchmark.py --batch-sizes 256 1024 --compile both --dtype bfloat16  # on a GPU
    python scripts/benchmark.py --training --models alternet-50-cifar100 --batch-sizes 96 --num-workers 8
    python scripts/benchmark.py --data-only --models alternet-50-cifar100  # CPU ms per image, one loader worker
    python scripts/benchmark.py --data-only --streaming  # the same, prepared split against a stream of parquet files
    python scripts/benchmark.py --engine-overhead  # engine loop vs a hand-written loop, ms per step
    python scripts/benchmark.py --reference-dir how-do-vits-work/  # AlterNet-50 vs the reference code's
    python scripts/benchmark.py --evaluation --models pit-ti-cifar100 --batch-sizes 64 --compile both
    python scripts/benchmark.py --corruptions --num-images 1000  # CIFAR-C generation vs per-image NumPy
    python scripts/benchmark.py --hessian --models outputs/alternet-digits  # Lanczos vs power iteration
    python scripts/benchmark.py --feature-maps --models alternet-18-cifar10 --num-images 256
    python scripts/benchmark.py --finetune --models alternet-50-cifar100 outputs/alternet-digits --seeds 0 1 2
    python scripts/benchmark.py --sample --num-images 512 --split-images 50000 --split-files 20
    python scripts/benchmark.py --any-model  # the Space's Any model tab: ResNet-50 analysed, then a cached answer
"""

import functools
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
COMPILED = {"no": [False], "yes": [True], "both": [False, True]}  # --compile: eager, compiled or both, per run


def build_parser():
    parser = make_parser(__doc__)
    flag = functools.partial(parser.add_argument, action="store_true")
    modes = parser.add_mutually_exclusive_group()  # each run measures one thing
    mode = functools.partial(modes.add_argument, action="store_true")
    parser.add_argument(
        "--models",
        nargs="+",
        help=f"default: {' '.join(DEFAULT_MODELS)}; --finetune takes them from you (presets or model folders), "
        "--any-model timm architectures",
    )
    parser.add_argument("--batch-sizes", nargs="+", type=positive_int, default=[32])
    parser.add_argument(
        "--modes", nargs="+", default=["forward", "forward+backward"], choices=["forward", "forward+backward"]
    )
    parser.add_argument(
        "--compile",
        choices=["no", "yes", "both"],
        default=None,
        help="time torch.compile'd models too (compilation is not timed, except inside --training; default: no, "
        "and for --training the engine's default, compiled on CUDA)",
    )
    parser.add_argument(
        "--dtype",
        choices=DTYPES,
        nargs="+",
        default=["float32"],
        help="autocast dtypes of bare steps and of --evaluation (there float32 and bfloat16)",
    )
    parser.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    parser.add_argument("--iterations", type=positive_int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    mode(
        "--training",
        help="time alternet-train end to end (paper recipe, loader workers, evaluation and a checkpoint every epoch)",
    )
    parser.add_argument(
        "--training-images", type=positive_int, default=960, help="training images per --training epoch"
    )
    parser.add_argument("--training-epochs", type=positive_int, default=2, help="epochs of the --training run")
    parser.add_argument("--num-workers", type=int, default=2, help="data-loading processes for --training")
    mode("--data-only", help="CPU time per image of the training data path, as one loader worker")
    flag("--streaming", help="--data-only also reads the images as alternet-train --streaming does, from parquet files")
    mode("--engine-overhead", help="ms per step of the engine's loop beyond a hand-written one")
    modes.add_argument(
        "--reference-dir",
        type=Path,
        help="a checkout of xxxnell/how-do-vits-work: race AlterNet-50 against its, both given each memory "
        "format, by wall and CPU time (forward and forward+backward at the first --batch-sizes, inference at "
        "--inference-batch-sizes)",
    )
    parser.add_argument(
        "--inference-batch-sizes",
        type=positive_int,
        nargs="+",
        default=[1, 256],
        help="batch sizes of the --reference-dir race's inference pass (eval, no grad)",
    )
    parser.add_argument(
        "--repeats",
        type=positive_int,
        default=5,
        help="repetitions of --data-only / --engine-overhead / --reference-dir measurements",
    )
    mode(
        "--evaluation",
        help="images/s (and per core) of the release's CIFAR-100-C pass (eval, uint8 images normalised on the device) "
        "at each --batch-sizes, eager and/or compiled (--compile)",
    )
    mode("--corruptions", help="time CIFAR-C corruption generation against imagecorruptions")
    parser.add_argument(
        "--num-images", type=positive_int, default=1000, help="images per corruption for --corruptions; of the --sample"
    )
    parser.add_argument("--corruption-names", nargs="+", default=None, help="a subset of corruptions to time")
    parser.add_argument("--severity", type=int, default=3, help="severity for --corruptions")
    parser.add_argument("--threads", type=positive_int, default=None, help="torch threads for --corruptions")
    mode(
        "--hessian",
        help="count Hessian-vector products of Lanczos and power iteration for the top eigenvalue (digits batch)",
    )
    mode(
        "--feature-maps",
        help="seconds of Fourier + variance on --num-images digits: separate passes, one shared pass, and the "
        "reference notebooks' computation on the same maps",
    )
    mode(
        "--finetune",
        help="held-out accuracy of alternet-finetune with its defaults on real photographs (scikit-image's LFW "
        "subset: faces or not), from a preset (from scratch) or a model folder (fine-tuned), per --seeds",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds of the --finetune runs")
    mode(
        "--sample",
        help="seconds to a streamed sample of --num-images from a parquet split of --split-images in --split-files "
        "files, against preparing the split first",
    )
    parser.add_argument("--split-images", type=positive_int, default=50_000, help="images of the --sample split")
    mode(
        "--image-check",
        help="files per second of the check a folder of images gets before a run (headers and ends), on "
        "--num-images 224×224 JPEGs",
    )
    parser.add_argument("--split-files", type=positive_int, default=20, help="parquet files of the --sample split")
    mode(
        "--any-model",
        help="seconds of the Space's Any model tab for timm architectures (--models; default resnet50), untrained, "
        "in timm's Hub format, already in the cache: the first answer, and a cached one with its figures",
    )
    parser.add_argument("--output", type=Path, default=None, help="also write the results as JSON here")
    return parser


def sweep(measure, over: dict, *, bar: str | None = None, **fixed) -> list:
    """`measure(**fixed)` at every combination of the values `over` lists per keyword (the last varies fastest), behind
    a progress bar of runs named `bar` where one is named."""
    from tqdm import tqdm

    runs = list(itertools.product(*over.values()))
    return [measure(**dict(zip(over, run)), **fixed) for run in (tqdm(runs, desc=bar, unit="run") if bar else runs)]


@command
def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.streaming and not args.data_only:
        raise CommandError("--streaming measures the data path: give it with --data-only")
    if args.evaluation and set(args.dtype) - {"float32", "bfloat16"}:
        raise CommandError("--evaluation runs in float32 and/or bf16 autocast: give --dtype float32 bfloat16")
    if args.finetune and not args.models:
        raise CommandError(
            "--finetune needs --models: presets (trained from scratch) and/or folders of trained models (fine-tuned), "
            "e.g. --models alternet-50-cifar100 outputs/alternet-digits"
        )
    if args.finetune and importlib.util.find_spec("skimage") is None:
        raise CommandError("--finetune reads scikit-image's photographs: pip install scikit-image")
    named_models, args.models = args.models, args.models or list(DEFAULT_MODELS)
    compiled_options = COMPILED[args.compile or "no"]
    workdir = tempfile.TemporaryDirectory(prefix="alternet-any-model-") if args.any_model else None
    if workdir is not None:  # read by huggingface_hub when it is imported: the weights are local, the Hub off
        os.environ |= {"HF_HUB_OFFLINE": "1", "ALTERNET_MODEL_CACHE": str(Path(workdir.name) / "hub")}
    import torch

    import zoo_benchmark as benchmark
    from zoo_benchmark import tables

    if args.finetune:
        from zoo_benchmark.finetuning import finetune_accuracy, write_faces_dataset

        with tempfile.TemporaryDirectory(prefix="alternet-finetune-benchmark-") as work:
            faces = write_faces_dataset(Path(work) / "faces")
            over = {"model": args.models, "seed": args.seeds}
            rows = sweep(finetune_accuracy, over, bar="fine-tuning", dataset=faces, runs=Path(work) / "runs")
        report = tables.finetune_table(rows)
    elif args.any_model:
        from zoo_benchmark.any_model import any_model_speed

        with workdir:
            architectures = named_models or ["resnet50"]
            rows = [any_model_speed(workdir.name, architecture=name, repeats=args.repeats) for name in architectures]
        report = tables.any_model_table(rows)
    elif args.engine_overhead:
        result = benchmark.measure_engine_overhead(repeats=args.repeats)
        report, rows = tables.engine_overhead_table(result, args.repeats), [result]
    elif args.reference_dir:
        rows = benchmark.race_reference(
            args.reference_dir,
            batch_size=args.batch_sizes[0],
            inference_batch_sizes=tuple(args.inference_batch_sizes),
            repeats=args.repeats,
        )
        report = tables.reference_race_table(rows)
    elif args.data_only:
        over = {"name": args.models, "streaming": (False, True) if args.streaming else (False,)}
        rows = sweep(benchmark.measure_data_path, over, images=args.training_images, repeats=args.repeats)
        report = "\n".join(map(tables.data_path_line, rows))
    elif args.training:
        compiled = [None] if args.compile is None else compiled_options  # None: the engine's choice
        rows = sweep(
            benchmark.measure_training_run,
            {"name": args.models, "batch_size": args.batch_sizes, "compiled": compiled},
            epochs=args.training_epochs,
            images=args.training_images,
            num_workers=args.num_workers,
        )
        report = "\n\n".join(map(tables.training_run_lines, rows))
    elif args.sample:
        with tempfile.TemporaryDirectory(prefix="alternet-sample-") as workdir:
            rows = [
                benchmark.sample_speed(
                    num_images=args.num_images, split_images=args.split_images, files=args.split_files, workdir=workdir
                )
            ]
        report = tables.sample_table(rows)
    elif args.image_check:
        with tempfile.TemporaryDirectory(prefix="alternet-image-check-") as workdir:
            rows = [benchmark.image_check_speed(num_images=args.num_images, workdir=workdir)]
        report = tables.image_check_table(rows)
    elif args.evaluation:
        bf16 = [dtype == "bfloat16" for dtype in args.dtype]
        over = {"name": args.models, "compiled": compiled_options, "bf16": bf16, "batch_size": args.batch_sizes}
        rows = sweep(
            benchmark.evaluation_throughput, over, bar="evaluation", device=args.device, repeats=args.iterations
        )
        report = tables.evaluation_table(rows)
    elif args.feature_maps:
        settings = dict(num_images=args.num_images, repeats=args.repeats, device=args.device)
        rows = sweep(benchmark.per_block_speed, {"name": args.models}, bar="feature maps", **settings)
        report = tables.feature_maps_table(rows)
    elif args.corruptions:
        from alternet_hf.data.cifar_c import CORRUPTIONS

        rows = benchmark.corruption_speed(
            num_images=args.num_images,
            severity=args.severity,
            corruptions=args.corruption_names or CORRUPTIONS,
            device=args.device,
            num_threads=args.threads,
        )
        report = tables.corruptions_table(rows)
    elif args.hessian:
        over = {"name": args.models, "batch_size": args.batch_sizes}
        rows = sweep(benchmark.hessian_convergence, over, bar="hessian", device=args.device)
        report = tables.hessian_table(rows)
    else:
        rows = sweep(
            benchmark.measure_throughput,
            {
                "name": args.models,
                "batch_size": args.batch_sizes,
                "mode": args.modes,
                "compiled": compiled_options,
                "dtype": [getattr(torch, dtype) for dtype in args.dtype],
            },
            bar="benchmark",
            device=args.device,
            warmup=args.warmup,
            iterations=args.iterations,
        )
        report = tables.throughput_table(rows)
    print(f"\n{report}")
    if args.output:
        write_json(args.output, [asdict(row) if is_dataclass(row) else row for row in rows])
        print(f"\nwrote {args.output}")


if __name__ == "__main__":
    main()
