"""The paper's build-up rules for putting self-attention into a CNN (docs/paper.md §1), as a search
(`alternet-buildup`, docs/training.md).

A layout is the number of MSA blocks per stage (`AlterNetConfig.num_attention_blocks`). Every candidate is an
ordinary training run in its own folder, kept when its accuracy beats the current layout's by more than the
comparison's noise (`analysis.claims.decide`).
"""

import dataclasses
import inspect
import json
import math
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..training.recipe import TrainingConfig
from ..utils import write_json

# What a candidate's model folder holds that `final/` copies (the training's checkpoints and logs stay behind).
MODEL_FILES = ("config.json", "model.safetensors", "preprocessor_config.json", "metrics.json")
RECORD = "buildup.json"  # in each candidate's folder: what the search read off its training


def has_room(layout: Sequence[int], depths: Sequence[int], stage: int) -> bool:
    """Whether one more MSA fits at the end of `stage` (its last 2m blocks alternate Conv and MSA)."""
    return 2 * (layout[stage] + 1) <= depths[stage]


def add_msa(layout: Sequence[int], stage: int) -> tuple[int, ...]:
    """`layout` with one more MSA block at the end of `stage` (replacing a Conv block)."""
    return tuple(m + (i == stage) for i, m in enumerate(layout))


def next_candidates(
    layout: Sequence[int], depths: Sequence[int], *, up_to: int | None = None
) -> list[tuple[int, tuple[int, ...]]]:
    """(stage, layout) of the next candidates by rules 1 and 2, in the order the search tries them: one more MSA at
    the end of the latest open stage (`up_to` and before) with room, then of each earlier one (rule 2's fallbacks)."""
    last = len(layout) - 1 if up_to is None else up_to
    return [(stage, add_msa(layout, stage)) for stage in range(last, -1, -1) if has_room(layout, depths, stage)]


def layout_name(layout: Sequence[int]) -> str:
    return "msa-" + "-".join(map(str, layout))


@dataclass
class Step:
    """One trained layout of the path (its seeds' runs together)."""

    layout: tuple[int, ...]
    stage: int | None  # where this step added an MSA (None: the starting layout)
    accuracy: float  # held-out, mean over seeds
    standard_error: float  # over seeds where several, else of one run's accuracy over the images
    accuracies: list[float]
    parameters: int
    flops: float  # of one image's forward pass
    decision: str  # "start", "kept", "rejected" or "undecided" (within the noise: not kept)
    reason: str
    folders: list[str]


@dataclass
class BuildUp:
    """The path of a search, and where it went."""

    steps: list[Step]
    output_dir: Path
    final_layout: tuple[int, ...]
    stopped: str  # why the search ended
    seeds: list[int] = field(default_factory=list)

    @property
    def undecided(self) -> bool:
        """Whether no candidate could be told apart from the layout it challenged (a budget too small)."""
        tried = [step for step in self.steps if step.decision != "start"]
        return bool(tried) and all(step.decision == "undecided" for step in tried)

    def summary(self) -> str:
        start, final = self.steps[0], next(s for s in reversed(self.steps) if s.decision in ("start", "kept"))
        text = (
            f"{layout_name(start.layout)} {100 * start.accuracy:.2f}% -> {layout_name(final.layout)} "
            f"{100 * final.accuracy:.2f}% in {len(self.steps) - 1} candidate{'s' * (len(self.steps) != 2)} "
            f"({self.stopped})"
        )
        if self.undecided:
            text += (
                "; no candidate could be told from the layout it challenged: the budget is too small to decide "
                "(train longer, or on more seeds with --seeds)"
            )
        return text

    def to_dict(self) -> dict:
        """buildup.json: the fields, the verdict and the summary (JSON writes the layouts as lists)."""
        verdict = {"output_dir": str(self.output_dir), "undecided": self.undecided, "summary": self.summary()}
        return {**dataclasses.asdict(self), **verdict}


class NotAnAlterNetError(ValueError):
    """The baseline is not a CNN the build-up rules can re-lay out."""


