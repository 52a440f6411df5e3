"""Images/s of zoo presets on this machine: bare forward and forward+backward steps, eager and
torch.compile, or (--training) one epoch of the training engine with the paper's recipe.

    alternet-benchmark                                   # the three zoo models, batch 32, eager
    alternet-benchmark --batch-sizes 256 1024 --compile both --dtype bfloat16   # on a GPU
    alternet-benchmark --training --models alternet-50-cifar100 --batch-sizes 96 --num-workers 8
    alternet-benchmark --corruptions --num-images 1000      # CIFAR-C generation vs per-image NumPy
    alternet-benchmark --hessian --models outputs/alternet-digits   # Lanczos vs power iteration
"""

import json
from pathlib import Path

from alternet_hf.cli._common import command, make_parser

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
        default="no",
        help="time torch.compile'd models too (compilation is not timed, except inside a --training epoch)",
    )
    parser.add_argument("--dtype", choices=DTYPES, default="float32", help="autocast dtype of bare steps")
    parser.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument(
        "--training",
        action="store_true",
        help="time one epoch of alternet-train's engine (paper recipe, data loading and augmentation included)",
    )
    parser.add_argument("--training-images", type=int, default=960, help="images in the --training epoch")
    parser.add_argument("--num-workers", type=int, default=0, help="data-loading processes for --training")
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
    parser.add_argument("--output", type=Path, default=None, help="also write the results as JSON here")
    return parser


@command
def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    import torch
    from tqdm import tqdm

    from alternet_hf.benchmark import measure_throughput, measure_training_throughput

    if args.corruptions or args.hessian:
        results = analysis_benchmarks(args)
        if args.output:
            args.output.parent.mkdir(parents=True, exist_ok=True)
            args.output.write_text(json.dumps(results, indent=2))
            print(f"\nwrote {args.output}")
        return

    compiled_options = {"no": [False], "yes": [True], "both": [False, True]}[args.compile]
    modes = ["train"] if args.training else args.modes
    runs = [(n, b, m, c) for n in args.models for b in args.batch_sizes for m in modes for c in compiled_options]
    results = []
    for name, batch_size, mode, compiled in tqdm(runs, desc="benchmark", unit="run"):
        if args.training:
            result = measure_training_throughput(
                name,
                images=args.training_images,
                batch_size=batch_size,
                num_workers=args.num_workers,
                compiled=compiled,
            )
        else:
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
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps([r.to_dict() for r in results], indent=2))
        print(f"\nwrote {args.output}")


def analysis_benchmarks(args) -> list[dict]:
    from tqdm import tqdm

    from analysis.benchmark import corruption_speed, hessian_convergence
    from analysis.corruptions import CORRUPTIONS

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
