#!/usr/bin/env bash
# Train, evaluate, analyse and publish the three zoo models and the Space.
# For whoever holds a GPU machine and a Hub token (`hf auth login`):  ORG=<org> bash scripts/release.sh
# Each step is resumable: re-running skips nothing but training resumes from its last checkpoint.
set -euo pipefail
ORG=${ORG:?set ORG to the Hub organisation or user}
MODELS=${MODELS:-"alternet-50-cifar100 resnet-50-cifar100 vit-ti-cifar100"}
OUT=${OUT:-outputs}

for preset in $MODELS; do
  dir="$OUT/$preset-paper"
  accelerate launch -m alternet_hf.cli.train --model "$preset" --recipe paper --dataset uoft-cs/cifar100 \
      --output-dir "$dir" --resume
  alternet-evaluate --model "$dir" --dataset uoft-cs/cifar100
  alternet-analyze --model "$dir" --dataset uoft-cs/cifar100 --out "results/$preset"
  alternet-push --model "$dir" --repo-id "$ORG/$preset"
done

# The Space: app, card, requirements, and the two packages it imports; stored results for the curves.
space=$(mktemp -d)
cp spaces/app.py spaces/README.md spaces/requirements.txt "$space/"
cp -r alternet_hf analysis "$space/"
mkdir -p "$space/results"
cp -r results/resnet-50-cifar100 "$space/results/ResNet-50"
cp -r results/vit-ti-cifar100 "$space/results/ViT-Ti"
cp -r results/alternet-50-cifar100 "$space/results/AlterNet-50"
hf upload "$ORG/how-do-vits-work" "$space" . --repo-type space
echo "Space: https://huggingface.co/spaces/$ORG/how-do-vits-work (set ALTERNET_SPACE_RESULTS=results and"
echo "ALTERNET_SPACE_MODELS=ResNet-50=$ORG/resnet-50-cifar100,ViT-Ti=$ORG/vit-ti-cifar100,AlterNet-50=$ORG/alternet-50-cifar100)"
