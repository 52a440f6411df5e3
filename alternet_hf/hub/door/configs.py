"""Allow, don't deny: of a visitor's config and image-processor settings, only the fields an analysis needs, each
checked for type and range, are read; everything else is ignored and never passed on.

transformers: the config class of a model type in transformers' own image-classification mapping (or the zoo's),
built from the fields its signature names. timm: an architecture of timm's registry and only the `model_args` that
set its size. Strings are short names (an activation, a pooling), never anything with a `/`, `:` or `\\`; no field
whose name says it may name a file, a repo, a URL, code, a kernel, an attention implementation, a quantization or a
device is ever used, and one that does name something (a string that could be a path or an id) is refused, so that
the visitor learns which field was at fault.
"""

import inspect
import math
import re
from dataclasses import dataclass, field

from .refusals import RefusedModel, shown

# Field names that may name a file, a repo, a URL, code, a kernel, an attention implementation, a quantization or a
# device, or that load anything: never used, whatever the architecture declares.
_NEVER_WORDS = set(
    "path paths file files filename dir directory folder url urls uri repo hub revision token cache code kernel "
    "kernels impl implementation quantization quantize quantized device dtype backbone pretrained checkpoint remote "
    "adapter peft map".split()
)
_NEVER_NAMES = {"features_only", "out_indices", "out_features"}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")  # a field name
_SHORT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,63}$")  # a short string value: a name, never a path or an id
_NAMES_SOMETHING = re.compile(r"[/\\:]")
MAX_INT = 2**31 - 1
MAX_LABELS = 100_000
MAX_LIST = 64


@dataclass
class Preprocessing:
    """How inputs are prepared: resized to `image_size` (the model's own size, `asked_size`, at most the cap) and
    normalised with `mean`/`std`; `note` says what was assumed or capped."""

    image_size: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    asked_size: int
    note: str = ""


@dataclass
class AllowedConfig:
    """What a model is built from: `library` ("transformers" or "timm"), `architecture` (a transformers class name
    or timm's architecture), `model_type` (transformers'), `arguments` (the checked fields), `num_labels`."""

    library: str
    architecture: str
    model_type: str | None
    arguments: dict = field(repr=False)
    num_labels: int
    ignored: list[str] = field(default_factory=list)


def _never(name: str) -> bool:
    """Whether a field's name says it may name a file, a repo, a URL, code, a kernel, an attention implementation,
    a quantization or a device (its words, `_` apart; stochastic depth's `drop_path` is a rate, not a path)."""
    name = name.lower()
    return name in _NEVER_NAMES or bool(_NEVER_WORDS & set(name.replace("drop_path", "drop").split("_")))


def _plain(repo_id: str, name: str, value, *, depth: int = 0):
    """`value` if it is a number, a flag, a short name or a short list of them; else `RefusedModel` naming the field."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if abs(value) <= MAX_INT:
            return value
    elif isinstance(value, float):
        if math.isfinite(value):
            return value
    elif isinstance(value, str):
        if _SHORT.match(value):
            return value
    elif isinstance(value, list) and depth < 2 and len(value) <= MAX_LIST:
        return [_plain(repo_id, name, item, depth=depth + 1) for item in value]
    raise RefusedModel(
        f"The config of “{repo_id}” has {shown(name)} set to something that is not a number, a flag or a short name, "
        "so it is not analysed here."
    )


def _refuse_named_things(repo_id: str, config: dict, where: str = "config") -> None:
    """A field of the kinds never used that names something (a path, a repo, a URL, a kernel) is refused, naming it,
    so that a visitor sees why; one that is empty or a plain word is only ignored."""
    for name, value in config.items():
        if not _NAME.match(str(name)) or not _never(name):
            continue
        values = value if isinstance(value, list) else [value]
        if any(isinstance(item, str) and _NAMES_SOMETHING.search(item) for item in values):
            raise RefusedModel(
                f"The {where} of “{repo_id}” has {shown(name)} naming a file, a repo or code, which is never fetched "
                "or opened here."
            )


def _num_labels(repo_id: str, config: dict) -> int:
    labels = config.get("id2label")
    count = len(labels) if isinstance(labels, dict) and labels else config.get("num_labels")
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_LABELS:
        raise RefusedModel(f"The config of “{repo_id}” gives no usable number of classes (1 to {MAX_LABELS:,}).")
    return count


def transformers_config(repo_id: str, config: dict) -> AllowedConfig:
    """The checked fields of a transformers image classifier's config.json (see the module docstring)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES

    import alternet_hf  # noqa: F401  (the zoo's model types, registered with the Auto classes)

    model_type = config.get("model_type")
    classifiers = dict(MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES)
    classifiers |= {"alternet": "AlterNetForImageClassification", "cifar_resnet": "CifarResNetForImageClassification"}
    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING:
        if config.get("auto_map"):
            raise RefusedModel(
                f"“{repo_id}” needs code of its own to run (its config.json points at Python files in the repo), "
                "and code from a repo is never run here."
            )
        raise RefusedModel(
            f"“{repo_id}” is of a model type that neither transformers nor timm knows: only their image classifiers "
            "are analysed here."
        )
    if model_type == "timm_wrapper":  # transformers' wrapper of a timm model: timm's allow-list, under its prefix
        timm_part = timm_config(repo_id, {key: config.get(key) for key in ("architecture", "model_args")})
        arguments = {"architecture": timm_part.architecture, "model_args": timm_part.arguments}
        if isinstance(config.get("do_pooling"), bool):
            arguments["do_pooling"] = config["do_pooling"]
        num_labels = _num_labels(repo_id, {"num_labels": config.get("num_classes"), **config})
        return AllowedConfig("transformers", classifiers[model_type], model_type, arguments, num_labels)
    if model_type not in classifiers:
        raise RefusedModel(
            f"“{repo_id}” is not an image classifier that transformers builds on its own: only those are analysed."
        )
    architectures = config.get("architectures")
    named = isinstance(architectures, list) and classifiers[model_type] in architectures
    if architectures is not None and not named:
        raise RefusedModel(f"“{repo_id}” is not an image classifier: only image classifiers are analysed.")
    _refuse_named_things(repo_id, config)
    config_class = CONFIG_MAPPING[model_type]
    accepted = [name for name in inspect.signature(config_class.__init__).parameters if name not in ("self", "kwargs")]
    skipped = {"transformers_version", "architectures", "id2label", "label2id", "num_labels", "return_dict"}
    skipped |= {"output_hidden_states", "output_attentions", "problem_type", "is_encoder_decoder"}
    arguments = {}
    for name in accepted:
        if name in config and name not in skipped and not _never(name):
            arguments[name] = _plain(repo_id, name, config[name])
    if arguments.get("num_channels", 3) != 3:
        raise RefusedModel(f"“{repo_id}” does not take 3 input channels: only RGB models are analysed.")
    ignored = sorted(str(name)[:64] for name in config if name not in arguments and name not in skipped)
    return AllowedConfig(
        "transformers", classifiers[model_type], model_type, arguments, _num_labels(repo_id, config), ignored
    )


