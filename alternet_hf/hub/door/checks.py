"""From a typed id to a loaded module, every step checked before the next spends anything.

`check_model` resolves the commit (one API call), reads the config and image-processor settings (sizes known and
bounded before the download), keeps only their allowed fields (`configs`), reads the safetensors headers as byte
ranges and checks them (`weights`), builds the model on the meta device from the allowed fields and compares it with
the headers tensor by tensor, and estimates one forward pass at the input size it will get. Only then does
`load_checked` fetch exactly the checked weight files (each of the size checked, the total under the limit) and fill
the model built from the allowed fields, strictly. Offline (`HF_HUB_OFFLINE=1`) the same checks read the files a
check fetched before from the cache, by the same revision rules.
"""

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from ...utils import GATED, NOT_FOUND, UNAUTHENTICATED, UNREACHABLE, hub_failure
from . import limits
from .configs import AllowedConfig, Preprocessing, preprocessing, timm_config, transformers_config
from .ids import model_reference
from .refusals import RefusedModel
from .weights import INDEX, SINGLE, Header, compare, expected_tensors, read_header, shards

logger = logging.getLogger(__name__)
CACHE_VARIABLE = "ALTERNET_MODEL_CACHE"
PICKLED_SUFFIXES = (".bin", ".pth", ".pt", ".pkl", ".ckpt", ".pth.tar", ".h5", ".msgpack")


@dataclass
class CheckedModel:
    """A repo checked at one commit: what builds it (`allowed`), how its inputs are prepared, the weight files that
    will be fetched and their exact sizes, and what one forward pass costs."""

    repo_id: str
    revision: str  # the commit sha that was checked, and the only one fetched
    allowed: AllowedConfig
    preprocessing: Preprocessing
    headers: list[Header] = field(repr=False)
    parameters: int
    gflops: float | None  # one image through the model at `preprocessing.image_size`, if it could be counted
    empty_model: object = field(repr=False, default=None)  # built on the meta device: modules and shapes only

    @property
    def library(self) -> str:
        return self.allowed.library

    @property
    def architecture(self) -> str:
        return self.allowed.architecture

    @property
    def download_bytes(self) -> int:
        return sum(header.file_size for header in self.headers)


def model_cache() -> Path:
    """Where checked files are downloaded: `ALTERNET_MODEL_CACHE`, else huggingface_hub's own cache."""
    value = os.environ.get(CACHE_VARIABLE)
    if value:
        return Path(value).expanduser()
    from huggingface_hub.constants import HF_HUB_CACHE

    return Path(HF_HUB_CACHE)


def _count(number: float, unit: str = "") -> str:
    text = f"{number / 1e6:,.1f} M" if number >= 1e5 else f"{number:,.0f}"
    return f"{text} {unit}".strip()


def hub_refusal(error: BaseException, repo_id: str, revision: str | None) -> RefusedModel:
    """One sentence for a failed call to the Hub about `repo_id`; the error itself goes to the log."""
    from huggingface_hub import errors

    logger.info("the Hub about %s: %r", repo_id, error)
    failure = hub_failure(error)
    if isinstance(error, errors.RevisionNotFoundError) and revision:
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
    return RefusedModel(f"The Hub did not answer about “{repo_id}”: try again later.")


class _Gated(Exception):
    hub_failure = GATED


