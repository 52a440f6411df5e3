"""What a GPU's training step costs in FLOPs, counted on the meta device, and the H100 figures the estimates and the
device check measure against."""

import torch

# The H100 estimate: the datasheet's dense bf16 peak, and the share of it assumed sustained (the engine's goal).
H100_BF16_FLOPS = 989e12
ASSUMED_UTILISATION = 0.08


def training_flops_per_image(preset: str, **overrides) -> float:
    """FLOPs of one training image (forward + backward) of the preset (full size unless `overrides` say otherwise) at
    its input size, counted by torch's FlopCounterMode on the meta device (shapes only: instant, no memory)."""
    from torch.utils.flop_counter import FlopCounterMode

    from alternet_hf.models.presets import create_model

    with torch.device("meta"):
        model = create_model(preset, **overrides)
        inputs = torch.randn(2, 3, model.config.image_size, model.config.image_size)
    with FlopCounterMode(display=False) as counter:
        model(inputs).logits.sum().backward()
    return counter.get_total_flops() / len(inputs)
