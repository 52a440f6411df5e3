"""The models: configurations and modeling files (copied beside the weights for `trust_remote_code=True`, so they
import only each other), the blocks each model is made of, the presets that name every size, and timm's view of them.

Nothing here imports anything else of the package but `alternet_hf.utils`.
"""
