"""`analysis.hessian` against PyHessian (amirgholami/PyHessian) on one model and one fixed batch, in one process: per
quantity, both values, both counts of Hessian-vector products and both times. BatchNorm in eval mode (PyHessian puts
the model there), no weight decay, cross-entropy; both sides use the math attention kernel, which alone has a second
derivative.

PyHessian is GPL: it is installed from the package index at run time into a side folder (`install_peer`) and imported
from there by this benchmark alone, never vendored and never imported by the library or its tests.
"""

import contextlib
import functools
import importlib
import math
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from .analyses import _model_and_images
from .timing import torch_threads

PEER = "pyhessian==0.1"


def install_peer(folder: Path) -> Path:
    """PyHessian in `folder` (pip's --target, without dependencies: it needs only torch and numpy, both here)."""
    folder = Path(folder)
    if not (folder / "pyhessian" / "hessian.py").is_file():
        command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(folder), PEER]
        subprocess.run(command, check=True)
    return folder


def import_peer(folder: Path):
    """(PyHessian's `hessian` module from `folder`, a dict whose "hvps" counts its Hessian-vector products)."""
    sys.path.insert(0, str(folder))
    peer = importlib.import_module("pyhessian.hessian")  # the module: the package's `hessian` is its class

    counter = {"hvps": 0}
    product = peer.hessian_vector_product

    def counted(*args):
        counter["hvps"] += 1
        return product(*args)

    peer.hessian_vector_product = counted  # every product of its eigenvalues, trace and density goes through it
    return peer, counter


