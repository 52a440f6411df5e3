"""ImageNet-size classifiers made local without the Hub: created untrained (seeded), saved as their Hub repos hold
them, and placed as snapshots in a Hub cache, so that the Space's door reads them with `HF_HUB_OFFLINE=1` as if it had
downloaded them. What the benchmarks time is then the checks and the probe, not the network."""

import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path

# transformers models by name: (config class, model class, image processor class, the config's fields). ViT-S/16 at
# 224 px: timm's vit_small_patch16_224 in transformers' format.
TRANSFORMERS_MODELS = {
    "vit-small-patch16-224": (
        "ViTConfig",
        "ViTForImageClassification",
        "ViTImageProcessor",
        dict(hidden_size=384, num_hidden_layers=12, num_attention_heads=6, intermediate_size=1536, num_labels=1000),
    ),
}


def cached_snapshot(cache: Path, repo_id: str, write: Callable[[Path], None]) -> str:
    """The files `write(folder)` writes, as the main branch of `repo_id` in the Hub cache `cache` (where a download
    leaves them); their (made-up) commit sha, a hash of their names and bytes, so that the same files give the same
    commit."""
    staging = cache / "staging"
    shutil.rmtree(staging, ignore_errors=True)
    write(staging)
    digest = hashlib.sha1()
    for path in sorted(staging.rglob("*")):
        if path.is_file():
            digest.update(path.relative_to(staging).as_posix().encode() + b"\0" + path.read_bytes())
    sha = digest.hexdigest()
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / sha
    snapshot.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(snapshot, ignore_errors=True)
    staging.rename(snapshot)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(sha)
    return sha


def timm_snapshot(cache: Path, repo_id: str, architecture: str, *, seed: int = 0) -> str:
    """timm's `architecture` without pretrained weights (initialised from `seed`), in timm's Hub format (config.json
    with its pretrained_cfg, model.safetensors) as `repo_id`'s main branch in `cache`; its commit sha."""
    import timm
    import torch
    from timm.models._hub import save_for_hf

    def write(folder: Path) -> None:
        torch.manual_seed(seed)
        save_for_hf(timm.create_model(architecture, pretrained=False), str(folder), safe_serialization=True)

    return cached_snapshot(cache, repo_id, write)


def transformers_snapshot(cache: Path, repo_id: str, name: str, *, seed: int = 0, **overrides) -> str:
    """The transformers model `TRANSFORMERS_MODELS[name]` (its fields, then `overrides`) initialised from `seed`,
    saved with `save_pretrained` (config.json, model.safetensors) and an image processor's preprocessor_config.json
    at its size, as `repo_id`'s main branch in `cache`; its commit sha."""
    import torch
    import transformers

    from alternet_hf.utils import quiet_progress_bars

    config_class, model_class, processor_class, fields = TRANSFORMERS_MODELS[name]
    config = getattr(transformers, config_class)(**{**fields, **overrides})

    def write(folder: Path) -> None:
        torch.manual_seed(seed)
        with quiet_progress_bars():  # its bar of shards written
            getattr(transformers, model_class)(config).save_pretrained(folder)  # safetensors, transformers' default
        size = {"height": config.image_size, "width": config.image_size}
        getattr(transformers, processor_class)(size=size).save_pretrained(folder)

    return cached_snapshot(cache, repo_id, write)
