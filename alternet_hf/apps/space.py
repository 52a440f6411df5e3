"""The alternet-hf Space: how ResNet, ViT and AlterNet see frequencies, and how they hold up under corruptions.

Started by `alternet-space` (or the Space repo's `app.py`); docs/release.md says what it shows and how it falls
back to the offline mini-zoo. Models load without `trust_remote_code`: the zoo's classes come from `alternet_hf`.
"""

import contextlib
import hashlib
import io
import os
import sys
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path

import gradio as gr
import numpy as np
import torch
from matplotlib.figure import Figure  # figures without pyplot's registry: each is freed once shown
from PIL import Image, UnidentifiedImageError
from transformers import AutoModelForImageClassification

import alternet_hf  # noqa: F401  (registers the zoo's classes: no remote code is ever run)
from analysis.blocks import as_feature_map, run_blocks
from analysis.fourier import fourier_log_amplitude, mean_log_amplitude
from analysis.probe import PHOTOS as PROBE_PHOTOS
from analysis.probe import plot_probe_by_depth, plot_probe_noise
from analysis.robustness import band_pass_noise
from analysis.runner import read_result

from ..data.augmentation import channel_statistics, eval_transform, normalize_images
from ..data.cifar_c import CORRUPTIONS, SEVERITIES
from ..data.cifar_c.corruptions import corrupt
from ..hub.door import RefusedModel
from ..hub.door.worker import WorkerStopped
from ..utils import UNREACHABLE, damaged_model_file, hub_failure, to_rgb, write_atomically
from .any_model import EXAMPLES as ANY_MODEL_EXAMPLES
from .any_model import AnyModel, Busy
from .atlas import KIND_COLOURS, PLACED, PLACED_COLOUR, AtlasView, measured_row, probe_result
from .atlas import MEASURES as ATLAS_MEASURES

MAX_SIDE = 4096  # larger images are refused from their header; anything above MAX_WORKING_SIDE is shrunk
MAX_WORKING_SIDE = 512
# A click without an image is a notice alone, its panels left as they were (`gr.skip()`): an error would mark every
# output failed, the stored results too, which need no image.
NO_IMAGE = "Pick an example photo or upload an image first."
MAX_UPLOAD = "10mb"
KEPT_OUTPUTS = 256  # output images kept on disk: a long-running Space's folder stays bounded
FREQUENCY_NOISE = "frequency noise"
EXAMPLES = ("astronaut", "coffee", "chelsea", "rocket")
MINI_ZOO = Path("outputs/mini-zoo")  # what `alternet-reproduce` writes: models/<family>/, results/<family>/
MINI_ZOO_COMMAND = "alternet-reproduce"
BLOCK_NAMES = {
    "stem": "the stem",
    "head": "the last",
    "msa": "an MSA",
    "mlp": "an MLP",
    "conv": "a Conv",
    "pool": "a downsampling",
}
# Visitors of the Any model tab served at once: cached answers need no CPU; the analyses wait in the service's line.
ANY_MODEL_CONCURRENCY = 16
MODELS_SYNTAX = "alternet-space --models Name=folder_or_hub_id,... (or ALTERNET_SPACE_MODELS)"
ATLAS_VARIABLE = "ALTERNET_SPACE_ATLAS"
ATLAS_KINDS = ["convolution", "attention", "hybrid", "other", "not measured"]


@dataclass
class LoadedModel:
    name: str
    source: str
    model: torch.nn.Module | None
    error: str | None = None


def parse_models(spec: str) -> list[tuple[str, str]]:
    """`name=source,...` -> [(name, source)], or an error that shows the syntax."""
    entries = []
    for entry in filter(None, (part.strip() for part in spec.split(","))):
        name, _, source = entry.partition("=")
        if not name.strip() or not source.strip():
            raise ValueError(f"model entry {entry!r} must look like Name=folder_or_hub_id: {MODELS_SYNTAX}")
        entries.append((name.strip(), source.strip()))
    if not entries:
        raise ValueError(f"no models given: {MODELS_SYNTAX}")
    if not any(_folder_or_hub_id(source) for _, source in entries):  # a Space with nothing to load: say so now
        wrong = ", ".join(source for _, source in entries)
        raise ValueError(f"{wrong}: neither a folder here nor a Hub id (owner/name): {MODELS_SYNTAX}")
    return entries


