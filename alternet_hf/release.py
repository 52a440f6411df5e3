"""The release of the zoo as one resumable run (`alternet-release`): CIFAR-100-C published as parquet, each model
trained with the paper's recipe, evaluated on the clean test split and on CIFAR-100-C, analysed and compared, pushed
with its card, and the Space pushed configured for this release's organisation.

Every step is recorded in `<out>/release.json` (its settings, the hashes of its outputs, its wall time) and skipped
when it is complete with the same settings and its outputs are unchanged, so a killed release resumes at the step it
was in (training itself resumes from its last checkpoint). `<out>` holds each repository exactly as it is uploaded:

    <out>/release.json
    <out>/datasets/cifar100-c/          the CIFAR-100-C dataset repo (parquet + card)
    <out>/models/<preset>/              each model repo (weights, config, remote code, card with figures)
    <out>/spaces/how-do-vits-work/      the Space repo (app, packages, stored results, space.json)
    <out>/work/                         training runs, analyses and the comparison the repos are made from

With `dry_run` nothing is uploaded. The rehearsal (`rehearsal=True`) is the same run on a stand-in built offline in
the real schemas: a 100-class dataset in `uoft-cs/cifar100`'s columns (two embedded digits side by side, class
10·left + right) and CIFAR-100-C arrays in the Zenodo layout made by the zoo's own corruption generator, with tiny
models and epochs, and the GPU branches (inductor, bf16 autocast, channels-last) on the CPU. Only the data source
and the sizes differ from the real release.
"""

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .data import KNOWN_COLUMNS
from .hub import write_release
from .presets import display_name
from .recipe import recipe_config

DATASET = "uoft-cs/cifar100"
COLUMNS = KNOWN_COLUMNS[DATASET]
RELEASE_MODELS = ("resnet-50-cifar100", "vit-ti-cifar100", "alternet-50-cifar100")
CIFAR100C_REPO = "cifar100-c"
SPACE_REPO = "how-do-vits-work"
MANIFEST = "release.json"
MANIFEST_VERSION = 1

# The rehearsal's stand-in sizes: 10 training and 2 test images per class, tiny members of each family, 2 epochs.
STAND_IN_IMAGES_PER_CLASS = {"train": 10, "test": 2}
REHEARSAL_MODELS = {
    "resnet-50": dict(hidden_sizes=[8, 16, 16, 32], embedding_size=8, depths=[1, 1, 1, 1]),
    "vit-ti": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, patch_size=4),
    "pit-ti": dict(base_dims=[16, 16], depth=[1, 1], heads=[1, 2], patch_size=4, stride=2),
    "swin-ti": dict(embed_dim=16, depths=[1, 2], num_heads=[1, 2], window_size=4, patch_size=2),
    "alternet-50": dict(
        hidden_sizes=[8, 16, 16, 32],
        embedding_size=8,
        depths=[1, 2, 2, 2],
        num_attention_blocks=[0, 1, 1, 1],
        num_attention_heads=[1, 1, 1, 1],
        attention_head_dim=8,
    ),
}
REHEARSAL_TRAINING = dict(
    epochs=2, warmup_epochs=0.5, batch_size=32, eval_batch_size=100, learning_rate=2e-3, num_workers=0,
    eval_every_epochs=1, save_every_epochs=1, save_every_minutes=None, log_every_steps=10,
)  # fmt: skip
# The H100 estimate: NVIDIA's dense bf16 peak of an H100 SXM, and the share of it these 32x32 models are assumed to
# sustain: 8% is what the engine's H100 goal (8,500 AlterNet-50 training images/s, README) means in FLOPs. An
# assumption, not a measurement: no GPU was lent to the sessions that built this.
H100_BF16_FLOPS = 989e12
ASSUMED_UTILISATION = 0.08
CIFAR_TRAIN_IMAGES, CIFAR_TEST_IMAGES = 50_000, 10_000


class ReleaseError(ValueError):
    """Something the person releasing can fix, said before anything is trained where it can be."""


