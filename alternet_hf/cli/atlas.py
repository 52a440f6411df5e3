"""The atlas: the Space's *Any model* probe over many Hub image classifiers, as a Hub dataset, with the paper's claims
decided across them.

    alternet-atlas timm/resnet50.a1_in1k google/vit-base-patch16-224 --output-dir atlas/
    alternet-atlas --top 100 --output-dir atlas/        # the 100 most downloaded of transformers and of timm
    alternet-atlas --from-file models.txt --output-dir atlas/ --push-to <org>/frequency-atlas
    alternet-atlas --output-dir atlas/                  # every repo already in it, at its current commit
    alternet-atlas --output-dir atlas/ --check 5        # 5 rows measured again from a clean cache

Each model goes through the Space's checks, worker and answer cache (ALTERNET_SPACE_CACHE; its limits are the
Space's: SECURITY.md): a commit measured before is not measured again, and a model refused or failed gets a row with
its reason. --output-dir is a dataset repo: data/*.parquet, README.md (the card: columns, method, command, counts,
the claims), claims.json, figures/. Stop it at any time: a run again goes on from the last model written.
"""

import argparse
import shlex
import sys
from pathlib import Path

from alternet_hf.cli.common import CommandError, command, make_parser, output_folder


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = make_parser(__doc__)
    parser.add_argument("models", nargs="*", help="Hub model ids (or URLs, /tree/<revision> included)")
    parser.add_argument("--from-file", type=Path, help="a file of model ids, one per line (# comments)")
    parser.add_argument(
        "--top", type=positive, metavar="N", help="add the N most downloaded image classifiers of each --library"
    )
    parser.add_argument(
        "--library",
        default="transformers,timm",
        help="libraries --top lists, comma-separated (default: transformers,timm)",
    )
    parser.add_argument("--output-dir", type=output_folder, required=True, help="the atlas folder (a dataset repo)")
    parser.add_argument(
        "--check", type=positive, metavar="N", help="measure N of its rows again from a clean cache and compare"
    )
    parser.add_argument("--push-to", metavar="ORG/NAME", help="upload the folder to this Hub dataset repo")
    parser.add_argument("--private", action="store_true", help="with --push-to: create the repo private")
    parser.add_argument("--seed", type=int, default=0, help="seed of the claims' tests and of --check's sample")
    parser.add_argument("--time-limit", type=float, help="seconds per model (default: the Space's, 180)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


@command
def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    libraries = [name.strip() for name in args.library.split(",") if name.strip()]
    unknown = sorted(set(libraries) - {"transformers", "timm"})
    if unknown:
        raise CommandError(f"--library takes transformers and/or timm, not {', '.join(unknown)}")
    if args.from_file is not None and not args.from_file.is_file():
        raise CommandError(f"--from-file {args.from_file}: no such file")
    from alternet_hf.apps import atlas

    with atlas.held(args.output_dir):
        found = atlas.Atlas(args.output_dir)
        if args.check:
            if not found.measured():
                raise CommandError(f"{args.output_dir} has no measured rows to check")
            differences = atlas.check(found, args.check, seed=args.seed, time_limit=args.time_limit)
            checked = min(args.check, len(found.measured()))
            if differences:
                print(f"{len(differences)} of {checked} rows differ:", *differences, sep="\n  ")
                raise SystemExit(1)
            print(f"all {checked} rows checked agree with a clean measurement")
            return
        ids = list(args.models)
        if args.from_file is not None:
            ids += atlas.read_ids(args.from_file)
        if args.top:
            listed = atlas.top_models(args.top, libraries)
            print(f"the Hub lists {len(listed)} image classifiers ({args.top} of each of {', '.join(libraries)})")
            ids += listed
        if not ids:
            ids = list(found.rows)  # refresh: every repo already in the atlas, at its current commit
        if not ids:
            raise CommandError(
                f"name the models to measure (ids, --from-file or --top N); {args.output_dir} has none yet"
            )
        counts = atlas.measure(found, ids, time_limit=args.time_limit, progress=not args.no_progress, report=print)
        command_line = shlex.join(["alternet-atlas", *(sys.argv[1:] if argv is None else argv)])
        decided = atlas.write_outputs(found, command=command_line, seed=args.seed)
        totals = {status: sum(row["status"] == status for row in found.rows.values()) for status in counts}
        print(
            f"{len(ids)} model{'s' * (len(ids) != 1)}: {counts['measured']} measured, {counts['unchanged']} unchanged, "
            f"{counts['refused']} refused, {counts['failed']} failed; the atlas holds {totals['measured']} measured, "
            f"{totals['refused']} refused, {totals['failed']} failed"
        )
        for claim in decided:
            print(f"  {claim.key}: {claim.sentence()}")
        print(f"wrote {args.output_dir}/ ({atlas.DATA_FILE}, README.md, {atlas.CLAIMS_FILE}, figures/)")
    if args.push_to:
        push(args)


def push(args: argparse.Namespace) -> None:
    """Upload the atlas folder to `--push-to` (a dataset repo, created if missing); the folder is left as it is."""
    from huggingface_hub import HfApi

    from alternet_hf.utils import hub_failure
    from alternet_hf.utils.run_lock import LOCK_FILE

    api = HfApi()
    try:
        api.create_repo(args.push_to, repo_type="dataset", private=args.private, exist_ok=True)
        api.upload_folder(
            repo_id=args.push_to,
            repo_type="dataset",
            folder_path=args.output_dir,
            ignore_patterns=[LOCK_FILE, "*.partial"],
            commit_message="alternet-atlas",
        )
    except Exception as error:
        if hub_failure(error) is None and not isinstance(error, OSError):
            raise
        raise CommandError(
            f"could not upload the atlas to the Hub ({type(error).__name__}: {str(error).splitlines()[0][:200]}); "
            f"{args.output_dir} is complete: log in with `hf auth login` (or set HF_TOKEN) where the Hub is "
            f"reachable, then run `alternet-atlas --output-dir {args.output_dir} --push-to {args.push_to}` again"
        ) from error
    print(f"published https://huggingface.co/datasets/{args.push_to}")


if __name__ == "__main__":
    main()
