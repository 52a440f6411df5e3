"""The release's run: `release.json` (the manifest that makes it resumable) and `Release`, its steps in order."""

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

import alternet_hf
from alternet_hf.apps import atlas
from alternet_hf.data.sources import load_image_classification
from alternet_hf.hub.cifar100c import write_hub_dataset
from alternet_hf.hub.reference import PAPER_RESULTS, REFERENCE_FILES, DownloadError, download, file_url
from alternet_hf.hub.repos import PAPER_ID, write_release
from alternet_hf.models.presets import PAPER_MODELS, display_name
from alternet_hf.training.recipe import recipe_config
from alternet_hf.utils import format_duration, machine, write_json
from alternet_hf.utils.run_lock import hold_folder
from analysis.inputs import DataOptions, choose_device
from analysis.registry import PAPER_ANALYSES, Settings

from . import package, rehearsal
from .checks import (
    ATLAS_REPO,
    CIFAR100C_REPO,
    COLLECTION_TITLE,
    COLUMN_NAMES,
    DATASET,
    MANIFEST,
    MANIFEST_VERSION,
    SPACE_REPO,
    ReleaseError,
    ReleaseOptions,
    check_cifar100c_labels,
    evaluation_batch,
    evaluation_rules,
    inductor_available,
)
from .estimates import CIFAR_TRAIN_IMAGES, h100_estimate
from .outputs import write_robustness, write_space_repo
from .verify import UserSession, verify_repo

# The public classifiers the release's atlas places the zoo among (a rehearsal's: `rehearsal.PUBLIC_STAND_INS`).
ATLAS_MODELS = Path(__file__).with_name("atlas_models.txt")
# What a second release on a folder in use is told (`run_lock.hold_folder`).
RUNNING_ADVICE = "wait for it to end: run again later, the release goes on from where that one stopped"


