"""What goes to the Hub (docs/release.md): a trained (or converted) zoo model as the exact folder to upload, with a
model card whose `model-index` comes from the evaluation JSON, and CIFAR-100-C as a parquet dataset
(`write_hub_dataset`).
"""

import json
import shutil
import warnings
from pathlib import Path
from typing import NamedTuple

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from .. import __version__
from ..metrics.classification import METRIC_NAMES
from ..models.modeling_common import ZooModelMixin
from ..models.presets import create_model, list_models
from ..models.timm_families import is_timm_wrapper
from ..models.timm_models import TIMM_ARGUMENTS, timm_name
from ..training.recipe import FINETUNE_CONFIG, FINETUNE_EVALUATION, FINETUNE_RESULTS

PAPER_ID = "2202.06709"  # arXiv
PAPER_URL = f"https://arxiv.org/abs/{PAPER_ID}"  # every card links it: the Hub lists the repo on the paper's page
TEMPLATES = Path(__file__).parent / "templates"  # the cards' Jinja templates (`ModelCard.from_template`)
RUNS = "runs"  # a repo's TensorBoard event files, which the Hub shows on its metrics tab
CITATION = """@inproceedings{park2022how,
  title={How Do Vision Transformers Work?},
  author={Namuk Park and Songkuk Kim},
  booktitle={International Conference on Learning Representations},
  year={2022}
}"""
CIFAR_C_METRIC = "Mean accuracy over corruptions and severities"
PAPER_NUMBERS_NOTE = """
The paper's numbers are read off its CIFAR-100 plots (good to a few tenths); the released files need not be the
runs those plots show.
"""
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


class Evaluation(NamedTuple):
    """The evaluation a card reports, and what made it: "given" (`--evaluation`), "alternet-evaluate", "fine-tune"
    (`alternet-finetune`'s own, on its evaluation split) or "training" (`alternet-train`'s final one)."""

    metrics: dict
    dataset: str
    split: str
    source: str


def find_evaluation(model_dir: Path, evaluation: Path | None = None) -> Evaluation:
    """The evaluation of a trained model for its card: `evaluation` (an `eval_*.json` of alternet-evaluate) if
    given; else alternet-evaluate's `eval_*.json` on the dataset and split the model was trained (or fine-tuned) and
    evaluated on (any other is not the headline result), the whole split before a sample of it and a larger sample
    before a smaller; else the fine-tune's own `eval_results.json`, or training's final `metrics.json`."""
    if evaluation is not None:
        payload = json.loads(Path(evaluation).read_text())
        return Evaluation(payload["metrics"], payload["dataset"], payload["split"], "given")
    metrics_file, config_file = model_dir / "metrics.json", model_dir / "training_config.json"
    finetuned = read_finetune(model_dir)
    training = finetuned or (json.loads(config_file.read_text()) if config_file.exists() else None)
    evaluations = {
        p: json.loads(p.read_text()) for p in sorted(model_dir.glob("eval_*.json")) if p.name not in FINETUNE_RESULTS
    }
    if training is not None:
        headline = (training["dataset"], training.get("eval_split", "test"))
        ignored = sorted(p.name for p, e in evaluations.items() if (e["dataset"], e["split"]) != headline)
        if ignored:
            warnings.warn(f"the card reports {headline}, not {ignored}; choose one with --evaluation", stacklevel=2)
        evaluations = {p: e for p, e in evaluations.items() if (e["dataset"], e["split"]) == headline}
    if evaluations:
        payload = max(evaluations.values(), key=lambda e: ("sample" not in e, e.get("num_images", 0)))
        return Evaluation(payload["metrics"], payload["dataset"], payload["split"], "alternet-evaluate")
    finetune_results = model_dir / FINETUNE_EVALUATION
    if finetuned is not None and finetune_results.exists():
        recorded = json.loads(finetune_results.read_text())
        metrics = {name: recorded[f"eval_{name}"] for name in METRIC_NAMES if f"eval_{name}" in recorded}
        return Evaluation(metrics, finetuned["dataset"], finetuned["eval_split"], "fine-tune")
    if not metrics_file.exists() or not config_file.exists():
        raise FileNotFoundError(
            f"{model_dir} has no evaluation: run alternet-evaluate --model {model_dir} --dataset <dataset> "
            "(alternet-train and alternet-finetune leave their own evaluation beside the model they write)"
        )
    return Evaluation(
        json.loads(metrics_file.read_text()), training["dataset"], training.get("eval_split", "test"), "training"
    )


