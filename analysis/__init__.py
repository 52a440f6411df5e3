"""The measurements of "How Do Vision Transformers Work?" (Park & Kim, ICLR 2022) as a library.

One module per topic, each `fn(model, data, *, ..., device=None) -> SomethingResult` (dataclasses of numpy arrays
with `to_dict()`) and `plot_something(result, ax=None)`: the modules are listed in CONTRIBUTING.md's layout and
docs/analyses.md, each says in its docstring what it holds. `analysis.<module>` is imported when first used, so that
the commands read the registry without importing torch.
"""

from alternet_hf.utils import lazy_package

__getattr__ = lazy_package(__name__)
