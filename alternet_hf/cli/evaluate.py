"""Evaluate a trained model with the paper's metrics; print them and write JSON (and a reliability diagram).

alternet-evaluate --model outputs/alternet-digits --dataset digits
alternet-evaluate --model <org>/alternet-50-cifar100 --dataset uoft-cs/cifar100 --output results/
"""

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
        "--mixed-precision",
        choices=["no", "bf16", "fp16"],
        default="no",
        help="float32 by default: the numbers a model card reports; bf16 is faster on a GPU",
    )
    parser.add_argument(
        "--output", type=Path, help="folder for metrics JSON and plot (default: the model folder if local)"
    )
    return parser


@command
def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    from alternet_hf.evaluation import evaluate_model, metric_lines, write_evaluation

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
    print("\n".join(metric_lines(metrics)))
    output = args.output or (Path(args.model) if Path(args.model).is_dir() else Path("results"))
    path = write_evaluation(
        output,
        model=args.model,
        dataset=args.dataset,
        split=args.split,
        metrics=metrics,
        logits=logits,
        labels=labels,
        mixed_precision=args.mixed_precision,
    )
    print(f"wrote {path} and {path.stem}_reliability.png")


if __name__ == "__main__":
    main()