def read_finetune(model_dir: Path) -> dict | None:
    """The settings `alternet-finetune` recorded beside the model it wrote, if it wrote this one."""
    path = model_dir / FINETUNE_CONFIG
    return json.loads(path.read_text()) if path.exists() else None


def _fields_table(fields: dict) -> str:
    rows = "\n".join(f"| `{key}` | `{json.dumps(value)}` |" for key, value in fields.items() if key != "output_dir")
    return f"| field | value |\n|---|---|\n{rows}"


def _recipe_table(model_dir: Path, provenance: dict | None = None, dataset_aliases: dict | None = None) -> str:
    if provenance is not None:  # weights trained by the reference's authors, with the recipe the zoo reproduces
        from ..training.recipe import recipe_config

        preset = provenance["preset"]
        fields = recipe_config(preset, "paper").to_dict()
        return (
            "Trained by the reference's authors with the paper's recipe for CIFAR-100 (their released weights, "
            "converted; no training curves were released). `alternet-train --recipe paper --model "
            f"{preset}` runs the same recipe:\n\n{_fields_table(fields)}"
        )
    finetuned = read_finetune(model_dir)
    if finetuned is not None:
        fields = {**finetuned, "model": _source_name(finetuned)}
        fields["dataset"] = (dataset_aliases or {}).get(fields["dataset"], fields["dataset"])
        return (
            "Run by `alternet-finetune` of alternet-hf (the HF `Trainer`, keeping the model of the last epoch); its "
            f"training curves and evaluations are on this repo's metrics tab:\n\n{_fields_table(fields)}"
        )
    config_file = model_dir / "training_config.json"
    if not config_file.exists():
        return "Trained outside `alternet-train`; no recipe recorded."
    fields = json.loads(config_file.read_text())
    fields["dataset"] = (dataset_aliases or {}).get(fields.get("dataset"), fields.get("dataset"))
    return f"Trained with `alternet-train` of alternet-hf:\n\n{_fields_table(fields)}"


def _source_name(finetuned: dict) -> str:
    """The model a fine-tune started from, as a card names it: a Hub id or preset as it is, a folder by its name
    (its path is the fine-tuning machine's)."""
    model = finetuned["model"]
    return Path(model).name if finetuned["model_source"] == "folder" else model


def _origin(finetuned: dict | None) -> str:
    """How the card's first sentence says where the weights come from."""
    if finetuned is None:
        return "trained on"
    source = finetuned["model_source"]
    if source == "preset":
        return f"the preset `{finetuned['model']}` trained from scratch with `alternet-finetune` on"
    if source == "hub":
        return f"fine-tuned from [`{finetuned['model']}`](https://huggingface.co/{finetuned['model']}) on"
    return f"fine-tuned from a model folder (`{_source_name(finetuned)}`) on"


def _finetune_evaluation_note(finetuned: dict) -> str:
    """Which images the fine-tune's own evaluation is of: its evaluation split, or the hold-out it carved."""
    holdout, images = finetuned.get("holdout"), f"{finetuned['eval_samples']:,} images"
    if holdout is not None:
        split = (
            f"a seeded, stratified hold-out of {100 * holdout['fraction']:g}% of the `{finetuned['train_split']}` "
            f"split ({images}, seed {holdout['seed']}), never trained on"
        )
    else:
        split = f"its evaluation split, `{finetuned['eval_split']}` ({images})"
    return f"The fine-tune's own evaluation (`alternet-finetune`, after its last epoch), on {split}."


def _provenance_section(provenance: dict | None, evaluated_on: str | None) -> str:
    """Where converted weights come from: the released file, its SHA-256, the converter, where they were evaluated."""
    if provenance is None:
        return ""
    where = f", evaluated here on {evaluated_on}" if evaluated_on else ""
    return f"""
## Weights

The reference's release: file [`{provenance["file"]}`]({provenance["url"]}) ({provenance["size"]:,} bytes, SHA-256
`{provenance["sha256"]}`), released by the authors of the paper with their code (`xxxnell/how-do-vits-work`,
Apache-2.0), converted by {provenance["converter"]} (`alternet-convert`: every key of the file consumed, none left
over){where}. The file's name ends in the authors' run id, not a checksum: the SHA-256 above is of the file converted.
"""