@dataclass
class ReleaseOptions:
    """What `alternet-release` was asked for. `out` is the dry-run folder or the staging folder of a real release."""

    org: str
    out: Path
    models: tuple[str, ...] = RELEASE_MODELS
    cifar100c_dir: Path | None = None
    without_cifar100c: bool = False
    dry_run: bool = False
    rehearsal: bool = False
    overwrite: bool = False
    private: bool = False
    num_processes: int | None = None  # training processes; default: one per visible GPU (at least one)

    def identity(self) -> dict:
        """What makes two runs the same release (a folder holding another one is refused). A dry run and the real
        one are the same release: publishing after a dry run uploads its folder without redoing a step."""
        return dict(
            org=self.org, models=list(self.models), rehearsal=self.rehearsal, cifar100c=not self.without_cifar100c
        )


def architecture_of(preset: str) -> str:
    return preset.rsplit("-", 1)[0]


# --- checks before anything runs ----------------------------------------------------------------------------


def check_options(options: ReleaseOptions) -> None:
    """Every refusal that needs no training: organisation name, presets, CIFAR-100-C arrays, the folder."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    from .presets import list_models

    try:
        validate_repo_id(f"{options.org}/{SPACE_REPO}")
    except HFValidationError:
        raise ReleaseError(
            f"--org {options.org!r} is not a valid Hugging Face user or organisation name (letters, digits, '-', "
            "'_' and '.', not starting or ending with '-' or '.', at most 96 characters)"
        ) from None
    for preset in options.models:
        if preset not in list_models("cifar100"):
            raise ReleaseError(
                f"{preset!r} is not a CIFAR-100 preset of the zoo; the release trains on {DATASET} and evaluates on "
                f"CIFAR-100-C: choose from {', '.join(list_models('cifar100'))}"
            )
    if len(set(options.models)) != len(options.models):
        raise ReleaseError(f"--models names a preset twice: {', '.join(options.models)}")
    if not options.rehearsal and not options.without_cifar100c:
        check_cifar100c_dir(options.cifar100c_dir)
    check_out_dir(options)


def check_cifar100c_dir(folder: Path | None) -> None:
    from analysis.corruptions import CORRUPTIONS
    from analysis.robustness import ZENODO_URL

    where = (
        f"download CIFAR-100-C.tar from Zenodo record 3555552 ({ZENODO_URL}), unpack it and pass the folder as "
        "--cifar100c-dir; a release without CIFAR-100-C (no robustness on the cards, no dataset) needs "
        "--without-cifar100c"
    )
    if folder is None:
        raise ReleaseError(f"the release evaluates on CIFAR-100-C and publishes it: {where}")
    if not Path(folder).is_dir():
        raise ReleaseError(f"there is no folder {folder}: {where}")
    missing = [
        name for name in ("labels.npy", *(f"{c}.npy" for c in CORRUPTIONS)) if not (Path(folder) / name).is_file()
    ]
    if missing:
        raise ReleaseError(f"{folder} lacks {', '.join(missing)}: {where}")


def check_out_dir(options: ReleaseOptions) -> None:
    """The folder is empty, or holds this same release (resumed); another release is refused unless `overwrite`."""
    out = options.out
    if not out.exists() or not any(out.iterdir()):
        return
    manifest = out / MANIFEST
    held = json.loads(manifest.read_text()).get("release") if manifest.is_file() else None
    if held == options.identity():
        return
    if options.overwrite:
        shutil.rmtree(out)
        return
    what = f"another release ({held})" if held else "files that are not a release"
    raise ReleaseError(
        f"{out} holds {what}; this one is {options.identity()}. Choose another folder, or pass --overwrite to delete "
        "it and start again"
    )


def check_hub(options: ReleaseOptions) -> str:
    """The user the token belongs to, or one clear error (no token, or the Hub unreachable) before any training."""
    from huggingface_hub import HfApi, get_token

    from .hub import hub_unauthenticated, hub_unreachable

    if get_token() is None:
        raise ReleaseError(
            "no Hugging Face token: log in with `hf auth login` (or set HF_TOKEN) with write access to "
            f"{options.org}, or write the repositories locally with --dry-run DIR"
        )
    try:
        return HfApi().whoami()["name"]
    except Exception as error:
        if hub_unreachable(error):
            raise ReleaseError(
                "the Hugging Face Hub cannot be reached (offline, HF_HUB_OFFLINE=1, or no network): nothing was "
                "trained. Run where the Hub is reachable, or write the repositories locally with --dry-run DIR"
            ) from error
        if hub_unauthenticated(error):
            raise ReleaseError(f"the Hub refused the token ({error}): log in again with `hf auth login`") from error
        raise


def check_training_data(options: ReleaseOptions) -> None:
    """The training set loads (from the Hub, or offline from its cache) before any step writes a file: a dry run
    would otherwise convert CIFAR-100-C into its folder and only then stop, at training."""
    if options.rehearsal:
        return
    from .data import DatasetUnavailableError, load_raw_dataset

    try:
        load_raw_dataset(DATASET, split="test")
        return
    except DatasetUnavailableError as error:
        cause = error.__cause__ or error
    # raised outside the handler: the release has no --model or --dataset for the generic offline hint to name
    raise ReleaseError(
        f"the training set {DATASET} could not be loaded from the Hugging Face Hub or its cache ({cause}): nothing "
        "was written. Run once where the Hub is reachable (the dataset is then cached for offline runs), or rehearse "
        "the whole release offline with --rehearsal"
    )


def inductor_available() -> bool:
    """Whether torch.compile can run here: on a GPU always, on a CPU where inductor finds a C++ compiler."""
    if torch.cuda.is_available():
        return True
    return any(shutil.which(name) for name in (os.environ.get("CXX", "g++"), "g++", "c++", "clang++"))


def _die_with_parent() -> None:
    """In a child process: be killed with the release (Linux), so a killed release leaves no training behind."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


