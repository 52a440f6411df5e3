"""Train a zoo model. With no arguments: a small AlterNet on the embedded digits, on the CPU, in minutes.

    alternet-train                                                            # offline first run
    accelerate launch -m alternet_hf.cli.train --recipe paper --model alternet-50-cifar100   # the paper's recipe
    accelerate launch -m alternet_hf.cli.train --config my_run.json --resume  # continue after a crash or kill
    alternet-train --recipe paper --model vit-ti-cifar100 --print-config > vit.json

Settings are layered: defaults (or `--recipe` for `--model`), then `--config` (JSON), then flags.
"""

import argparse
import dataclasses
import json
import types
import typing

from alternet_hf.cli.common import (
    CommandError,
    command,
    json_file,
    json_object,
    make_parser,
    model_source,
    output_folder,
)
from alternet_hf.training.recipe import TrainingConfig, recipe_config


def _parsertype(annotation):
    """argparse type for a dataclass field annotation (`X | None` accepts 'none')."""
    args = typing.get_args(annotation)
    if isinstance(annotation, types.UnionType) and type(None) in args:
        inner = next(a for a in args if a is not type(None))
        return lambda text: None if text.lower() == "none" else _parsertype(inner)(text)
    return json_object if annotation is dict else annotation


# Checked as the user typed them, before anything is built.
FIELD_TYPES = {"model": model_source, "output_dir": lambda text: str(output_folder(text))}


def build_parser() -> argparse.ArgumentParser:
    parser = make_parser(__doc__)
    parser.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --output-dir")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace an earlier run in --output-dir (refused otherwise)"
    )
    parser.add_argument("--print-config", action="store_true", help="print the resulting config as JSON and exit")
    add_training_arguments(parser)
    return parser


def add_training_arguments(parser: argparse.ArgumentParser) -> None:
    """--recipe, --config and one flag per TrainingConfig field (read back by `config_from_args`)."""
    parser.add_argument("--recipe", choices=["paper", "sgd"], help="start from this recipe for --model's dataset")
    parser.add_argument("--config", type=json_file, help="JSON file of TrainingConfig fields")
    helps = TrainingConfig.fields_help()
    hints = typing.get_type_hints(TrainingConfig)
    for f in dataclasses.fields(TrainingConfig):
        flag = "--" + f.name.replace("_", "-")
        if hints[f.name] in (bool, bool | None):  # --flag / --no-flag; unset keeps the default (None: automatic)
            parser.add_argument(
                flag, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS, help=helps[f.name]
            )
        else:
            kind = FIELD_TYPES.get(f.name) or _parsertype(hints[f.name])
            parser.add_argument(flag, type=kind, default=argparse.SUPPRESS, help=helps[f.name])


def config_from_args(args: argparse.Namespace) -> TrainingConfig:
    flags = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainingConfig) if hasattr(args, f.name)}
    from_file = args.config or {}
    unknown = set(from_file) - {f.name for f in dataclasses.fields(TrainingConfig)}
    if unknown:
        raise CommandError(f"--config: unknown field(s) {sorted(unknown)}; see --help for the fields")
    model = flags.get("model", from_file.get("model"))
    if args.recipe:
        if model is None:
            raise CommandError("--recipe needs --model (a preset such as alternet-50-cifar100)")
        base = recipe_config(model, args.recipe).to_dict()
    else:
        base = (TrainingConfig() if model is None else TrainingConfig(model=model)).to_dict()
    # Model overrides add up across the layers (a layout from a file keeps the recipe's stochastic depth);
    # a field set to null is removed, so the preset's own value applies again.
    overrides = {}
    for layer in (base, from_file, flags):
        layer_overrides = layer.get("model_overrides") or {}
        if not isinstance(layer_overrides, dict):
            raise CommandError(f"model_overrides must be a JSON object of config fields, got {layer_overrides!r}")
        overrides.update(layer_overrides)
    overrides = {name: value for name, value in overrides.items() if value is not None}
    config = TrainingConfig(**{**base, **from_file, **flags, "model_overrides": overrides})
    try:
        config.validate()
    except ValueError as error:
        raise CommandError(f"invalid training settings: {error}") from None
    return config


@command
def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    config = config_from_args(args)
    if args.print_config:
        print(json.dumps(config.to_dict(), indent=2))
        return
    from alternet_hf.training.engine import train

    if args.resume and args.overwrite:
        raise CommandError("--resume continues the run in --output-dir and --overwrite replaces it: choose one")
    result = train(config, resume=args.resume, overwrite=args.overwrite)
    if result.metrics:
        print(
            f"\nfinal test accuracy {100 * result.metrics['accuracy']:.2f}% (best {100 * result.best_accuracy:.2f}%)\n"
            f"model, image processor and metrics.json: {result.output_dir}/\n"
            f"best model: {result.output_dir}/best/\n"
            f"plots: {result.output_dir}/training_curves.png, {result.output_dir}/reliability_diagram.png\n"
            f"TensorBoard: tensorboard --logdir {result.output_dir}/logs"
        )


if __name__ == "__main__":
    main()
