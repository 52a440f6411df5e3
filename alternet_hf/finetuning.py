"""Fine-tuning any zoo model on any image-classification dataset with the Hugging Face `Trainer`.

The standard transformers recipe: label names from the dataset, a new head where the label count
changes (`ignore_mismatched_sizes`), `set_transform` preprocessing with the model's own image
processor statistics, and the paper's metrics through our local `evaluate` module.
"""

from dataclasses import dataclass
from pathlib import Path

import evaluate
import numpy as np
from transformers import Trainer, TrainingArguments

from .data import collate_images, load_image_classification, with_transform
from .metrics import EVALUATE_METRIC_PATH
from .modeling_common import build_image_processor
from .presets import create_model
from .recipe import eval_transform, train_transform


@dataclass
class FinetuneResult:
    output_dir: Path
    metrics_before: dict
    metrics_after: dict


def finetune(
    model_name_or_path: str,
    dataset: str,
    output_dir: str | Path,
    *,
    image_column: str | None = None,
    label_column: str | None = None,
    train_split: str = "train",
    eval_split: str = "test",
    epochs: float = 3,
    learning_rate: float = 1e-3,
    batch_size: int = 32,
    weight_decay: float = 0.05,
    horizontal_flip: float = 0.5,
    seed: int = 0,
    model_overrides: dict | None = None,
    **training_arguments,
) -> FinetuneResult:
    """Fine-tune, evaluating before and after; the model and its image processor go to `output_dir`."""
    columns = dict(image_column=image_column, label_column=label_column)
    train_data = load_image_classification(dataset, split=train_split, **columns)
    names = train_data.features["label"].names
    eval_data = load_image_classification(dataset, split=eval_split, class_names=names, **columns)
    model = create_model(model_name_or_path, num_labels=len(names), **(model_overrides or {}))
    model.config.id2label = dict(enumerate(names))
    model.config.label2id = {name: i for i, name in enumerate(names)}

    size, mean, std = model.config.image_size, model.config.image_mean, model.config.image_std
    train_data = with_transform(
        train_data, train_transform(size, mean, std, crop_padding=size // 8, horizontal_flip=horizontal_flip)
    )
    eval_data = with_transform(eval_data, eval_transform(size, mean, std))

    metric = evaluate.load(EVALUATE_METRIC_PATH)

    def compute_metrics(prediction):
        return metric.compute(predictions=np.asarray(prediction.predictions), references=prediction.label_ids)

    args = TrainingArguments(
        output_dir=str(output_dir),
        num_train_epochs=epochs,
        learning_rate=learning_rate,
        per_device_train_batch_size=batch_size,
        per_device_eval_batch_size=max(batch_size, 128),
        weight_decay=weight_decay,
        lr_scheduler_type="cosine",
        warmup_steps=0.1,
        eval_strategy="epoch",
        save_strategy="epoch",
        save_total_limit=1,
        load_best_model_at_end=True,
        metric_for_best_model="accuracy",
        remove_unused_columns=False,
        report_to=[],
        seed=seed,
        **training_arguments,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=train_data,
        eval_dataset=eval_data,
        data_collator=collate_images,
        compute_metrics=compute_metrics,
    )
    before = trainer.evaluate()
    trainer.train()
    after = trainer.evaluate()
    trainer.save_model(str(output_dir))
    build_image_processor(model.config).save_pretrained(str(output_dir))
    return FinetuneResult(Path(output_dir), before, after)