# --- the manifest -----------------------------------------------------------------------------------------


def file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def tree_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


class Manifest:
    """`release.json`: the release's identity and, per step, its settings, output hashes and wall time."""

    def __init__(self, out: Path, identity: dict):
        self.out, self.path = out, out / MANIFEST
        self.data = json.loads(self.path.read_text()) if self.path.is_file() else {}
        self.data.setdefault("version", MANIFEST_VERSION)
        self.data["release"] = identity
        self.data.setdefault("steps", {})

    @property
    def steps(self) -> dict:
        return self.data["steps"]

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
        self.out.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(".json.partial")
        partial.write_text(json.dumps(self.data, indent=2))
        os.replace(partial, self.path)

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


# --- the run ----------------------------------------------------------------------------------------------


@dataclass
class Release:
    """One release: the steps in order, each skipped when the manifest says it is complete."""

    options: ReleaseOptions
    say: Callable[[str], None] = print
    manifest: Manifest = field(init=False)
    skipped: list[str] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)

    def __post_init__(self):
        self.out = Path(self.options.out)
        self.work = self.out / "work"
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.compile = inductor_available()

    # The layout of <out>.
    def train_dir(self, preset: str) -> Path:
        return self.work / "train" / preset

    def results_dir(self) -> Path:
        return self.work / "results"

    @property
    def dataset_repo(self) -> Path:
        return self.out / "datasets" / CIFAR100C_REPO

    def model_repo(self, preset: str) -> Path:
        return self.out / "models" / preset

    @property
    def space_repo(self) -> Path:
        return self.out / "spaces" / SPACE_REPO

    @property
    def stand_in(self) -> Path:
        return self.work / "stand-in"

    @property
    def source(self) -> str:
        """The training and test images: CIFAR-100 on the Hub, or the rehearsal's stand-in in its schema."""
        return str(self.stand_in / "cifar100") if self.options.rehearsal else DATASET

    @property
    def cifar100c_arrays(self) -> Path | None:
        if self.options.rehearsal:
            return self.stand_in / "CIFAR-100-C"
        return None if self.options.without_cifar100c else Path(self.options.cifar100c_dir)

    def run(self) -> dict:
        """Every step not yet complete, then the summary (also returned)."""
        options = self.options
        self.manifest = Manifest(self.out, options.identity())
        self.manifest.save()
        self.say(
            f"release of {', '.join(options.models)} for {options.org} into {self.out}/ "
            f"({'rehearsal, ' if options.rehearsal else ''}{'dry run' if options.dry_run else 'uploading'}; "
            f"{self.device}, torch.compile {'on' if self.compile else 'off: no C++ compiler'})"
        )
        if options.rehearsal:
            self.step("stand-in", self.stand_in_settings(), self.build_stand_in)
        if self.cifar100c_arrays is not None:
            arrays = {"arrays": str(self.cifar100c_arrays), "inputs": self.outputs_of("stand-in")}
            self.step("dataset", arrays, self.write_dataset)
        for preset in options.models:
            config = self.training_config(preset)
            settings = {"config": config.to_dict(), "inputs": self.outputs_of("stand-in")}
            self.step(f"train/{preset}", settings, lambda config=config: self.train(config))
            self.step(f"evaluate/{preset}", self.evaluation_settings(preset), lambda p=preset: self.evaluate(p))
            self.step(f"analyze/{preset}", self.analysis_settings(preset), lambda p=preset: self.analyze(p))
        analysed = self.outputs_of(*(f"analyze/{p}" for p in options.models))
        self.step("compare", {"inputs": analysed}, self.compare)
        for preset in options.models:
            inputs = self.outputs_of(f"evaluate/{preset}", f"analyze/{preset}")
            self.step(
                f"card/{preset}",
                {"repo_id": self.repo_id(preset), "inputs": inputs},
                lambda p=preset: self.write_card(p),
            )
        inputs = self.outputs_of(*(f"analyze/{p}" for p in options.models))
        self.step("space", {"models": self.space_models(), "inputs": inputs}, self.write_space)
        if not options.dry_run:
            for kind, name, folder, written_by in self.uploads():
                self.step(
                    f"upload/{name}",
                    {"repo_id": f"{options.org}/{name}", "repo_type": kind, "inputs": self.outputs_of(written_by)},
                    lambda kind=kind, name=name, folder=folder: self.upload(kind, name, folder),
                )
        summary = self.summary()
        self.manifest.data["summary"] = summary
        self.manifest.save()
        return summary

    def step(self, name: str, settings: dict, action: Callable[[], list[Path]]) -> None:
        if self.manifest.complete(name, settings):
            self.skipped.append(name)
            self.say(f"[{name}] complete, skipped")
            return
        if name in self.manifest.steps:
            self.say(f"[{name}] its settings or outputs changed since it ran: running it again")
        self.say(f"[{name}] ...")
        started = time.perf_counter()
        outputs = action()
        seconds = time.perf_counter() - started
        self.manifest.record(name, settings, outputs, seconds)
        self.ran.append(name)
        self.say(f"[{name}] done in {seconds:.0f} s")

    def outputs_of(self, *steps: str) -> dict:
        """The recorded output hashes of `steps`: part of a later step's settings, so it runs again when they change."""
        return {name: self.manifest.steps.get(name, {}).get("outputs", {}) for name in steps}

    def repo_id(self, preset: str) -> str:
        return f"{self.options.org}/{preset}"

    # --- a. the stand-in and the dataset -----------------------------------------------------------------

    def stand_in_settings(self) -> dict:
        return {"images_per_class": STAND_IN_IMAGES_PER_CLASS}

    def build_stand_in(self) -> list[Path]:
        dataset = write_stand_in_dataset(self.stand_in / "cifar100")
        arrays = write_stand_in_cifar100c(self.stand_in / "cifar100", self.stand_in / "CIFAR-100-C")
        return tree_files(dataset) + tree_files(arrays)

    def write_dataset(self) -> list[Path]:
        from analysis.robustness import write_hub_dataset

        if self.dataset_repo.exists():
            shutil.rmtree(self.dataset_repo)  # a half-written one from a killed run
        write_hub_dataset(self.cifar100c_arrays, self.dataset_repo, f"{self.options.org}/{CIFAR100C_REPO}")
        return tree_files(self.dataset_repo)

    # --- b. training ---------------------------------------------------------------------------------------

    def training_config(self, preset: str):
        """The paper's recipe for `preset` on the release's data; the rehearsal's tiny sizes and the GPU branches
        (compiled steps, bf16 autocast, channels-last) on the CPU."""
        fields = dict(
            dataset=self.source, image_column=COLUMNS.image, label_column=COLUMNS.label,
            output_dir=str(self.train_dir(preset)), channels_last=True,
        )  # fmt: skip
        if self.options.rehearsal:
            model_overrides = {**REHEARSAL_MODELS[architecture_of(preset)], "drop_path_rate": 0.1}
            fields |= dict(REHEARSAL_TRAINING, model_overrides=model_overrides, mixed_precision="bf16")
            fields |= dict(compile=self.compile, num_workers=0)
        config = recipe_config(preset, "paper", **fields)
        config.validate()
        return config

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

    # --- c. evaluation ------------------------------------------------------------------------------------

    def evaluation_settings(self, preset: str) -> dict:
        return {
            "model": self.outputs_of(f"train/{preset}"),
            "data": self.outputs_of("stand-in", "dataset"),
            "dataset": self.source,
            "cifar100c": str(self.dataset_repo) if self.cifar100c_arrays is not None else None,
            "compile": self.compile,
        }

    def evaluate(self, preset: str) -> list[Path]:
        """Clean test split (float32, the card's numbers) and, where there is CIFAR-100-C, every corruption and
        severity of the published parquet: `eval_<dataset>_test.json` and `robustness_cifar100-c.json` + figures."""
        from .evaluation import evaluate_model, write_evaluation

        folder = self.train_dir(preset)
        metrics, logits, labels = evaluate_model(
            str(folder), self.source, split="test", image_column=COLUMNS.image, label_column=COLUMNS.label,
            compile_mode="default" if self.compile else None,
        )  # fmt: skip
        path = write_evaluation(
            folder, model=str(folder), dataset=self.source, split="test", metrics=metrics, logits=logits, labels=labels
        )
        self.say(f"{preset}: top-1 {100 * metrics['accuracy']:.2f}% on the clean test split ({len(labels):,} images)")
        outputs = [path, path.with_name(f"{path.stem}_reliability.png")]
        if self.cifar100c_arrays is not None:
            repo_id = f"{self.options.org}/{CIFAR100C_REPO}"
            outputs += write_robustness(folder, self.dataset_repo, repo_id, device=self.device, say=self.say)
        return outputs

    # --- d. analyses and comparison -----------------------------------------------------------------------

    def analysis_plan(self):
        """(settings, notes, data, analyses) of each model's analyses: the device's amounts (the paper's on a GPU), or
        the rehearsal's smallest; the robustness analysis on the published CIFAR-100-C where there is one."""
        from analysis.compare import ANALYSES, Settings
        from analysis.runner import DataOptions

        if self.options.rehearsal:
            settings, notes = Settings(**Settings.QUICK_AMOUNTS), ["the rehearsal's smallest amounts"]
        else:
            settings, notes = Settings.for_device(self.device)
        data = DataOptions(
            dataset=self.source, image_column=COLUMNS.image, label_column=COLUMNS.label,
            cifar_c=str(self.dataset_repo) if self.cifar100c_arrays is not None else None,
            batch_size=64 if self.options.rehearsal else 256,
        )  # fmt: skip
        analyses = [a for a in ANALYSES if a != "robustness" or data.cifar_c is not None]
        return settings, notes, data, analyses

    def analysis_settings(self, preset: str) -> dict:
        settings, notes, data, analyses = self.analysis_plan()
        return {
            "analyses": analyses, "settings": settings.to_dict(), "notes": notes, "data": dataclasses.asdict(data),
            "model": self.outputs_of(f"train/{preset}"),
        }  # fmt: skip

    def analyze(self, preset: str) -> list[Path]:
        """Every analysis of the paper on one model (`alternet-analyze`), into work/results/<name>/."""
        from analysis.runner import analyse_model

        settings, notes, data, analyses = self.analysis_plan()
        out = self.results_dir() / display_name(preset)
        if out.exists():
            shutil.rmtree(out)  # a killed run's partial results
        analyse_model(
            str(self.train_dir(preset)), analyses, data=data, settings=settings, device=self.device, out=out,
            scaled_down=notes, say=self.say,
        )  # fmt: skip
        return tree_files(out)

    def compare(self) -> list[Path]:
        """The comparison of all models (`alternet-compare`'s figures and claims report) from their stored results."""
        from analysis.runner import compare_stored

        settings, notes, data, _ = self.analysis_plan()
        specs = [(display_name(p), str(self.train_dir(p))) for p in self.options.models]
        written = compare_stored(
            specs, data=data, settings=settings, device=self.device, results_dir=self.results_dir(),
            comparison_dir=self.work / "comparison", scaled_down=notes,
        )  # fmt: skip
        return [Path(p) for p in written.values()]

    # --- e. cards -----------------------------------------------------------------------------------------

    def write_card(self, preset: str) -> list[Path]:
        folder, repo = self.train_dir(preset), self.model_repo(preset)
        if repo.exists():
            shutil.rmtree(repo)
        results = self.results_dir() / display_name(preset)
        figures = {
            "Training curves": folder / "training_curves.png",
            "Reliability diagram (clean test split)": next(folder.glob("eval_*_test_reliability.png"), None),
            "ΔlogA: relative log amplitude of the feature maps, block by block (the paper's Fig. 2a)": results
            / "fourier.png",
            "Accuracy under CIFAR-100-C, per corruption and severity": folder / "robustness_cifar100-c.png",
        }
        robustness = folder / "robustness_cifar100-c.json"
        write_release(
            folder, repo, self.repo_id(preset), evaluation=next(folder.glob("eval_*_test.json")),
            robustness=robustness if robustness.is_file() else None,
            figures={title: path for title, path in figures.items() if path is not None and path.is_file()},
            cifar100c_repo=f"{self.options.org}/{CIFAR100C_REPO}",
        )  # fmt: skip
        return tree_files(repo)

    # --- f. the Space -------------------------------------------------------------------------------------

    def space_models(self) -> str:
        return ",".join(f"{display_name(p)}={self.repo_id(p)}" for p in self.options.models)

    def write_space(self) -> list[Path]:
        """The Space repo: app.py, card, requirements, the two packages, the stored results and `space.json`, which
        points the app at this release's models and results (no variable to set by hand)."""
        import alternet_hf
        import analysis

        if self.space_repo.exists():
            shutil.rmtree(self.space_repo)
        write_space_repo(
            self.space_repo,
            packages=[Path(alternet_hf.__file__).parent, Path(analysis.__file__).parent],
            models=[(display_name(p), self.repo_id(p)) for p in self.options.models],
            results={display_name(p): self.results_dir() / display_name(p) for p in self.options.models},
            dataset=f"{self.options.org}/{CIFAR100C_REPO}" if self.cifar100c_arrays is not None else None,
        )
        return tree_files(self.space_repo)

    # --- uploads and summary ------------------------------------------------------------------------------

    def uploads(self) -> list[tuple[str, str, Path, str]]:
        """(repo type, name, folder, the step that wrote it) of every repo to upload."""
        repos = [("dataset", CIFAR100C_REPO, self.dataset_repo, "dataset")] if self.cifar100c_arrays is not None else []
        repos += [("model", p, self.model_repo(p), f"card/{p}") for p in self.options.models]
        return repos + [("space", SPACE_REPO, self.space_repo, "space")]

    def upload(self, kind: str, name: str, folder: Path) -> list[Path]:
        from huggingface_hub import HfApi

        api, repo_id = HfApi(), f"{self.options.org}/{name}"
        extra = {"space_sdk": "gradio"} if kind == "space" else {}
        api.create_repo(repo_id, repo_type=kind, private=self.options.private, exist_ok=True, **extra)
        api.upload_folder(repo_id=repo_id, repo_type=kind, folder_path=folder, commit_message="alternet-release")
        self.say(f"published https://huggingface.co/{'' if kind == 'model' else kind + 's/'}{repo_id}")
        return tree_files(folder)

    def summary(self) -> dict:
        models = {}
        for preset in self.options.models:
            folder = self.train_dir(preset)
            clean = json.loads(next(folder.glob("eval_*_test.json")).read_text())["metrics"]
            robustness = folder / "robustness_cifar100-c.json"
            mean_c = json.loads(robustness.read_text())["mean_accuracy"] if robustness.is_file() else None
            models[preset] = {"repo_id": self.repo_id(preset), "top1": clean["accuracy"], "cifar100c_mean": mean_c}
        comparison = json.loads((self.work / "comparison" / "comparison.json").read_text())
        verdicts = [claim["verdict"] for claim in comparison["claims"]]
        return {
            "models": models,
            "claims": {verdict: verdicts.count(verdict) for verdict in sorted(set(verdicts))},
            "dataset": f"{self.options.org}/{CIFAR100C_REPO}" if self.cifar100c_arrays is not None else None,
            "space": f"{self.options.org}/{SPACE_REPO}",
            "steps_run": self.ran,
            "steps_skipped": self.skipped,
        }