def _die_with_parent() -> None:
    """In a child process: be killed with the release (Linux), so a killed release leaves no training behind."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def tree_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def emptied(folder: Path) -> Path:
    """`folder`, gone if it was there: a step writes its folder whole (a killed run's half is never built on)."""
    if folder.exists():
        shutil.rmtree(folder)
    return folder


class Manifest:
    """`release.json`: the release's identity and, per step, its settings, output hashes and wall time."""

    def __init__(self, out: Path, identity: dict):
        self.out, self.path = out, out / MANIFEST
        self.data = json.loads(self.path.read_text()) if self.path.is_file() else {}
        self.data.setdefault("version", MANIFEST_VERSION)
        self.data["release"] = identity
        self.steps = self.data.setdefault("steps", {})

    def complete(self, name: str, settings: dict) -> bool:
        """Whether step `name` ran to its end with `settings` and its outputs are still as it left them."""
        entry = self.steps.get(name)
        if entry is None or entry.get("settings") != self.portable(settings):
            return False
        return all(
            (self.out / path).is_file() and file_hash(self.out / path) == digest
            for path, digest in entry["outputs"].items()
        )

    def record(self, name: str, settings: dict, outputs: list[Path], seconds: float) -> None:
        self.steps[name] = {
            "settings": self.portable(settings),
            "outputs": {str(p.relative_to(self.out)): file_hash(p) for p in sorted(set(outputs))},
            "seconds": round(seconds, 2),
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        self.save()

    def save(self) -> None:
        write_json(self.path, self.data)

    def portable(self, settings: dict):
        """`settings` as JSON, with paths inside the release folder written from `<out>`: a moved or copied release
        (or one named by another path) is the same release."""
        root = str(self.out)

        def relative(value):
            if isinstance(value, dict):
                return {key: relative(item) for key, item in value.items()}
            if isinstance(value, list):
                return [relative(item) for item in value]
            if isinstance(value, str) and (value == root or value.startswith(root + os.sep)):
                return "<out>" + value[len(root) :]
            return value

        return relative(json.loads(json.dumps(settings, default=str)))


@dataclass
class Release:
    """One release: the steps in order, each skipped when the manifest says it is complete."""

    options: ReleaseOptions
    say: Callable[[str], None] = print
    manifest: Manifest = field(init=False)
    skipped: list[str] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)
    pending: dict[str, str] = field(default_factory=dict)  # preset: why it is not in this run
    refused: dict[str, str] = field(default_factory=dict)  # preset: the one line that says why

    def __post_init__(self):
        self.out = Path(self.options.out)
        self.work = self.out / "work"
        self.device = choose_device()
        self.compile = inductor_available()
        self.user = UserSession()  # the interpreter that loads each repo as a user without alternet_hf does
        # The layout of <out>; the reference's files are read from the rehearsal's stand-ins, the folder given, or
        # the downloads. Cards and messages name the training set `dataset_name`: never a path of this machine.
        self.stand_in, self.results_dir = self.work / "stand-in", self.work / "results"
        self.dataset_repo, self.space_repo = self.out / "datasets" / CIFAR100C_REPO, self.out / "spaces" / SPACE_REPO
        self.atlas_repo = self.out / "datasets" / ATLAS_REPO
        given = Path(self.options.reference_dir) if self.options.reference_dir else self.work / "reference"
        self.reference_dir = self.stand_in / "reference" if self.options.rehearsal else given
        self.dataset_name = rehearsal.STAND_IN_NAME if self.options.rehearsal else DATASET

    def train_dir(self, preset: str) -> Path:
        return self.work / "train" / preset

    def model_dir(self, preset: str) -> Path:
        """The model folder the later steps read: converted from the reference's file, or trained."""
        return self.work / "converted" / preset if self.options.converted(preset) else self.train_dir(preset)

    def model_repo(self, preset: str) -> Path:
        return self.out / "models" / preset

    @property
    def dataset_id(self) -> str | None:
        """CIFAR-100-C's repo id, None in a release without it."""
        return None if self.cifar100c_arrays is None else f"{self.options.org}/{CIFAR100C_REPO}"

    @property
    def source(self) -> str:
        """The training and test images: CIFAR-100 on the Hub, or the rehearsal's stand-in in its schema."""
        return str(self.stand_in / "cifar100") if self.options.rehearsal else DATASET

    @property
    def cifar100c_arrays(self) -> Path | None:
        if self.options.rehearsal:
            return self.stand_in / "CIFAR-100-C"
        return None if self.options.without_cifar100c else Path(self.options.cifar100c_dir)

    @property
    def released(self) -> list[str]:
        """The presets in this run's comparison, cards and Space: all but the pending and the refused."""
        return [p for p in self.options.models if p not in self.pending and p not in self.refused]

    def run(self) -> dict:
        """Every step not yet complete, then the summary (also returned); one run at a time per output folder."""
        with hold_folder(self.out, advice=RUNNING_ADVICE), contextlib.closing(self.user):
            return self._run()

    def _run(self) -> dict:
        options = self.options
        self.manifest = Manifest(self.out, options.identity())
        self.manifest.save()
        self.say(
            f"release of {', '.join(options.models)} for {options.org} into {self.out}/ "
            f"({'rehearsal, ' if options.rehearsal else ''}{'dry run' if options.dry_run else 'uploading'}; "
            f"{self.device}, torch.compile {'on' if self.compile else 'off: no C++ compiler'})"
        )
        if self.cifar100c_arrays is not None:
            self.say(f"CIFAR-100-C is evaluated in {evaluation_rules(self.device)}")
        if options.rehearsal:
            stand_in = {"images_per_class": rehearsal.IMAGES_PER_CLASS, "hues": rehearsal.HUES}
            self.step("stand-in", stand_in, self.build_stand_in)
            for preset in filter(options.converted, options.models):  # only the released files this run needs
                family = preset.split("-", 1)[0]
                settings = {
                    "data": self.outputs_of("stand-in"),
                    "model": rehearsal.REFERENCE_STAND_INS[preset],
                    "training": rehearsal.STAND_IN_TRAINING,
                    "learning_rate": rehearsal.STAND_IN_LEARNING_RATES[family],
                }
                self.step(f"stand-in/{preset}", settings, self.build_reference_stand_in, preset)
        if self.cifar100c_arrays is not None:
            arrays = {
                "arrays": str(self.cifar100c_arrays),
                "dataset": self.source,
                "inputs": self.outputs_of("stand-in"),
            }
            self.step("dataset", arrays, self.write_dataset)
        for preset in options.models:
            try:
                self.release_model(preset)
            except ReleaseError as error:
                if not options.converted(preset):
                    raise
                self.refused[preset] = str(error)
                self.say(f"[{preset}] refused: {error}")
        if self.refused:
            lines = "\n".join(f"  {preset}: {why}" for preset, why in self.refused.items())
            raise ReleaseError(
                f"the release stopped before the comparison, cards and uploads: nothing was published.\n{lines}\n"
                "Fix the file or the preset (the other models' steps are complete and will be skipped), or leave "
                "the refused models out with --models"
            )
        released = self.released
        if not released:
            raise ReleaseError(
                "every model is pending (above): there is nothing to publish from this machine. Run the same command "
                "where they can be trained in time (a GPU), or give the reference's files with --from-reference"
            )
        analysed = self.outputs_of(*(f"analyze/{p}" for p in released))
        self.step("compare", {"inputs": analysed, "pending": self.pending_names()}, self.compare)
        self.step("atlas", self.atlas_settings(), self.build_atlas)
        for preset in released:
            inputs = self.outputs_of(f"evaluate/{preset}", f"analyze/{preset}", f"convert/{preset}")
            card = {"repo_id": self.repo_id(preset), "inputs": inputs, "atlas": self.atlas_placement(preset)}
            self.step(f"card/{preset}", card, self.write_card, preset)
            self.step(f"verify/{preset}", {"inputs": self.outputs_of(f"card/{preset}")}, self.verify, preset)
        settings = {"models": self.space_models(), "pending": self.pending_names(), "inputs": analysed}
        self.step("space", settings, self.write_space)
        self.step("collection", self.collection(), self.write_collection)
        self.step("package", {"version": package.version(), "rehearsal": options.rehearsal}, self.build_package)
        if not options.dry_run:  # the package first: a version that may not be published stops all uploads
            self.step("upload/package", {"inputs": self.outputs_of("package")}, self.publish_package)
            for kind, name, folder, written_by in self.uploads():
                repo = {"repo_id": f"{options.org}/{name}", "repo_type": kind, "inputs": self.outputs_of(written_by)}
                self.step(f"upload/{name}", repo, self.upload, kind, name, folder)
            self.step("upload/collection", {"inputs": self.outputs_of("collection")}, self.publish_collection)
        summary = self.summary()
        self.manifest.data["summary"] = summary
        self.manifest.save()
        return summary

    def release_model(self, preset: str) -> None:
        """One model's steps up to its analyses: fetched and converted, or trained (unless it must wait for a
        machine that trains it in time), then evaluated and analysed."""
        if self.options.converted(preset):
            self.step(f"fetch/{preset}", self.fetch_settings(preset), self.fetch, preset)
            settings = {
                "inputs": self.outputs_of(f"fetch/{preset}"),
                "config": self.conversion_overrides(preset),
                "reported": self.reported(preset),
            }
            self.step(f"convert/{preset}", settings, self.convert, preset)
        else:
            config = self.training_config(preset)
            settings = {"config": config.to_dict(), "inputs": self.outputs_of("stand-in")}
            if not self.manifest.complete(f"train/{preset}", settings):
                waiting = self.training_is_out_of_reach(config)
                if waiting:
                    self.pending[preset] = waiting
                    self.say(f"[{preset}] pending: {waiting}")
                    return
            self.step(f"train/{preset}", settings, self.train, config)
        self.step(f"evaluate/{preset}", self.evaluation_settings(preset), self.evaluate, preset)
        self.step(f"analyze/{preset}", self.analysis_settings(preset), self.analyze, preset)

    def step(self, name: str, settings: dict, action: Callable[..., list[Path]], *args) -> None:
        """`action(*args)`, which returns the files it wrote, unless the manifest says step `name` is complete."""
        if self.manifest.complete(name, settings):
            self.skipped.append(name)
            self.say(f"[{name}] complete, skipped")
            return
        if name in self.manifest.steps:
            self.say(f"[{name}] its settings or outputs changed since it ran: running it again")
        self.say(f"[{name}] ...")
        started = time.perf_counter()
        outputs = action(*args)
        seconds = time.perf_counter() - started
        self.manifest.record(name, settings, outputs, seconds)
        self.ran.append(name)
        self.say(f"[{name}] done in {seconds:.0f} s")

    def outputs_of(self, *steps: str) -> dict:
        """The recorded output hashes of `steps`: part of a later step's settings, so it runs again when they change."""
        return {name: self.manifest.steps.get(name, {}).get("outputs", {}) for name in steps}

    def repo_id(self, preset: str) -> str:
        return f"{self.options.org}/{preset}"

    def pending_names(self) -> list[str]:
        return [display_name(p) for p in self.pending]

    def build_stand_in(self) -> list[Path]:
        dataset = rehearsal.write_stand_in_dataset(self.stand_in / "cifar100")
        arrays = rehearsal.write_stand_in_cifar100c(self.stand_in / "cifar100", self.stand_in / "CIFAR-100-C")
        return tree_files(dataset) + tree_files(arrays)

    def build_reference_stand_in(self, preset: str) -> list[Path]:
        return rehearsal.write_reference_stand_in(self.stand_in / "cifar100", self.reference_dir, preset, say=self.say)

    def write_dataset(self) -> list[Path]:
        """CIFAR-100-C as the Hub dataset, once its labels are checked against the clean test split's."""
        test = load_image_classification(self.source, split="test", **COLUMN_NAMES)
        check_cifar100c_labels(self.cifar100c_arrays, test["label"], self.dataset_name)
        write_hub_dataset(self.cifar100c_arrays, emptied(self.dataset_repo), self.dataset_id)
        return tree_files(self.dataset_repo)

    def reference_file(self, preset: str) -> Path:
        return self.reference_dir / REFERENCE_FILES[preset]

    def fetch_settings(self, preset: str) -> dict:
        """Where the file comes from; a file given in a folder by its name and content, neither its folder nor its
        times: a folder moved, copied without times or unpacked is the same file, an edited one is fetched again."""
        path = self.reference_file(preset)
        if self.options.rehearsal or self.options.reference_dir:
            return {"file": path.name, "size": path.stat().st_size, "sha256": file_hash(path)}
        return {"url": file_url(REFERENCE_FILES[preset])}

    def fetch(self, preset: str) -> list[Path]:
        """The released file, downloaded unless it was given; its provenance (`work/reference/<preset>.json`:
        name, where from, size, SHA-256) is what the card states."""
        path, url = self.reference_file(preset), file_url(REFERENCE_FILES[preset])
        downloaded = not (self.options.rehearsal or self.options.reference_dir)
        if downloaded and not path.is_file():  # a file there is whole: downloads are renamed only once complete
            try:
                download(url, path)
            except DownloadError as error:
                raise ReleaseError(f"{error}. Run the same command again to resume the download") from None
        provenance = {
            "file": path.name,
            "url": url,
            "size": path.stat().st_size,
            "sha256": file_hash(path),
            "obtained": "downloaded from its url" if downloaded else "given in a folder",
        }
        record = write_json(self.work / "reference" / f"{preset}.json", provenance)
        self.say(f"{path.name}: {provenance['size']:,} bytes, SHA-256 {provenance['sha256']}")
        return [record, path] if downloaded else [record]

    def conversion_overrides(self, preset: str) -> dict:
        """Config fields beyond the preset's: the rehearsal's stand-ins are smaller than the released models."""
        return dict(rehearsal.REFERENCE_STAND_INS[preset]) if self.options.rehearsal else {}

    def convert(self, preset: str) -> list[Path]:
        """The zoo model of the released file (`alternet_hf.hub.convert`: every key consumed, none left over), saved
        with `provenance.json`: the file's record, the converter's version, the numbers the paper reports."""
        from alternet_hf.hub.convert import convert_original_checkpoint

        path, folder = self.reference_file(preset), self.model_dir(preset)
        try:
            model = convert_original_checkpoint(path, preset, **self.conversion_overrides(preset))
        except (ValueError, FileNotFoundError) as error:
            raise ReleaseError(f"{path.name} is not the reference's {preset} checkpoint: {error}") from None
        model.save_pretrained(emptied(folder))
        provenance = json.loads((self.work / "reference" / f"{preset}.json").read_text())
        provenance |= {"preset": preset, "converter": f"alternet-hf {alternet_hf.__version__}"}
        provenance["reported"] = self.reported(preset)
        write_json(folder / "provenance.json", provenance)
        return tree_files(folder)

    def reported(self, preset: str) -> dict | None:
        """The top-1 and CIFAR-100-C mean (percent) reported for `preset`, and by whom: the paper, or in the
        rehearsal the stand-in's own test before its file was written."""
        if self.options.rehearsal:
            table = self.reference_dir / rehearsal.REPORTED / f"{preset}.json"
            numbers = json.loads(table.read_text()) if table.is_file() else None
            return numbers and {**numbers, "by": "the stand-in (its own test, before its file was written)"}
        paper = PAPER_RESULTS.get(preset)
        return paper and {"top1": paper.top1, "cifar100c_mean": paper.cifar100c_mean, "by": "the paper"}

    def check_accuracy(self, preset: str, top1: float) -> None:
        """A converted model's clean top-1 (percent) within `max_accuracy_gap` points of the reported value."""
        reported = self.reported(preset)
        if not self.options.converted(preset) or reported is None or reported.get("top1") is None:
            return
        gap, allowed = abs(top1 - reported["top1"]), self.options.max_accuracy_gap
        if gap > allowed:
            raise ReleaseError(
                f"{REFERENCE_FILES[preset]} converted as {preset} scores {top1:.2f}% top-1 on the test split, "
                f"{gap:.1f} points from the {reported['top1']:g}% reported by {reported['by']} (more than "
                f"--max-accuracy-gap {allowed:g}): likely the wrong file for this preset, the wrong preset, or images "
                "prepared differently from the reference's (32×32, CIFAR-100's mean and std)"
            )
        self.say(
            f"{preset}: top-1 {top1:.2f}% here, {reported['top1']:g}% reported by {reported['by']}: {gap:.2f} points "
            f"apart (at most {allowed:g})"
        )

    def training_config(self, preset: str):
        """The paper's recipe for `preset` on the release's data; the rehearsal's tiny sizes and the GPU branches
        (compiled steps, bf16 autocast, channels-last) on the CPU."""
        fields = dict(dataset=self.source, **COLUMN_NAMES, output_dir=str(self.train_dir(preset)), channels_last=True)
        if self.options.rehearsal:
            model_overrides = {**rehearsal.REHEARSAL_MODELS[preset.rsplit("-", 1)[0]], "drop_path_rate": 0.1}
            fields |= dict(rehearsal.REHEARSAL_TRAINING, model_overrides=model_overrides, mixed_precision="bf16")
            fields |= dict(compile=self.compile, num_workers=0)
        config = recipe_config(preset, "paper", **fields)
        config.validate()
        return config

    def training_is_out_of_reach(self, config) -> str | None:
        """Why `config` should wait for another machine (its training would outlast the budget here), or None."""
        per_epoch = 100 * rehearsal.IMAGES_PER_CLASS["train"] if self.options.rehearsal else CIFAR_TRAIN_IMAGES
        images = per_epoch * config.epochs
        overrides = {k: v for k, v in config.model_overrides.items() if k != "drop_path_rate"}
        gpu_hours, _ = h100_estimate([config.model], config.epochs, **overrides)
        if self.device.type == "cuda":
            seconds, how = 3600 * gpu_hours, "estimated from its FLOPs"
        else:
            from zoo_benchmark.models import measure_throughput

            step = measure_throughput(
                config.model, batch_size=16, mode="forward+backward", warmup=1, iterations=2, **config.model_overrides
            )
            seconds, how = images / step.images_per_second, "from two timed steps here"
        if seconds <= self.options.training_budget:
            return None
        budget, gpu = format_duration(self.options.training_budget), format_duration(3600 * gpu_hours)
        return (
            f"training it here ({self.device.type}) would take about {format_duration(seconds)} ({how}; "
            f"{config.epochs} epochs of {images // config.epochs:,} images), over --training-budget {budget}; one "
            f"H100 takes about {gpu} (an estimate). Run this command again on a GPU machine to add it"
        )

    def train(self, config) -> list[Path]:
        """`alternet-train --config ... --resume` in its own process (through `accelerate launch`, one process per
        GPU, where there are several): a fresh Accelerate state and memory for each model."""
        processes = self.options.num_processes or max(torch.cuda.device_count(), 1)
        folder = Path(config.output_dir)
        settings = self.work / "configs" / f"{folder.name}.json"
        settings.parent.mkdir(parents=True, exist_ok=True)
        config.save(settings)
        launcher = [sys.executable, "-m"]
        if processes > 1:
            launcher += ["accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes), "-m"]
        command = [*launcher, "alternet_hf.cli.train", "--config", str(settings), "--resume"]
        if subprocess.run(command, preexec_fn=_die_with_parent).returncode != 0:
            raise ReleaseError(
                f"training {folder.name} failed (its error is above); run the release again to resume it from its "
                f"last checkpoint in {folder}/checkpoints"
            )
        return [folder / name for name in ("config.json", "model.safetensors", "history.json", "metrics.json")]

    def evaluation_settings(self, preset: str) -> dict:
        """What decides the evaluation's numbers: the device does not (a later run on a GPU evaluates the models
        it adds, and leaves the others' numbers as they are)."""
        return {
            "model": self.outputs_of(f"train/{preset}", f"convert/{preset}"),
            "data": self.outputs_of("stand-in", "dataset"),
            "dataset": self.source,
            "cifar100c": str(self.dataset_repo) if self.cifar100c_arrays is not None else None,
            "cifar100c_budget": self.options.cifar100c_budget,
            "compile": self.compile,
            "max_accuracy_gap": self.options.max_accuracy_gap if self.options.converted(preset) else None,
            "reported": self.reported(preset) if self.options.converted(preset) else None,
        }

    def evaluate(self, preset: str) -> list[Path]:
        """The clean test split (a converted model's top-1 checked against the reported one) and, where there is
        CIFAR-100-C, its corruptions read from the published parquet."""
        from alternet_hf.apps.evaluation import evaluate_model, write_evaluation

        folder = self.model_dir(preset)
        metrics, logits, labels = evaluate_model(
            str(folder),
            self.source,
            split="test",
            **COLUMN_NAMES,
            batch_size=evaluation_batch(self.device),
            compile_mode="default" if self.compile else None,
        )
        path = write_evaluation(
            folder, model=str(folder), dataset=self.source, split="test", metrics=metrics, logits=logits, labels=labels
        )
        self.say(f"{preset}: top-1 {100 * metrics['accuracy']:.2f}% on the clean test split ({len(labels):,} images)")
        self.check_accuracy(preset, 100 * metrics["accuracy"])
        outputs = [path, path.with_name(f"{path.stem}_reliability.png")]
        if self.cifar100c_arrays is not None:
            outputs += write_robustness(
                folder,
                self.dataset_repo,
                self.dataset_id,
                device=self.device,
                compile=self.compile,
                budget=None if self.device.type == "cuda" else self.options.cifar100c_budget,
                say=self.say,
            )
        return outputs

    def analysis_plan(self):
        """(settings, notes, data, analyses) of each model's analyses, at the amounts of the device the release first
        ran on; robustness is the evaluation step's result, not measured again."""
        if self.options.rehearsal:
            settings, notes = Settings(**Settings.QUICK_AMOUNTS), ["the rehearsal's smallest amounts"]
        else:
            first_device = self.manifest.data.setdefault("analysis_device", self.device.type)
            settings, notes = Settings.for_device(first_device)
        data = DataOptions(dataset=self.source, **COLUMN_NAMES, batch_size=64 if self.options.rehearsal else 256)
        return settings, notes, data, [a for a in PAPER_ANALYSES if a != "robustness"]

    def analysis_settings(self, preset: str) -> dict:
        settings, notes, data, analyses = self.analysis_plan()
        return {
            "analyses": analyses,
            "settings": settings.to_dict(),
            "notes": notes,
            "data": dataclasses.asdict(data),
            "model": self.outputs_of(f"train/{preset}", f"convert/{preset}"),
            "cifar100c": self.outputs_of(f"evaluate/{preset}"),
        }

    def analyze(self, preset: str) -> list[Path]:
        """Every analysis of the paper on one model (`alternet-analyze`), into work/results/<name>/, with the
        evaluation's CIFAR-100-C result as the robustness analysis's (measured once: on a CPU it is hours)."""
        from analysis.runner import analyse_model

        settings, notes, data, analyses = self.analysis_plan()
        out = emptied(self.results_dir / display_name(preset))
        analyse_model(
            str(self.model_dir(preset)),
            analyses,
            data=data,
            settings=settings,
            device=self.device,
            out=out,
            scaled_down=notes,
            say=self.say,
        )
        evaluated = self.model_dir(preset) / "robustness_cifar100-c.json"
        for suffix in (".json", ".png") if evaluated.is_file() else ():  # the evaluation's format is the analysis's
            shutil.copyfile(evaluated.with_suffix(suffix), out / f"robustness{suffix}")
        return tree_files(out)

    def compare(self) -> list[Path]:
        """The comparison of the released models (`alternet-compare`'s figures and claims report) from their stored
        results; the pending ones are named in its notes."""
        from analysis.runner import compare_stored

        settings, notes, data, _ = self.analysis_plan()
        specs = [(display_name(p), str(self.model_dir(p))) for p in self.released]
        comparison = emptied(self.work / "comparison")  # the figures of a line-up that has grown since
        written = compare_stored(
            specs,
            data=data,
            settings=settings,
            device=self.device,
            results_dir=self.results_dir,
            comparison_dir=comparison,
            scaled_down=notes,
            pending=self.pending_names(),
        )
        return [Path(p) for p in written.values()]

    def write_card(self, preset: str) -> list[Path]:
        folder, repo = self.model_dir(preset), emptied(self.model_repo(preset))
        results = self.results_dir / display_name(preset)
        figures = {
            "Training curves": folder / "training_curves.png",
            "Reliability diagram (clean test split)": next(folder.glob("eval_*_test_reliability.png"), None),
            "ΔlogA: relative log amplitude of the feature maps, block by block (the paper's Fig. 2a)": results
            / "fourier.png",
            "Accuracy under CIFAR-100-C, per corruption and severity": folder / "robustness_cifar100-c.png",
        }
        robustness = folder / "robustness_cifar100-c.json"
        provenance = folder / "provenance.json"
        reported = self.reported(preset)
        write_release(
            folder,
            repo,
            self.repo_id(preset),
            evaluation=next(folder.glob("eval_*_test.json")),
            robustness=robustness if robustness.is_file() else None,
            figures={title: path for title, path in figures.items() if path is not None and path.is_file()},
            cifar100c_repo=self.dataset_id,
            provenance=json.loads(provenance.read_text()) if provenance.is_file() else None,
            reported=reported if self.options.converted(preset) or not self.options.rehearsal else None,
            evaluated_on=self.device_name(),
            dataset_name=self.dataset_name,
            atlas=self.atlas_placement(preset),
        )
        return tree_files(repo)

    @property
    def atlas_id(self) -> str:
        return f"{self.options.org}/{ATLAS_REPO}"

    def public_models(self) -> list[str]:
        """The public classifiers of the atlas: `ATLAS_MODELS`' Hub ids, or the rehearsal's stand-ins' names."""
        if self.options.rehearsal:
            return [f"stand-in/{name}" for name in rehearsal.PUBLIC_STAND_INS]
        return atlas.read_ids(ATLAS_MODELS)

    def atlas_settings(self) -> dict:
        evaluated = self.outputs_of(*(f"evaluate/{p}" for p in self.released), "stand-in")
        return {"public": self.public_models(), "repo_ids": [self.repo_id(p) for p in self.released], **evaluated}

    def build_atlas(self) -> list[Path]:
        """The atlas dataset (`alternet-atlas`'s folder): the public classifiers through the Space's door (a
        rehearsal's stand-ins from their folders), then the released models from theirs, with its card."""
        found = atlas.Atlas(emptied(self.atlas_repo))
        if self.options.rehearsal:
            for model_id in self.public_models():
                name = model_id.split("/", 1)[1]
                atlas.measure_folder(found, model_id, rehearsal.write_public_stand_in(self.work / "public", name))
        else:
            atlas.measure(found, self.public_models(), report=self.say, progress=False)
        for preset in self.released:
            atlas.measure_folder(found, self.repo_id(preset), self.model_dir(preset))
        command = f"python scripts/release.py --org {self.options.org} (its step `atlas`)"
        decided = atlas.write_outputs(found, command=command)
        measured = len(found.measured()) - len(self.released)
        self.say(
            f"[atlas] the released models among {measured} public ones; claims: "
            + ", ".join(f"{claim.key} {claim.verdict}" for claim in decided)
        )
        return tree_files(self.atlas_repo)

    def atlas_placement(self, preset: str) -> dict | None:
        """Where `preset` sits among the atlas' public models (`atlas.placement`), with the atlas' repo id."""
        found = atlas.Atlas(self.atlas_repo)
        if self.repo_id(preset) not in found.rows:
            return None
        placed = atlas.placement(found, self.repo_id(preset), among=self.public_models())
        return {**placed, "repo_id": self.atlas_id}

    def verify(self, preset: str) -> list[Path]:
        """The repo as a user loads it scores the card's top-1, and the Space predicts what it predicts
        (`verify.verify_repo`); what was compared goes to work/verify/<preset>.json."""
        checked = verify_repo(self.model_repo(preset), self.source, self.dataset_name, **COLUMN_NAMES, user=self.user)
        self.say(
            f"{preset}: the card's top-1 {100 * checked['card_top1']:.2f}%, loaded as a user loads it "
            f"{100 * checked['user_top1']:.2f}%; the Space predicts as the model does"
        )
        return [write_json(self.work / "verify" / f"{preset}.json", checked)]

    def device_name(self) -> str:
        if self.device.type == "cuda":
            return torch.cuda.get_device_name(self.device)
        return f"a CPU ({machine()})"

    def space_models(self) -> str:
        return ",".join(f"{display_name(p)}={self.repo_id(p)}" for p in self.released)

    def write_space(self) -> list[Path]:
        """The Space repo (`outputs.write_space_repo`), pointed at this release's models and results."""
        write_space_repo(
            emptied(self.space_repo),
            models=[(display_name(p), self.repo_id(p)) for p in self.released],
            results={display_name(p): self.results_dir / display_name(p) for p in self.released},
            dataset=self.dataset_id,
            pending=self.pending_names(),
            atlas=self.atlas_id,
        )
        return tree_files(self.space_repo)

    def build_package(self) -> list[Path]:
        """The sdist and the wheel, checked, installed into a fresh environment and run there (`package`); a
        rehearsal reuses this environment's dependencies and leaves the main job out."""
        import sysconfig

        files = package.build(self.out / "package")
        with tempfile.TemporaryDirectory(prefix="alternet-hf-package-") as workdir:
            reuse = Path(sysconfig.get_path("purelib")) if self.options.rehearsal else None
            ran = package.try_installed(
                files[1], Path(workdir), dependencies_from=reuse, main_job=not self.options.rehearsal
            )
        built = ", ".join(file.name for file in files)
        self.say(f"[package] {built}: twine check passed; from a fresh environment ran {', '.join(ran)}")
        return files

    def publish_package(self) -> list[Path]:
        files = sorted((self.out / "package").iterdir())
        self.say(f"[upload/package] {package.publish(files)}")
        return files

    def uploads(self) -> list[tuple[str, str, Path, str]]:
        """(repo type, name, folder, the step that wrote it) of every repo to upload."""
        repos = [("dataset", CIFAR100C_REPO, self.dataset_repo, "dataset")] if self.cifar100c_arrays is not None else []
        repos += [("model", p, self.model_repo(p), f"card/{p}") for p in self.released]
        return repos + [
            ("dataset", ATLAS_REPO, self.atlas_repo, "atlas"),
            ("space", SPACE_REPO, self.space_repo, "space"),
        ]

    def upload(self, kind: str, name: str, folder: Path) -> list[Path]:
        from huggingface_hub import HfApi  # here: the tests replace it

        api, repo_id = HfApi(), f"{self.options.org}/{name}"
        extra = {"space_sdk": "gradio"} if kind == "space" else {}
        api.create_repo(repo_id, repo_type=kind, private=self.options.private, exist_ok=True, **extra)
        api.upload_folder(repo_id=repo_id, repo_type=kind, folder_path=folder, commit_message="scripts/release.py")
        self.say(f"published https://huggingface.co/{'' if kind == 'model' else kind + 's/'}{repo_id}")
        return tree_files(folder)

    def collection(self) -> dict:
        """The release's Hub Collection: the paper, then the released models in the paper's order, CIFAR-100-C, the
        atlas and the Space."""
        items = [{"type": "paper", "id": PAPER_ID}]
        items += [{"type": "model", "id": self.repo_id(p)} for p in PAPER_MODELS if p in self.released]
        items += [{"type": "dataset", "id": self.dataset_id}] if self.cifar100c_arrays is not None else []
        items += [{"type": "dataset", "id": self.atlas_id}, {"type": "space", "id": f"{self.options.org}/{SPACE_REPO}"}]
        return {"title": COLLECTION_TITLE, "namespace": self.options.org, "items": items}

    def write_collection(self) -> list[Path]:
        """What the Collection will hold (`collection.json`): what a dry run would create."""
        return [write_json(self.out / "collection.json", self.collection())]

    def publish_collection(self) -> list[Path]:
        """Create the Collection, or find it by its title, and add what it lacks: run twice, it changes nothing."""
        from huggingface_hub import HfApi

        api, wanted = HfApi(), json.loads((self.out / "collection.json").read_text())
        collection = api.create_collection(
            wanted["title"], namespace=wanted["namespace"], private=self.options.private, exists_ok=True
        )
        for item in wanted["items"]:
            api.add_collection_item(collection.slug, item["id"], item["type"], exists_ok=True)
        self.say(f"published the collection https://huggingface.co/collections/{collection.slug}")
        return [self.out / "collection.json"]

    def summary(self) -> dict:
        models = {}
        for preset in self.released:
            folder = self.model_dir(preset)
            clean = json.loads(next(folder.glob("eval_*_test.json")).read_text())["metrics"]
            robustness = folder / "robustness_cifar100-c.json"
            mean_c = json.loads(robustness.read_text())["result"]["mean_accuracy"] if robustness.is_file() else None
            models[preset] = {
                "repo_id": self.repo_id(preset),
                "top1": clean["accuracy"],
                "cifar100c_mean": mean_c,
                "weights": "converted from the reference's release" if self.options.converted(preset) else "trained",
            }
        comparison = json.loads((self.work / "comparison" / "comparison.json").read_text())
        verdicts = [claim["verdict"] for claim in comparison["claims"]]
        return {
            "models": models,
            "pending": {preset: {"repo_id": self.repo_id(preset), "why": why} for preset, why in self.pending.items()},
            "claims": {verdict: verdicts.count(verdict) for verdict in sorted(set(verdicts))},
            "dataset": self.dataset_id,
            "atlas": {"repo_id": self.atlas_id, "public_models": len(self.public_models())},
            "space": f"{self.options.org}/{SPACE_REPO}",
            "steps_run": self.ran,
            "steps_skipped": self.skipped,
        }
