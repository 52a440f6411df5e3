"""What the release writes beside the model repos (`alternet_hf.hub.repos`): each model's CIFAR-100-C evaluation
within the machine's time budget, and the Space repo with its requirements pinned (the released package among them)."""

import shutil
import sys
from pathlib import Path

from alternet_hf.utils import format_duration, write_json

from .checks import BF16_CHECK_PER_CLASS, SUBSET_SEED, ReleaseError, evaluation_batch


def write_robustness(
    model_dir: Path, dataset_repo: Path, repo_id: str, *, device, compile: bool, budget: float | None, say=print
) -> list[Path]:
    """CIFAR-100-C accuracy of the model in `model_dir`, read from the dataset repo `repo_id` as written into
    `dataset_repo`, written as `alternet-analyze` writes the robustness analysis. Where every set would outlast
    `budget` seconds here (None: no limit), each is evaluated on one seeded, class-stratified subset. On a CPU with
    bf16 matrix instructions, in bf16 where that leaves the top-1 on a fixed subset unchanged
    (`checks.evaluation_rules`)."""
    import matplotlib.pyplot as plt
    import torch

    from alternet_hf.data.cifar_c import SEVERITIES
    from alternet_hf.data.cifar_c.sources import ParquetCorruptions
    from alternet_hf.models.presets import create_model
    from analysis.robustness import (
        Classifiers,
        bf16_agreement,
        bf16_matrix_units,
        evaluate_corruptions,
        images_per_second,
        plot_corruptions,
        stratified_subset,
    )
    from analysis.runner import write_result

    model, source = create_model(str(model_dir)).eval(), ParquetCorruptions(dataset_repo)
    source.name = f"CIFAR-100-C ({repo_id})"  # read from the local copy of that repo
    corruptions = source.available()
    labels = source.set_labels(corruptions[0], SEVERITIES[0])
    sets, classes = len(corruptions) * len(SEVERITIES), len(set(labels.tolist()))
    batch_size = evaluation_batch(device)
    compile_mode = "default" if compile else None
    rows, plan = None, {"images_per_set": len(labels), "batch_size": batch_size, "compiled": compile}
    classifiers = Classifiers(model, compile_mode)  # each graph compiled once: the check's, the probe's, the pass's
    bf16 = False
    if torch.device(device).type == "cpu" and bf16_matrix_units():
        fixed = stratified_subset(labels, BF16_CHECK_PER_CLASS, seed=SUBSET_SEED)
        check = bf16_agreement(model, source, rows=fixed, batch_size=batch_size, device=device, classifiers=classifiers)
        bf16 = check["correct_bf16"] == check["correct_float32"]
        plan["bf16_check"] = check
        say(
            f"{model_dir.name}: bf16 against float32 on {check['images']:,} fixed CIFAR-100-C images (severity "
            f"{check['severity']}): {check['correct_bf16']:,} against {check['correct_float32']:,} right, "
            f"{check['disagreements']:,} predictions differ; evaluating in {'bf16' if bf16 else 'float32'}"
        )
    plan["precision"] = "bf16" if bf16 else "float32"
    if budget is not None:
        rate = images_per_second(model, batch_size=batch_size, bf16=bf16, device=device, classifiers=classifiers)
        full = sets * len(labels) / rate
        plan |= {"images_per_second": round(rate, 1), "full_sets_seconds": round(full)}
        if full > budget:
            per_class = round_down(budget * rate / (sets * classes))
            rows = stratified_subset(labels, per_class, seed=SUBSET_SEED)
            plan |= {"per_class": per_class, "seed": SUBSET_SEED, "images_per_set": len(rows)}
            say(
                f"{model_dir.name}: CIFAR-100-C at {rate:.0f} images/s here: its {sets} sets would take "
                f"{format_duration(full)}, over --cifar100c-budget {format_duration(budget)}; evaluating {per_class} "
                f"images of each class per set ({len(rows):,} of {len(labels):,}, seed {SUBSET_SEED})"
            )
    result = evaluate_corruptions(
        model,
        source,
        corruptions=corruptions,
        rows=rows,
        batch_size=batch_size,
        bf16=bf16,
        device=device,
        progress=True,
        classifiers=classifiers,
    )
    meta = {"model": str(model_dir), "dataset": repo_id, "read_from": str(dataset_repo), "plan": plan}
    ax = plot_corruptions(result)
    path = write_result(model_dir, "robustness", result, meta, ax, stem="robustness_cifar100-c")
    plt.close(ax.figure)
    error = result.mean_accuracy_standard_error
    shown = f" ± {100 * error:.2f} (standard error of the subset)" if error is not None else ""
    say(f"{model_dir.name}: CIFAR-100-C mean accuracy {100 * result.mean_accuracy:.2f}%{shown}")
    return [path, path.with_suffix(".png")]