def baseline(config: TrainingConfig) -> tuple[TrainingConfig, list[int]]:
    """`config` with its model as an AlterNet preset and overrides (a folder's architecture read from its config: the
    fields of `AlterNetConfig` and the image statistics, which the candidates, trained from scratch, take on), and the
    stages' depths; an error that names the families the rules apply to for anything else."""
    from ..models.configuration_alternet import AlterNetConfig
    from ..models.presets import create_config

    not_alternet = (
        f"{config.model} is not an AlterNet: the build-up rules re-lay out the blocks of an AlterNet's CNN (the "
        "presets alternet-18/-34/-50/-101/-152 for CIFAR-10, CIFAR-100 or ImageNet, each starting as the ResNet of "
        "its depth without MSAs, or a folder of such a model); ViT, PiT, Swin, the ResNet presets and timm models "
        "have no Conv blocks this search can replace"
    )
    folder = Path(config.model)
    if folder.is_dir():
        saved = json.loads((folder / "config.json").read_text()) if (folder / "config.json").is_file() else {}
        if saved.get("model_type") != "alternet":
            raise NotAnAlterNetError(not_alternet)
        architecture = (*inspect.signature(AlterNetConfig.__init__).parameters, "image_mean", "image_std")
        fields = {name: saved[name] for name in architecture if name in saved}
        config = dataclasses.replace(
            config, model="alternet-18-cifar10", model_overrides={**fields, **config.model_overrides}
        )
    if create_config(config.model).model_type != "alternet":
        raise NotAnAlterNetError(not_alternet)
    depths = config.model_overrides.get("depths", create_config(config.model).depths)
    cnn = create_config(config.model, **{**config.model_overrides, "num_attention_blocks": [0] * len(depths)})
    return config, list(cnn.depths)


def search(
    config: TrainingConfig,
    *,
    seeds: Sequence[int] = (0,),
    max_msa: int | None = None,
    start_layout: Sequence[int] | None = None,
    jobs: int = 1,
    say: Callable[[str], None] = print,
) -> BuildUp:
    """Build an AlterNet from the CNN `config.model` by the rules, each candidate trained as `config` says (under
    `config.output_dir`); returns the path, also written there (JSON, Markdown table, figure). `jobs` > 1 trains the
    next candidate and rule 2's fallbacks side by side, a process each."""
    config, depths = baseline(config)
    layout = tuple(start_layout) if start_layout is not None else (0,) * len(depths)
    if len(layout) != len(depths) or any(m < 0 or 2 * m > d for m, d in zip(layout, depths)):
        raise ValueError(
            f"start layout {list(layout)} does not fit the stages' depths {depths}: one count per stage, at most "
            "half the stage's blocks each"
        )
    if not seeds:
        raise ValueError("give at least one seed")
    root = Path(config.output_dir)
    current = _train_layout(config, root, layout, None, seeds, say)
    steps, up_to, stopped = [current], len(depths) - 1, "no stage has room for another MSA"
    while True:
        if max_msa is not None and sum(layout) >= max_msa:
            stopped = f"{max_msa} MSA blocks reached (--max-msa)"
            break
        options = next_candidates(layout, depths, up_to=up_to)
        if not options:
            if steps[-1].decision != "kept" and len(steps) > 1:
                stopped = "no earlier stage is left to try"
            break
        stage, candidate = options[0]
        if jobs > 1 and len(options) > 1:
            _train_side_by_side(config, root, [option for _, option in options[:jobs]], seeds, say)
        say(f"--- candidate {len(steps)}: {layout_name(candidate)} (an MSA at the end of stage {stage + 1})")
        step = _train_layout(config, root, candidate, stage, seeds, say)
        step.decision, step.reason = _judge(step, current, seeds)
        say(f"{layout_name(candidate)}: {step.decision}, {step.reason}")
        steps.append(step)
        if step.decision == "kept":
            layout, current, up_to = candidate, step, stage
        else:
            up_to = stage - 1
    result = BuildUp(steps, root, layout, stopped, list(seeds))
    _write_outputs(result, current)
    say(f"\nbuild-up: {result.summary()}\npath: {root / 'buildup.md'}, {root / 'buildup.png'}; model: {root / 'final'}")
    return result


