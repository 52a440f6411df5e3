"""Release the zoo: publish CIFAR-100-C, train, evaluate (clean and CIFAR-100-C), analyse and compare the models,
push each with its card, and push the Space configured for this organisation. One command, resumable.

    alternet-release --org <org> --cifar100c-dir CIFAR-100-C/            # on a GPU machine, after `hf auth login`
    alternet-release --org <org> --cifar100c-dir CIFAR-100-C/ --dry-run zoo-release/   # all but the uploads
    alternet-release --org <org> --rehearsal --dry-run rehearsal/        # the whole release offline, on a CPU

Each step is recorded in <out>/release.json and skipped when it is complete: run the same command again after a
crash or a kill and it goes on at the step it was in (training from its last checkpoint). --dry-run DIR writes
every repository exactly as it would be uploaded (DIR/models/<preset>/, DIR/datasets/cifar100-c/,
DIR/spaces/how-do-vits-work/) and uploads nothing. --rehearsal runs the same path on a stand-in built offline in the
real schemas (a 100-class dataset in uoft-cs/cifar100's columns, CIFAR-100-C arrays in the Zenodo layout), with tiny
models and epochs, compiled with inductor in bf16 and channels-last on the CPU: under 3 minutes on 2 cores.
"""

from pathlib import Path

from alternet_hf.cli._common import CommandError, command, make_parser


def build_parser():
    parser = make_parser(__doc__)
    parser.add_argument("--org", required=True, help="the Hub user or organisation that will own the repos")
    parser.add_argument(
        "--models", nargs="+", metavar="PRESET",
        help="CIFAR-100 presets (default: resnet-50-cifar100 vit-ti-cifar100 alternet-50-cifar100; the paper's PiT "
        "and Swin: add pit-ti-cifar100 swin-ti-cifar100)",
    )  # fmt: skip
    parser.add_argument(
        "--cifar100c-dir", type=Path,
        help="CIFAR-100-C as released on Zenodo (labels.npy and <corruption>.npy; record 3555552)",
    )  # fmt: skip
    parser.add_argument(
        "--without-cifar100c", action="store_true",
        help="release without CIFAR-100-C: no dataset, no robustness on the cards (refused otherwise)",
    )  # fmt: skip
    parser.add_argument("--dry-run", type=Path, metavar="DIR", help="write every repo into DIR, upload nothing")
    parser.add_argument(
        "--out", type=Path, default=Path("outputs/release"), help="staging folder of a real release (and its manifest)"
    )
    parser.add_argument("--rehearsal", action="store_true", help="the whole release offline on a stand-in, tiny")
    parser.add_argument("--overwrite", action="store_true", help="delete another release's files in the folder")
    parser.add_argument("--private", action="store_true", help="create the Hub repos private")
    parser.add_argument("--num-processes", type=int, help="training processes (default: one per GPU)")
    parser.add_argument("--no-estimate", action="store_true", help="skip the H100 time estimate (FLOP counting)")
    return parser


@command
def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    from alternet_hf.release import (
        RELEASE_MODELS,
        Release,
        ReleaseOptions,
        check_hub,
        check_options,
        check_training_data,
        h100_estimate,
    )

    if args.cifar100c_dir is not None and args.without_cifar100c:
        raise CommandError("--cifar100c-dir and --without-cifar100c exclude each other: choose one")
    if args.num_processes is not None and args.num_processes < 1:
        raise CommandError(f"--num-processes must be at least 1, not {args.num_processes}")
    options = ReleaseOptions(
        org=args.org, out=args.dry_run or args.out, models=tuple(args.models or RELEASE_MODELS),
        cifar100c_dir=args.cifar100c_dir, without_cifar100c=args.without_cifar100c, dry_run=args.dry_run is not None,
        rehearsal=args.rehearsal, overwrite=args.overwrite, private=args.private, num_processes=args.num_processes,
    )  # fmt: skip
    check_options(options)
    if not options.dry_run:
        print(f"Hub: logged in as {check_hub(options)}")
    check_training_data(options)
    if not args.no_estimate:
        _, lines = h100_estimate(RELEASE_MODELS if options.rehearsal else options.models)
        print(f"the real release on one H100 (paper recipe, full-size models):\n{lines}")
    summary = Release(options).run()
    print_summary(summary, options)


def print_summary(summary: dict, options) -> None:
    print("\nrelease summary" + (" (rehearsal)" if options.rehearsal else ""))
    for model in summary["models"].values():
        mean_c = "not evaluated" if model["cifar100c_mean"] is None else f"{100 * model['cifar100c_mean']:.2f}%"
        print(f"  {model['repo_id']}: top-1 {100 * model['top1']:.2f}%, CIFAR-100-C mean accuracy {mean_c}")
    if summary["dataset"]:
        print(f"  dataset {summary['dataset']}")
    print(f"  Space {summary['space']}")
    print("  claims: " + ", ".join(f"{count} {verdict}" for verdict, count in summary["claims"].items()))
    where = f"written to {options.out}/ (nothing uploaded)" if options.dry_run else "published"
    print(f"  {len(summary['steps_run'])} steps run, {len(summary['steps_skipped'])} already complete; {where}")


if __name__ == "__main__":
    main()
