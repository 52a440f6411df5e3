"""Images/s of zoo presets on this machine: bare forward and forward+backward steps, eager and
torch.compile; or the training engine: end to end (--training), its data path per loader worker (--data-only),
its loop overhead against a hand-written loop (--engine-overhead), a step against the reference code's
(--reference-dir).

    alternet-benchmark                                   # the three zoo models, batch 32, eager
    alternet-benchmark --batch-sizes 256 1024 --compile both --dtype bfloat16   # on a GPU
    alternet-benchmark --training --models alternet-50-cifar100 --batch-sizes 96 --num-workers 8
    alternet-benchmark --data-only --models alternet-50-cifar100    # CPU ms per image of one loader worker
    alternet-benchmark --engine-overhead                  # engine loop vs a hand-written loop, ms per step
    alternet-benchmark --reference-dir how-do-vits-work/  # AlterNet-50 train step vs the reference code's
    alternet-benchmark --corruptions --num-images 1000      # CIFAR-C generation vs per-image NumPy
    alternet-benchmark --hessian --models outputs/alternet-digits   # Lanczos vs power iteration
    alternet-benchmark --feature-maps --models alternet-18-cifar10 --num-images 256   # one pass vs the notebooks'
"""

import json
import os
from pathlib import Path

from alternet_hf.cli._common import CommandError, command, make_parser

DTYPES = ("float32", "bfloat16", "float16")


def build_parser():
    parser = make_parser(__doc__)
    parser.add_argument(
        "--models", nargs="+", default=["alternet-50-cifar100", "resnet-50-cifar100", "vit-ti-cifar100"]
    )
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[32])
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
    parser.add_argument("--dtype", choices=DTYPES, default="float32", help="autocast dtype of bare steps")
    parser.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument(
        "--training",
        action="store_true",
        help="time alternet-train end to end (paper recipe, loader workers, evaluation and a checkpoint every epoch)",
    )
    parser.add_argument("--training-images", type=int, default=960, help="training images per --training epoch")
    parser.add_argument("--training-epochs", type=int, default=2, help="epochs of the --training run")
    parser.add_argument("--num-workers", type=int, default=2, help="data-loading processes for --training")
    parser.add_argument(
        "--data-only", action="store_true", help="CPU time per image of the training data path, as one loader worker"
    )
    parser.add_argument(
        "--engine-overhead", action="store_true", help="ms per step of the engine's loop beyond a hand-written one"
    )
    parser.add_argument(
        "--reference-dir",
        type=Path,
        help="a checkout of xxxnell/how-do-vits-work: time an AlterNet-50 training step of ours against its",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=5,
        help="repetitions of --data-only / --engine-overhead / --reference-dir measurements",
    )
    parser.add_argument(
        "--corruptions", action="store_true", help="time CIFAR-C corruption generation against imagecorruptions"
    )
    parser.add_argument("--num-images", type=int, default=1000, help="images per corruption for --corruptions")
    parser.add_argument("--corruption-names", nargs="+", default=None, help="a subset of corruptions to time")
    parser.add_argument("--severity", type=int, default=3, help="severity for --corruptions")
    parser.add_argument("--threads", type=int, default=None, help="torch threads for --corruptions")
    parser.add_argument(
        "--hessian",
        action="store_true",
        help="count Hessian-vector products of Lanczos and power iteration for the top eigenvalue (digits batch)",
    )
    parser.add_argument(
        "--feature-maps",
        action="store_true",
        help="seconds of Fourier + variance on --num-images digits: separate passes, one shared pass, and the "
        "reference notebooks' computation on the same maps",
    )
    parser.add_argument("--output", type=Path, default=None, help="also write the results as JSON here")
    return parser


@command
def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    import torch
    from tqdm import tqdm

    from alternet_hf.benchmark import measure_throughput

    special = (
        args.corruptions or args.hessian or args.feature_maps,
        args.training,
        args.data_only,
        args.engine_overhead,
        args.reference_dir,
    )
    if sum(map(bool, special)) > 1:
        raise CommandError(
            "choose one of --corruptions/--hessian/--feature-maps, --training, --data-only, --engine-overhead, "
            "--reference-dir"
        )
    if args.corruptions or args.hessian or args.feature_maps:
        _write(args.output, analysis_benchmarks(args))
        return
    if args.training or args.data_only or args.engine_overhead or args.reference_dir:
        _write(args.output, engine_benchmarks(args))
        return

    compiled_options = {"no": [False], "yes": [True], "both": [False, True]}[args.compile or "no"]
    runs = [(n, b, m, c) for n in args.models for b in args.batch_sizes for m in args.modes for c in compiled_options]
    results = []
    for name, batch_size, mode, compiled in tqdm(runs, desc="benchmark", unit="run"):
        result = measure_throughput(
            name,
            batch_size=batch_size,
            mode=mode,
            compiled=compiled,
            device=args.device,
            dtype=getattr(torch, args.dtype),
            warmup=args.warmup,
            iterations=args.iterations,
        )
        results.append(result)

    print("\n| model | device | dtype | compile | batch | mode | images/s |\n|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r.model} | {r.device} | {r.dtype} | {'yes' if r.compiled else 'no'} | {r.batch_size} | "
            f"{r.mode} | {r.images_per_second:,.0f} |"
        )
    _write(args.output, [r.to_dict() for r in results])


def _write(path: Path | None, results) -> None:
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=2))
        print(f"\nwrote {path}")