def _folder_or_hub_id(source: str) -> bool:
    """Whether `source` is a folder, or has a Hub id's form (owner/name, where no folder `owner` is here: that is a
    path with a typo)."""
    if Path(source).expanduser().exists():
        return True
    parts = source.split("/")
    return len(parts) == 2 and all(parts) and not source.startswith((".", "~")) and not Path(parts[0]).is_dir()


def load_models(spec: str) -> list[LoadedModel]:
    """Models in eval mode; one that fails to load is reported, not fatal. Once the Hub proves unreachable, the
    remaining Hub ids are not tried (each try costs seconds of retries)."""
    loaded, hub_down = [], False
    for name, source in parse_models(spec):
        local = Path(source).expanduser().exists()
        if hub_down and not local:
            loaded.append(LoadedModel(name, source, None, "not tried: the Hugging Face Hub is unreachable"))
            continue
        problem = damaged_model_file(source) if local else None
        if problem:
            loaded.append(LoadedModel(name, source, None, problem))
            continue
        try:
            model = AutoModelForImageClassification.from_pretrained(source, trust_remote_code=False).eval()
            loaded.append(LoadedModel(name, source, model))
        except Exception as error:  # offline, missing folder, foreign architecture: say so in the page
            hub_down = hub_down or (not local and hub_failure(error) == UNREACHABLE)
            loaded.append(LoadedModel(name, source, None, _short_reason(error, source, local)))
    return loaded


def _short_reason(error: Exception, source: str, local: bool) -> str:
    if not local and hub_failure(error) == UNREACHABLE:
        return "the Hugging Face Hub is unreachable (offline or no network)"
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    if not local and "/" in source and not source.startswith((".", "/", "~")):
        return f"no local folder of that name, and the Hub says: {first or type(error).__name__}"
    return f"{type(error).__name__}: {first}"


def mini_zoo_spec(root: Path = MINI_ZOO) -> str | None:
    """`name=folder,...` for the mini-zoo's models, or None where there is none."""
    folders = sorted(p for p in (root / "models").glob("*") if (p / "config.json").is_file())
    return ",".join(f"{folder.name}={folder}" for folder in folders) or None


def start(
    spec: str, results_dir: Path | None = None, *, mini_zoo: Path = MINI_ZOO, pending=(), atlas: str | None = None
) -> "Space":
    """The Space for `spec`, or the mini-zoo's where none of its models loads; `pending`: models not published yet;
    `atlas`: the *Atlas* tab's folder or Hub dataset."""
    models = load_models(spec)
    if any(m.model is not None for m in models):
        return Space(models, results_dir, pending=pending, atlas=atlas)
    fallback = mini_zoo_spec(mini_zoo)
    if fallback is None:
        note = (
            f"**No model could be loaded** (below). Offline, `{MINI_ZOO_COMMAND}` trains a small ResNet, ViT and "
            f"AlterNet on the embedded digits in minutes (into `{mini_zoo}/`): start the Space again after it."
        )
        return Space(models, results_dir, note=note, atlas=atlas)
    unavailable = ", ".join(f"{m.name} ({m.error})" for m in models)
    note = f"The requested models could not be loaded: {unavailable}. Showing the offline mini-zoo of `{mini_zoo}/`."
    return Space(load_models(fallback), results_dir or mini_zoo / "results", note=note, atlas=atlas)


def example_files(kind: str = "photos") -> list[str]:
    """Example images as PNG files (examples go through the upload path): photographs, or (`kind="digits"`) digits."""
    folder = Path(tempfile.gettempdir()) / "alternet-space-examples"
    if kind == "digits":
        from ..data.sources import load_digits_dataset

        test = load_digits_dataset("test")
        images = {f"digit-{test[i]['label']}": test[i]["image"] for i in range(0, 40, 5)}
    else:
        from skimage import data

        images = {name: None for name in EXAMPLES}
    paths = []
    for name, image in images.items():
        path = folder / f"{name}.png"
        if not path.exists():
            _write_once(path, _png(image if image is not None else Image.fromarray(getattr(data, name)())))
        paths.append(str(path))
    return paths


def _png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, format="PNG")
    return buffer.getvalue()


def _write_once(path: Path, data: bytes) -> None:
    """Write `path` atomically, so that a reader never sees it half written whoever else writes it; a file already
    there is marked as just used (`_prune` keeps the newest)."""
    try:
        os.utime(path)
    except FileNotFoundError:
        write_atomically(path, data)


