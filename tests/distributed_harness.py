"""Run by torchrun in the distributed tests: train (`--resume` after the two arguments: resume), then save this rank's
final weights. A streamed run first saves the rows of the split this rank's loader reads in the first epoch
(`rows<rank>.json`)."""

import json
import os
import sys
from pathlib import Path

import torch
from accelerate import PartialState
from safetensors.torch import save_file

from alternet_hf.data.augmentation import SeededAugmentation
from alternet_hf.data.sources import stream_image_classification
from alternet_hf.data.streaming import stream_loader
from alternet_hf.training.engine import train
from alternet_hf.training.recipe import TrainingConfig


class RowNumbers(SeededAugmentation):
    """An "augmentation" whose pixels are the row's number in the split: which rows a batch holds."""

    def __init__(self):
        super().__init__(transform=None, seed=0)

    def __call__(self, image, index: int):
        return torch.tensor(float(index)).view(1, 1, 1)


if __name__ == "__main__":
    config, out = TrainingConfig(**json.loads(sys.argv[1])), Path(sys.argv[2])
    rank = int(os.environ.get("RANK", 0))  # set by torchrun
    if config.streaming:
        PartialState(cpu=True)  # as the engine's Accelerator starts it (ACCELERATE_USE_CPU)
        split = stream_image_classification(config.dataset, split=config.train_split)
        loader = stream_loader(config, split, RowNumbers(), source=config.dataset)
        loader.set_epoch(0)
        rows = [int(row) for batch in loader for row in batch["pixel_values"].flatten()]
        (out / f"rows{rank}.json").write_text(json.dumps(rows))
    result = train(config, resume="--resume" in sys.argv[3:])
    state = {k: v.detach().contiguous() for k, v in result.model.state_dict().items()}
    save_file(state, str(out / f"rank{rank}.safetensors"))