class _Online:
    """The repo's files at one commit, through the Hub: listing, sizes (HEAD), byte ranges and bounded downloads."""

    def __init__(self, repo_id: str, revision: str | None, *, public_only: bool):
        from huggingface_hub import HfApi

        self.repo_id = repo_id
        try:
            info = HfApi().model_info(repo_id, revision=revision)
        except Exception as error:
            if hub_failure(error) is None and not _is_hub_error(error):
                raise
            raise hub_refusal(error, repo_id, revision) from None
        if public_only and info.private:
            raise RefusedModel(f"“{repo_id}” is private: only public models are analysed here.")
        if public_only and info.gated:
            raise hub_refusal(_Gated(), repo_id, revision)
        self.revision, self.info = info.sha, info
        self.files = {sibling.rfilename for sibling in info.siblings or []}
        self.branch = revision or "main"  # files are fetched by commit; the branch is noted for offline use

    def _note_branch(self) -> None:
        """Record in the cache which commit the branch or tag named (huggingface_hub's `refs/<name>` file, which it
        writes only when it downloads by name), so that offline the same name finds the checked snapshot. The name
        passed `ids.hub_revision`: it cannot leave the repo's folder."""
        if self.branch == self.revision:
            return
        from huggingface_hub.constants import REPO_ID_SEPARATOR

        folder = model_cache() / f"models{REPO_ID_SEPARATOR}{self.repo_id.replace('/', REPO_ID_SEPARATOR)}"
        ref = folder / "refs" / self.branch
        ref.parent.mkdir(parents=True, exist_ok=True)
        ref.write_text(self.revision)

    def _url(self, file: str) -> str:
        from huggingface_hub import hf_hub_url

        return hf_hub_url(self.repo_id, file, revision=self.revision)

    def size(self, file: str) -> int:
        from huggingface_hub import get_hf_file_metadata

        try:
            size = get_hf_file_metadata(self._url(file)).size
        except Exception as error:
            if hub_failure(error) is None and not _is_hub_error(error):
                raise
            raise hub_refusal(error, self.repo_id, self.revision) from None
        if not isinstance(size, int) or size < 0:
            raise RefusedModel(f"The Hub gives no size for a file of “{self.repo_id}”, so it is not fetched.")
        return size

    def read_range(self, file: str, first: int, last: int) -> bytes:
        """Bytes `first`..`last` of `file`, and never more, even from a server that ignores the range."""
        from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

        wanted = last - first + 1
        headers = {**build_hf_headers(), "Range": f"bytes={first}-{last}"}
        try:
            with get_session().stream("GET", self._url(file), headers=headers, follow_redirects=True) as response:
                hf_raise_for_status(response)
                skip = first if response.status_code == 200 else 0  # the whole file: read up to the range only
                data = bytearray()
                for chunk in response.iter_bytes():
                    data += chunk
                    if len(data) >= skip + wanted:
                        break
        except Exception as error:
            if hub_failure(error) is None and not _is_hub_error(error):
                raise
            raise hub_refusal(error, self.repo_id, self.revision) from None
        return bytes(data[skip : skip + wanted])

    def fetch(self, file: str) -> Path:
        from huggingface_hub import hf_hub_download

        try:
            path = Path(hf_hub_download(self.repo_id, file, revision=self.revision, cache_dir=model_cache()))
            self._note_branch()
            return path
        except Exception as error:
            if hub_failure(error) is None and not _is_hub_error(error):
                raise
            raise hub_refusal(error, self.repo_id, self.revision) from None


class _Cached:
    """The same, offline: the files a check fetched before, found in the cache by the revision's rules."""

    def __init__(self, repo_id: str, revision: str | None):
        from huggingface_hub import try_to_load_from_cache

        self.repo_id = repo_id
        found = try_to_load_from_cache(repo_id, "config.json", cache_dir=model_cache(), revision=revision)
        if not isinstance(found, str):
            raise RefusedModel(
                f"“{repo_id}” is not in the model cache and the Hugging Face Hub cannot be reached (HF_HUB_OFFLINE=1): "
                "analyse it once online first."
            )
        self.folder = Path(found).parent
        self.revision = self.folder.name
        self.files = {path.name for path in self.folder.iterdir()}

    def size(self, file: str) -> int:
        return (self.folder / file).stat().st_size

    def read_range(self, file: str, first: int, last: int) -> bytes:
        return _read(self.folder / file, first, last)

    def fetch(self, file: str) -> Path:
        return self.folder / file


def _is_hub_error(error: BaseException) -> bool:
    from huggingface_hub.errors import HfHubHTTPError

    return isinstance(error, HfHubHTTPError)


def _source(repo_id: str, revision: str | None, public_only: bool):
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return _Cached(repo_id, revision)
    return _Online(repo_id, revision, public_only=public_only)


def resolve_commit(text: str, revision: str | None = None, *, public_only: bool = True) -> tuple[str, str]:
    """(repo id, the commit sha `revision` names) of the model `text` names: checked to be a Hub id and revision, to
    exist and (`public_only`) to be public and not gated; one API call (offline: the cache), nothing fetched."""
    repo_id, revision = model_reference(text, revision)
    return repo_id, _source(repo_id, revision, public_only).revision


def _settings(source, file: str) -> dict | None:
    """A JSON settings file of the repo (config, image processor), its size checked before it is fetched; None if
    the repo has none."""
    if file not in source.files:
        return None
    unreadable = RefusedModel(f"The {file} of “{source.repo_id}” is not a JSON object of settings.")
    if source.size(file) > limits.MAX_SETTINGS_BYTES:
        raise unreadable
    try:
        value = json.loads(source.fetch(file).read_bytes())
    except (ValueError, UnicodeDecodeError):
        raise unreadable from None
    if not isinstance(value, dict):
        raise unreadable
    return value