def _reported_section(reported: dict | None, metrics: dict, robustness: dict | None) -> str:
    """The reported top-1 and CIFAR-100-C mean beside the ones measured here."""
    if reported is None:
        return ""
    ours_c = "—" if robustness is None else f"{100 * robustness['mean_accuracy']:.2f}"
    theirs_c = "—" if reported.get("cifar100c_mean") is None else f"{reported['cifar100c_mean']:g}"
    return f"""
## Against the reported numbers

| | top-1 (%) | CIFAR-100-C mean accuracy (%) |
|---|---|---|
| reported by {reported["by"]} | {reported["top1"]:g} | {theirs_c} |
| measured here | {100 * metrics["accuracy"]:.2f} | {ours_c} |
{PAPER_NUMBERS_NOTE if reported["by"] == "the paper" else ""}"""


def build_model_card(
    model,
    repo_id: str,
    metrics: dict,
    dataset: str,
    split: str,
    model_dir: Path,
    *,
    robustness: dict | None = None,
    figures: dict[str, str] | None = None,
    provenance: dict | None = None,
    reported: dict | None = None,
    evaluated_on: str | None = None,
    dataset_aliases: dict[str, str] | None = None,
    finetune_evaluation: bool = False,
    atlas: dict | None = None,
) -> ModelCard:
    """A model card: metadata (`model-index` from `metrics`, and CIFAR-100-C's mean accuracy from `robustness`),
    usage, results, `figures` ({title: path in the repo}), recipe and citation. For converted weights, `provenance`
    (the file, its SHA-256, the converter) and `reported` (the top-1 and CIFAR-100-C mean reported, and by whom);
    `dataset_aliases` ({recorded: shown}) name a dataset recorded as a path of the machine that trained. A model
    `alternet-finetune` wrote says what it was fine-tuned from (`base_model` for a Hub id), and whether `metrics` are
    the fine-tune's own evaluation (`finetune_evaluation`) and of which images. `atlas`: where the model sits in the
    release's atlas of public models (`apps.atlas.placement` and the atlas' `repo_id`).
    """
    name = repo_id.split("/")[-1]
    finetuned = read_finetune(model_dir)
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
    if robustness is not None:
        results.append(
            EvalResult(
                task_type="image-classification",
                dataset_type=robustness["repo_id"],
                dataset_name="CIFAR-100-C",
                dataset_split="test",
                metric_type="accuracy",
                metric_name=CIFAR_C_METRIC,
                metric_value=float(robustness["mean_accuracy"]),
            )
        )
    timm_family = is_timm_wrapper(model)  # PiT, Swin: a timm repo, which transformers loads too
    data = ModelCardData(
        library_name="timm" if timm_family else "transformers",
        license="apache-2.0",
        pipeline_tag="image-classification",
        tags=["image-classification", "vision", "how-do-vits-work", model.config.model_type],
        datasets=[dataset] if _is_hub_id(dataset) else None,
        base_model=finetuned["model"] if finetuned and finetuned["model_source"] == "hub" else None,
        model_name=name,
        eval_results=results or None,
    )
    remote = isinstance(model, ZooModelMixin)
    zoo_model = None if timm_family else _zoo_timm_model(model_dir, provenance and provenance["preset"])
    clean = [r for r in results if r.dataset_name == dataset]
    return ModelCard.from_template(
        data,
        template_path=str(TEMPLATES / "model_card.md"),
        name=name,
        architecture=f"timm's {type(model.timm_model).__name__}" if timm_family else type(model).__name__,
        parameters=f"{model.num_parameters():,}",
        paper_url=PAPER_URL,
        origin=_origin(finetuned),
        dataset=dataset,
        split=split,
        repo_id=repo_id,
        remote=remote,
        version=__version__,
        provenance=_provenance_section(provenance, evaluated_on),
        timm_usage=_timm_usage(repo_id, zoo_model) if timm_family or zoo_model else "",
        scripts=_scripts_section(repo_id, dataset, remote, zoo_model, timm=timm_family or zoo_model is not None),
        evaluated_on=evaluated_on,
        evaluation_note=_finetune_evaluation_note(finetuned) if finetune_evaluation else "",
        metrics_table="\n".join(f"| {METRIC_LABELS[r.metric_type]} | {r.metric_value:.4f} |" for r in clean),
        reported=_reported_section(reported, metrics, robustness),
        robustness=_robustness_section(robustness),
        figures=_figures_section(figures),
        atlas=_atlas_section(atlas),
        recipe=_recipe_table(model_dir, provenance, dataset_aliases),
        citation=CITATION,
    )


