"""The alternet-hf Space: how ResNet, ViT and AlterNet see frequencies, and how they hold up under corruptions.

Started by `alternet-space` (or the Space repo's `app.py`). Models are loaded from Hub ids or folders,
never with `trust_remote_code`: the zoo's classes come from `alternet_hf` itself. Stored analysis results
(`alternet-analyze --out <results>/<name>`) draw the accuracy curves of the robustness tab.
"""

import json
from dataclasses import dataclass
from pathlib import Path

import gradio as gr
import matplotlib
import numpy as np
import torch
from PIL import Image

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from transformers import AutoModelForImageClassification  # noqa: E402

import alternet_hf  # noqa: E402  (registers the zoo's classes: no remote code is ever run)
from analysis.blocks import as_feature_map, run_blocks  # noqa: E402
from analysis.corruptions import CORRUPTIONS, corrupt  # noqa: E402
from analysis.fourier import fourier_log_amplitude, mean_log_amplitude  # noqa: E402
from analysis.robustness import band_pass_noise  # noqa: E402

MAX_SIDE = 4096  # larger uploads are refused; anything above MAX_WORKING_SIDE is shrunk first
MAX_WORKING_SIDE = 512
FREQUENCY_NOISE = "frequency noise"
EXAMPLES = ("astronaut", "coffee", "chelsea", "rocket")


@dataclass
class LoadedModel:
    name: str
    source: str
    model: torch.nn.Module | None
    error: str | None = None


def load_models(spec: str) -> list[LoadedModel]:
    """`name=source,...` -> models in eval mode; a source that fails to load is reported, not fatal."""
    loaded = []
    for entry in filter(None, (part.strip() for part in spec.split(","))):
        name, _, source = entry.partition("=")
        if not source:
            raise ValueError(f"model entry {entry!r} must look like name=hub_id_or_folder")
        try:
            model = AutoModelForImageClassification.from_pretrained(source, trust_remote_code=False).eval()
            loaded.append(LoadedModel(name, source, model))
        except Exception as error:  # offline, missing folder, foreign architecture: say so in the page
            loaded.append(LoadedModel(name, source, None, f"{type(error).__name__}: {str(error)[:200]}"))
    if not any(m.model is not None for m in loaded):
        details = "; ".join(f"{m.name} ({m.source}): {m.error}" for m in loaded)
        raise RuntimeError(f"no model could be loaded: {details}. Point --models at folders from alternet-train")
    return loaded


def example_photos() -> list[Image.Image]:
    from skimage import data

    return [Image.fromarray(getattr(data, name)()).convert("RGB") for name in EXAMPLES]


def checked_image(image: Image.Image | None) -> Image.Image:
    if image is None:
        raise gr.Error("Pick an example photo or upload an image first.")
    if max(image.size) > MAX_SIDE:
        raise gr.Error(f"The image is {image.size[0]}×{image.size[1]}; the limit is {MAX_SIDE} pixels a side.")
    image = image.convert("RGB")
    image.thumbnail((MAX_WORKING_SIDE, MAX_WORKING_SIDE))
    return image


def to_inputs(model, image: Image.Image) -> torch.Tensor:
    return alternet_hf.build_image_processor(model.config)(image, return_tensors="pt")["pixel_values"]


def _pixels(model, image: Image.Image) -> torch.Tensor:
    """The image as the model's (1, 3, S, S) float tensor in [0, 1], before normalisation."""
    size = model.config.image_size
    resized = np.array(image.resize((size, size), Image.Resampling.BILINEAR))
    return torch.from_numpy(resized).permute(2, 0, 1)[None] / 255


def _statistics(model) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tensor(model.config.image_mean).view(1, 3, 1, 1), torch.tensor(model.config.image_std).view(1, 3, 1, 1)


def _normalise(model, pixels: torch.Tensor) -> torch.Tensor:
    mean, std = _statistics(model)
    return (pixels - mean) / std


def _denormalise(model, inputs: torch.Tensor) -> torch.Tensor:
    mean, std = _statistics(model)
    return (inputs * std + mean).clamp(0, 1)