def write_robustness(model_dir: Path, dataset_repo: Path, repo_id: str, *, device, say=print) -> list[Path]:
    """Mean accuracy over CIFAR-100-C's corruptions and severities (and the per-corruption table) of the model in
    `model_dir`, read from the dataset repo `repo_id` as written into `dataset_repo`: `robustness_cifar100-c.json`
    and its figure."""
    import matplotlib.pyplot as plt

    from analysis.compare import finite
    from analysis.robustness import ParquetCorruptions, evaluate_corruptions, plot_corruptions

    from .presets import create_model

    model = create_model(str(model_dir))
    source = ParquetCorruptions(dataset_repo, split="test")
    source.name = f"CIFAR-100-C ({repo_id})"  # read from the local copy of that repo
    result = evaluate_corruptions(model, source, corruptions=source.available(), device=device, progress=True)
    payload = {"dataset": repo_id, "read_from": str(dataset_repo), **finite(result.to_dict())}
    path = model_dir / "robustness_cifar100-c.json"
    path.write_text(json.dumps(payload, indent=2))
    ax = plot_corruptions(result)
    ax.figure.savefig(path.with_suffix(".png"), dpi=120, bbox_inches="tight")
    plt.close(ax.figure)
    say(f"{model_dir.name}: CIFAR-100-C mean accuracy {100 * result.mean_accuracy:.2f}%")
    return [path, path.with_suffix(".png")]