def write_release(
    model_dir: str | Path,
    output_dir: str | Path,
    repo_id: str,
    *,
    evaluation: str | Path | None = None,
    robustness: str | Path | None = None,
    figures: dict[str, Path] | None = None,
    cifar100c_repo: str | None = None,
    provenance: dict | None = None,
    reported: dict | None = None,
    evaluated_on: str | None = None,
    dataset_name: str | None = None,
    atlas: dict | None = None,
) -> Path:
    """Write everything the Hub repo `repo_id` will hold for the trained model in `model_dir`: weights, config,
    image processor, remote code, and the card. `robustness`: a `robustness_cifar100-c.json` (of the dataset
    `cifar100c_repo`); `figures`: {title: PNG} copied into figures/; `dataset_name`: how the card names the
    evaluation's dataset (default: as the evaluation recorded it); the rest (`atlas` too): see `build_model_card`."""
    model_dir, output_dir = Path(model_dir), Path(output_dir)
    metrics, recorded, split, source = find_evaluation(model_dir, evaluation)
    dataset = dataset_name or recorded
    model = create_model(str(model_dir))
    output_dir.mkdir(parents=True, exist_ok=True)
    if isinstance(model, ZooModelMixin):
        model.save_pretrained(output_dir, remote_code=True)
    else:
        model.save_pretrained(output_dir)
    robustness_payload = None
    if robustness is not None:
        evaluated = json.loads(Path(robustness).read_text())  # as the robustness analysis writes its result
        robustness_payload = evaluated["result"] | {
            "plan": evaluated.get("plan", {}),
            "repo_id": cifar100c_repo or "cifar100-c",
        }
    if not _copy_training_logs(model_dir, output_dir):  # converted weights: their evaluation instead
        clean = [name for name in ("accuracy", "nll", "ece") if metrics.get(name) is not None]
        scalars = {f"eval/{name}": metrics[name] for name in clean}
        if robustness_payload is not None:
            scalars["eval/cifar100c_mean_accuracy"] = robustness_payload["mean_accuracy"]
        write_scalar_events(output_dir / RUNS / "evaluation", scalars)
    shown = {}
    for title, path in (figures or {}).items():
        (output_dir / "figures").mkdir(exist_ok=True)
        target = output_dir / "figures" / Path(path).name
        shutil.copy(path, target)
        shown[title] = f"figures/{target.name}"
    card = build_model_card(
        model,
        repo_id,
        metrics,
        dataset,
        split,
        model_dir,
        robustness=robustness_payload,
        figures=shown,
        provenance=provenance,
        reported=reported,
        evaluated_on=evaluated_on,
        dataset_aliases={recorded: dataset},
        finetune_evaluation=source == "fine-tune",
        atlas=atlas,
    )
    card.save(output_dir / "README.md")
    return output_dir


def _copy_training_logs(model_dir: Path, output_dir: Path) -> bool:
    """Copy the TensorBoard event files of the run into the repo's `runs/`, where the Hub's metrics tab finds them:
    `alternet-train`'s `logs/` into `runs/training/`, `alternet-finetune`'s `runs/` as they are; whether there
    were any."""
    copied = False
    for logs, target in ((model_dir / "logs", output_dir / RUNS / "training"), (model_dir / RUNS, output_dir / RUNS)):
        events = sorted(p for p in logs.rglob("*") if p.is_file() and "tfevents" in p.name) if logs.is_dir() else []
        for path in events:
            (target / path.relative_to(logs)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, target / path.relative_to(logs))
        copied = copied or bool(events)
    return copied


def write_scalar_events(folder: Path, scalars: dict[str, float], step: int = 0) -> Path:
    """`scalars` ({tag: value}) as a TensorBoard event file at `step`, in the format training logs: the same scalars
    give the same bytes (no wall time, a fixed name), so a release written twice is the same release."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "events.out.tfevents.0.alternet-hf"
    with path.open("wb") as file:
        writer = RecordWriter(file)
        writer.write(event_pb2.Event(wall_time=0.0, file_version="brain.Event:2").SerializeToString())
        for tag, value in scalars.items():
            summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=float(value))])
            writer.write(event_pb2.Event(wall_time=0.0, step=step, summary=summary).SerializeToString())
    return path


def _is_hub_id(name: str) -> bool:
    """Whether `name` reads as a Hub repo id (`owner/name`), not a local path, for the card's `datasets`."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return name.count("/") == 1 and not name.startswith((".", "/", "~"))


