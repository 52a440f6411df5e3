"""Fine-tuning any zoo model on any image-classification dataset with the Hugging Face `Trainer`: the standard
transformers recipe, with a new head where the label count changes and the paper's metrics as an `evaluate` module.
"""

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import evaluate
import numpy as np
import torch
from transformers import Trainer, TrainingArguments, set_seed
from transformers.integrations import TensorBoardCallback

from ..data.augmentation import eval_transform, train_transform
from ..data.collate import collate_images, with_transform
from ..data.rows import UNREADABLE_FILE, UnreadableRows
from ..data.sources import DIGITS, load_train_and_eval
from ..metrics.classification import EVALUATE_METRIC_PATH
from ..models.modeling_common import build_image_processor
from ..models.presets import create_classifier, loads_weights
from ..utils import write_json
from ..utils.run_lock import hold_folder
from .recipe import (
    FINETUNE_ALL,
    FINETUNE_CONFIG,
    FINETUNE_DEFAULTS,
    FINETUNE_EVALUATION,
    FINETUNE_EVENTS,
    FINETUNE_STATE,
    FINETUNE_TRAINING,
    FROM_SCRATCH_DEFAULTS,
    model_record,
    remove_model_record,
)


@dataclass
class FinetuneResult:
    output_dir: Path
    metrics_before: dict
    metrics_after: dict
    holdout_note: str | None = None  # where the evaluation split was carved out of the training split
    from_scratch: bool = False  # a preset, trained from scratch (it has no trained weights)
    epochs: float | None = None  # what it trained with (see `FINETUNE_DEFAULTS`)
    learning_rate: float | None = None
    warmup: float | None = None


def default_horizontal_flip(model_name_or_path: str, dataset: str) -> float:
    """The flip probability that fits the data: the one the model's own recipe (or its own fine-tune) used (data
    trained without flips, such as digits, must not be mirrored), none for the embedded digits, else 0.5 as for
    photos."""
    for name in ("training_config.json", FINETUNE_CONFIG):
        recorded = Path(model_name_or_path) / name
        if recorded.is_file():
            training = json.loads(recorded.read_text())
            if training.get("horizontal_flip") is not None:
                return float(training["horizontal_flip"])
    return 0.0 if dataset == DIGITS else 0.5


def default_output_dir(model_name_or_path: str, dataset: str) -> Path:
    """outputs/<model>-finetuned-<dataset>, from the last parts of both names."""
    return Path("outputs") / f"{Path(model_name_or_path).name}-finetuned-{Path(dataset.rstrip('/')).name}"


def claim_output_dir(
    output_dir: Path, model_name_or_path: str, *, overwrite: bool, say: Callable[[str], None] = print
) -> None:
    """Never write a fine-tuned model over its source, nor over another model or training run unless asked to; then
    remove all that described the one replaced (`model_record`), or its numbers would stand beside the new model."""
    if Path(model_name_or_path).is_dir() and Path(model_name_or_path).resolve() == output_dir.resolve():
        raise ValueError(
            f"the output folder {output_dir} is the model being fine-tuned: writing there would replace it; "
            "choose another --output-dir"
        )
    earlier = model_record(output_dir)
    # what a fine-tune stopped midway leaves: its events and list of unreadable rows, no model yet
    unfinished = set(earlier) <= {FINETUNE_EVENTS, UNREADABLE_FILE}
    if earlier and not unfinished and not overwrite:
        raise FileExistsError(
            f"{output_dir} already holds a model or a training run ({', '.join(earlier)}): choose another "
            "--output-dir, or pass --overwrite to replace it"
        )
    said = remove_model_record(output_dir, earlier)
    if earlier and not unfinished:
        say(said)


