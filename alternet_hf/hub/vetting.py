"""Models from the Hub named by anyone, checked before any weight byte is fetched: what a public page or a command
may load when the name comes from someone else.

`vet_model` asks the Hub about the repo (one API call), reads its `config.json` and the safetensors header (a few KB),
and either returns a `VettedModel` pinned to the commit it checked or raises `RefusedModel` with one sentence a
visitor understands. Only then does `fetch_model` download exactly what was checked: the config, the image-processor
settings and the safetensors weights of that commit, never a pickled checkpoint and never a file of code. Loading
never sets `trust_remote_code`: a repo whose architecture needs its own code is refused on its config alone.
"""

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..utils import GATED, NOT_FOUND, UNAUTHENTICATED, UNREACHABLE, hub_failure

MAX_PARAMETERS_VARIABLE = "ALTERNET_MAX_PARAMETERS"
# A 2-vCPU Space analyses an ImageNet ViT-B/16 (86.6 M) in well under a minute; a ViT-L (304 M) takes minutes.
DEFAULT_MAX_PARAMETERS = 100_000_000
CACHE_VARIABLE = "ALTERNET_MODEL_CACHE"
SAFE_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")
PICKLED_SUFFIXES = (".bin", ".pth", ".pt", ".pkl", ".ckpt", ".pth.tar", ".h5", ".msgpack")
# What `fetch_model` downloads of a checked commit: settings and safetensors weights, nothing that runs.
FETCHED_FILES = ["config.json", "preprocessor_config.json", "*.safetensors", "model.safetensors.index.json"]
# owner/name as the Hub spells it (huggingface_hub's rule, checked again below), or a canonical name without owner.
_HUB_ID = re.compile(r"^(?:[A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*$")
_URL_PREFIXES = ("https://huggingface.co/", "http://huggingface.co/", "huggingface.co/", "hf-hub:", "hf_hub:")


class RefusedModel(ValueError):
    """A model that may not be loaded here, and why, in one sentence (`str(error)`)."""


@dataclass
class VettedModel:
    """A repo checked at one commit: what the analyses need to build it, and its size."""

    repo_id: str
    revision: str  # the commit sha that was checked, and the only one fetched
    library: str  # "transformers" or "timm"
    architecture: str  # transformers' class name, or timm's architecture
    parameters: int
    config: dict = field(repr=False)


def max_parameters() -> int:
    """The parameter limit: `ALTERNET_MAX_PARAMETERS` (e.g. 300e6 on a bigger machine), else the CPU Space's."""
    value = os.environ.get(MAX_PARAMETERS_VARIABLE, "").strip()
    if not value:
        return DEFAULT_MAX_PARAMETERS
    try:
        limit = int(float(value))
    except ValueError:
        raise ValueError(f"{MAX_PARAMETERS_VARIABLE}={value!r} is not a number of parameters (e.g. 100e6)") from None
    if limit < 1:
        raise ValueError(f"{MAX_PARAMETERS_VARIABLE} must be at least 1, not {value}")
    return limit


def model_cache() -> Path:
    """Where checked snapshots are downloaded: `ALTERNET_MODEL_CACHE`, else huggingface_hub's own cache."""
    value = os.environ.get(CACHE_VARIABLE)
    if value:
        return Path(value).expanduser()
    from huggingface_hub.constants import HF_HUB_CACHE

    return Path(HF_HUB_CACHE)


def hub_model_id(text: str) -> str:
    """`text` as a Hub model id, or `RefusedModel`: never a path on this machine (a leading `/`, `.`, `~`, a `..`
    or a backslash is refused before anything is asked), a URL of the Hub's or timm's `hf-hub:` prefix taken off."""
    name = (text or "").strip()
    for prefix in _URL_PREFIXES:
        if name.lower().startswith(prefix):
            name = name[len(prefix) :]
    name = name.split("/tree/")[0].rstrip("/")
    example = "type it as owner/name, e.g. timm/resnet50.a1_in1k or google/vit-base-patch16-224"
    if not name:
        raise RefusedModel(f"Type a Hub model id first: {example}.")
    looks_like_path = name.startswith(("/", ".", "~")) or ".." in name or "\\" in name or name.count("/") > 1
    if looks_like_path or not _HUB_ID.match(name) or len(name) > 96:
        raise RefusedModel(f"“{text.strip()[:100]}” is not a Hub model id: {example}.")
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        raise RefusedModel(f"“{name}” is not a Hub model id: {example}.") from None
    return name


def _revision(text: str | None) -> str | None:
    revision = (text or "").strip() or None
    if revision is not None and (len(revision) > 100 or not re.fullmatch(r"[\w./-]+", revision) or ".." in revision):
        raise RefusedModel(f"“{revision[:100]}” is not a revision: give a branch, a tag or a commit sha.")
    return revision


