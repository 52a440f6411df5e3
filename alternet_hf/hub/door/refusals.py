"""Refusals: one fixed sentence for each class of problem, naming the repo and the field or file at fault, and never
an exception's text, a path of this machine or a token (the details go to the log)."""

import re

_SHOWN = re.compile(r"^[\w.+-]{1,64}$")


class RefusedModel(ValueError):
    """A model that may not or cannot be analysed here, and why, in one sentence (`str(error)`)."""


def shown(name: object) -> str:
    """A field or file name of a visitor's repo, as it may be shown: a short plain name as it is, anything else as a
    placeholder (a hostile key could be a path, markup or a very long text)."""
    text = str(name)
    return f"“{text}”" if _SHOWN.match(text) else "a field with an unprintable name"