def round_down(value: float) -> int:
    """The largest of 1, 2, 5, 10, 20, 50, ..., 5,000,000 not above `value` (at least 1): images per class of a
    CIFAR-100-C subset, round so that a small change of speed picks the same subset."""
    return max((step * 10**k for k in range(7) for step in (1, 2, 5) if step * 10**k <= value), default=1)


TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def space_requirements(template: Path) -> str:
    """The clone's spaces/requirements.txt pinned to the versions installed here (torch and torchvision as CPU
    builds: a Space runs on a CPU unless upgraded), so that a Space rebuilt later runs what the release ran."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.requirements import Requirement

    lines = [
        "# Pinned by scripts/release.py to the versions it ran with; torch and torchvision as CPU builds.",
        f"--extra-index-url {TORCH_CPU_INDEX}",
    ]
    for line in template.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        requirement = Requirement(line)
        package, extras = requirement.name, "".join(f"[{extra}]" for extra in sorted(requirement.extras))
        try:
            installed = version(package)
        except PackageNotFoundError:
            raise ReleaseError(
                f"the Space needs {package}, which is not installed here: pip install -e '.[space]'"
            ) from None
        if package in ("torch", "torchvision"):
            installed = installed.split("+")[0] + "+cpu"
        lines.append(f"{package}{extras}=={installed}")
    return "\n".join(lines) + "\n"


def write_space_repo(
    folder: Path, *, models, results: dict, dataset: str | None, pending: list[str] = (), atlas: str | None = None
) -> None:
    """The Space repo in `folder`: the clone's spaces/ with its card and requirements for this release (the released
    alternet-hf among them, which the app imports; the model repos keep their remote code for those without it), the
    stored results and `space.json`, the app's defaults for its ALTERNET_SPACE_* variables (`atlas`: the Atlas
    tab's dataset)."""
    from importlib.metadata import version

    from huggingface_hub import SpaceCard

    template = Path(__file__).resolve().parents[2] / "spaces"
    if not (template / "app.py").is_file():
        raise ReleaseError(
            f"the Space's files are not beside this alternet_hf ({template} has no app.py): run scripts/release.py "
            "from a clone of alternet-hf installed with `pip install -e .`"
        )
    folder.mkdir(parents=True)
    shutil.copy(template / "app.py", folder / "app.py")
    (folder / "requirements.txt").write_text(space_requirements(template / "requirements.txt"))
    card = SpaceCard.load(template / "README.md")
    card.data.models = [repo_id for _, repo_id in models]
    card.data.datasets = [name for name in (dataset, atlas) if name] or None
    card.data.sdk_version = version("gradio")
    card.data.python_version = f"{sys.version_info.major}.{sys.version_info.minor}"
    card.save(folder / "README.md")
    for name, stored in results.items():
        shutil.copytree(stored, folder / "results" / name, ignore=shutil.ignore_patterns(".*"))
    defaults = {
        "ALTERNET_SPACE_MODELS": ",".join(f"{name}={repo_id}" for name, repo_id in models),
        "ALTERNET_SPACE_RESULTS": "results",
    }
    if pending:
        defaults["ALTERNET_SPACE_PENDING"] = ",".join(pending)
    if atlas:
        defaults["ALTERNET_SPACE_ATLAS"] = atlas
    write_json(folder / "space.json", defaults)