class Space:
    def __init__(self, models: list[LoadedModel], results_dir: Path | None = None):
        self.models = models
        self.ready = [m for m in models if m.model is not None]
        self.results_dir = results_dir

    def status(self) -> str:
        lines = [
            f"- **{m.name}**: {type(m.model).__name__} from `{m.source}`" if m.model is not None else
            f"- **{m.name}**: not loaded from `{m.source}` ({m.error})"
            for m in self.models
        ]  # fmt: skip
        return "Models:\n" + "\n".join(lines)

    # --- frequency tab -----------------------------------------------------------------------------

    @torch.no_grad()
    def frequency(self, image: Image.Image | None, depth: float):
        image = checked_image(image)
        figure, axes = plt.subplots(2, len(self.ready), figsize=(4 * len(self.ready), 6.5), squeeze=False)
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
            ax.set_xlabel("depth")
            run = run_blocks(entry.model, inputs)
            index = min(int(round(depth * (len(run.states) - 1))), len(run.states) - 1)
            feature_map = as_feature_map(run.states[index], run.num_prefix_tokens)
            spectrum = axes[1, column]
            spectrum.imshow(mean_log_amplitude(feature_map).numpy(), cmap="inferno")
            spectrum.set_title(f"log |FFT| of block {index} ({run.kinds[index]})", fontsize=9)
            spectrum.axis("off")
            ax.axvline(index + 1, color="tab:red", linewidth=0.8)
        figure.tight_layout()
        return figure

    # --- robustness tab ----------------------------------------------------------------------------

    @torch.no_grad()
    def robustness(self, image: Image.Image | None, corruption: str, severity: int, frequency: float):
        image = checked_image(image)
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
                corrupted = corrupt(pixels, corruption, int(severity), generator=generator.manual_seed(0))
                inputs = _normalise(entry.model, corrupted)
            probabilities = entry.model(inputs).logits.softmax(-1)[0]
            top = probabilities.topk(min(5, len(probabilities)))
            labels = entry.model.config.id2label
            predictions.append({labels[i.item()]: p.item() for p, i in zip(top.values, top.indices)})
            if shown is None:
                shown = Image.fromarray((corrupted[0].permute(1, 2, 0).numpy() * 255).round().astype(np.uint8))
        shown = shown.resize((256, 256), Image.Resampling.NEAREST)
        return [shown, *predictions, self.curves(corruption)]

    def curves(self, corruption: str):
        """Accuracy vs severity (or noise frequency) from stored analysis results, one line per model."""
        figure, ax = plt.subplots(figsize=(5, 3.2))
        found = []
        for entry in self.ready:
            folder = self.results_dir / entry.name if self.results_dir else None
            if corruption == FREQUENCY_NOISE:
                path = folder / "frequency-noise.json" if folder else None
                if path and path.exists():
                    result = json.loads(path.read_text())["result"]
                    ax.plot(
                        result["frequencies"], 100 * np.array(result["delta_accuracy"]), marker="o", label=entry.name
                    )
                    found.append(entry.name)
            else:
                path = folder / "robustness.json" if folder else None
                if path and path.exists():
                    result = json.loads(path.read_text())["result"]
                    if corruption in result["corruptions"]:
                        row = result["accuracy"][result["corruptions"].index(corruption)]
                        ax.plot(result["severities"], 100 * np.array(row, dtype=float), marker="o", label=entry.name)
                        found.append(entry.name)
        if found:
            ax.set_xlabel("noise frequency (π)" if corruption == FREQUENCY_NOISE else "severity")
            ax.set_ylabel("Δ accuracy (%)" if corruption == FREQUENCY_NOISE else "accuracy (%)")
            ax.legend()
            ax.set_title(f"Stored results: {corruption}", fontsize=9)
        else:
            ax.axis("off")
            ax.text(0.5, 0.5, "No stored results for these models:\nrun alternet-analyze --out <results>/<name>",
                    ha="center", va="center", fontsize=9)  # fmt: skip
        figure.tight_layout()
        return figure


def build_demo(space: Space) -> gr.Blocks:
    examples = example_photos()
    with gr.Blocks(title="How Do Vision Transformers Work?") as demo:
        gr.Markdown(
            "# How Do Vision Transformers Work?\n"
            "Multi-head self-attentions (MSAs) are **low-pass filters**, convolutions **high-pass**: watch the "
            "high-frequency log amplitude fall after MSA blocks (shaded) and rise after convolutions. "
            "AlterNet alternates the two.\n\n" + space.status()
        )
        with gr.Tab("Frequency"):
            with gr.Row():
                image = gr.Image(type="pil", label="Photo", height=280)
                with gr.Column():
                    depth = gr.Slider(0, 1, value=0.5, step=0.05, label="Feature map depth (0 = input, 1 = head)")
                    analyse = gr.Button("Analyse frequencies", variant="primary")
            gr.Examples([[e] for e in examples], inputs=[image], label="Example photos (scikit-image)")
            frequency_plot = gr.Plot(label="ΔlogA by depth and feature-map spectra")
            analyse.click(space.frequency, [image, depth], frequency_plot, api_name="frequency")
        with gr.Tab("Robustness"):
            with gr.Row():
                robust_image = gr.Image(type="pil", label="Photo", height=280)
                with gr.Column():
                    corruption = gr.Dropdown([*CORRUPTIONS, FREQUENCY_NOISE], value="fog", label="Corruption")
                    severity = gr.Slider(1, 5, value=3, step=1, label="Severity (CIFAR-C)")
                    frequency = gr.Slider(
                        0.1, 0.9, value=0.5, step=0.1, label="Noise frequency (π), for frequency noise"
                    )
                    run = gr.Button("Corrupt and classify", variant="primary")
            gr.Examples([[e] for e in examples], inputs=[robust_image], label="Example photos (scikit-image)")
            with gr.Row():
                corrupted = gr.Image(label="What the models see", height=256)
                labels = [gr.Label(num_top_classes=5, label=f"{m.name} top-5") for m in space.ready]
            curves = gr.Plot(label="Accuracy from stored analysis results")
            run.click(
                space.robustness, [robust_image, corruption, severity, frequency], [corrupted, *labels, curves],
                api_name="robustness",
            )  # fmt: skip
    return demo