def finetune(
    model_name_or_path: str,
    dataset: str,
    output_dir: str | Path | None = None,
    *,
    image_column: str | None = None,
    label_column: str | None = None,
    train_split: str = "train",
    eval_split: str = "test",
    epochs: float | None = None,
    learning_rate: float | None = None,
    warmup: float | None = None,
    batch_size: int = 32,
    weight_decay: float = 0.05,
    horizontal_flip: float | None = None,
    seed: int = 0,
    model_overrides: dict | None = None,
    overwrite: bool = False,
    skip_unreadable: bool = False,
    say: Callable[[str], None] = print,
    **training_arguments,
) -> FinetuneResult:
    """Fine-tune, evaluating before and after; the model and its image processor go to `output_dir` (default
    `default_output_dir`; see `claim_output_dir`). `epochs`, `learning_rate` and `warmup` (a fraction of the steps)
    default to `FINETUNE_DEFAULTS`, or `FROM_SCRATCH_DEFAULTS` for a preset (said in one line). Every random draw
    (the new head, data order, augmentation) follows `seed`. `skip_unreadable`: rows whose image cannot be read are
    left out and listed in `output_dir/unreadable.jsonl`, rather than stop the run. Beside the model: the run's record
    (`write_record`) and its TensorBoard events in `runs/training/`."""
    output_dir = Path(output_dir) if output_dir is not None else default_output_dir(model_name_or_path, dataset)
    from_scratch = not loads_weights(model_name_or_path)
    defaults = FROM_SCRATCH_DEFAULTS if from_scratch else FINETUNE_DEFAULTS
    epochs = defaults["epochs"] if epochs is None else epochs
    learning_rate = defaults["learning_rate"] if learning_rate is None else learning_rate
    warmup = defaults["warmup"] if warmup is None else warmup
    with hold_folder(output_dir):
        claim_output_dir(output_dir, model_name_or_path, overwrite=overwrite, say=say)
        if from_scratch:
            say(
                f"{model_name_or_path} is a preset without trained weights: training it from scratch ({epochs:g} "
                f"epochs, learning rate {learning_rate:g}, warm-up {warmup:g} of the steps; --epochs, "
                "--learning-rate and --warmup change them)"
            )
        set_seed(seed)  # before the model: its new head is drawn from it
        if horizontal_flip is None:
            horizontal_flip = default_horizontal_flip(model_name_or_path, dataset)
        splits = load_train_and_eval(
            dataset,
            train_split=train_split,
            eval_split=eval_split,
            image_column=image_column,
            label_column=label_column,
            seed=seed,
        )
        train_data, eval_data = splits.train, splits.eval
        model = create_classifier(model_name_or_path, train_data.features["label"].names, **(model_overrides or {}))
        settings = dict(
            model=model_name_or_path,
            model_source=model_source(model_name_or_path),
            dataset=dataset,
            image_column=image_column,
            label_column=label_column,
            train_split=train_split,
            eval_split=eval_split,
            holdout=None if splits.holdout is None else {k: splits.holdout[k] for k in ("fraction", "seed")},
            train_samples=len(train_data),
            eval_samples=len(eval_data),
            seed=seed,
            epochs=epochs,
            learning_rate=learning_rate,
            warmup=warmup,
            batch_size=batch_size,
            weight_decay=weight_decay,
            horizontal_flip=horizontal_flip,
            model_overrides=model_overrides or {},
        )

        size, mean, std = model.config.image_size, model.config.image_mean, model.config.image_std
        unreadable = UnreadableRows(output_dir / UNREADABLE_FILE, fresh=True) if skip_unreadable else None
        augment = train_transform(size, mean, std, crop_padding=size // 8, horizontal_flip=horizontal_flip)
        sources = (f"{dataset} (split {train_split!r})", f"{dataset} (split {eval_split!r})")
        train_data = with_transform(train_data, augment, source=sources[0], unreadable=unreadable)
        eval_data = with_transform(eval_data, eval_transform(size, mean, std), source=sources[1], unreadable=unreadable)

        metric = evaluate.load(EVALUATE_METRIC_PATH)

        def compute_metrics(prediction):
            return metric.compute(predictions=np.asarray(prediction.predictions), references=prediction.label_ids)

        defaults = dict(
            dataloader_pin_memory=torch.cuda.is_available(),
            logging_steps=0.05,  # a fraction of the steps: twenty points on the loss curve, however long the run
        )
        args = TrainingArguments(
            output_dir=str(output_dir),
            num_train_epochs=epochs,
            learning_rate=learning_rate,
            per_device_train_batch_size=batch_size,
            per_device_eval_batch_size=max(batch_size, 128),
            weight_decay=weight_decay,
            lr_scheduler_type="cosine",
            warmup_steps=warmup,
            eval_on_start=True,  # the "before" of the run, at step 0 of its history and its curves
            eval_strategy="epoch",
            # The model of the last epoch: the evaluation split is often the test split, and choosing the best epoch on
            # it would report a number selected on the test images.
            save_strategy="no",
            remove_unused_columns=False,
            report_to=[],  # TensorBoard only, into the folder (below), whatever else is installed
            seed=seed,
            **{**defaults, **training_arguments},
        )
        events = TensorBoardCallback()
        events.logging_dir = str(output_dir / FINETUNE_EVENTS)  # where the release keeps a run's events
        trainer = Trainer(
            model=model,
            args=args,
            train_dataset=train_data,
            eval_dataset=eval_data,
            data_collator=collate_images,
            compute_metrics=compute_metrics,
            callbacks=[events],
        )
        trained = trainer.train()
        evaluations = [entry for entry in trainer.state.log_history if "eval_loss" in entry]
        before, after = evaluations[0], evaluations[-1]
        if after["step"] != trainer.state.global_step:  # the last epoch's evaluation is the final model's
            after = trainer.evaluate()
        trainer.save_model(str(output_dir))
        build_image_processor(model.config).save_pretrained(str(output_dir))
        splits.write_holdout(output_dir, dataset, train_split)
        write_record(trainer, output_dir, settings, trained.metrics, after)
        note = splits.holdout_note(dataset, train_split)
        if unreadable is not None and unreadable.rows():
            say(unreadable.summary())
        return FinetuneResult(
            output_dir,
            _without_step(before),
            _without_step(after),
            note,
            from_scratch,
            epochs=epochs,
            learning_rate=learning_rate,
            warmup=warmup,
        )


def model_source(model_name_or_path: str) -> str:
    """'preset' (no trained weights: trained from scratch), 'folder' or 'hub': what a card says it came from."""
    if not loads_weights(model_name_or_path):
        return "preset"
    return "folder" if os.path.isdir(model_name_or_path) else "hub"


def write_record(trainer: Trainer, output_dir: Path, settings: dict, train_metrics: dict, evaluation: dict) -> None:
    """The run's record as transformers' examples leave it (`train_results.json`, `eval_results.json`, both in
    `all_results.json`, the history in `trainer_state.json`) and its settings, each file written whole or not at
    all."""
    train = {**train_metrics, "train_samples": settings["train_samples"]}
    evaluation = {**_without_step(evaluation), "eval_samples": settings["eval_samples"]}
    for name, metrics in (
        (FINETUNE_TRAINING, train),
        (FINETUNE_EVALUATION, evaluation),
        (FINETUNE_ALL, train | evaluation),
    ):
        write_json(output_dir / name, metrics, indent=4, sort_keys=True)
    state = output_dir / FINETUNE_STATE
    partial = state.with_name(f".{state.name}.{os.getpid()}.partial")
    trainer.state.save_to_json(str(partial))  # transformers' own format, then renamed over the file
    os.replace(partial, state)
    write_json(output_dir / FINETUNE_CONFIG, settings)


def _without_step(evaluation: dict) -> dict:
    return {key: value for key, value in evaluation.items() if key != "step"}