def write_space_repo(folder: Path, *, packages: list[Path], models, results: dict, dataset: str | None) -> None:
    """The Space repo in `folder`: the clone's spaces/ (app.py, card, requirements) with the card's `models` and
    `datasets` for this release, the packages the app imports, the stored results (`results/<name>/`) and
    `space.json`, the app's defaults for ALTERNET_SPACE_MODELS and ALTERNET_SPACE_RESULTS."""
    from huggingface_hub import SpaceCard

    template = Path(__file__).resolve().parents[1] / "spaces"
    if not (template / "app.py").is_file():
        raise ReleaseError(
            f"the Space's files are not beside this alternet_hf ({template} has no app.py): run alternet-release "
            "from a clone of alternet-hf installed with `pip install -e .`"
        )
    folder.mkdir(parents=True)
    shutil.copy(template / "app.py", folder / "app.py")
    shutil.copy(template / "requirements.txt", folder / "requirements.txt")
    card = SpaceCard.load(template / "README.md")
    card.data.models = [repo_id for _, repo_id in models]
    card.data.datasets = [dataset] if dataset else None
    card.save(folder / "README.md")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in packages:
        shutil.copytree(package, folder / package.name, ignore=ignore)
    for name, stored in results.items():
        shutil.copytree(stored, folder / "results" / name, ignore=shutil.ignore_patterns(".*"))
    defaults = {
        "ALTERNET_SPACE_MODELS": ",".join(f"{name}={repo_id}" for name, repo_id in models),
        "ALTERNET_SPACE_RESULTS": "results",
    }
    (folder / "space.json").write_text(json.dumps(defaults, indent=2))