def timm_config(repo_id: str, config: dict) -> AllowedConfig:
    """The checked fields of a config.json in timm's Hub format: the architecture from timm's registry, the number
    of classes, and the `model_args` that are numbers, flags or short names under a plain name (never `pretrained*`,
    `checkpoint*`, a path, a URL or a repo)."""
    import timm

    architecture = config.get("architecture")
    if not isinstance(architecture, str) or not _SHORT.match(architecture) or not timm.is_model(architecture):
        raise RefusedModel(
            f"“{repo_id}” names a timm architecture that the installed timm ({timm.__version__}) does not have."
        )
    _refuse_named_things(repo_id, config)
    model_args = config.get("model_args") or {}
    if not isinstance(model_args, dict):
        raise RefusedModel(f"The config of “{repo_id}” has “model_args” that are not a set of named values.")
    _refuse_named_things(repo_id, model_args, "model_args")
    arguments = {}
    for name, value in model_args.items():
        if not _NAME.match(str(name)) or _never(name) or name.startswith("_"):
            raise RefusedModel(
                f"The model_args of “{repo_id}” set {shown(name)}, which does not set an architecture's size: only "
                "numbers, flags and short names of the architecture are taken."
            )
        arguments[name] = _plain(repo_id, name, value)
    num_labels = arguments.pop("num_classes", config.get("num_classes"))
    num_labels = _num_labels(repo_id, {"num_labels": 1000 if num_labels is None else num_labels})  # timm's default
    if arguments.get("in_chans", 3) != 3:
        raise RefusedModel(f"“{repo_id}” does not take 3 input channels: only RGB models are analysed.")
    ignored = sorted(str(name)[:64] for name in config if name not in ("architecture", "model_args", "num_classes"))
    return AllowedConfig("timm", architecture, None, arguments, num_labels, ignored)


def _size(value) -> int | None:
    """An image side from an image processor's or timm's way of writing it, or None."""
    if isinstance(value, dict):
        value = value.get("height", value.get("shortest_edge"))
    elif isinstance(value, (list, tuple)) and value:
        value = value[-1]
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _channel_values(value, low: float, high: float) -> tuple[float, ...] | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = [value] * 3
    if not isinstance(value, (list, tuple)) or len(value) not in (1, 3):
        return None
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and low <= v <= high for v in value):
        return None
    return tuple(float(v) for v in value) * (3 // len(value))


def preprocessing(repo_id: str, size, mean, std, *, cap: int, source: str) -> Preprocessing:
    """The input size, mean and std read from `source` (their values as found there), checked: a side of 1 to 16,384
    px (analysed at no more than `cap`), a mean in [-1, 2] and a std in (0, 10] per channel; ImageNet's where one
    is missing, said in the note."""
    from ...models.presets import DATASETS

    imagenet = DATASETS["imagenet"]
    notes = []
    side = _size(size)
    if side is not None and not 1 <= side <= 16384:
        raise RefusedModel(f"The {source} of “{repo_id}” asks for an input size of {side} px, which no model has.")
    found_mean, found_std = _channel_values(mean, -1.0, 2.0), _channel_values(std, 1e-3, 10.0)
    for name, value, given in (("mean", found_mean, mean), ("std", found_std, std)):
        if value is None and given is not None:
            raise RefusedModel(f"The {source} of “{repo_id}” has an image {name} that is not 3 numbers in range.")
    missing = [name for name, value in (("size", side), ("mean", found_mean), ("std", found_std)) if value is None]
    if missing:
        notes.append(f"{', '.join(missing)} not given: ImageNet's assumed")
    side = side or imagenet.image_size
    used = min(side, cap)
    if used < side:
        notes.append(f"analysed at {used} px, the cap here (it asks for {side} px)")
    return Preprocessing(
        used,
        found_mean or tuple(imagenet.image_mean),
        found_std or tuple(imagenet.image_std),
        side,
        "; ".join(notes),
    )
