"""Fine-tune a zoo model (preset, folder or Hub id) on any image-classification dataset with the HF Trainer.

alternet-finetune --model outputs/alternet-digits --dataset path/to/imagefolder --output-dir out/ft
alternet-finetune --model <org>/alternet-50-cifar100 --dataset uoft-cs/cifar10 --epochs 10
"""

from alternet_hf.cli.common import command, flag_values, json_object, make_parser, model_source, output_folder
from alternet_hf.training.recipe import (
    FINETUNE_CONFIG,
    FINETUNE_DEFAULTS,
    FINETUNE_EVENTS,
    FINETUNE_RESULTS,
    FROM_SCRATCH_DEFAULTS,
    SKIP_UNREADABLE_HELP,
)


def build_parser():
    parser = make_parser(__doc__)
    parser.add_argument("--model", required=True, type=model_source)
    parser.add_argument("--dataset", required=True, help="'digits', a Hub id, or a local folder/parquet file")
    parser.add_argument("--output-dir", type=output_folder, help="default: outputs/<model>-finetuned-<dataset>")
    parser.add_argument("--overwrite", action="store_true", help="replace a model already in --output-dir")
    parser.add_argument("--image-column")
    parser.add_argument("--label-column")
    parser.add_argument("--train-split", default="train")
    parser.add_argument(
        "--eval-split", default="test", help="a split name, or holdout[:fraction] of the training split"
    )
    trained, scratch = FINETUNE_DEFAULTS, FROM_SCRATCH_DEFAULTS
    parser.add_argument(
        "--epochs",
        type=float,
        help=f"default: {trained['epochs']:g} for a model with trained weights, {scratch['epochs']:g} for a preset "
        "(trained from scratch)",
    )
    parser.add_argument(
        "--learning-rate",
        type=float,
        help=f"default: {trained['learning_rate']:g} with trained weights, {scratch['learning_rate']:g} for a preset",
    )
    parser.add_argument(
        "--warmup",
        type=float,
        help=f"fraction of the steps over which the learning rate warms up (default: {trained['warmup']:g} with "
        f"trained weights, {scratch['warmup']:g} for a preset)",
    )
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--horizontal-flip",
        type=float,
        help="probability (default: as in the model's own training recipe, else 0 for digits and 0.5 for photos)",
    )
    parser.add_argument("--model-overrides", type=json_object, default={}, help="config fields as JSON")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-unreadable", action="store_true", help=SKIP_UNREADABLE_HELP)
    return parser


@command
def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    from alternet_hf.training.finetuning import finetune

    options = flag_values(
        args,
        "image_column label_column train_split eval_split epochs learning_rate warmup batch_size horizontal_flip seed "
        "model_overrides overwrite skip_unreadable",
    )
    result = finetune(args.model, args.dataset, args.output_dir, **options)
    if result.holdout_note:
        print(result.holdout_note)
    before, after = result.metrics_before["eval_accuracy"], result.metrics_after["eval_accuracy"]
    print(f"accuracy {100 * before:.2f}% -> {100 * after:.2f}%; model and image processor in {result.output_dir}")
    print(
        f"the run's record beside them: {', '.join((*FINETUNE_RESULTS, FINETUNE_CONFIG))} and TensorBoard's "
        f"{FINETUNE_EVENTS}/ (alternet-push --model {result.output_dir} puts them on the Hub)"
    )


if __name__ == "__main__":
    main()