def image_file(image: Image.Image) -> str:
    """`image` as a PNG file named by its content, in a temporary folder: Gradio copies a file into its cache
    atomically, but rewrites a returned PIL image's on every request, cutting short identical replies being sent."""
    data = _png(image)
    folder = Path(tempfile.gettempdir()) / "alternet-space-outputs"
    path = folder / f"{hashlib.sha256(data).hexdigest()[:32]}.png"
    _write_once(path, data)
    _prune(folder, keep=KEPT_OUTPUTS)
    return str(path)


def _prune(folder: Path, *, keep: int) -> None:
    """Remove all but the `keep` newest files of `folder` (Gradio has copied the older ones into its cache)."""
    files = []
    for path in folder.glob("*.png"):
        with contextlib.suppress(FileNotFoundError):
            files.append((path.stat().st_mtime, path))
    for _, path in sorted(files, reverse=True)[keep:]:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def knows_only_digits(models: list) -> bool:
    """Whether every loaded model's classes are the ten digits (the offline mini-zoo's)."""
    digits = [str(d) for d in range(10)]
    return bool(models) and all(
        [m.model.config.id2label[i] for i in range(m.model.config.num_labels)] == digits for m in models
    )


def open_image(path: str) -> Image.Image:
    """An upload as an RGB image of at most MAX_WORKING_SIDE a side; its size is checked from the header,
    before any pixel is decoded (a 300 KB PNG may claim 10000×10000 pixels)."""
    try:
        with Image.open(path) as image:
            width, height = image.size
            if max(width, height) > MAX_SIDE:
                raise gr.Error(f"The image is {width}×{height}; the limit is {MAX_SIDE} pixels a side.")
            image.draft("RGB", (MAX_WORKING_SIDE, MAX_WORKING_SIDE))  # JPEG decodes at a reduced scale
            image.load()  # while the file is open
            image = to_rgb(image)
    except (UnidentifiedImageError, Image.DecompressionBombError, OSError, SyntaxError) as error:
        raise gr.Error(f"This file could not be read as an image ({type(error).__name__}).") from None
    image.thumbnail((MAX_WORKING_SIDE, MAX_WORKING_SIDE))
    return image


def to_inputs(model, image: Image.Image) -> torch.Tensor:
    return alternet_hf.build_image_processor(model.config)(image, return_tensors="pt")["pixel_values"]


def _pixels(model, image: Image.Image) -> torch.Tensor:
    """The image as the model's (1, 3, S, S) float tensor in [0, 1], before normalisation."""
    config = model.config
    return eval_transform(config.image_size, config.image_mean, config.image_std, normalize=False)(image)[None] / 255


def _probabilities(model, inputs: torch.Tensor) -> torch.Tensor:
    return model(inputs).logits.float().softmax(-1)


def _normalise(model, pixels: torch.Tensor) -> torch.Tensor:
    return normalize_images(pixels, *channel_statistics(model.config.image_mean, model.config.image_std))


def _denormalise(model, inputs: torch.Tensor) -> torch.Tensor:
    mean, std = channel_statistics(model.config.image_mean, model.config.image_std)
    return (inputs * std + mean).clamp(0, 1)


