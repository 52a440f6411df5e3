"""The measurements of "How Do Vision Transformers Work?" (Park & Kim, ICLR 2022) as a library.

Each topic is a module with functions `fn(model, data, *, ..., device=None) -> SomethingResult`
(dataclasses of numpy arrays with `to_dict()`) and `plot_something(result, ax=None)`:

- `blocks`: any model as the sequence of tagged blocks (stem, conv, MSA, MLP, pool, head), found
  automatically for the zoo and the usual timm and transformers families; one pass feeding many analyses
- `fourier`: relative log amplitude of feature maps by frequency (`fourier_log_amplitude`)
- `variance`: feature-map variance by depth (`feature_map_variance`)
- `hessian`: top eigenvalues by Lanczos, Hutchinson trace, spectral density, max-eigenvalue spectra
- `landscape`: filter-normalised 1-D and 2-D loss landscapes
- `cifar_c`, `corruptions`: CIFAR-C's definition, and its 15 corruptions on batched torch tensors
- `robustness`: CIFAR-100-C from three sources, evaluation per corruption and severity, frequency-band noise
- `lesion`: accuracy with each residual block removed
- `cka`: minibatch CKA between the blocks of one or two models
- `models`: any zoo, transformers or timm classifier loaded with its preprocessing (timm weights from local files)
- `registry`: every analysis as the commands run it, and the settings of each (each a flag)
- `inputs`, `runner`: the analyses of models from disk or the Hub on a dataset, written as JSON and figures (what
  `alternet-analyze` and `alternet-compare` run)
- `claims`: the paper's claims decided on the models of a comparison; `report`: the comparison written to disk

`analysis.<module>` is imported when first used, so that the commands read the registry without importing torch.
"""

from alternet_hf.utils import lazy_package

__getattr__ = lazy_package(__name__)
