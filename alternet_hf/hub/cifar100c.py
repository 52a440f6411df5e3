"""CIFAR-100-C as a Hub dataset repo: the released arrays as parquet, a config per corruption with a split per
severity (so that a reader fetches only the sets it reads), and its card."""

from collections.abc import Sequence
from pathlib import Path

from ..data.cifar_c import CIFAR_C_CITATION, CORRUPTIONS, SEVERITIES, SEVERITY_PARAMETERS, ZENODO_URL
from ..data.cifar_c.sources import severity_split
from .repos import PAPER_URL, TEMPLATES


def set_file(corruption: str, severity: int) -> str:
    """Where `write_hub_dataset` puts one set, relative to the repo."""
    return f"data/{corruption}/{severity_split(severity)}-00000-of-00001.parquet"


def hub_dataset_configs(corruptions: Sequence[str]) -> list[dict]:
    """The card's configs: `default`, every set in one split `test`; then one per corruption, a split per severity."""
    configs = [{"config_name": "default", "data_files": [{"split": "test", "path": "data/*/*.parquet"}]}]
    for corruption in corruptions:
        files = [
            {"split": severity_split(s), "path": set_file(corruption, s).replace("00000-of-00001", "*")}
            for s in SEVERITIES
        ]
        configs.append({"config_name": corruption, "data_files": files})
    return configs


def hub_dataset_card(repo_id: str, corruptions: Sequence[str], images_per_set: int):
    """The dataset card of CIFAR-C published as parquet."""
    from huggingface_hub import DatasetCard, DatasetCardData

    data = DatasetCardData(
        license="cc-by-4.0",
        pretty_name="CIFAR-100-C",
        task_categories=["image-classification"],
        size_categories=["100K<n<1M"] if images_per_set * 5 * len(corruptions) >= 100_000 else ["n<100K"],
        source_datasets=["uoft-cs/cifar100"],
        configs=hub_dataset_configs(corruptions),
    )
    return DatasetCard.from_template(
        data,
        template_path=str(TEMPLATES / "dataset_card.md"),
        repo_id=repo_id,
        corruptions=len(corruptions),
        images_per_set=f"{images_per_set:,}",
        images=f"{len(corruptions) * 5 * images_per_set:,}",
        example="fog" if "fog" in corruptions else corruptions[0],
        parameters_table="\n".join(f"| {name} | {SEVERITY_PARAMETERS[name]} |" for name in corruptions),
        paper_url=PAPER_URL,
        citation=CIFAR_C_CITATION,
    )


def write_hub_dataset(
    zenodo_dir: str | Path, folder: str | Path, repo_id: str, corruptions: Sequence[str] | None = None
) -> Path:
    """The Hub dataset repo of the Zenodo arrays in `zenodo_dir`, written into `folder`, with its card."""
    from tqdm import tqdm

    from ..data.cifar_c.sources import ZenodoArrays, save_as_parquet

    corruptions = CORRUPTIONS if corruptions is None else corruptions
    folder = Path(folder)
    source = ZenodoArrays(zenodo_dir)
    missing = sorted(set(corruptions) - set(source.available()))
    if missing:
        raise FileNotFoundError(
            f"{zenodo_dir} lacks {', '.join(f'{name}.npy' for name in missing)} (it has {source.available()}): "
            f"CIFAR-100-C's arrays are Zenodo record 3555552 ({ZENODO_URL}); unpack CIFAR-100-C.tar there"
        )
    sets = [(corruption, severity) for corruption in corruptions for severity in SEVERITIES]
    for corruption, severity in tqdm(sets, desc="parquet", unit="set"):
        save_as_parquet(
            source, folder / set_file(corruption, severity), corruptions=[corruption], severities=[severity]
        )
    hub_dataset_card(repo_id, corruptions, source.per_severity).save(folder / "README.md")
    return folder
