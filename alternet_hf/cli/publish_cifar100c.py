"""Publish the released CIFAR-100-C arrays (Zenodo record 3555552) as a parquet dataset on the Hub.

    alternet-publish-cifar100c --zenodo-dir CIFAR-100-C/ --repo-id <org>/cifar100-c
    alternet-publish-cifar100c --zenodo-dir CIFAR-100-C/ --repo-id <org>/cifar100-c --dry-run cifar100c/

Writes one parquet file per corruption and severity and a dataset card (docs/release.md), then uploads them (needs a
token: `hf auth login`). The Hub's other copies of CIFAR-100-C are loading-script datasets that current `datasets`
refuses; this one is plain parquet.
"""

import functools
from pathlib import Path

from alternet_hf.cli.common import command, make_parser, output_folder, publish


def build_parser():
    parser = make_parser(__doc__)
    parser.add_argument("--zenodo-dir", type=Path, required=True, help="folder with labels.npy and <corruption>.npy")
    parser.add_argument("--repo-id", required=True, help="the dataset repo to create, e.g. <org>/cifar100-c")
    parser.add_argument("--dry-run", type=output_folder, help="write the files into this folder, upload nothing")
    parser.add_argument("--corruptions", help="comma-separated subset (default: all 15)")
    parser.add_argument("--private", action="store_true")
    return parser


@command
def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    from alternet_hf.hub.cifar100c import write_hub_dataset

    corruptions = [c for c in args.corruptions.split(",") if c] if args.corruptions else None  # None: all
    write = functools.partial(write_hub_dataset, args.zenodo_dir, repo_id=args.repo_id, corruptions=corruptions)
    if not publish(args, write, "CIFAR-100-C", repo_type="dataset"):
        print(f"dry run: wrote {args.dry_run}/ (README.md and data/*.parquet); nothing uploaded")


if __name__ == "__main__":
    main()