def engine_benchmarks(args) -> list[dict]:
    import platform

    import torch

    from alternet_hf import benchmark

    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}"
    if args.engine_overhead:
        result = benchmark.measure_engine_overhead(repeats=args.repeats)
        medians = result["median_milliseconds_per_step"]
        print(
            f"\n{machine}; CPU ms per step (median of {args.repeats}), batch {result['batch_size']}, "
            "the smallest AlterNet, one thread"
        )
        print("| loop | ms per step |\n|---|---|")
        for label, value in medians.items():
            print(f"| {label} | {value:.2f} |")
        print(f"engine overhead: {result['overhead_milliseconds_per_step']:+.3f} ms per step")
        return [result]
    if args.reference_dir:
        result = benchmark.measure_reference_step(
            args.reference_dir, batch_size=args.batch_sizes[0], repeats=args.repeats
        )
        medians = result["median_cpu_seconds_per_step"]
        print(f"\n{machine}, {result['threads']} threads; AlterNet-50 training step, batch {result['batch_size']}")
        print("| implementation | CPU s per step (median) |\n|---|---|")
        for label, value in medians.items():
            print(f"| {label} | {value:.3f} |")
        print(f"alternet_hf / reference: {result['ratio']:.2f}×")
        return [result]
    rows = []
    for name in args.models:
        if args.data_only:
            result = benchmark.measure_data_path(name, images=args.training_images, repeats=args.repeats)
            rows.append(result.to_dict())
            per_pass = ", ".join(f"{ms:.3f}" for ms in result.milliseconds_per_image)
            print(
                f"\n{name}, paper recipe, {machine}: {per_pass} ms CPU per image "
                f"({result.images_per_second_per_worker:,.0f} images/s per loader worker)"
            )
            continue
        for batch_size in args.batch_sizes:
            compiled = {None: None, "no": False, "yes": True}[args.compile]
            result = benchmark.measure_training_run(
                name, epochs=args.training_epochs, images=args.training_images, batch_size=batch_size,
                num_workers=args.num_workers, compiled=compiled,
            )  # fmt: skip
            rows.append(result.to_dict())
            shares = ", ".join(f"{part} {100 * share:.0f}%" for part, share in result.shares.items())
            print(
                f"\n{name} on {result.device} ({machine}), batch {batch_size}, {args.num_workers} workers, "
                f"compiled: {result.compiled}\n"
                f"{result.train_images} images in {result.seconds:.1f} s: {result.images_per_second:,.1f} images/s "
                f"(last epoch's training {result.last_epoch_images_per_second:,.1f} images/s); time: {shares}\n"
                f"checkpoint {result.checkpoint_bytes / 1e6:,.0f} MB; the full recipe's cadence writes "
                f"{result.recipe_checkpoints} in {result.recipe_minutes:g} minutes: "
                f"{result.recipe_checkpoint_bytes / 1e9:,.1f} GB"
            )
    return rows


def analysis_benchmarks(args) -> list[dict]:
    from tqdm import tqdm

    from analysis.benchmark import corruption_speed, hessian_convergence, per_block_speed
    from analysis.corruptions import CORRUPTIONS

    if args.feature_maps:
        rows = [
            per_block_speed(name, num_images=args.num_images, repeats=args.repeats, device=args.device)
            for name in tqdm(args.models, desc="feature maps", unit="model")
        ]
        print(
            "\n| model | images | separate passes s | one pass s | reference notebooks s | separate / one | one / ref |"
        )
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            print(
                f"| {r['model']} | {r['images']} | {r['separate_passes_s']:.2f} | {r['one_pass_s']:.2f} | "
                f"{r['reference_notebook_s']:.2f} | {r['separate_over_one_pass']:.2f}× | "
                f"{r['one_pass_over_reference']:.2f}× |"
            )
        return rows
    if args.corruptions:
        rows = corruption_speed(
            num_images=args.num_images,
            severity=args.severity,
            corruptions=args.corruption_names or CORRUPTIONS,
            device=args.device,
            num_threads=args.threads,
        )
        print(f"\n{args.num_images} images 32×32, severity {args.severity}, on {rows[0]['device']}")
        print("| corruption | ours images/s | imagecorruptions images/s | speed-up |\n|---|---|---|---|")
        notes: list[str] = []
        for r in rows:
            if r["numpy_images_per_s"]:
                theirs = f"{r['numpy_images_per_s']:,.0f}"
            else:
                notes += [r["note"]] if r["note"] not in notes else []
                theirs = f"— ({notes.index(r['note']) + 1})"
            speedup = f"{r['speedup']:.1f}×" if r["speedup"] else "—"
            print(f"| {r['corruption']} | {r['ours_images_per_s']:,.0f} | {theirs} | {speedup} |")
        for number, note in enumerate(notes, 1):
            print(f"({number}) {note}")
        return rows
    rows = []
    for name in tqdm(args.models, desc="hessian", unit="model"):
        for batch_size in args.batch_sizes:
            rows.append(hessian_convergence(name, batch_size=batch_size, device=args.device))
    print(
        "\n| model | batch | top eigenvalue | HVPs to 1%: Lanczos | power | own stop: Lanczos (error) | power (error) |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['model']} | {r['batch_size']} | {r['top_eigenvalue']:.4g} | {r['lanczos_hvps_to_tolerance']} | "
            f"{r['power_hvps_to_tolerance'] or 'never'} | "
            f"{r['lanczos_hvps_own_stop']} ({r['lanczos_error_own_stop']:.1e}) | "
            f"{r['power_hvps_own_stop']} ({r['power_error_own_stop']:.1e}) |"
        )
    return rows


if __name__ == "__main__":
    main()
