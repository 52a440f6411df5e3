"""Evaluate a trained model with the paper's metrics; print them and write JSON (and a reliability diagram).

alternet-evaluate --model outputs/alternet-digits --dataset digits
alternet-evaluate --model <org>/alternet-50-cifar100 --dataset uoft-cs/cifar100 --output results/
"""

import json
import math
from pathlib import Path

from alternet_hf.cli._common import command, make_parser, model_source


def build_parser():
    parser = make_parser(__doc__)
    parser.add_argument("--model", required=True, type=model_source, help="folder or Hub id of a trained model")
    parser.add_argument("--dataset", default="digits", help="'digits', a Hub id, or a local folder/parquet file")
    parser.add_argument("--split", default="test")
    parser.add_argument("--image-column")
    parser.add_argument("--label-column")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument(
        "--mixed-precision", choices=["no", "bf16", "fp16"], default="no",
        help="float32 by default: the numbers a model card reports; bf16 is faster on a GPU",
    )  # fmt: skip
    parser.add_argument(
        "--output", type=Path, help="folder for metrics JSON and plot (default: the model folder if local)"
    )
    return parser


@command
def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    from alternet_hf.metrics import plot_reliability_diagram, reliability_diagram
    from alternet_hf.training import evaluate_model

    metrics, logits, labels = evaluate_model(
        args.model,
        args.dataset,
        split=args.split,
        image_column=args.image_column,
        label_column=args.label_column,
        batch_size=args.batch_size,
        num_workers=args.num_workers,
        mixed_precision=args.mixed_precision,
    )
    print(f"{args.model} on {args.dataset} ({args.split}, {len(labels):,} images)")
    for name, value in metrics.items():
        if not math.isfinite(value):
            shown = "undefined" + (" (no misclassified images)" if name == "unc_90" else "")
        elif name in ("accuracy", "acc_90", "unc_90", "freq_90", "iou", "iou_90"):
            shown = f"{100 * value:.2f}%"
        else:
            shown = f"{value:.4f}"
        print(f"  {name:>9}: {shown}")

    output = args.output or (Path(args.model) if Path(args.model).is_dir() else Path("results"))
    output.mkdir(parents=True, exist_ok=True)
    stem = f"eval_{Path(args.dataset).name}_{args.split}"
    (output / f"{stem}.json").write_text(
        json.dumps(
            {
                "model": args.model,
                "dataset": args.dataset,
                "split": args.split,
                "num_images": len(labels),
                "mixed_precision": args.mixed_precision,
                "metrics": {k: v if math.isfinite(v) else None for k, v in metrics.items()},
            },
            indent=2,
        )
    )
    ax = plot_reliability_diagram(reliability_diagram(logits.numpy(), labels.numpy()))
    ax.figure.savefig(output / f"{stem}_reliability.png", dpi=120)
    print(f"wrote {output / stem}.json and {stem}_reliability.png")


if __name__ == "__main__":
    main()