def _weight_files(source) -> tuple[list[str], dict | None]:
    """The safetensors files to check ([model.safetensors], or the index's shards) and the index's map."""
    repo_id = source.repo_id
    if SINGLE in source.files:
        return [SINGLE], None
    if INDEX in source.files:
        if source.size(INDEX) > limits.MAX_SETTINGS_BYTES:
            raise RefusedModel(f"The weights index of “{repo_id}” is too large to be a list of files.")
        weight_map = shards(repo_id, source.fetch(INDEX).read_bytes())
        files = sorted(set(weight_map.values()))
        if not set(files) <= source.files:
            raise RefusedModel(f"The weights index of “{repo_id}” lists files the repo does not have.")
        return files, weight_map
    pickled = sorted(name for name in source.files if name.lower().endswith(PICKLED_SUFFIXES))
    if pickled:
        raise RefusedModel(
            f"“{repo_id}” has its weights only as a pickled checkpoint ({pickled[0]}), which can run code when it is "
            "loaded: only safetensors weights are loaded here."
        )
    raise RefusedModel(f"“{repo_id}” has no model.safetensors: there are no weights to analyse.")


def _preprocessing(source, config: dict, allowed: AllowedConfig) -> Preprocessing:
    cap = int(limits.INPUT_SIZE.value())
    if allowed.library == "timm":
        data = config.get("pretrained_cfg") if isinstance(config.get("pretrained_cfg"), dict) else {}
        if not data:  # the architecture's own defaults, from timm's registry
            import timm

            data = timm.models.get_pretrained_cfg(allowed.architecture).to_dict()
        return preprocessing(
            source.repo_id, data.get("input_size"), data.get("mean"), data.get("std"), cap=cap, source="timm config"
        )
    processor = _settings(source, "preprocessor_config.json") or {}
    timm_data = config.get("pretrained_cfg") if isinstance(config.get("pretrained_cfg"), dict) else {}
    size = config.get("image_size") or processor.get("crop_size") or processor.get("size")
    size = size or timm_data.get("input_size")
    mean = config.get("image_mean", processor.get("image_mean", timm_data.get("mean")))
    std = config.get("image_std", processor.get("image_std", timm_data.get("std")))
    return preprocessing(source.repo_id, size, mean, std, cap=cap, source="image-processor settings")


def build(allowed: AllowedConfig, device: str = "cpu"):
    """The model the allowed fields describe, on `device` ("meta": modules and shapes, no memory), in eval mode."""
    import torch

    with torch.device(device):
        if allowed.library == "timm":
            import timm

            model = timm.create_model(
                allowed.architecture, pretrained=False, num_classes=allowed.num_labels, **allowed.arguments
            )
        else:
            from transformers import AutoModelForImageClassification
            from transformers.models.auto.configuration_auto import CONFIG_MAPPING

            config = CONFIG_MAPPING[allowed.model_type](num_labels=allowed.num_labels, **allowed.arguments)
            model = AutoModelForImageClassification.from_config(config)
    return model.eval()


def checkpoint_names(model):
    """The function from a tensor's name in the weights file to its name in `model`: transformers renames the
    layers of some architectures as it loads them (its checkpoint conversion mapping; renamings only, of names); timm
    and the zoo keep the names they save."""
    try:
        from transformers import PreTrainedModel
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightRenaming, rename_source_key
    except ImportError:  # a transformers without conversion mappings loads names as they are
        return lambda name: name
    if not isinstance(model, PreTrainedModel):
        return lambda name: name
    renamings = [t for t in get_model_conversion_mapping(model) if isinstance(t, WeightRenaming)]
    expected = model.state_dict()
    return lambda name: rename_source_key(name, renamings, [], model.base_model_prefix, expected)[0]


def _renamed(headers: list[Header], rename) -> list[Header]:
    return [
        Header(header.file, {rename(name): entry for name, entry in header.tensors.items()}, header.file_size)
        for header in headers
    ]


