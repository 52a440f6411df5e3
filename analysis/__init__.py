"""The measurements of "How Do Vision Transformers Work?" (Park & Kim, ICLR 2022) as a library.

Each topic is a module with functions `fn(model, data, *, ..., device=None) -> SomethingResult`
(dataclasses of numpy arrays with `to_dict()`) and `plot_something(result, ax=None)`:

- `blocks`: any model as the sequence of tagged blocks (stem, conv, MSA, MLP, pool, head), found
  automatically for the zoo and the usual timm and transformers families; one pass feeding many analyses
- `fourier`: relative log amplitude of feature maps by frequency (`fourier_log_amplitude`)
- `variance`: feature-map variance by depth (`feature_map_variance`)
- `hessian`: top eigenvalues by Lanczos, Hutchinson trace, spectral density, max-eigenvalue spectra
- `landscape`: filter-normalised 1-D and 2-D loss landscapes
- `corruptions`: the 15 CIFAR-C corruptions on batched torch tensors
- `robustness`: CIFAR-100-C from three sources, evaluation per corruption and severity, frequency-band noise
- `lesion`: accuracy with each residual block removed
- `cka`: minibatch CKA between the blocks of one or two models
- `models`: any zoo, transformers or timm classifier loaded with its preprocessing (timm weights from local files)
- `compare`: every analysis of one model (per-block ones in one pass), and the figures with all models in one plot
- `claims`: the paper's claims decided on the models of a comparison; `report`: the comparison written to disk
- `runner`: the analyses of models read from disk or the Hub on a dataset, written as JSON and figures (what
  `alternet-analyze` and `alternet-compare` run)
"""

from . import (  # noqa: F401  (the package is its modules, each as `analysis.<module>`)
    blocks,
    cka,
    claims,
    compare,
    corruptions,
    fourier,
    hessian,
    landscape,
    lesion,
    models,
    report,
    robustness,
    runner,
    variance,
)