def _judge(step: Step, current: Step, seeds: Sequence[int]) -> tuple[str, str]:
    """Kept, rejected or undecided, by the comparison's rule on the held-out accuracy, and the reason in words."""
    from analysis.claims import NOISE_MULTIPLE, decide

    if len(seeds) > 1:
        error = math.hypot(step.standard_error, current.standard_error)
        how = f"over {len(seeds)} seeds"
    else:  # one run each, on the same images: the paired difference's error
        ours, theirs = (_correct(Path(s.folders[0])) for s in (step, current))
        difference = ours.astype(float) - theirs
        error = float(difference.std(ddof=1) / np.sqrt(difference.size)) if difference.size > 1 else 0.0
        how = "paired over the held-out images"
    difference = step.accuracy - current.accuracy
    verdict = decide(difference, error)
    words = f"{100 * difference:+.2f} points against {layout_name(current.layout)} ({NOISE_MULTIPLE:g} SE = "
    words += f"{100 * NOISE_MULTIPLE * error:.2f} points, {how})"
    return {True: "kept", False: "rejected", None: "undecided"}[verdict], words


def _correct(folder: Path) -> np.ndarray:
    bits = json.loads((folder / RECORD).read_text())["correct"]
    return np.frombuffer(bits.encode(), dtype=np.uint8) - ord("0")


def candidate_config(config: TrainingConfig, root: Path, layout: Sequence[int], seed: int) -> TrainingConfig:
    """The training run of one layout and seed: `config` with the layout, the seed and the candidate's folder."""
    overrides = {**config.model_overrides, "num_attention_blocks": list(layout)}
    folder = root / "candidates" / f"{layout_name(layout)}-seed{seed}"
    return dataclasses.replace(config, model_overrides=overrides, output_dir=str(folder), seed=seed)


def _train_side_by_side(config: TrainingConfig, root: Path, layouts, seeds: Sequence[int], say) -> None:
    """Train the runs of `layouts` not yet recorded, a `--train-candidate` process (and GPU, where enough) each."""
    import os
    import subprocess
    import sys

    import torch

    runs = [candidate_config(config, root, layout, seed) for layout in layouts for seed in seeds]
    runs = [run for run in runs if not (Path(run.output_dir) / RECORD).is_file()]
    gpus = torch.cuda.device_count()
    processes = []
    for index, run in enumerate(runs):
        settings = Path(run.output_dir).with_suffix(".json")
        run.save(settings)  # the folder made too
        environment = dict(os.environ)
        if gpus >= len(runs):
            environment["CUDA_VISIBLE_DEVICES"] = str(index)
        command = [sys.executable, "-m", "alternet_hf.cli.buildup", "--train-candidate", str(settings)]
        processes.append((run, subprocess.Popen(command, env=environment)))
    if processes:
        say(f"training {', '.join(Path(run.output_dir).name for run, _ in processes)} side by side")
    failed = [Path(run.output_dir).name for run, process in processes if process.wait() != 0]
    if failed:
        raise RuntimeError(f"training {', '.join(failed)} failed (their output above says why)")


def _train_layout(config: TrainingConfig, root: Path, layout, stage: int | None, seeds: Sequence[int], say) -> Step:
    records = [train_candidate(candidate_config(config, root, layout, seed), say) for seed in seeds]
    accuracies = [record["accuracy"] for record in records]
    if len(accuracies) > 1:
        error = float(np.std(accuracies, ddof=1) / np.sqrt(len(accuracies)))
    else:
        error = math.sqrt(accuracies[0] * (1 - accuracies[0]) / max(records[0]["eval_images"], 1))
    return Step(
        layout=tuple(layout),
        stage=stage,
        accuracy=float(np.mean(accuracies)),
        standard_error=error,
        accuracies=accuracies,
        parameters=records[0]["parameters"],
        flops=records[0]["flops"],
        decision="start",
        reason="the CNN the search starts from" if not any(layout) else "the layout the search starts from",
        folders=[record["folder"] for record in records],
    )