class Space:
    def __init__(
        self,
        models: list[LoadedModel],
        results_dir: Path | None = None,
        *,
        note: str | None = None,
        pending=(),
        atlas: str | None = None,
    ):
        self.models = models
        self.ready = [m for m in models if m.model is not None]
        self.results_dir = Path(results_dir) if results_dir is not None else None
        self.note = note
        self.pending = list(pending)
        self.any_model = AnyModel({m.name: m.model for m in self.ready})
        self.atlas, self.atlas_note = _load_atlas(atlas)

    def status(self) -> str:
        lines = [
            f"- **{m.name}**: {type(m.model).__name__} from `{m.source}`"
            if m.model is not None
            else f"- **{m.name}**: not loaded from `{m.source}` ({m.error})"
            for m in self.models
        ]
        lines += [
            f"- **{name}**: pending: its weights are not published yet (they are still to be trained)"
            for name in self.pending
        ]
        text = "Models:\n" + "\n".join(lines)
        if len(self.ready) < len(self.models):
            text += f"\n\nChoose the models with `{MODELS_SYNTAX}`."
        if knows_only_digits(self.ready):
            text += (
                "\n\n**These models know only handwritten digits** (scikit-learn's 8×8 scans, scaled to 32×32): the "
                "examples are digits; a photo still gets one of the ten digits as its answer, with a confidence "
                "that means nothing."
            )
        return (self.note + "\n\n" + text) if self.note else text

    def _require_models(self) -> None:
        if not self.ready:
            raise gr.Error(f"No model is loaded. Run `{MINI_ZOO_COMMAND}` (offline, minutes) or `{MODELS_SYNTAX}`.")

    # --- frequency tab -----------------------------------------------------------------------------

    @torch.no_grad()
    def frequency(self, path: str | None, depth: float) -> Figure:
        self._require_models()
        if path is None:
            gr.Warning(NO_IMAGE)
            return gr.skip()
        image = open_image(path)
        figure = Figure(figsize=(4.2 * len(self.ready), 6.8), layout="constrained")
        axes = figure.subplots(2, len(self.ready), squeeze=False)
        for column, entry in enumerate(self.ready):
            inputs = to_inputs(entry.model, image)
            result = fourier_log_amplitude(entry.model, inputs)
            ax = axes[0, column]
            positions = np.arange(len(result.kinds))
            for position, kind in zip(positions, result.kinds):
                if kind == "msa":
                    ax.axvspan(position - 0.5, position + 0.5, color="0.85", linewidth=0)
            ax.plot(positions, result.high_frequency, marker="o", markersize=3)
            ax.set_title(f"{entry.name}: ΔlogA at π (MSA shaded)", fontsize=9)
            ax.set(xlabel="depth (0 = input image, then each block's output)", ylabel="ΔlogA at π")
            # Position 0 is the input, position i the output of block i-1, as in the ΔlogA curve above.
            position = min(int(round(depth * (len(positions) - 1))), len(positions) - 1)
            run = run_blocks(entry.model, inputs)
            maps = [inputs] + [
                as_feature_map(s, run.num_prefix_tokens, channels_last=run.channels_last) for s in run.states
            ]
            while maps[position] is None:  # PiT's head is its class token alone: the last block with a map
                position -= 1
            feature_map, kind = maps[position], result.kinds[position]
            what = "the input image" if position == 0 else f"output of {BLOCK_NAMES.get(kind, f'a {kind}')} block"
            spectrum = axes[1, column]
            shown = spectrum.imshow(mean_log_amplitude(feature_map).numpy(), cmap="inferno")
            spectrum.set_title(f"{entry.name}: log |FFT| at depth {position}\n({what})", fontsize=9)
            spectrum.set(xlabel="horizontal frequency (0 at centre)", ylabel="vertical frequency")
            spectrum.set_xticks([])
            spectrum.set_yticks([])
            figure.colorbar(shown, ax=spectrum, shrink=0.8, label="log amplitude")
            ax.axvline(position, color="tab:red", linewidth=0.8)
        return figure

    @torch.no_grad()
    def probabilities(self, image: Image.Image) -> list[torch.Tensor]:
        """Each ready model's (1, classes) probabilities for the clean `image`, prepared as the tabs prepare an
        upload (what a release checks against the model as a user loads it)."""
        image = to_rgb(image)
        return [_probabilities(e.model, _normalise(e.model, _pixels(e.model, image))) for e in self.ready]

    # --- robustness tab ----------------------------------------------------------------------------

    @torch.no_grad()
    def robustness(self, path: str | None, corruption: str, severity: int, frequency: float):
        self._require_models()
        if corruption != FREQUENCY_NOISE and (
            float(severity) != int(float(severity)) or int(float(severity)) not in SEVERITIES
        ):
            raise gr.Error(f"The severity is an integer from {min(SEVERITIES)} to {max(SEVERITIES)}, not {severity}.")
        severity = int(float(severity))
        if path is None:
            gr.Warning(NO_IMAGE)
            return [gr.skip(), *[gr.skip() for _ in self.ready], self.curves(corruption)]
        image = open_image(path)
        shown, predictions = None, []
        generator = torch.Generator().manual_seed(0)
        for entry in self.ready:
            pixels = _pixels(entry.model, image)
            if corruption == FREQUENCY_NOISE:
                # As in analysis.robustness.frequency_noise: the noise is added in the model's input space.
                inputs = _normalise(entry.model, pixels)
                inputs = inputs + band_pass_noise(inputs.shape, frequency, generator=generator.manual_seed(0))
                corrupted = _denormalise(entry.model, inputs)
            else:
                if corruption not in CORRUPTIONS:
                    raise gr.Error(f"Unknown corruption {corruption!r}.")
                corrupted = corrupt(pixels, corruption, severity, generator=generator.manual_seed(0))
                inputs = _normalise(entry.model, corrupted)
            probabilities = _probabilities(entry.model, inputs)[0]
            top = probabilities.topk(min(5, len(probabilities)))
            labels = entry.model.config.id2label
            predictions.append({labels[i.item()]: p.item() for p, i in zip(top.values, top.indices)})
            if shown is None:
                shown = Image.fromarray((corrupted[0].permute(1, 2, 0).numpy() * 255).round().astype(np.uint8))
        shown = shown.resize((256, 256), Image.Resampling.NEAREST)
        return [image_file(shown), *predictions, self.curves(corruption)]

    def curves(self, corruption: str) -> Figure:
        """Accuracy vs severity (or noise frequency) from stored analysis results, one line per model."""
        figure = Figure(figsize=(5.5, 3.4), layout="constrained")
        ax = figure.subplots()
        found = []
        for entry in self.ready:
            stored = f"{'frequency-noise' if corruption == FREQUENCY_NOISE else 'robustness'}.json"
            path = self.results_dir / entry.name / stored if self.results_dir else None
            result = read_result(path) if path and path.exists() else None
            if corruption == FREQUENCY_NOISE and result is not None:
                ax.plot(result.frequencies, 100 * result.delta_accuracy, marker="o", label=entry.name)
                found.append(entry.name)
            elif result is not None and corruption in result.corruptions:
                row = result.accuracy[result.corruptions.index(corruption)]
                ax.plot(result.severities, 100 * row, marker="o", label=entry.name)
                found.append(entry.name)
        if found:
            ax.set_xlabel("noise frequency (π)" if corruption == FREQUENCY_NOISE else "severity")
            ax.set_ylabel("Δ accuracy (points)" if corruption == FREQUENCY_NOISE else "accuracy (%)")
            ax.legend()
            ax.set_title(f"Stored results: {corruption}", fontsize=9)
        else:
            ax.axis("off")
            where = f"in {self.results_dir}/<model name>/" if self.results_dir else "(no --results folder given)"
            ax.text(
                0.5,
                0.5,
                f"No stored results for these models {where}.\nRun alternet-analyze --out "
                "<results>/<model name>, then start the Space\nwith --results <results> "
                "(or ALTERNET_SPACE_RESULTS).",
                ha="center",
                va="center",
                fontsize=9,
            )
        return figure

    # --- any model tab -----------------------------------------------------------------------------

    def analyse_model(self, model_id: str, revision: str = "", progress=gr.Progress()):  # noqa: B008 (Gradio's way)
        """The probe of any Hub model beside the Space's own: [reading, ΔlogA figure, variance figure, noise figure,
        JSON answer]. A model that may not or cannot be analysed gets one sentence in the reading, no figures, and
        `{"model_id", "refused"}` as its answer: never a traceback in the page."""
        from analysis.probe import ProbeResult, probe_reading

        def waiting(ahead: int) -> None:
            progress(0.0, desc=f"waiting for the CPU: {ahead} analys{'es' if ahead != 1 else 'is'} ahead")

        try:
            answer = self.any_model.analyse(
                model_id, revision, on_wait=waiting, on_step=lambda fraction, what: progress(fraction, desc=what)
            )
            references = self.any_model.reference_results()
        except (RefusedModel, Busy, WorkerStopped) as error:
            return self._refusal(model_id, str(error))
        except Exception:  # a failure of the Space's own (the Hub's answer, the cache): logged for us, never shown
            traceback.print_exc(file=sys.stderr)
            return self._refusal(model_id, "The model could not be analysed right now (the details are in the log).")
        result = ProbeResult.from_dict(answer)
        found = {answer["model_id"]: result, **references}
        figures = []
        bold = dict(highlight=answer["model_id"])
        for draw, title in (
            (lambda ax: plot_probe_by_depth(found, ax, **bold), "ΔlogA at π by depth (its MSA blocks shaded)"),
            (lambda ax: plot_probe_by_depth(found, ax, field="variance", **bold), "Feature-map variance by depth"),
            (lambda ax: plot_probe_noise(found, ax, **bold), "Top-1 kept under band-limited noise"),
        ):
            figure = Figure(figsize=(5.2, 3.6), layout="constrained")
            draw(figure.subplots()).set_title(title, fontsize=9)
            figures.append(figure)
        where = "from the cache" if answer["cached"] else f"in {answer['seconds']:.1f} s"
        reading = (
            f"**{answer['model_id']}** at commit `{answer['revision']}` ({answer['architecture']}, "
            f"{answer['parameters'] / 1e6:.1f} M parameters, {answer['library']}), on {result.num_images} photos, "
            f"answered {where}"
            + (f" ({answer['preprocessing_note']})" if answer.get("preprocessing_note") else "")
            + ".\n\n"
            + probe_reading(answer["model_id"], result, references)
        )
        return [reading, *figures, answer]

    # --- atlas tab ---------------------------------------------------------------------------------

    def _require_atlas(self) -> AtlasView:
        if self.atlas is None:
            raise gr.Error(self.atlas_note)
        return self.atlas

    def _points(self, x: str, y: str, placed: dict | None = None):
        """The scatter's frame; axes that are not measures of the atlas are the visitor's error, in one sentence."""
        try:
            return self._require_atlas().points(x, y, placed)
        except ValueError as error:
            raise gr.Error(str(error)) from None

    def atlas_scatter(self, x: str, y: str):
        """The atlas' models on two of its measures, coloured by kind, each named on hover."""
        return _scatter(self._points(x, y), x, y)

    def atlas_table(self, search: str = "", kinds: list[str] | None = None):
        """The atlas' rows whose id or architecture holds `search`, of the chosen kinds."""
        return self._require_atlas().table(search, kinds)

    def atlas_model(self, model_id: str):
        """[reading, figure] of one model of the atlas: its curves beside the zoo's."""
        view = self._require_atlas()
        row = view.rows.get(str(model_id).strip())
        if row is None:
            raise gr.Error(f"“{str(model_id)[:100]}” is not in the atlas; type it under “Where would my model sit”.")
        return [view.reading(row), self._atlas_curves(row) if row["status"] == "measured" else None]

    def _atlas_curves(self, row: dict) -> Figure:
        from analysis.probe import plot_probe

        figure = Figure(figsize=(13, 3.6), layout="constrained")
        plot_probe({row["model_id"]: probe_result(row), **self.any_model.reference_results()}, figure=figure)
        return figure

    def atlas_select(self, event: gr.SelectData):
        """A click on a row of the table: that model's curves."""
        return self.atlas_model(event.row_value[0])

    def atlas_place(self, model_id: str, x: str, y: str, progress=gr.Progress()):  # noqa: B008 (Gradio's way)
        """[reading, figure, scatter]: any Hub model measured as in the Any model tab (cached alike), its curves
        beside the zoo's, placed on the atlas' axes as “your model”; a refused one gets its sentence, no figure, and
        the scatter as it was."""
        view = self._require_atlas()
        self._points(x, y)  # the axes checked before any work
        try:
            answer = self.any_model.analyse(
                model_id,
                on_wait=lambda ahead: progress(0.0, desc=f"waiting for the CPU: {ahead} ahead"),
                on_step=lambda fraction, what: progress(fraction, desc=what),
            )
        except (RefusedModel, Busy, WorkerStopped) as error:
            return [f"**Not placed.** {error}", None, _scatter(self._points(x, y), x, y)]
        except Exception:
            traceback.print_exc(file=sys.stderr)
            sentence = "The model could not be analysed right now (the details are in the log)."
            return [f"**Not placed.** {sentence}", None, _scatter(self._points(x, y), x, y)]
        row = measured_row(answer)
        return [view.reading(row), self._atlas_curves(row), _scatter(self._points(x, y, placed=row), x, y)]

    @staticmethod
    def _refusal(model_id: str, sentence: str) -> list:
        answer = {"model_id": str(model_id)[:200], "refused": sentence}
        return [f"**Not analysed.** {sentence}", None, None, None, answer]


