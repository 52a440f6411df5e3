"""A typed model id and revision, read by the Hub's rules before anything is asked: never a path of this machine.

The same rules hold online and offline: offline, huggingface_hub joins a branch name into a path of its cache
(`refs/<revision>`), so a revision such as `/dev/zero` or `../..` must never reach it."""

import re
import urllib.parse

from .refusals import RefusedModel

# owner/name as the Hub spells it (huggingface_hub's rule, checked again below), or a canonical name without owner.
_HUB_ID = re.compile(r"^(?:[A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*$")
_URL_PREFIXES = ("https://huggingface.co/", "http://huggingface.co/", "huggingface.co/", "hf-hub:", "hf_hub:")
_SHA = re.compile(r"^[0-9a-f]{40}$")
# A branch or tag name as git and the Hub allow it, a little stricter: ASCII letters, digits and `._-/`, starting
# with a letter or digit, at most 128 characters (`refs/pr/3` included).
_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")
EXAMPLE = "type it as owner/name, e.g. timm/resnet50.a1_in1k or google/vit-base-patch16-224"


def hub_model_id(text: str) -> str:
    """`text` as a Hub model id, or `RefusedModel`: never a path on this machine (a leading `/`, `.`, `~`, a `..`
    or a backslash is refused before anything is asked), a URL of the Hub's or timm's `hf-hub:` prefix taken off.
    A URL's `/tree/<revision>` is read by `model_reference`, never dropped."""
    name = _without_prefix(text)
    if not name:
        raise RefusedModel(f"Type a Hub model id first: {EXAMPLE}.")
    looks_like_path = name.startswith(("/", ".", "~")) or ".." in name or "\\" in name or name.count("/") > 1
    if looks_like_path or not _HUB_ID.match(name) or len(name) > 96:
        raise RefusedModel(f"That is not a Hub model id: {EXAMPLE}.")
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        raise RefusedModel(f"“{name}” is not a Hub model id: {EXAMPLE}.") from None
    return name


def hub_revision(text: str | None) -> str | None:
    """`text` as a revision (None: the main branch): a 40-hex commit sha, or a branch or tag name by the Hub's rules
    (no leading `/`, no `..` or `//`, no backslash, no control character, at most 128 characters)."""
    revision = (text or "").strip()
    if not revision:
        return None
    if _SHA.match(revision):
        return revision
    bad = (
        not _REF.match(revision)
        or ".." in revision
        or "//" in revision
        or revision.endswith(("/", ".", ".lock"))
        or "/." in revision
    )
    if bad:
        raise RefusedModel("That is not a revision: give a branch, a tag or a 40-character commit sha.")
    return revision


def model_reference(text: str, revision: str | None = None) -> tuple[str, str | None]:
    """(repo id, revision or None) of what a visitor typed: an id or the Hub's URL of a model, whose `/tree/<rev>`
    part is its revision; a different revision given beside it is refused, never silently preferred."""
    name = _without_prefix(text)
    in_url = None
    if "/tree/" in name:
        name, _, tail = name.partition("/tree/")
        in_url = hub_revision(urllib.parse.unquote(tail.strip("/")))
        if in_url is None:
            raise RefusedModel("The link ends in /tree/ without a revision: add one, or leave /tree/ out.")
    repo_id, given = hub_model_id(name), hub_revision(revision)
    if in_url is not None and given is not None and in_url != given:
        raise RefusedModel(f"The link to “{repo_id}” names the revision “{in_url}” and another was given: give one.")
    return repo_id, in_url or given


def _without_prefix(text: str) -> str:
    name = (text or "").strip()
    for prefix in _URL_PREFIXES:
        if name.lower().startswith(prefix):
            name = name[len(prefix) :]
    return name.rstrip("/")
