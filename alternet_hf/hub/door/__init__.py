"""The public door: a model named by someone else (a visitor of the Space, an id typed into a command) is read,
checked and loaded here, and nowhere else.

What runs is derived only from what was checked. A typed id and revision are parsed by the Hub's rules (`ids`); the
repo's config gives only the fields an architecture needs, each checked for type and range, and never a field that
could name a file, a repo, a URL, code, a kernel, a quantization or a device (`configs`); the model is built on the
meta device and compared, tensor by tensor, with the safetensors headers before any weight byte is fetched
(`weights`); the files fetched are exactly the checked ones, their sizes known beforehand and bounded (`checks`); and
the Space runs all of it in a worker process with a memory ceiling and a hard time limit (`worker`), so that a check
missed costs one worker, never the Space. Every refusal is one fixed sentence for its class (`RefusedModel`).
SECURITY.md states what this promises and what it does not.
"""

from .ids import hub_model_id, hub_revision, model_reference
from .limits import LIMITS
from .refusals import RefusedModel

__all__ = ["LIMITS", "RefusedModel", "hub_model_id", "hub_revision", "model_reference"]
