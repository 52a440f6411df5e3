"""The Hub release of a trained zoo model: the exact folder to upload, with a model card whose
`model-index` comes from the evaluation JSON written by training or `alternet-evaluate`.

The folder holds safetensors weights, the config, the image processor and, for AlterNet and the CIFAR
ResNet, self-contained modeling files with an `auto_map`, so the repo loads with the Auto classes and
`pipeline` whether or not `alternet_hf` is installed (`trust_remote_code=True` without it). ViT is
transformers' own class and needs no code.

Also how a failed Hub call is told apart (`hub_unreachable`, `hub_unauthenticated`), for the messages of the
commands and the Space.
"""

import json
import warnings
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from .metrics import METRIC_NAMES
from .modeling_common import ZooModelMixin
from .presets import create_model

PAPER = "https://arxiv.org/abs/2202.06709"
CITATION = """@inproceedings{park2022how,
  title={How Do Vision Transformers Work?},
  author={Namuk Park and Songkuk Kim},
  booktitle={International Conference on Learning Representations},
  year={2022}
}"""
METRIC_LABELS = {
    "accuracy": "Accuracy",
    "nll": "NLL",
    "ece": "ECE",
    "acc_90": "Acc-90",
    "unc_90": "Unc-90",
    "freq_90": "Freq-90",
    "iou": "IoU",
    "iou_90": "IoU-90",
    "brier": "Brier",
}


def find_evaluation(model_dir: Path, evaluation: Path | None = None) -> tuple[dict, str, str]:
    """(metrics, dataset, split) of a trained model for its card: `evaluation` (an `eval_*.json` of
    alternet-evaluate) if given; else the newest `eval_*.json` on the dataset and split the model was
    trained and evaluated on (any other, e.g. a corrupted or training split, is not the headline result);
    else the final `metrics.json` of training (evaluated at the training precision: bf16 on a GPU) with the
    dataset from `training_config.json`."""
    if evaluation is not None:
        payload = json.loads(Path(evaluation).read_text())
        return payload["metrics"], payload["dataset"], payload["split"]
    metrics_file, config_file = model_dir / "metrics.json", model_dir / "training_config.json"
    training = json.loads(config_file.read_text()) if config_file.exists() else None
    evaluations = {p: json.loads(p.read_text()) | {"mtime": p.stat().st_mtime} for p in model_dir.glob("eval_*.json")}
    if training is not None:
        headline = (training["dataset"], training.get("eval_split", "test"))
        ignored = sorted(p.name for p, e in evaluations.items() if (e["dataset"], e["split"]) != headline)
        if ignored:
            warnings.warn(f"the card reports {headline}, not {ignored}; choose one with --evaluation", stacklevel=2)
        evaluations = {p: e for p, e in evaluations.items() if (e["dataset"], e["split"]) == headline}
    if evaluations:
        payload = max(evaluations.values(), key=lambda e: e["mtime"])
        return payload["metrics"], payload["dataset"], payload["split"]
    if not metrics_file.exists() or not config_file.exists():
        raise FileNotFoundError(
            f"{model_dir} has no evaluation: run alternet-evaluate --model {model_dir} --dataset <dataset> "
            "(or train it with alternet-train, which writes metrics.json and training_config.json)"
        )
    return json.loads(metrics_file.read_text()), training["dataset"], training.get("eval_split", "test")


def _recipe_table(model_dir: Path) -> str:
    config_file = model_dir / "training_config.json"
    if not config_file.exists():
        return "Trained outside `alternet-train`; no recipe recorded."
    fields = json.loads(config_file.read_text())
    rows = "\n".join(f"| `{key}` | `{json.dumps(value)}` |" for key, value in fields.items() if key != "output_dir")
    return f"Trained with `alternet-train` of alternet-hf:\n\n| field | value |\n|---|---|\n{rows}"


