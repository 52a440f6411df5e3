"""Evaluate a trained model with the paper's metrics; print them and write JSON (and a reliability diagram).

alternet-evaluate --model outputs/alternet-digits --dataset digits
alternet-evaluate --model <org>/alternet-50-cifar100 --dataset uoft-cs/cifar100 --output results/
alternet-evaluate --model <org>/alternet-50-imagenet --dataset ILSVRC/imagenet-1k --split validation --max-images 1000
"""

from pathlib import Path

from alternet_hf.cli.common import command, flag_values, make_parser, model_source, output_folder, positive_int
from alternet_hf.training.recipe import SKIP_UNREADABLE_HELP


def build_parser():
    parser = make_parser(__doc__)
    parser.add_argument("--model", required=True, type=model_source, help="folder or Hub id of a trained model")
    parser.add_argument("--dataset", default="digits", help="'digits', a Hub id, or a local folder/parquet file")
    parser.add_argument("--split", default="test")
    parser.add_argument("--image-column")
    parser.add_argument("--label-column")
    parser.add_argument(
        "--max-images", type=positive_int, help="a seeded sample of this many images of the split, streamed"
    )
    parser.add_argument("--seed", type=int, default=0, help="of the --max-images sample")
    parser.add_argument(
        "--streaming", action="store_true", help="read the whole split as a stream instead of preparing it on disk"
    )
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument(
        "--mixed-precision",
        choices=["no", "bf16", "fp16"],
        default="no",
        help="float32 by default: the numbers a model card reports; bf16 is faster on a GPU",
    )
    parser.add_argument(
        "--output", type=output_folder, help="folder for metrics JSON and plot (default: the model folder if local)"
    )
    parser.add_argument("--skip-unreadable", action="store_true", help=SKIP_UNREADABLE_HELP)
    return parser


@command
def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    from alternet_hf.apps.evaluation import evaluate_model, evaluation_stem, metric_lines, write_evaluation
    from alternet_hf.data.rows import UnreadableRows
    from alternet_hf.data.sources import SAMPLE_SHUFFLE_BUFFER

    sample = None
    if args.max_images is not None:
        sample = {"num_images": args.max_images, "seed": args.seed, "shuffle_buffer": SAMPLE_SHUFFLE_BUFFER}
    saved = (Path(args.model) / "config.json").is_file()  # a model folder, not a preset beside a folder of its name
    output = args.output or (Path(args.model) if saved else Path("results"))
    unreadable = None
    if args.skip_unreadable:
        stem = evaluation_stem(args.dataset, args.split, sample)
        unreadable = UnreadableRows(output / f"{stem}_unreadable.jsonl", fresh=True)
    options = "split image_column label_column batch_size num_workers mixed_precision max_images seed streaming"
    metrics, logits, labels = evaluate_model(
        args.model, args.dataset, **flag_values(args, options), unreadable=unreadable
    )
    drawn = f": a sample, seed {args.seed}" if sample else (", streamed" if args.streaming else "")
    print(f"{args.model} on {args.dataset} ({args.split}, {len(labels):,} images{drawn})")
    if unreadable is not None and unreadable.rows():
        print(unreadable.summary())
    print("\n".join(metric_lines(metrics)))
    run = flag_values(args, "model dataset split mixed_precision")
    path = write_evaluation(output, **run, metrics=metrics, logits=logits, labels=labels, sample=sample)
    print(f"wrote {path} and {path.stem}_reliability.png")


if __name__ == "__main__":
    main()