def _scatter(frame, x: str, y: str):
    """A scatter plot of `frame` (model_id, kind, x, y), coloured by kind, every column on hover. Every kind is in
    its data, those without a point as a row without values (not drawn): the page keeps the colours of the kinds it
    first drew, and would never draw a kind that came later (a visitor's model)."""
    import pandas as pd

    colours = {**KIND_COLOURS, PLACED: PLACED_COLOUR}
    missing = [kind for kind in colours if kind not in set(frame["kind"])]
    frame = pd.concat([frame, pd.DataFrame({"model_id": "", "kind": missing})], ignore_index=True)
    return gr.ScatterPlot(
        value=frame,
        x=x,
        y=y,
        color="kind",
        color_map=colours,
        tooltip=list(frame.columns),
        x_title=x.replace("_", " "),
        y_title=y.replace("_", " "),
    )


def _load_atlas(source: str | None) -> tuple[AtlasView | None, str]:
    """The *Atlas* tab's atlas, or None and a sentence saying why there is none (the Space starts either way)."""
    if not source:
        return None, (
            f"No atlas is loaded: start the Space with `--atlas <folder or Hub dataset id>` (or {ATLAS_VARIABLE}); "
            "`alternet-atlas` makes one."
        )
    try:
        view = AtlasView.load(source)
    except Exception as error:  # a missing folder, the Hub out of reach: the rest of the Space still works
        print(f"the atlas {source} was not loaded: {type(error).__name__}: {error}", file=sys.stderr)
        reason = "the Hub cannot be reached" if hub_failure(error) == UNREACHABLE else type(error).__name__
        return None, f"The atlas `{source}` could not be loaded ({reason}); the other tabs work without it."
    return view, view.summary()


