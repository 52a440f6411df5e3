"""Publish a trained zoo model to the Hub: weights, config, image processor, remote code and a model card.

    alternet-push --model outputs/alternet-50-cifar100-paper --repo-id <org>/alternet-50-cifar100
    alternet-push --model outputs/alternet-digits --repo-id <org>/alternet-digits --dry-run release/

The card's `model-index` comes from --evaluation, else alternet-evaluate's eval_*.json on the training (or
fine-tuning) dataset's evaluation split (the whole split before a sample of it), else alternet-finetune's
eval_results.json or alternet-train's metrics.json. Uploading needs a token (`hf auth login`).
"""

import functools
from pathlib import Path

from alternet_hf.cli.common import CommandError, command, make_parser, output_folder, publish
from alternet_hf.utils import damaged_model_file


def build_parser():
    parser = make_parser(__doc__)
    parser.add_argument("--model", type=Path, required=True, help="folder of a trained or fine-tuned model")
    parser.add_argument("--repo-id", required=True, help="e.g. <org>/alternet-50-cifar100")
    parser.add_argument("--dry-run", type=output_folder, help="write the files into this folder, upload nothing")
    parser.add_argument("--evaluation", type=Path, help="the eval_*.json of alternet-evaluate to report")
    parser.add_argument("--private", action="store_true")
    return parser


@command
def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if not args.model.is_dir():
        raise CommandError(f"{args.model} is not a folder: give the output folder of alternet-train or -finetune")
    problem = damaged_model_file(args.model)
    if problem:
        raise CommandError(problem)
    from alternet_hf.hub.repos import write_release

    write = functools.partial(write_release, args.model, repo_id=args.repo_id, evaluation=args.evaluation)
    if not publish(args, write, f"the model {args.model}", commit_message=f"Upload {args.model.name}"):
        print(f"dry run: wrote {args.dry_run}/ ({', '.join(sorted(p.name for p in args.dry_run.iterdir()))})")


if __name__ == "__main__":
    main()