def _gflops(model, size: int) -> float | None:
    """FLOPs of one image at `size` px through the model on the meta device (nothing computed), or None where an
    operation cannot run there."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(torch.empty(1, 3, size, size, device="meta"))
    return counter.get_total_flops() / 1e9


def check_model(text: str, revision: str | None = None, *, public_only: bool = True) -> CheckedModel:
    """Check the model `text` names at `revision` (default: its main branch), fetching no weight byte (the module
    docstring); `public_only` refuses private and gated repos even where a token could read them."""
    repo_id, revision = model_reference(text, revision)
    source = _source(repo_id, revision, public_only)
    config = _settings(source, "config.json")
    if config is None:
        raise RefusedModel(
            f"“{repo_id}” has no config.json: it is not a transformers or timm model (the only kinds analysed here)."
        )
    timm_format = "architecture" in config and "model_type" not in config
    allowed = timm_config(repo_id, config) if timm_format else transformers_config(repo_id, config)
    if allowed.ignored:
        logger.info("%s: config fields not used: %s", repo_id, ", ".join(allowed.ignored[:50]))
    files, weight_map = _weight_files(source)
    sizes = {file: source.size(file) for file in files}
    download_limit = limits.DOWNLOAD_MB.value() * 1e6
    if sum(sizes.values()) > download_limit:
        raise RefusedModel(
            f"The weights of “{repo_id}” are {sum(sizes.values()) / 1e6:,.0f} MB; the limit here is "
            f"{download_limit / 1e6:,.0f} MB (a CPU machine; {limits.DOWNLOAD_MB.variable} raises it on a bigger one)."
        )
    headers = [
        read_header(repo_id, file, size, lambda first, last, file=file: source.read_range(file, first, last))
        for file, size in sizes.items()
    ]
    parameter_limit = limits.PARAMETERS.value()
    declared = sum(header.parameters for header in headers)
    if declared > parameter_limit:
        raise _too_many(repo_id, declared, parameter_limit)
    prepared = _preprocessing(source, config, allowed)
    empty = build(allowed, "meta")
    rename = checkpoint_names(empty)
    weight_map = {rename(name): file for name, file in weight_map.items()} if weight_map is not None else None
    parameters = compare(repo_id, _renamed(headers, rename), expected_tensors(empty), weight_map)
    try:
        gflops = _gflops(empty, prepared.image_size)
    except Exception as error:
        logger.info("%s: one pass at %d px not counted on the meta device: %r", repo_id, prepared.image_size, error)
        if prepared.image_size < prepared.asked_size:
            raise RefusedModel(
                f"“{repo_id}” asks for {prepared.asked_size} px inputs and cannot run at {prepared.image_size} px, "
                f"the cap here ({limits.INPUT_SIZE.variable} raises it on a bigger machine)."
            ) from None
        gflops = None
    if gflops is not None and gflops > limits.GFLOPS.value():
        raise RefusedModel(
            f"One image through “{repo_id}” at {prepared.image_size} px takes {gflops:,.0f} GFLOPs; the limit here is "
            f"{limits.GFLOPS.value():,.0f} (a CPU machine; {limits.GFLOPS.variable} raises it on a bigger one)."
        )
    return CheckedModel(repo_id, source.revision, allowed, prepared, headers, parameters, gflops, empty)


def _too_many(repo_id: str, parameters: int, limit: float) -> RefusedModel:
    return RefusedModel(
        f"“{repo_id}” has {_count(parameters)} parameters; the limit here is {_count(limit)} "
        f"(a CPU machine; {limits.PARAMETERS.variable} raises it on a bigger one)."
    )


def load_checked(checked: CheckedModel):
    """The checked model with its weights, in eval mode: exactly the checked files fetched (each of the size and
    header checked), loaded into the model built from the allowed fields, every tensor accounted for."""
    import torch
    from safetensors.torch import load_file

    source = _source(checked.repo_id, checked.revision, False)
    state = {}
    for header in checked.headers:
        path = source.fetch(header.file)
        local = read_header(
            checked.repo_id, header.file, path.stat().st_size, lambda first, last, path=path: _read(path, first, last)
        )
        if local.tensors != header.tensors or local.file_size != header.file_size:
            raise RefusedModel(f"The weights of “{checked.repo_id}” changed between the check and the download.")
        state.update(load_file(path))
    model = build(checked.allowed, "cpu")
    rename = checkpoint_names(model)
    state = {rename(name): tensor for name, tensor in state.items()}
    with torch.no_grad():
        result = model.load_state_dict(state, strict=False)
    missing = [name for name in result.missing_keys if not name.endswith("num_batches_tracked")]
    if missing or result.unexpected_keys:  # `compare` saw the same: a second guard, never reached by a checked repo
        raise RefusedModel(f"The weights of “{checked.repo_id}” do not fit its architecture.")
    return model.eval()


def forget_weights(checked: CheckedModel) -> None:
    """Remove a checked model's weight files from the model cache once they are loaded: a public Space keeps its
    visitors' answers, not their weights, so that its disk holds one visitor's model at a time."""
    from huggingface_hub import try_to_load_from_cache

    for header in checked.headers:
        found = try_to_load_from_cache(checked.repo_id, header.file, cache_dir=model_cache(), revision=checked.revision)
        if isinstance(found, str):
            link = Path(found)
            blob = link.resolve()
            link.unlink(missing_ok=True)
            blob.unlink(missing_ok=True)


def _read(path: Path, first: int, last: int) -> bytes:
    with path.open("rb") as handle:
        handle.seek(first)
        return handle.read(last - first + 1)
