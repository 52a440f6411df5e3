"""The reference code's released CIFAR-100 checkpoints, and what the paper reports for its five models.

The files are assets of the GitHub release `v0.1` of `xxxnell/how-do-vits-work-storage` (docs/release.md); their
names end in the reference's run id, not a checksum, so a release records the SHA-256 of the files it converted. The
paper's numbers are read off its CIFAR-100 plots (top-1, and mean accuracy over CIFAR-100-C), good to a few tenths.
"""

import http.client
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

RELEASE_URL = "https://github.com/xxxnell/how-do-vits-work-storage/releases/download/v0.1"
RELEASE_URL_VARIABLE = "ALTERNET_REFERENCE_URL"  # a mirror (or a test server) in its place
CHUNK_SIZE = 1 << 20  # bytes read and written at a time by `download`


@dataclass(frozen=True)
class PaperResult:
    """The paper's CIFAR-100 numbers for one model, in percent."""

    top1: float
    cifar100c_mean: float


PAPER_RESULTS = {
    "alternet-50-cifar100": PaperResult(top1=84.0, cifar100c_mean=66.7),
    "resnet-50-cifar100": PaperResult(top1=82.5, cifar100c_mean=65.0),
    "swin-ti-cifar100": PaperResult(top1=76.7, cifar100c_mean=60.0),
    "pit-ti-cifar100": PaperResult(top1=76.0, cifar100c_mean=58.7),
    "vit-ti-cifar100": PaperResult(top1=66.5, cifar100c_mean=51.9),
}

# The released files, by the zoo preset with the same architecture (the converters' `alternet_hf.hub.convert`).
REFERENCE_FILES = {
    "resnet-50-cifar100": "resnet_50_cifar100_691cc9a9e4.pth.tar",
    "vit-ti-cifar100": "vit_ti_cifar100_9857b21357.pth.tar",
    "pit-ti-cifar100": "pit_ti_cifar100_0645889efb.pth.tar",
    "swin-ti-cifar100": "swin_ti_cifar100_ec2894492b.pth.tar",
}


def release_url() -> str:
    return os.environ.get(RELEASE_URL_VARIABLE, RELEASE_URL).rstrip("/")


def file_url(filename: str) -> str:
    return f"{release_url()}/{filename}"


def where_to_get_them(presets=tuple(REFERENCE_FILES)) -> str:
    """One sentence naming the released files of `presets` and where they are, for errors."""
    names = ", ".join(REFERENCE_FILES[p] for p in presets)
    return (
        f"the reference's released checkpoints ({names}) are assets of {release_url()}/ (linked from the README of "
        "xxxnell/how-do-vits-work); download them into a folder and pass it as --from-reference DIR"
    )


class DownloadError(OSError):
    """A file that could not be downloaded whole; whatever arrived stays in `<name>.partial` for the next try."""


def _total_length(response, offset: int) -> int | None:
    """The whole file's length, from `Content-Range` (a resumed download) or `Content-Length`."""
    content_range = response.headers.get("Content-Range")
    if content_range and "/" in content_range and not content_range.endswith("/*"):
        return int(content_range.rsplit("/", 1)[1])
    length = response.headers.get("Content-Length")
    return offset + int(length) if length is not None else None


def download(
    url: str,
    target: str | Path,
    *,
    progress: bool = True,
    timeout: float = 60.0,
) -> Path:
    """Download `url` to `target`: written to `target.partial`, resumed from there where the server honours range
    requests, renamed to `target` only once it holds as many bytes as the server announced; a connection that breaks
    raises `DownloadError` and keeps the partial file."""
    from tqdm import tqdm

    target = Path(target)
    partial = target.with_name(target.name + ".partial")
    target.parent.mkdir(parents=True, exist_ok=True)
    offset = partial.stat().st_size if partial.is_file() else 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={offset}-"} if offset else {})
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as error:
        if error.code != 416 or not offset:  # 416: the range starts at or past the end; start again
            raise DownloadError(f"could not download {url}: HTTP {error.code} {error.reason}") from error
        partial.unlink()
        return download(url, target, progress=progress, timeout=timeout)
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise DownloadError(f"could not download {url}: {reason}") from error
    with response:
        if offset and response.status != 206:  # the server ignored the range: the body is the whole file
            offset = 0
        total = _total_length(response, offset)
        mode = "ab" if offset else "wb"
        bar = tqdm(
            total=total,
            initial=offset,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            desc=target.name,
            disable=not progress,
            leave=False,
        )
        try:
            with open(partial, mode) as handle, bar:
                while chunk := response.read(CHUNK_SIZE):
                    handle.write(chunk)
                    bar.update(len(chunk))
        except (OSError, http.client.HTTPException) as error:  # a reset, a timeout, a connection closed early
            raise DownloadError(
                f"the download of {url} broke off after {partial.stat().st_size:,} bytes ({error}); run again to "
                f"resume it from {partial}"
            ) from error
    size = partial.stat().st_size
    if total is not None and size != total:
        raise DownloadError(
            f"the download of {url} ended after {size:,} of {total:,} bytes; run again to resume it from {partial}"
        )
    os.replace(partial, target)
    return target