def _hub_refusal(error: BaseException, repo_id: str, revision: str | None) -> RefusedModel:
    from huggingface_hub import errors

    failure = hub_failure(error)
    if isinstance(error, errors.RevisionNotFoundError):
        return RefusedModel(f"“{repo_id}” has no revision “{revision}” on the Hub.")
    if failure == GATED:
        return RefusedModel(
            f"“{repo_id}” is gated: its authors share it only with people who accept their terms, so it is not "
            "analysed here."
        )
    if failure in (NOT_FOUND, UNAUTHENTICATED):
        return RefusedModel(f"There is no public model “{repo_id}” on the Hub: check the spelling (owner/name).")
    if failure == UNREACHABLE:
        return RefusedModel("The Hugging Face Hub cannot be reached from here right now: try again in a minute.")
    return RefusedModel(f"The Hub did not answer about “{repo_id}” ({type(error).__name__}): try again later.")


def _parameter_text(count: int) -> str:
    return f"{count / 1e6:,.1f} M" if count >= 1e5 else f"{count:,}"


def resolve_commit(text: str, revision: str | None = None, *, public_only: bool = True):
    """(repo id, the commit sha `revision` names, the Hub's model info) of the model `text` names, checked to be a
    Hub id, to exist and (`public_only`) to be public and not gated: one API call, nothing fetched. Offline
    (`HF_HUB_OFFLINE=1`), the commit of the snapshot in the cache, and no info."""
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import HfHubHTTPError

    repo_id, revision = hub_model_id(text), _revision(revision)
    if constants.HF_HUB_OFFLINE:  # a snapshot checked and fetched before: its commit, from the cache
        return repo_id, _cached_snapshot(repo_id, revision).name, None
    try:
        info = HfApi().model_info(repo_id, revision=revision)
    except Exception as error:
        if hub_failure(error) is None and not isinstance(error, HfHubHTTPError):
            raise
        raise _hub_refusal(error, repo_id, revision) from None
    if public_only and info.private:
        raise RefusedModel(f"“{repo_id}” is private: only public models are analysed here.")
    if public_only and info.gated:
        raise _hub_refusal(_Gated(), repo_id, revision)
    return repo_id, info.sha, info


def vet_model(
    text: str, revision: str | None = None, *, public_only: bool = True, limit: int | None = None
) -> VettedModel:
    """Check the model `text` names (see the module docstring), at `revision` (default: its main branch), fetching
    no weights; `public_only` refuses private and gated repos even where a token could read them; `limit`: the
    parameter limit (default `max_parameters()`)."""
    from huggingface_hub import constants, get_safetensors_metadata, hf_hub_download
    from huggingface_hub.errors import NotASafetensorsRepoError, SafetensorsParsingError

    limit = max_parameters() if limit is None else limit
    if constants.HF_HUB_OFFLINE:
        return _vet_cached(hub_model_id(text), _revision(revision), limit)
    repo_id, sha, info = resolve_commit(text, revision, public_only=public_only)
    files = [sibling.rfilename for sibling in info.siblings or []]
    if "config.json" not in files:
        raise RefusedModel(
            f"“{repo_id}” has no config.json: it is not a transformers or timm model (the only kinds analysed here)."
        )
    try:
        config_path = hf_hub_download(repo_id, "config.json", revision=sha, cache_dir=model_cache())
        config = json.loads(Path(config_path).read_text())
    except (ValueError, UnicodeDecodeError):
        raise RefusedModel(f"The config.json of “{repo_id}” is not valid JSON.") from None
    except Exception as error:
        if hub_failure(error) is None:
            raise
        raise _hub_refusal(error, repo_id, revision) from None
    if not isinstance(config, dict):
        raise RefusedModel(f"The config.json of “{repo_id}” is not a JSON object.")
    library, architecture = _architecture(repo_id, config)
    _check_weights(repo_id, files)
    try:
        metadata = get_safetensors_metadata(repo_id, revision=sha)
    except (NotASafetensorsRepoError, SafetensorsParsingError):
        raise RefusedModel(f"The safetensors header of “{repo_id}” cannot be read: the file is damaged.") from None
    except Exception as error:
        if hub_failure(error) is None:
            raise
        raise _hub_refusal(error, repo_id, revision) from None
    parameters = int(sum(metadata.parameter_count.values()))
    _check_size(repo_id, parameters, limit)
    return VettedModel(repo_id, sha, library, architecture, parameters, config)


def _check_size(repo_id: str, parameters: int, limit: int) -> None:
    if parameters > limit:
        raise RefusedModel(
            f"“{repo_id}” has {_parameter_text(parameters)} parameters; the limit here is {_parameter_text(limit)} "
            f"(a CPU machine; {MAX_PARAMETERS_VARIABLE} raises it on a bigger one)."
        )


