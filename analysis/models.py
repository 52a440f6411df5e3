"""Any image classifier, loaded for the analyses with the input size and normalisation it expects.

A source is a zoo preset or folder, a transformers image classifier (folder or Hub id), or `timm:<name>`: created
without weights and given `weights=` (a safetensors file, a checkpoint read with `weights_only=True`, or a folder
holding one), offline; without them, from the Hub. A folder written by `alternet-train` also gives its
`training_config.json`, whose augmentation the Hessian and landscape analyses take.

A Hub id (a transformers classifier, or a timm model in timm's Hub format; `timm:hf-hub:<id>` too) goes through
the public door, `alternet_hf.hub.door`, as the Space takes a visitor's: only the allowed fields of its config, its
safetensors headers compared with the model before any weight byte, the bytes and input size bounded, one commit
checked and fetched. What comes back is a module and its preprocessing: the analyses never see the repo.
"""

import difflib
import json
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from alternet_hf.models.presets import DATASETS

TIMM_PREFIX = "timm:"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "open_clip_pytorch_model.bin")
WEIGHT_SUFFIXES = (".safetensors", ".pth", ".pth.tar", ".pt", ".bin", ".ckpt")


@dataclass
class LoadedModel:
    """A model ready for the analyses: inputs are resized to `image_size` and normalised with
    `image_mean`/`image_std`; `training_config` is the `alternet-train` config it was trained with, if known."""

    name: str
    source: str
    model: nn.Module
    image_size: int
    image_mean: tuple[float, ...]
    image_std: tuple[float, ...]
    training_config: dict | None = None
    training_config_path: Path | None = None
    preprocessing_note: str = ""
    revision: str | None = None  # the commit of a Hub model that was checked and loaded

    @property
    def num_labels(self) -> int:
        config = getattr(self.model, "config", None)
        if config is not None and getattr(config, "num_labels", None):
            return config.num_labels
        return self.model.num_classes


def default_name(source: str) -> str:
    """`timm:resnet50` -> `resnet50`, `outputs/vit` -> `vit`, `org/model` -> `model`."""
    return source.removeprefix(TIMM_PREFIX).rstrip("/").rsplit("/", 1)[-1]


def load_model(
    source: str,
    *,
    name: str | None = None,
    weights: str | Path | None = None,
    image_size: int | None = None,
    revision: str | None = None,
) -> LoadedModel:
    """Load `source` (see the module docstring), a Hub id at `revision` (default: its main branch); `image_size`
    overrides the size inputs are resized to."""
    name = name or default_name(source)
    hub_id = source.removeprefix(TIMM_PREFIX).removeprefix("hf-hub:")
    if source.startswith(f"{TIMM_PREFIX}hf-hub:") or (not source.startswith(TIMM_PREFIX) and is_hub_id(source)):
        if weights is not None:
            raise ValueError(f"--weights applies to timm models (timm:<name>); {source} is a Hub repo with its weights")
        loaded = _load_from_hub(hub_id, name, revision)
    elif source.startswith(TIMM_PREFIX):
        loaded = _load_timm(source, name, weights)
    else:
        if weights is not None:
            raise ValueError(
                f"--weights applies to timm models (timm:<name>); {source} is a zoo or transformers model, whose "
                "folder holds its weights already"
            )
        loaded = _load_transformers(source, name, revision)
    if image_size is not None:
        loaded.image_size = image_size
    return loaded


def _load_from_hub(repo: str, name: str, revision: str | None) -> LoadedModel:
    """A Hub repo through the public door (a token may open private repos): its module and preprocessing."""
    from alternet_hf.hub.door.checks import check_model, load_checked

    checked = check_model(repo, revision, public_only=False)
    prepared = checked.preprocessing
    return LoadedModel(
        name,
        checked.repo_id,
        load_checked(checked),
        prepared.image_size,
        prepared.mean,
        prepared.std,
        preprocessing_note=prepared.note,
        revision=checked.revision,
    )


def _load_transformers(source: str, name: str, revision: str | None = None) -> LoadedModel:
    import alternet_hf

    if revision is not None:
        raise ValueError(f"--revision applies to Hub ids; {source} is a preset or a folder")
    model = alternet_hf.create_model(source)
    config = model.config
    fields = {key: getattr(config, key, None) for key in ("image_size", "image_mean", "image_std")}
    note = ""
    if not all(fields.values()):
        fields, note = _from_image_processor(source, fields)
    size = fields["image_size"]
    config_path = training_config_path(source)
    return LoadedModel(
        name,
        source,
        model,
        int(size if isinstance(size, int) else size[0]),
        tuple(fields["image_mean"]),
        tuple(fields["image_std"]),
        training_config=json.loads(config_path.read_text()) if config_path else None,
        training_config_path=config_path,
        preprocessing_note=note,
    )


