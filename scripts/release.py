"""Release the zoo: publish CIFAR-100-C, put each model on the Hub (the reference's released weights converted, or
trained with the paper's recipe), evaluated on the clean test split and CIFAR-100-C, analysed and compared, with its
card, push the Space configured for this organisation, and upload the alternet-hf package itself to the package index
(built, checked and tried first; twine's TWINE_* settings). One command, resumable (docs/release.md: every step).

    python scripts/release.py --org <org> --from-reference --cifar100c-dir CIFAR-100-C/  # the reference's four
    python scripts/release.py --org <org> --from-reference ckpts/ --cifar100c-dir CIFAR-100-C/  # files in ckpts/
    python scripts/release.py --org <org> --cifar100c-dir CIFAR-100-C/  # train all three, on a GPU machine
    python scripts/release.py --org <org> --cifar100c-dir CIFAR-100-C/ --dry-run zoo-release/  # all but uploads
    python scripts/release.py --org <org> --from-reference --rehearsal --dry-run rehearsal/  # offline

Each step is recorded in <out>/release.json and skipped once complete: after a crash or a kill, run the same command
again. A model whose training would outlast --training-budget here is left pending; run again on a GPU, it is added.
"""

import argparse
from pathlib import Path

from alternet_hf.cli.common import CommandError, command, flag_values, make_parser
from zoo_release import CIFAR100C_BUDGET, MAX_ACCURACY_GAP, TRAINING_BUDGET, parse_duration


def build_parser():
    parser = make_parser(__doc__)
    parser.add_argument("--org", required=True, help="the Hub user or organisation that will own the repos")
    parser.add_argument(
        "--from-reference",
        nargs="?",
        const="",
        metavar="DIR",
        help="release the reference's four released CIFAR-100 models from their files (in DIR, else downloaded) "
        "and AlterNet-50 trained",
    )
    parser.add_argument(
        "--models",
        nargs="+",
        metavar="PRESET",
        help="CIFAR-100 presets (default: resnet-50-cifar100 vit-ti-cifar100 alternet-50-cifar100, trained; with "
        "--from-reference the paper's five, the four released ones converted)",
    )
    cifar100c = parser.add_mutually_exclusive_group()
    cifar100c.add_argument(
        "--cifar100c-dir",
        type=Path,
        help="CIFAR-100-C as released on Zenodo (labels.npy and <corruption>.npy; record 3555552)",
    )
    cifar100c.add_argument(
        "--without-cifar100c",
        action="store_true",
        help="release without CIFAR-100-C: no dataset, no robustness on the cards (refused otherwise)",
    )
    parser.add_argument("--dry-run", type=Path, metavar="DIR", help="write every repo into DIR, upload nothing")
    parser.add_argument(
        "--out", type=Path, default=Path("outputs/release"), help="staging folder of a real release (and its manifest)"
    )
    parser.add_argument("--rehearsal", action="store_true", help="the whole release offline on a stand-in, tiny")
    parser.add_argument("--overwrite", action="store_true", help="delete another release's files in the folder")
    parser.add_argument("--private", action="store_true", help="create the Hub repos private")
    parser.add_argument("--num-processes", type=int, help="training processes (default: one per GPU)")
    parser.add_argument("--no-estimate", action="store_true", help="skip the H100 time estimate (FLOP counting)")
    parser.add_argument(
        "--max-accuracy-gap",
        type=float,
        default=MAX_ACCURACY_GAP,
        metavar="POINTS",
        help=f"refuse a converted model whose top-1 lies further than this from the reported one (default "
        f"{MAX_ACCURACY_GAP:g} points)",
    )
    parser.add_argument(
        "--cifar100c-budget",
        type=duration,
        default=CIFAR100C_BUDGET,
        metavar="TIME",
        help="CIFAR-100-C evaluation time per model on a CPU, e.g. 30m, 2h (default 1h); beyond it a seeded, "
        "class-stratified subset of each set is evaluated",
    )
    parser.add_argument(
        "--training-budget",
        type=duration,
        default=TRAINING_BUDGET,
        metavar="TIME",
        help="training time per model here (default 24h); a model that would take longer is left pending",
    )
    return parser


def duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


@command
def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    from alternet_hf.utils.run_lock import hold_folder
    from zoo_release import RUNNING_ADVICE, Release, ReleaseOptions, preflight

    if args.num_processes is not None and args.num_processes < 1:
        raise CommandError(f"--num-processes must be at least 1, not {args.num_processes}")
    options = ReleaseOptions(
        out=args.dry_run or args.out,
        dry_run=args.dry_run is not None,
        from_reference=args.from_reference is not None,
        reference_dir=Path(args.from_reference) if args.from_reference else None,
        **flag_values(
            args,
            "org models cifar100c_dir without_cifar100c rehearsal overwrite private num_processes max_accuracy_gap "
            "cifar100c_budget training_budget",
        ),
    )
    with hold_folder(options.out, advice=RUNNING_ADVICE):  # before the checks: --overwrite deletes
        preflight(options, estimate=not args.no_estimate)
        summary = Release(options).run()
    print_summary(summary, options)


def print_summary(summary: dict, options) -> None:
    print("\nrelease summary" + (" (rehearsal)" if options.rehearsal else ""))
    for model in summary["models"].values():
        mean_c = "not evaluated" if model["cifar100c_mean"] is None else f"{100 * model['cifar100c_mean']:.2f}%"
        print(
            f"  {model['repo_id']}: top-1 {100 * model['top1']:.2f}%, CIFAR-100-C mean accuracy {mean_c} "
            f"({model['weights']})"
        )
    for model in summary["pending"].values():
        print(f"  {model['repo_id']}: pending: {model['why']}")
    if summary["dataset"]:
        print(f"  dataset {summary['dataset']}")
    print(f"  Space {summary['space']}")
    print("  claims: " + ", ".join(f"{count} {verdict}" for verdict, count in summary["claims"].items()))
    where = f"written to {options.out}/ (nothing uploaded)" if options.dry_run else "published"
    print(f"  {len(summary['steps_run'])} steps run, {len(summary['steps_skipped'])} already complete; {where}")


if __name__ == "__main__":
    main()