def _cached_snapshot(repo_id: str, revision: str | None) -> Path:
    """The cached snapshot of `repo_id` at `revision` (its main branch by default), found without the Hub."""
    from huggingface_hub import snapshot_download

    try:
        return Path(
            snapshot_download(
                repo_id, revision=revision, allow_patterns=FETCHED_FILES, cache_dir=model_cache(), local_files_only=True
            )
        )
    except Exception:
        raise RefusedModel(
            f"“{repo_id}” is not in the model cache ({model_cache()}) and the Hugging Face Hub cannot be reached "
            "(HF_HUB_OFFLINE=1): analyse it once online first."
        ) from None


def _vet_cached(repo_id: str, revision: str | None, limit: int) -> VettedModel:
    """`vet_model` offline (`HF_HUB_OFFLINE=1`): the same checks on a snapshot fetched before, read from the cache."""
    folder = _cached_snapshot(repo_id, revision)
    files = [path.name for path in folder.iterdir()]
    if "config.json" not in files:
        raise RefusedModel(f"The cached “{repo_id}” has no config.json: analyse it once online to fetch it again.")
    config = json.loads((folder / "config.json").read_text())
    library, architecture = _architecture(repo_id, config)
    _check_weights(repo_id, files)
    parameters = sum(_header_parameters(folder / name) for name in files if name.endswith(".safetensors"))
    _check_size(repo_id, parameters, limit)
    return VettedModel(repo_id, folder.name, library, architecture, parameters, config)


def _header_parameters(path: Path) -> int:
    """The number of values a safetensors file's header lists (the file's tensors are not read)."""
    with path.open("rb") as file:
        header = json.loads(file.read(int.from_bytes(file.read(8), "little")))
    counts = [entry["shape"] for key, entry in header.items() if key != "__metadata__"]
    return int(sum(math.prod(shape) for shape in counts))


class _Gated(Exception):
    hub_failure = GATED


def _architecture(repo_id: str, config: dict) -> tuple[str, str]:
    """("timm" | "transformers", architecture) of a config a library here builds without the repo's code."""
    if "architecture" in config and "model_type" not in config:  # timm's Hub format
        import timm

        architecture = str(config["architecture"])
        if not timm.is_model(architecture):
            raise RefusedModel(
                f"“{repo_id}” names the timm architecture “{architecture}”, which the installed timm "
                f"({timm.__version__}) does not have."
            )
        return "timm", architecture
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES

    model_type = config.get("model_type")
    if model_type not in CONFIG_MAPPING:
        if config.get("auto_map"):
            raise RefusedModel(
                f"“{repo_id}” needs code of its own to run (its config.json points at Python files in the repo), "
                "and code from a repo is never run here."
            )
        raise RefusedModel(
            f"“{repo_id}” is a “{model_type}” model, which neither transformers nor timm knows: only their image "
            "classifiers are analysed here."
        )
    classifiers = set(MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES.values())
    classifiers |= {"AlterNetForImageClassification", "CifarResNetForImageClassification"}
    architectures = config.get("architectures") or [MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES.get(model_type)]
    found = [name for name in architectures if name in classifiers]
    if not found:
        listed = ", ".join(str(name) for name in architectures if name) or model_type
        raise RefusedModel(f"“{repo_id}” is not an image classifier ({listed}): only image classifiers are analysed.")
    return "transformers", found[0]


def _check_weights(repo_id: str, files: list[str]) -> None:
    """Safetensors weights (one file, or shards with their index), else a refusal that says what there is."""
    if any(name in SAFE_WEIGHTS for name in files):
        return
    pickled = [name for name in files if name.lower().endswith(PICKLED_SUFFIXES)]
    if pickled:
        raise RefusedModel(
            f"“{repo_id}” has its weights only as a pickled checkpoint ({pickled[0]}), which can run code when it is "
            "loaded: only safetensors weights are loaded here."
        )
    raise RefusedModel(f"“{repo_id}” has no model.safetensors: there are no weights to analyse.")


def fetch_model(vetted: VettedModel) -> Path:
    """The checked commit's config, image-processor settings and safetensors weights, downloaded (or found in the
    cache), as a local folder; nothing else of the repo."""
    from huggingface_hub import snapshot_download

    try:
        folder = snapshot_download(
            vetted.repo_id, revision=vetted.revision, allow_patterns=FETCHED_FILES, cache_dir=model_cache()
        )
    except Exception as error:
        if hub_failure(error) is None:
            raise
        raise _hub_refusal(error, vetted.repo_id, vetted.revision) from None
    return Path(folder)
