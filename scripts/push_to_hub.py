#!/usr/bin/env python
"""Publish a trained zoo model to the Hub: weights, config, image processor, remote code and a model card.

    python scripts/push_to_hub.py --model outputs/alternet-50-cifar100-paper --repo-id <org>/alternet-50-cifar100
    python scripts/push_to_hub.py --model outputs/alternet-digits --repo-id <org>/alternet-digits --dry-run out/

The card's `model-index` comes from the model folder's evaluation JSON (--evaluation, else
scripts/evaluate.py's newest eval_*.json on the training dataset's evaluation split, else training's
metrics.json). With --dry-run DIR it writes exactly what would be uploaded into DIR and uploads
nothing; otherwise it needs a token (`hf auth login`).
"""

import argparse
import tempfile
from pathlib import Path

from huggingface_hub import HfApi

from alternet_hf.hub import write_release


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="folder of a trained model")
    parser.add_argument("--repo-id", required=True, help="e.g. <org>/alternet-50-cifar100")
    parser.add_argument("--dry-run", type=Path, help="write what would be uploaded into this folder, upload nothing")
    parser.add_argument("--evaluation", type=Path, help="the eval_*.json of scripts/evaluate.py to report")
    parser.add_argument("--private", action="store_true")
    args = parser.parse_args()
    if not args.model.is_dir():
        raise SystemExit(f"{args.model} is not a folder: give the output folder of scripts/train.py")

    if args.dry_run:
        write_release(args.model, args.dry_run, args.repo_id, evaluation=args.evaluation)
        print(f"dry run: wrote {args.dry_run}/ ({', '.join(sorted(p.name for p in args.dry_run.iterdir()))})")
        return
    with tempfile.TemporaryDirectory() as scratch:
        folder = write_release(args.model, scratch, args.repo_id, evaluation=args.evaluation)
        api = HfApi()
        api.create_repo(args.repo_id, private=args.private, exist_ok=True)
        api.upload_folder(repo_id=args.repo_id, folder_path=folder, commit_message=f"Upload {args.model.name}")
    print(f"published https://huggingface.co/{args.repo_id}")


if __name__ == "__main__":
    main()