class _Logits(nn.Module):
    """The zoo model as PyHessian calls it: `model(inputs)` returning the logits (in float32)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, inputs):
        from analysis.shared import logits_of

        return logits_of(self.model(inputs)).float()


def _row(quantity: str, peer: dict, ours: dict) -> dict:
    return {"quantity": quantity, "peer": peer, "ours": ours}


def _clock(run):
    started = time.perf_counter()
    value = run()
    return value, time.perf_counter() - started


def compare_with_peer(
    model_source: str,
    *,
    peer_folder: Path | None,
    dataset: str = "digits",
    batch_size: int = 64,
    top_n: int = 3,
    density_steps: int = 32,
    trace_rtol: float = 1e-2,
    threads: int | None = None,
    seed: int = 0,
    overrides: dict | None = None,
) -> dict:
    """Both tools on `model_source` (a zoo preset or model folder) and the first `batch_size` training images of
    `dataset` (evaluated, not augmented): the top eigenvalue, the top `top_n`, the trace (PyHessian to its own stop,
    ours to a 95% half-width of `trace_rtol`, the default 1%; PyHessian's estimator projected to that half-width; and
    ours held to PyHessian's count of products), and the SLQ density (one vector of `density_steps` Lanczos steps).
    Without `peer_folder`, ours alone."""
    from alternet_hf.utils import machine
    from analysis import hessian

    model, batch = _model_and_images(model_source, dataset, "train", batch_size, None, overrides or {})
    setup = dict(batchnorm="eval", seed=seed)
    rows = []
    with torch_threads(threads), sdpa_kernel(SDPBackend.MATH):
        peer = _peer_tool(peer_folder, model, batch) if peer_folder is not None else None
        for count in (1, top_n):
            top = functools.partial(hessian.top_eigenvalues, model, batch, top_k=count, tol=1e-3, **setup)
            ours, seconds = _clock(top)
            mine = {"values": ours.eigenvalues.tolist(), "hvps": ours.num_hvps, "seconds": seconds}
            rows.append(_row(f"top-{count} eigenvalue{'s' * (count > 1)}", peer and peer.eigenvalues(count), mine))
        ours, seconds = _clock(lambda: hessian.hessian_trace(model, batch, rtol=trace_rtol, **setup))
        mine = _trace_numbers(ours, seconds)
        theirs = peer and peer.trace()
        rows.append(_row("trace", theirs, mine))
        if theirs is not None and "failed" not in theirs:
            rows.append(_row(f"trace to ±{trace_rtol:.0%}", _projected_to(theirs, trace_rtol), mine))
        if theirs is not None:  # ours held to the products PyHessian's stop took
            budget = theirs["hvps"]
            with warnings.catch_warnings():  # the stop is not the point here: the interval at that price is
                warnings.simplefilter("ignore")
                ours, seconds = _clock(
                    lambda: hessian.hessian_trace(
                        model,
                        batch,
                        rtol=0.0,  # never stops early: Lanczos runs its steps, then every sample allowed
                        deflation_steps=budget // 2,
                        min_samples=budget - budget // 2,
                        max_samples=budget - budget // 2,
                        **setup,
                    )
                )
            rows.append(_row("trace, ours at PyHessian's products", None, _trace_numbers(ours, seconds)))
        ours, seconds = _clock(
            lambda: hessian.spectral_density(model, batch, num_vectors=1, num_steps=density_steps, **setup)
        )
        mine = {"values": [float(np.nanmin(ours.nodes)), float(np.nanmax(ours.nodes))], "hvps": ours.num_hvps}
        rows.append(_row("density (SLQ)", peer and peer.density(density_steps), mine | {"seconds": seconds}))
    return {
        "model": model_source,
        "parameters": sum(p.numel() for p in model.parameters()),
        "batch_size": batch_size,
        "dataset": dataset,
        "threads": threads or torch.get_num_threads(),
        "machine": machine(),
        "peer": PEER if peer_folder is not None else None,
        "rows": rows,
    }


def _projected_to(theirs: dict, rtol: float) -> dict:
    """What PyHessian's estimator (plain Hutchinson) would take to a 95% half-width of `rtol` of its estimate: the
    samples its own spread asks for, (1.96 s / (rtol |mean|))², at its measured seconds per product: a projection, not
    a run, since on a trained network that is thousands of products."""
    mean, spread = theirs["values"][0], theirs["sample_sd"]
    products = math.ceil((1.96 * spread / (rtol * abs(mean))) ** 2)
    seconds = products * theirs["seconds"] / theirs["hvps"]
    return {"values": [mean], "hvps": products, "seconds": seconds, "projected": True}


def _trace_numbers(result, seconds: float) -> dict:
    return {
        "values": [result.trace],
        "half_width": result.half_width,
        "converged": result.converged,
        "hvps": result.num_hvps,
        "seconds": seconds,
        "deflation_dimension": result.deflation_dimension,
    }


class _PeerTool:
    """PyHessian's `hessian` on one model and batch, each call timed and its products counted."""

    def __init__(self, module, counter, model, batch):
        self.module, self.counter, self.model, self.batch = module, counter, _Logits(model), batch

    @contextlib.contextmanager
    def _measured(self, found: dict):
        torch.manual_seed(0)  # its random vectors come from torch's global generator
        self.counter["hvps"] = 0
        started = time.perf_counter()
        try:
            yield
        except Exception as error:  # noqa: BLE001 -- a peer's failure is a result of the comparison
            found["failed"] = f"{type(error).__name__}: {error}"
        found |= {"hvps": self.counter["hvps"], "seconds": time.perf_counter() - started}
        self.model.zero_grad(set_to_none=True)  # it backpropagates into .grad with a graph: free it

    def _tool(self):
        # a fresh tool per quantity, as a user makes one; its setup (a forward and backward) is in its time
        return self.module.hessian(self.model, F.cross_entropy, data=self.batch, cuda=False)

    def eigenvalues(self, count: int) -> dict:
        found = {}
        with self._measured(found):
            values, _ = self._tool().eigenvalues(top_n=count)
            found["values"] = [float(v) for v in values]
        return found

    def trace(self) -> dict:
        found = {}
        with self._measured(found):
            samples = self._tool().trace()
            # PyHessian reports no error; its own samples give one (Student's t, 95%)
            from analysis.hessian import _confidence

            found |= {"values": [float(np.mean(samples))], "half_width": _confidence(list(samples))[1]}
            found["sample_sd"] = float(np.std(samples, ddof=1))
            found["samples"] = len(samples)
        return found

    def density(self, steps: int) -> dict:
        found = {}
        with self._measured(found):
            eigenvalues, _ = self._tool().density(iter=steps, n_v=1)
            found["values"] = [float(np.min(eigenvalues)), float(np.max(eigenvalues))]
        return found


def _peer_tool(folder: Path, model, batch) -> _PeerTool:
    module, counter = import_peer(install_peer(folder))
    return _PeerTool(module, counter, model, batch)