# --- the rehearsal's stand-in ---------------------------------------------------------------------------------


def stand_in_images(split: str) -> tuple[list, list[int]]:
    """Two 8×8 digits of scikit-learn's set side by side in a 32×32 RGB image, class 10·left + right, from the
    digits of the embedded dataset's own train/test split (so no test digit is seen in training)."""
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    rows = np.arange(len(digits.target))
    train, test = train_test_split(rows, test_size=0.2, random_state=0, stratify=digits.target)
    chosen = {"train": train, "test": test}[split]
    by_digit = {d: chosen[digits.target[chosen] == d] for d in range(10)}
    generator = np.random.default_rng({"train": 0, "test": 1}[split])
    images, labels = [], []
    for label in range(100):
        for _ in range(STAND_IN_IMAGES_PER_CLASS[split]):
            halves = [digits.images[generator.choice(by_digit[d])] for d in divmod(label, 10)]
            canvas = np.zeros((32, 32), dtype=np.uint8)
            for i, half in enumerate(halves):
                tile = Image.fromarray((half * (255 / 16)).astype(np.uint8)).resize((16, 16), Image.Resampling.BILINEAR)
                canvas[8:24, 16 * i : 16 * i + 16] = np.asarray(tile)
            images.append(Image.fromarray(canvas).convert("RGB"))
            labels.append(label)
    return images, labels


