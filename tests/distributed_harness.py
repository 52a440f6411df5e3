"""Run by torchrun in the distributed tests: train, then save this rank's final weights."""

import json
import os
import sys
from pathlib import Path

from safetensors.torch import save_file

from alternet_hf.recipe import TrainingConfig
from alternet_hf.training import train

if __name__ == "__main__":
    config, out = TrainingConfig(**json.loads(sys.argv[1])), Path(sys.argv[2])
    result = train(config)
    rank = int(os.environ.get("RANK", 0))  # set by torchrun
    state = {k: v.detach().contiguous() for k, v in result.model.state_dict().items()}
    save_file(state, str(out / f"rank{rank}.safetensors"))
