"""Publish the released CIFAR-100-C arrays (Zenodo record 3555552) as a parquet dataset on the Hub.

    alternet-publish-cifar100c --zenodo-dir CIFAR-100-C/ --repo-id <org>/cifar100-c
    alternet-publish-cifar100c --zenodo-dir CIFAR-100-C/ --repo-id <org>/cifar100-c --dry-run out/

Writes one parquet file per corruption (columns image, label, corruption, severity; split "test")
and a dataset card, then creates the dataset repo and uploads them (needs a token: `hf auth login`).
With --dry-run DIR it writes exactly what would be uploaded into DIR and uploads nothing. The Hub
copies of CIFAR-100-C that exist are loading-script datasets current `datasets` refuses; this one is
plain parquet, read back by `analysis.robustness.ParquetCorruptions("<org>/cifar100-c")`.
"""

import tempfile
from pathlib import Path

from alternet_hf.cli._common import CommandError, command, make_parser, upload

CITATION = """@inproceedings{hendrycks2019benchmarking,
  title={Benchmarking Neural Network Robustness to Common Corruptions and Perturbations},
  author={Dan Hendrycks and Thomas Dietterich},
  booktitle={International Conference on Learning Representations},
  year={2019}
}"""


def dataset_card(repo_id: str, corruptions: list[str], images_per_set: int):
    from huggingface_hub import DatasetCard, DatasetCardData

    from analysis.corruptions import SEVERITY_PARAMETERS

    data = DatasetCardData(
        license="cc-by-4.0",
        pretty_name="CIFAR-100-C",
        task_categories=["image-classification"],
        size_categories=["100K<n<1M"] if images_per_set * 5 * len(corruptions) >= 100_000 else ["n<100K"],
        source_datasets=["uoft-cs/cifar100"],
        configs=[{"config_name": "default", "data_files": [{"split": "test", "path": "data/test-*.parquet"}]}],
    )
    table = "\n".join(f"| {name} | {SEVERITY_PARAMETERS[name]} |" for name in corruptions)
    body = f"""
# CIFAR-100-C

The CIFAR-100 test set under {len(corruptions)} common corruptions at 5 severities (Hendrycks & Dietterich,
ICLR 2019), converted from the released arrays (Zenodo record 3555552) to parquet, one row per image:
`image` (PNG, 32×32 RGB), `label` (CIFAR-100 fine label), `corruption`, `severity` (1–5);
{images_per_set:,} images per corruption and severity.

```python
from datasets import load_dataset
fog = load_dataset("{repo_id}", split="test").filter(lambda row: row["corruption"] == "fog" and row["severity"] == 3)
# or, for evaluation by corruption and severity:
from analysis.robustness import ParquetCorruptions, evaluate_corruptions
evaluate_corruptions(model, ParquetCorruptions("{repo_id}"))
```

| corruption | CIFAR-C parameters, severities 1–5 |
|---|---|
{table}

Published with `alternet-publish-cifar100c` of alternet-hf. Licence of the original arrays: CC BY 4.0.

```bibtex
{CITATION}
```
"""
    return DatasetCard(f"---\n{data.to_yaml()}\n---\n{body}")


def write(zenodo_dir: Path, folder: Path, repo_id: str, corruptions: list[str]) -> Path:
    from tqdm import tqdm

    from analysis.robustness import ZenodoArrays, save_as_parquet

    source = ZenodoArrays(zenodo_dir)
    missing = sorted(set(corruptions) - set(source.available()))
    if missing:
        raise CommandError(f"{zenodo_dir} lacks {missing}.npy; it has {source.available()}")
    for corruption in tqdm(corruptions, desc="parquet", unit="corruption"):
        save_as_parquet(source, folder / "data" / f"test-{corruption}.parquet", corruptions=[corruption])
    dataset_card(repo_id, corruptions, source.per_severity).save(folder / "README.md")
    return folder


def build_parser():
    parser = make_parser(__doc__)
    parser.add_argument("--zenodo-dir", type=Path, required=True, help="folder with labels.npy and <corruption>.npy")
    parser.add_argument("--repo-id", required=True, help="the dataset repo to create, e.g. <org>/cifar100-c")
    parser.add_argument("--dry-run", type=Path, help="write what would be uploaded into this folder, upload nothing")
    parser.add_argument("--corruptions", help="comma-separated subset (default: all 15)")
    parser.add_argument("--private", action="store_true")
    return parser


@command
def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    from huggingface_hub import HfApi

    from analysis.corruptions import CORRUPTIONS

    corruptions = [c for c in args.corruptions.split(",") if c] if args.corruptions else list(CORRUPTIONS)

    if args.dry_run:
        folder = write(args.zenodo_dir, args.dry_run, args.repo_id, corruptions)
        print(f"dry run: wrote {folder}/ (README.md and data/*.parquet); nothing uploaded")
        return
    with tempfile.TemporaryDirectory() as scratch:
        folder = write(args.zenodo_dir, Path(scratch), args.repo_id, corruptions)
        api = HfApi()

        def upload_files():
            api.create_repo(args.repo_id, repo_type="dataset", private=args.private, exist_ok=True)
            api.upload_folder(repo_id=args.repo_id, repo_type="dataset", folder_path=folder)

        upload(upload_files, "CIFAR-100-C")
    print(f"published https://huggingface.co/datasets/{args.repo_id}")


if __name__ == "__main__":
    main()