def train_candidate(config: TrainingConfig, say: Callable[[str], None] = print) -> dict:
    """The record of one candidate run: read where it finished, else trained (resumed where a checkpoint is)."""
    from ..training.engine import changed_settings, train

    folder = Path(config.output_dir)
    record_path = folder / RECORD
    if record_path.is_file():
        record = json.loads(record_path.read_text())
        changed = changed_settings(record["training_config"], config)
        if changed:  # how a run ran may change (workers, precision, cadence); what it trained may not
            raise FileExistsError(
                f"{folder} holds a candidate trained with other settings ({', '.join(changed)}); give another "
                "--output-dir or delete it"
            )
        say(f"{folder.name}: trained before, read")
        return {**record, "folder": str(folder)}  # where it is now: a search moved or copied elsewhere reads it there
    resume = (folder / "checkpoints").is_dir()
    say(f"{folder.name}: {'resuming' if resume else 'training'}")
    result = train(config, resume=resume, overwrite=not resume)
    if result.logits is None:
        raise ValueError(f"{folder}: the run ended without an evaluation to judge it by")
    correct = (result.logits.argmax(-1) == result.labels).numpy()
    record = {
        "layout": config.model_overrides["num_attention_blocks"],
        "seed": config.seed,
        "accuracy": float(correct.mean()),
        "eval_images": int(correct.size),
        "correct": "".join("1" if c else "0" for c in correct),
        "parameters": sum(p.numel() for p in result.model.parameters()),
        "flops": _forward_flops(result.model),
        "folder": str(folder),
        "training_config": config.to_dict(),
    }
    write_json(record_path, record, indent=None)  # whole or not at all: a kill here retrains the candidate
    return record


def _forward_flops(model) -> float:
    """FLOPs of one image's forward pass, counted by torch on the meta device (shapes only)."""
    import copy

    import torch
    from torch.utils.flop_counter import FlopCounterMode

    size = model.config.image_size
    meta = copy.deepcopy(model).to("meta").eval()
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        meta(torch.empty(1, model.config.num_channels, size, size, device="meta"))
    return float(counter.get_total_flops())


def _write_outputs(result: BuildUp, final: Step) -> None:
    root = result.output_dir
    (root / "final").mkdir(parents=True, exist_ok=True)
    for name in MODEL_FILES:
        source = Path(final.folders[0]) / name
        if source.is_file():
            shutil.copy2(source, root / "final" / name)
    write_json(root / "buildup.json", result.to_dict())
    (root / "buildup.md").write_text(path_table(result))
    plot_path(result, root / "buildup.png")


def path_table(result: BuildUp) -> str:
    lines = [
        f"# Build-up: {result.summary()}",
        "",
        "| step | layout (MSAs per stage) | added at | held-out accuracy | parameters | GFLOPs | decision |",
        "|---|---|---|---|---|---|---|",
    ]
    for index, step in enumerate(result.steps):
        where = "—" if step.stage is None else f"stage {step.stage + 1}"
        accuracy = f"{100 * step.accuracy:.2f}% ± {100 * step.standard_error:.2f}"
        lines.append(
            f"| {index} | {', '.join(map(str, step.layout))} | {where} | {accuracy} | {step.parameters / 1e6:.2f} M "
            f"| {step.flops / 1e9:.3f} | {step.decision}: {step.reason} |"
        )
    lines += ["", f"Seeds: {', '.join(map(str, result.seeds))}. ± is one standard error."]
    return "\n".join(lines) + "\n"


def plot_path(result: BuildUp, path: Path) -> None:
    """Each step's accuracy with two standard errors, coloured by its decision, the kept path joined."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"start": "tab:blue", "kept": "tab:green", "rejected": "tab:red", "undecided": "tab:grey"}
    figure, axes = plt.subplots(figsize=(1.2 * len(result.steps) + 3, 4))
    kept = [(i, s.accuracy) for i, s in enumerate(result.steps) if s.decision in ("start", "kept")]
    axes.plot(*zip(*[(i, 100 * a) for i, a in kept]), color="tab:green", alpha=0.5, zorder=1)
    for index, step in enumerate(result.steps):
        axes.errorbar(
            index,
            100 * step.accuracy,
            yerr=200 * step.standard_error,
            fmt="o",
            color=colours[step.decision],
            capsize=4,
            zorder=2,
            label=step.decision,
        )
    handles, labels = axes.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    axes.legend(unique.values(), unique.keys(), loc="best")
    axes.set_xticks(range(len(result.steps)), [layout_name(s.layout).removeprefix("msa-") for s in result.steps])
    axes.set_xlabel("MSA blocks per stage, in the order tried")
    axes.set_ylabel("held-out accuracy (%), ± 2 SE")
    axes.set_title("AlterNet build-up")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