def _from_image_processor(source: str, fields: dict) -> tuple[dict, str]:
    """Size and normalisation from the image processor saved with a transformers model, else ImageNet's."""
    try:
        from transformers import AutoImageProcessor

        processor = AutoImageProcessor.from_pretrained(source)
    except (OSError, ValueError):
        processor = None
    size = getattr(processor, "size", None) or {}
    found = {
        "image_size": fields["image_size"] or size.get("height") or size.get("shortest_edge"),
        "image_mean": fields["image_mean"] or getattr(processor, "image_mean", None),
        "image_std": fields["image_std"] or getattr(processor, "image_std", None),
    }
    missing = [key for key, value in found.items() if not value]
    for key in missing:  # what a model without them most likely expects: the ImageNet preset's
        found[key] = getattr(DATASETS["imagenet"], key)
    note = f"{', '.join(missing)} not known for {source}: ImageNet's assumed" if missing else ""
    return found, note


def training_config_path(source: str | Path) -> Path | None:
    """The `training_config.json` `alternet-train` writes next to its model (or one up, for `<run>/best/`), or None."""
    folder = Path(source)
    for candidate in (folder / "training_config.json", folder.parent / "training_config.json"):
        if folder.is_dir() and candidate.is_file():
            return candidate
    return None


def _load_timm(source: str, name: str, weights) -> LoadedModel:
    import timm
    from timm.data import resolve_data_config

    architecture = source.removeprefix(TIMM_PREFIX)
    if not timm.is_model(architecture):
        close = difflib.get_close_matches(architecture, timm.list_models(), n=3, cutoff=0.6)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ValueError(f"timm has no model {architecture!r}.{hint} (`timm.list_models('*name*')` lists them)")
    if weights is None:
        try:
            model = timm.create_model(architecture, pretrained=True)
        except Exception as error:  # timm raises whatever the Hub client raises when it is out of reach
            raise OSError(
                f"could not fetch the weights of timm:{architecture} from the Hugging Face Hub ({error}). "
                f"Offline, give them as a local file or folder: --weights {name}=path/to/model.safetensors"
            ) from error
    else:
        model = _timm_with_weights(architecture, Path(weights))
    config = resolve_data_config({}, model=model)
    return LoadedModel(
        name,
        source,
        model,
        int(config["input_size"][-1]),
        tuple(config["mean"]),
        tuple(config["std"]),
        preprocessing_note="timm's data config of the architecture",
    )


def weight_file(path: Path) -> Path:
    """The checkpoint file `path` names, or the one inside the folder `path`."""
    if path.is_file():
        return path
    if not path.is_dir():
        raise FileNotFoundError(f"there is no weights file or folder {path}")
    for name in WEIGHT_FILES:
        if (path / name).is_file():
            return path / name
    found = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES))
    if len(found) != 1:
        listed = ", ".join(p.name for p in found) or "none"
        raise FileNotFoundError(
            f"{path} holds {len(found)} weight files ({listed}); name one, or use a folder with model.safetensors"
        )
    return found[0]


def _timm_with_weights(architecture: str, path: Path) -> nn.Module:
    import timm
    from timm.models import load_state_dict

    file = weight_file(path)
    state = load_state_dict(str(file), use_ema=True, weights_only=True)
    model = timm.create_model(architecture, pretrained=False)
    classifier = model.pretrained_cfg.get("classifier")
    classifier = classifier[0] if isinstance(classifier, (list, tuple)) else classifier
    rows = state.get(f"{classifier}.weight")
    if rows is not None and rows.shape[0] != model.num_classes:
        model.reset_classifier(rows.shape[0])  # the file's own label count
    wrong = f"{file} does not hold the weights of timm:{architecture}"
    try:
        result = model.load_state_dict(state, strict=False)
    except RuntimeError as error:  # same names, other shapes
        first = str(error).splitlines()[1].strip()
        raise ValueError(f"{wrong}: {first} …; name the architecture it was saved from") from None
    if result.missing_keys or result.unexpected_keys:
        raise ValueError(
            f"{wrong}: missing {list(result.missing_keys)[:5]}, unexpected {list(result.unexpected_keys)[:5]} (of "
            f"{len(result.missing_keys)} and {len(result.unexpected_keys)}); name the architecture it was saved from"
        )
    return model


def is_hub_id(source: str) -> bool:
    """Whether `source` names a Hub repo rather than a preset or a folder here."""
    from alternet_hf.models.presets import list_models

    return source not in list_models() and not Path(source).expanduser().exists() and source.count("/") == 1