def _zoo_timm_model(model_dir: Path, preset: str | None = None) -> tuple[str, dict] | None:
    """(timm's name of a zoo model, the config fields it was built with beyond its preset), or None."""
    config_file = model_dir / "training_config.json"
    training = json.loads(config_file.read_text()) if config_file.is_file() else {}
    preset = preset or training.get("model")
    if preset not in list_models():
        return None
    fields = {key: value for key, value in (training.get("model_overrides") or {}).items() if key != "drop_path_rate"}
    return timm_name(*preset.rsplit("-", 1)), {TIMM_ARGUMENTS.get(key, key): value for key, value in fields.items()}


def _timm_usage(repo_id: str, zoo_model: tuple[str, dict] | None) -> str:
    """How to load the weights in timm: by the repo id for timm's own families (PiT, Swin, `zoo_model` None), by the
    zoo's timm name and the downloaded file for the zoo's (`import alternet_hf` registers the names)."""
    if zoo_model is None:
        return f"""In timm (the repo is a timm model: no `alternet_hf` needed):

```python
import timm

model = timm.create_model("hf-hub:{repo_id}", pretrained=True)
```"""
    name, fields = zoo_model
    extra = "".join(f", {key}={value!r}" for key, value in fields.items())
    overlay = "".join(f", {key}={value!r}" for key, value in _overlay_fields(fields).items())
    return f"""In timm (the same weights; `import alternet_hf` registers the zoo's names):

```python
import alternet_hf, timm
from huggingface_hub import hf_hub_download

weights = hf_hub_download("{repo_id}", "model.safetensors")
model = timm.create_model("{name}", pretrained=True,
                          pretrained_cfg_overlay=dict(file=weights{overlay}){extra})
```"""


def _overlay_fields(fields: dict) -> dict:
    """What timm's `pretrained_cfg_overlay` must repeat of the model's arguments: a class count other than the
    tag's, or timm drops the classifier's weights."""
    return {key: value for key, value in fields.items() if key == "num_classes"}


# timm's scripts see the zoo's names once `alternet_hf` is imported: this runs the script that follows it so.
TIMM_SCRIPT_WRAPPER = (
    "python -c \"import alternet_hf, runpy, sys; sys.argv.pop(0); runpy.run_path(sys.argv[0], run_name='__main__')\""
)


def _scripts_section(
    repo_id: str, dataset: str, remote: bool, zoo_model: tuple[str, dict] | None, *, timm: bool
) -> str:
    """The commands of transformers' example script and, where timm loads the repo (`timm`), timm's `validate.py` and
    `train.py` for this repo, with the column flags of a dataset whose columns are not `image`/`label`."""
    from ..data.sources import DEFAULT_COLUMNS, KNOWN_COLUMNS

    name = repo_id.split("/")[-1]
    hub_dataset = dataset if _is_hub_id(dataset) else "<dataset on the Hub>"
    columns = KNOWN_COLUMNS.get(dataset, DEFAULT_COLUMNS)
    hf_columns = timm_columns = ""
    if columns != DEFAULT_COLUMNS:
        hf_columns = f" --image_column_name {columns.image} --label_column_name {columns.label}"
        timm_columns = f" --input-key {columns.image} --target-key {columns.label}"
    if zoo_model is None:  # a timm repo: timm's scripts load it by its id
        download, script, model = "", "python", f"hf-hub:{repo_id} --pretrained"
    else:
        timm_model, fields = zoo_model
        download = f"hf download {repo_id} model.safetensors --local-dir {name}-weights\n"
        script, model = TIMM_SCRIPT_WRAPPER, f"{timm_model} --pretrained"
        overlay = {"file": f"{name}-weights/model.safetensors", **_overlay_fields(fields)}
        model += " --model-kwargs " + " ".join(
            f'"{key}={value!r}"' for key, value in {"pretrained_cfg_overlay": overlay, **fields}.items()
        )
    through = "" if zoo_model is None else ", through the one-line wrapper that imports `alternet_hf` first"
    timm_scripts = f"""
timm's `validate.py` and `train.py`{through} (`--device cpu` where there is no GPU):

```bash
{download}{script} validate.py \\
    --model {model} \\
    --dataset hfds/{hub_dataset} --split test{timm_columns}
{script} train.py \\
    --model {model} \\
    --dataset hfds/{hub_dataset} --train-split train --val-split test{timm_columns} --output {name}-timm
```
"""
    return f"""## With the ecosystem's scripts

transformers' `examples/pytorch/image-classification/run_image_classification.py` evaluates and fine-tunes this
repo by its id (it evaluates the dataset's `validation` split, or a share of the training split where there is none,
as in CIFAR-100; `--ignore_mismatched_sizes True` gives a dataset with other classes a new head):

```bash
python run_image_classification.py --model_name_or_path {repo_id}{" --trust_remote_code True" if remote else ""} \\
    --dataset_name {hub_dataset}{hf_columns} \\
    --do_train --do_eval --remove_unused_columns False --output_dir {name}-finetuned
```
{timm_scripts if timm else ""}"""