def build_model_card(model, repo_id: str, metrics: dict, dataset: str, split: str, model_dir: Path) -> ModelCard:
    """A model card with metadata (`model-index` from `metrics`), usage, recipe, results and citation."""
    name = repo_id.split("/")[-1]
    results = [
        EvalResult(
            task_type="image-classification",
            dataset_type=dataset,
            dataset_name=dataset,
            dataset_split=split,
            metric_type=metric,
            metric_name=METRIC_LABELS[metric],
            metric_value=float(metrics[metric]),
        )
        for metric in METRIC_NAMES
        if metrics.get(metric) is not None
    ]
    data = ModelCardData(
        library_name="transformers",
        license="apache-2.0",
        pipeline_tag="image-classification",
        tags=["image-classification", "vision", "how-do-vits-work", model.config.model_type],
        datasets=[dataset] if "/" in dataset else None,
        model_name=name,
        eval_results=results or None,
    )
    remote = isinstance(model, ZooModelMixin)
    table = "\n".join(f"| {METRIC_LABELS[r.metric_type]} | {r.metric_value:.4f} |" for r in results)
    body = f"""
# {name}

{type(model).__name__} ({model.num_parameters():,} parameters) from ["How Do Vision Transformers Work?"]({PAPER})
(Park & Kim, ICLR 2022), trained on `{dataset}`. Released with alternet-hf.

## Usage

```python
{"import alternet_hf  # registers the zoo's classes (pip install alternet-hf)" if remote else ""}
from transformers import AutoImageProcessor, AutoModelForImageClassification, pipeline

model = AutoModelForImageClassification.from_pretrained("{repo_id}")
processor = AutoImageProcessor.from_pretrained("{repo_id}")
classifier = pipeline("image-classification", model="{repo_id}")
```
{"Without `alternet_hf`, pass `trust_remote_code=True`: the repo carries its own modeling code." if remote else ""}

Fine-tune with the HF `Trainer` (`forward(pixel_values, labels)` returns the loss), e.g.
`alternet-finetune --model {repo_id} --dataset <your dataset>` from alternet-hf.

## Evaluation on `{dataset}` ({split})

| metric | value |
|---|---|
{table}

## Training

{_recipe_table(model_dir)}

## Citation

```bibtex
{CITATION}
```
"""
    return ModelCard(f"---\n{data.to_yaml()}\n---\n{body}")


def write_release(
    model_dir: str | Path, output_dir: str | Path, repo_id: str, *, evaluation: str | Path | None = None
) -> Path:
    """Write everything the Hub repo `repo_id` will hold for the trained model in `model_dir`."""
    model_dir, output_dir = Path(model_dir), Path(output_dir)
    metrics, dataset, split = find_evaluation(model_dir, evaluation)
    model = create_model(str(model_dir))
    output_dir.mkdir(parents=True, exist_ok=True)
    if isinstance(model, ZooModelMixin):
        model.save_pretrained(output_dir, remote_code=True)
    else:
        model.save_pretrained(output_dir)
    build_model_card(model, repo_id, metrics, dataset, split, model_dir).save(output_dir / "README.md")
    return output_dir


def hub_unreachable(error: BaseException) -> bool:
    """Whether `error` (or an error it was raised from) says the Hub could not be reached: offline or no network."""
    names = {"OfflineModeIsEnabled", "LocalEntryNotFoundError", "ConnectionError", "ConnectTimeout", "ConnectError"}
    texts = ("couldn't connect", "offline mode", "hf_hub_offline", "connection refused", "failed to resolve")
    return any(
        type(e).__name__ in names or any(text in str(e).lower() for text in texts) for e in _errors_in_chain(error)
    )


def hub_unauthenticated(error: BaseException) -> bool:
    """Whether `error` (or one in its chain) says the Hub refused for want of a valid token."""
    names = {"LocalTokenNotFoundError", "GatedRepoError"}
    return any(type(e).__name__ in names or "401" in str(e) for e in _errors_in_chain(error))


def _errors_in_chain(error: BaseException):
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__