def _severity_or_frequency(corruption: str):
    """Only the control that applies to the chosen corruption is active."""
    noise = corruption == FREQUENCY_NOISE
    return gr.update(interactive=not noise), gr.update(interactive=noise)


def build_demo(space: Space) -> gr.Blocks:
    digits = knows_only_digits(space.ready)
    examples = [[path] for path in example_files("digits" if digits else "photos")]
    examples_label = "Example digits (the embedded test split)" if digits else "Example photos (scikit-image)"
    # type="filepath" with image_mode=None: Gradio hands over the uploaded file undecoded (see open_image).
    photo = dict(type="filepath", image_mode=None, label="Photo", height=280)
    with gr.Blocks(title="How Do Vision Transformers Work?") as demo:
        gr.Markdown(
            "# How Do Vision Transformers Work?\n"
            "Multi-head self-attentions (MSAs) are **low-pass filters**, convolutions **high-pass**: watch the "
            "high-frequency log amplitude fall after MSA blocks (shaded) and rise after convolutions. "
            "AlterNet alternates the two.\n\n" + space.status()
        )
        with gr.Tab("Frequency"):
            gr.Markdown(
                "Each model turns the image into feature maps block by block; the top row plots how much of their "
                "amplitude sits at the highest frequency (ΔlogA at π, relative to the lowest) at each depth, and the "
                "bottom row shows the Fourier spectrum of the feature map at the depth you choose (red line). A fall "
                "after an MSA block (shaded) is the low-pass filtering the paper reports; convolutions raise it."
            )
            with gr.Row():
                image = gr.Image(**photo)
                with gr.Column():
                    depth = gr.Slider(
                        0, 1, value=0.5, step=0.05, label="Depth (0 = the input image, 1 = the last block's output)"
                    )
                    analyse = gr.Button("Analyse frequencies", variant="primary")
            gr.Examples(examples, inputs=[image], label=examples_label)
            gr.Markdown("**ΔlogA at π by depth (top) and the spectrum of the feature map at the chosen depth**")
            frequency_plot = gr.Plot(show_label=False)
            analyse.click(space.frequency, [image, depth], frequency_plot, api_name="frequency")
        with gr.Tab("Robustness"):
            gr.Markdown(
                "The image is corrupted as CIFAR-100-C corrupts its test set (one of 15 corruptions at severity 1-5), "
                "or noise is added in a single frequency band, and each model's top-5 classes are shown for what it "
                "sees. Below, the accuracy each model keeps under that corruption over a whole test set, from the "
                "stored analysis results: the paper finds MSAs more robust, above all to high-frequency noise."
            )
            with gr.Row():
                robust_image = gr.Image(**photo)
                with gr.Column():
                    corruption = gr.Dropdown([*CORRUPTIONS, FREQUENCY_NOISE], value="fog", label="Corruption")
                    severity = gr.Slider(
                        min(SEVERITIES), max(SEVERITIES), value=3, step=1, label="Severity (CIFAR-C, 1-5)"
                    )  # a number in the API, as documented: an integer 1-5
                    frequency = gr.Slider(
                        0.1,
                        0.9,
                        value=0.5,
                        step=0.1,
                        label="Noise frequency (π), for frequency noise",
                        interactive=False,
                    )
                    run = gr.Button("Corrupt and classify", variant="primary")
            corruption.change(_severity_or_frequency, corruption, [severity, frequency])
            gr.Examples(examples, inputs=[robust_image], label=examples_label)
            with gr.Row():
                corrupted = gr.Image(type="filepath", label="What the models see", height=256)
                labels = [gr.Label(num_top_classes=5, label=f"{m.name} top-5") for m in space.ready]
            gr.Markdown("**Accuracy from stored analysis results**")
            curves = gr.Plot(show_label=False)
            run.click(
                space.robustness,
                [robust_image, corruption, severity, frequency],
                [corrupted, *labels, curves],
                api_name="robustness",
            )
        with gr.Tab("Any model"):
            gr.Markdown(
                "Type the id of any image classifier on the Hugging Face Hub (transformers, or timm's own repos) and "
                f"see how it handles frequencies on {len(PROBE_PHOTOS)} fixed photos, beside this Space's models: "
                "the high-frequency amplitude block by block (a fall after MSA blocks is the low-pass filtering "
                "the paper finds), the feature-map variance, and how many of its top-1 predictions survive noise "
                "in each frequency band. Only public models with safetensors weights and no code of their own are "
                "analysed, one at a time; every answer is kept, so a model someone already asked for answers at once."
            )
            with gr.Row():
                model_id = gr.Textbox(label="Hub model id", placeholder="owner/name, e.g. timm/resnet50.a1_in1k")
                revision = gr.Textbox(label="Revision (optional)", placeholder="main, a tag or a commit sha")
                probe_button = gr.Button("Analyse", variant="primary")
            gr.Examples([[example] for example in ANY_MODEL_EXAMPLES], inputs=[model_id], label="Well-known models")
            reading = gr.Markdown()
            with gr.Row():
                probe_plots = [gr.Plot(show_label=False, elem_classes="any-model-figure") for _ in range(3)]
            answer = gr.JSON(label="The numbers (also the API's answer)")
            probe_inputs = [model_id, revision]
            probe_outputs = [reading, *probe_plots, answer]
            # One limit for the button and the Enter key; the API endpoint is the button's.
            limits = dict(concurrency_limit=ANY_MODEL_CONCURRENCY, concurrency_id="any-model")
            probe_button.click(space.analyse_model, probe_inputs, probe_outputs, api_name="analyse_model", **limits)
            model_id.submit(space.analyse_model, probe_inputs, probe_outputs, api_name=False, **limits)
        with gr.Tab("Atlas"):
            gr.Markdown(
                "The *Any model* probe over many public image classifiers (`alternet-atlas`): each point a model, "
                "on any two of its measures, coloured by kind; the table sorts by a click on a column, and a click "
                "on a row shows that model's curves beside this Space's models. Below, the paper's claims decided "
                "across the atlas, each with its test, its effect's 95% bootstrap interval and the models it rests "
                "on.\n\n" + space.atlas_note
            )
            if space.atlas is not None:
                view = space.atlas
                with gr.Row():
                    x_measure = gr.Dropdown(ATLAS_MEASURES, value=ATLAS_MEASURES[0], label="x")
                    y_measure = gr.Dropdown(ATLAS_MEASURES, value=ATLAS_MEASURES[1], label="y")
                points = _scatter(view.points(ATLAS_MEASURES[0], ATLAS_MEASURES[1]), *ATLAS_MEASURES[:2])
                for control in (x_measure, y_measure):
                    control.change(space.atlas_scatter, [x_measure, y_measure], points, api_name=False)
                gr.Button("Redraw", size="sm").click(
                    space.atlas_scatter, [x_measure, y_measure], points, api_name="atlas_scatter"
                )
                with gr.Row():
                    place_id = gr.Textbox(
                        label="Where would my model sit", placeholder="a Hub model id, measured as in Any model"
                    )
                    place_button = gr.Button("Measure and place", variant="primary")
                with gr.Row():
                    search = gr.Textbox(label="Filter by id or architecture")
                    kinds = gr.CheckboxGroup(ATLAS_KINDS, value=ATLAS_KINDS, label="Kinds")
                table = gr.Dataframe(view.table(), interactive=False, label="Models", max_height=420)
                for control in (search, kinds):
                    control.change(space.atlas_table, [search, kinds], table, api_name=False)
                gr.Button("Filter", size="sm").click(space.atlas_table, [search, kinds], table, api_name="atlas_table")
                chosen_reading = gr.Markdown()
                chosen_curves = gr.Plot(show_label=False, elem_classes="atlas-figure")
                table.select(space.atlas_select, None, [chosen_reading, chosen_curves], api_name=False)
                chosen_id = gr.Textbox(label="Show a model of the atlas", placeholder="its id, or click its row")
                chosen_id.submit(space.atlas_model, chosen_id, [chosen_reading, chosen_curves], api_name="atlas_model")
                limits = dict(concurrency_limit=ANY_MODEL_CONCURRENCY, concurrency_id="any-model")
                place_button.click(
                    space.atlas_place,
                    [place_id, x_measure, y_measure],
                    [chosen_reading, chosen_curves, points],
                    api_name="atlas_place",
                    **limits,
                )
                gr.Markdown("### The paper's claims across the atlas\n\n" + view.claims_markdown())
    return demo