def write_stand_in_dataset(folder: Path) -> Path:
    """The stand-in in `uoft-cs/cifar100`'s schema (img, fine_label, coarse_label; train and test) as parquet."""
    import datasets

    features = datasets.Features(
        {
            "img": datasets.Image(),
            "fine_label": datasets.ClassLabel(names=[f"{a}{b}" for a in range(10) for b in range(10)]),
            "coarse_label": datasets.ClassLabel(names=[f"{a}{b // 5}" for a in range(10) for b in (0, 5)]),
        }
    )
    for split in ("train", "test"):
        images, labels = stand_in_images(split)
        rows = {"img": images, "fine_label": labels, "coarse_label": [label // 5 for label in labels]}
        datasets.Dataset.from_dict(rows, features=features).to_parquet(
            str(folder / "data" / f"{split}-00000-of-00001.parquet")
        )
    return folder


def write_stand_in_cifar100c(dataset: Path, folder: Path) -> Path:
    """CIFAR-100-C's Zenodo layout (`<corruption>.npy`, `labels.npy`) of the stand-in's test split, made by the zoo's
    corruption generator."""
    from analysis.robustness import GeneratedCorruptions, save_as_arrays

    from .data import load_image_classification

    test = load_image_classification(str(dataset), split="test", image_column=COLUMNS.image, label_column=COLUMNS.label)
    return save_as_arrays(GeneratedCorruptions.from_dataset(test), folder)


# --- the H100 estimate --------------------------------------------------------------------------------------


def training_flops_per_image(preset: str) -> float:
    """FLOPs of one training image (forward + backward) of the full-size preset at its input size, counted by
    torch's FlopCounterMode on the meta device (shapes only: instant, no memory)."""
    from torch.utils.flop_counter import FlopCounterMode

    from .presets import create_model

    with torch.device("meta"):
        model = create_model(preset)
        inputs = torch.randn(2, 3, model.config.image_size, model.config.image_size)
    with FlopCounterMode(display=False) as counter:
        model(inputs).logits.sum().backward()
    return counter.get_total_flops() / len(inputs)


def h100_estimate(presets, epochs: int | None = None) -> tuple[float, str]:
    """Hours the real release's training takes on one H100 by measured FLOPs at an assumed sustained rate, and
    the lines that say how."""
    from .recipe import PAPER_RECIPE

    epochs = epochs or PAPER_RECIPE["epochs"]
    rate = H100_BF16_FLOPS * ASSUMED_UTILISATION
    lines, total = [], 0.0
    for preset in presets:
        flops = training_flops_per_image(preset)
        # training images every epoch, plus the test split forward-only (a third of a training image) when evaluated
        per_run = flops * epochs * (CIFAR_TRAIN_IMAGES + CIFAR_TEST_IMAGES / 3 / PAPER_RECIPE["eval_every_epochs"])
        hours = per_run / rate / 3600
        total += hours
        lines.append(f"  {preset}: {flops / 1e9:.2f} GFLOPs per training image x {epochs} epochs -> {hours:.1f} h")
    lines.append(
        f"  total {total:.1f} h of training on one H100: an ESTIMATE from FLOPs counted here at an assumed "
        f"{ASSUMED_UTILISATION:.0%} of the {H100_BF16_FLOPS / 1e12:.0f} TFLOP/s bf16 peak, never measured on a GPU; "
        "evaluation, CIFAR-100-C and the analyses add to it"
    )
    return total, "\n".join(lines)
