"""Safetensors headers read and checked before any weight byte, and compared with the model they must fill.

A header is read as a bounded range of the file (at most `MAX_HEADER_BYTES`; a server that ignores the range is read
no further than that), and accepted only if every entry is a known dtype with a non-negative shape whose bytes match
its offsets, the tensors lie end to end from the start of the data, and the file's size (from the Hub's metadata,
before any download) is exactly 8 + header + data: no padding, nothing appended, no overflow (Python's integers)."""

import json
import math
import re
from dataclasses import dataclass

from .limits import MAX_HEADER_BYTES, MAX_SETTINGS_BYTES, MAX_SHARDS
from .refusals import RefusedModel, shown

ITEM_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
FLOATING = {"F64", "F32", "F16", "BF16"}
# A shard's name in an index: a plain file name inside the repo, never a path.
SHARD = re.compile(r"^[A-Za-z0-9][\w.-]{0,199}\.safetensors$")
SINGLE, INDEX = "model.safetensors", "model.safetensors.index.json"


@dataclass
class Header:
    """One checked safetensors file: {tensor name: (dtype, shape)}, and the file's exact size."""

    file: str
    tensors: dict[str, tuple[str, tuple[int, ...]]]
    file_size: int

    @property
    def parameters(self) -> int:
        return sum(math.prod(shape) for _, shape in self.tensors.values())


def _damaged(repo_id: str, file: str) -> RefusedModel:
    return RefusedModel(
        f"The weights file {shown(file)} of “{repo_id}” is not a well-formed safetensors file (its header, its "
        "tensors' sizes or its length do not agree), so none of it is loaded."
    )


def parse_header(repo_id: str, file: str, prefix: bytes, header: bytes, file_size: int) -> Header:
    """The checked header of `file` from its first 8 bytes and the header bytes they announce."""
    damaged = _damaged(repo_id, file)
    if len(prefix) != 8 or int.from_bytes(prefix, "little") != len(header):
        raise damaged
    try:
        entries = json.loads(header)
    except (ValueError, UnicodeDecodeError):
        raise damaged from None
    if not isinstance(entries, dict):
        raise damaged
    entries.pop("__metadata__", None)
    tensors, spans = {}, []
    for name, entry in entries.items():
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise damaged
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        integers = isinstance(shape, list) and isinstance(offsets, list) and len(offsets) == 2
        integers = integers and all(type(v) is int and v >= 0 for v in [*shape, *offsets])
        if dtype not in ITEM_BYTES or not integers or len(shape) > 8 or len(name) > 300:
            raise damaged
        begin, end = offsets
        if end - begin != math.prod(shape) * ITEM_BYTES[dtype]:
            raise damaged
        tensors[name] = (dtype, tuple(shape))
        spans.append((begin, end))
    position = 0
    for begin, end in sorted(spans):  # end to end from the start of the data: no gap, no overlap
        if begin != position:
            raise damaged
        position = end
    if file_size != 8 + len(header) + position:
        raise damaged
    return Header(file, tensors, file_size)


def read_header(repo_id: str, file: str, file_size: int, read_range) -> Header:
    """The checked header of `file` (of `file_size` bytes), read through `read_range(first, last) -> bytes`."""
    if file_size < 8:
        raise _damaged(repo_id, file)
    first = read_range(0, min(file_size, 100_000) - 1)
    length = int.from_bytes(first[:8], "little")
    if length > MAX_HEADER_BYTES or 8 + length > file_size:
        raise _damaged(repo_id, file)
    header = first[8 : 8 + length] if len(first) >= 8 + length else read_range(8, 7 + length)
    return parse_header(repo_id, file, first[:8], header, file_size)


def shards(repo_id: str, index_text: bytes) -> dict[str, str]:
    """{tensor: shard file} of a `model.safetensors.index.json`: plain file names inside the repo, a few of them."""
    refused = RefusedModel(
        f"The weights index of “{repo_id}” is not a list of safetensors files inside the repo, so none is fetched."
    )
    try:
        index = json.loads(index_text) if len(index_text) <= MAX_SETTINGS_BYTES else None
    except (ValueError, UnicodeDecodeError):
        raise refused from None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise refused
    if not all(isinstance(k, str) and isinstance(v, str) and SHARD.match(v) for k, v in weight_map.items()):
        raise refused
    if len(set(weight_map.values())) > MAX_SHARDS:
        raise refused
    return weight_map


def compare(repo_id: str, headers: list[Header], expected: dict, weight_map: dict | None = None) -> int:
    """The number of parameters the headers hold, once they are found to hold exactly the model's tensors:
    `expected` {name: (is floating, shape)} from the model built on the meta device. Only the counters BatchNorm
    keeps for training (`num_batches_tracked`) may be absent; any other tensor missing, extra, of another shape or
    of another kind (floating or integer) refuses the model, which is then never initialised at random."""
    found = {}
    for header in headers:
        for name, (dtype, shape) in header.tensors.items():
            if name in found or (weight_map is not None and weight_map.get(name) != header.file):
                raise _damaged(repo_id, header.file)
            found[name] = (dtype in FLOATING, shape)
    if weight_map is not None and set(weight_map) != set(found):
        raise _damaged(repo_id, headers[0].file)
    missing = [name for name in expected if name not in found and not name.endswith("num_batches_tracked")]
    extra = [name for name in found if name not in expected]
    wrong = [name for name in expected if name in found and found[name] != expected[name]]
    if missing or extra or wrong:
        raise RefusedModel(
            f"The weights of “{repo_id}” do not fit the architecture its config describes ({len(missing)} tensors "
            f"missing, {len(extra)} unexpected, {len(wrong)} of another shape or kind), so it is not analysed: a "
            "model is never filled with random weights here."
        )
    return sum(math.prod(shape) for _, shape in found.values())


def expected_tensors(model) -> dict:
    """{name: (is floating, shape)} of a model's state dict (built on the meta device)."""
    return {name: (tensor.is_floating_point(), tuple(tensor.shape)) for name, tensor in model.state_dict().items()}