def _robustness_section(robustness: dict | None) -> str:
    if robustness is None:
        return ""
    severities = robustness["severities"]
    header = "| corruption | mean | " + " | ".join(f"severity {s}" for s in severities) + " |"
    rows = [header, "|---|---|" + "---|" * len(severities)]
    for corruption, accuracy in zip(robustness["corruptions"], robustness["accuracy"]):
        cells = " | ".join(f"{100 * a:.2f}" for a in accuracy)
        rows.append(f"| {corruption} | {100 * sum(accuracy) / len(accuracy):.2f} | {cells} |")
    return f"""
## Robustness on CIFAR-100-C ([`{robustness["repo_id"]}`](https://huggingface.co/datasets/{robustness["repo_id"]}))

{CIFAR_C_METRIC}: **{100 * robustness["mean_accuracy"]:.2f}%**{_standard_error(robustness)} (NLL
{robustness["mean_nll"]:.4f}, ECE {robustness["mean_ece"]:.4f}). {_subset_note(robustness)}Accuracy (%) per
corruption and severity:

{chr(10).join(rows)}
"""


def _standard_error(robustness: dict) -> str:
    error = robustness.get("mean_accuracy_standard_error")
    return "" if error is None else f" ± {100 * error:.2f}"


def _subset_note(robustness: dict) -> str:
    """What a subset evaluation was, in words: the card's reader must know the ± is sampling, not seeds."""
    if robustness.get("mean_accuracy_standard_error") is None:
        return ""
    plan = robustness.get("plan", {})
    per_class = f", {plan['per_class']} of each class" if "per_class" in plan else ""
    seed = f", seed {plan['seed']}" if "seed" in plan else ""
    return (
        f"Evaluated on the same seeded, class-stratified subset of each set ({robustness['images_per_set']:,} of its "
        f"{robustness['set_size']:,} images{per_class}{seed}), to fit the release's time budget on a CPU; ± is the "
        "standard error that subset leaves on the mean accuracy. "
    )


def _atlas_section(atlas: dict | None) -> str:
    """Where the model sits in the release's atlas (`apps.atlas.placement`, with the atlas' `repo_id`)."""
    if not atlas or not atlas["count"]:
        return ""
    count, url = atlas["count"], f"https://huggingface.co/datasets/{atlas['repo_id']}"
    parts = []
    if atlas["late_delta_log_amplitude_rank"] is not None:
        parts.append(
            f"its late-stage ΔlogA at π is {atlas['late_delta_log_amplitude']:+.2f}, rank "
            f"{atlas['late_delta_log_amplitude_rank']} of {count + 1} from the lowest (the most low-pass)"
        )
    if atlas["high_frequency_kept_rank"] is not None:
        parts.append(
            f"it keeps {100 * atlas['high_frequency_kept']:.0f}% of its top-1 predictions under high-frequency "
            f"noise, rank {atlas['high_frequency_kept_rank']} of {count + 1} from the most kept"
        )
    return (
        f"\n## Where this model sits among {count} public models\n\nIn [the atlas]({url}) (the paper's probe of "
        f"frequencies over public image classifiers, on the same photos; a model of kind {atlas['kind']}): "
        + "; ".join(parts)
        + ". The atlas' card decides the paper's claims across all of them.\n"
    )


def _figures_section(figures: dict[str, str] | None) -> str:
    if not figures:
        return ""
    shown = "\n\n".join(f"**{title}**\n\n![{title}]({path})" for title, path in figures.items())
    return f"\n## Figures\n\n{shown}\n"
