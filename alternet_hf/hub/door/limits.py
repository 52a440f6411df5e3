"""The door's limits, each an environment variable with a default sized for a 2-vCPU, 16 GB CPU Space."""

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Limit:
    variable: str
    default: float
    unit: str  # how the value is written in a sentence: "{value} {unit}"
    example: str

    def value(self) -> float:
        """The variable's value, else the default; a clear `ValueError` for a value that is not a positive number."""
        text = os.environ.get(self.variable, "").strip()
        if not text:
            return self.default
        try:
            number = float(text)
        except ValueError:
            raise ValueError(f"{self.variable}={text!r} is not a number (e.g. {self.example})") from None
        if not number > 0 or number != number or number == float("inf"):
            raise ValueError(f"{self.variable} must be a number above 0, not {text}")
        return number


PARAMETERS = Limit("ALTERNET_MAX_PARAMETERS", 100e6, "parameters", "300e6")
DOWNLOAD_MB = Limit("ALTERNET_MAX_DOWNLOAD_MB", 800.0, "MB", "2000")
INPUT_SIZE = Limit("ALTERNET_MAX_INPUT_SIZE", 448.0, "px", "640")
GFLOPS = Limit("ALTERNET_MAX_GFLOPS", 100.0, "GFLOPs per image", "400")
WORKER_MEMORY_GB = Limit("ALTERNET_WORKER_MEMORY_GB", 6.0, "GB", "12")
TIME_LIMIT = Limit("ALTERNET_SPACE_TIME_LIMIT", 180.0, "s", "600")
LIMITS = (PARAMETERS, DOWNLOAD_MB, INPUT_SIZE, GFLOPS, WORKER_MEMORY_GB, TIME_LIMIT)

# Not settable: no honest config, image-processor file or index is near these, and a safetensors header of a
# 300 M parameter model is well under a megabyte.
MAX_SETTINGS_BYTES = 1 << 20
MAX_HEADER_BYTES = 16 << 20
MAX_SHARDS = 64
