"""Build an AlterNet for your data by the paper's rules: start from the CNN, add an MSA block at the end of the
network, keep it if the held-out accuracy rises beyond the noise, else try the end of an earlier stage; stop when no
stage is left (or at --max-msa). With no arguments: the first run's small AlterNet-18 on the embedded digits.

    alternet-buildup --epochs 2 --output-dir outputs/buildup-digits   # offline, minutes on a CPU
    alternet-buildup --recipe paper --model alternet-50-cifar100 --seeds 0 1 2   # on uoft-cs/cifar100, a GPU
    alternet-buildup --model outputs/alternet-digits --dataset path/to/imagefolder --start-layout 0 1 0 1 --max-msa 3

Every candidate is an alternet-train run with the same settings (any alternet-train flag applies to all); the path
goes to buildup.md, .png and .json, the last kept model to --output-dir/final/. Run again, it resumes.
"""

import argparse
import json
from pathlib import Path

from alternet_hf.cli.common import CommandError, command, make_parser
from alternet_hf.cli.train import add_training_arguments, config_from_args
from alternet_hf.training.recipe import TrainingConfig

DEFAULT_OUTPUT_DIR = "outputs/buildup"


def build_parser() -> argparse.ArgumentParser:
    parser = make_parser(__doc__)
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        help="train every candidate once per seed and judge by the mean over seeds (default: --seed's one run, "
        "judged on its held-out images)",
    )
    parser.add_argument("--max-msa", type=int, help="stop once the layout has this many MSA blocks")
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="train this many candidates side by side (the next and rule 2's fallbacks), one process each, on its "
        "own GPU where there are as many (default: 1)",
    )
    parser.add_argument("--train-candidate", type=Path, help=argparse.SUPPRESS)  # one run of --jobs, by its config
    parser.add_argument(
        "--start-layout",
        type=int,
        nargs="+",
        metavar="M",
        help="MSA blocks per stage to start from (default: none, the CNN)",
    )
    add_training_arguments(parser)
    parser.set_defaults(output_dir=DEFAULT_OUTPUT_DIR)
    return parser


@command
def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.train_candidate:
        from alternet_hf.apps.buildup import train_candidate

        train_candidate(TrainingConfig(**json.loads(args.train_candidate.read_text())))
        return
    if args.jobs < 1:
        raise CommandError(f"--jobs must be at least 1, not {args.jobs}")
    if args.max_msa is not None and args.max_msa < 1:
        raise CommandError(f"--max-msa must be at least 1, not {args.max_msa}")
    if args.config and "output_dir" in args.config and args.output_dir == DEFAULT_OUTPUT_DIR:
        del args.output_dir  # the file's folder, unless a flag says otherwise
    config = config_from_args(args)
    from alternet_hf.apps.buildup import NotAnAlterNetError, search

    try:
        search(
            config,
            seeds=args.seeds or [config.seed],
            max_msa=args.max_msa,
            start_layout=args.start_layout,
            jobs=args.jobs,
        )
    except NotAnAlterNetError as error:
        raise CommandError(str(error)) from None


if __name__ == "__main__":
    main()
