"""The curvature of each block: the top eigenvalue and the trace of the Hessian restricted to one block's parameters
(its diagonal block H_bb), by depth, MSA blocks marked, so that where a model's curvature sits can be read block by
block (the paper's "MSAs flatten the loss landscape", Fig. 1 and 4, seen per block; docs/paper.md §6).

A block owns the trainable parameters under the module it is named after (`Block.name`, as `analysis.blocks` finds
it: a whole residual block of a CNN or AlterNet, the attention or the MLP of a transformer layer); a parameter under
two blocks' modules belongs to the first. The parameters of no block (stems, heads, embeddings, and a transformer
layer's norms) are the `rest`, measured the same way. The blocks and the rest partition the parameters, so their
traces add up to the whole Hessian's (a block-diagonal restriction keeps the diagonal), each to its own 95% interval.
"""

import warnings
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from . import shared
from .blocks import describe_blocks
from .hessian import HessianOperator, _lanczos_extremes, hessian_loss, trace_of
from .shared import AnalysisResult, analysis_mode


def block_parameters(model: nn.Module, adapter=None) -> tuple[list, list[list[nn.Parameter]], list[nn.Parameter]]:
    """(blocks, each block's trainable parameters, the rest's): see the module docstring."""
    adapter = describe_blocks(model, adapter)
    modules = dict(model.named_modules())
    trainable = [p for p in model.parameters() if p.requires_grad]
    claimed: set[int] = set()
    owned = []
    for block in adapter.blocks:
        module = modules.get(block.name) if block.name else None
        found = [] if module is None or module is model else [p for p in module.parameters() if p.requires_grad]
        mine = [p for p in found if id(p) not in claimed]
        claimed.update(id(p) for p in mine)
        owned.append(mine)
    return adapter.blocks, owned, [p for p in trainable if id(p) not in claimed]


@dataclass
class BlockCurvatureResult(AnalysisResult):
    """Block i (`kinds[i]`, `names[i]`, `parameters[i]` trainable parameters) on minibatch b: `top_eigenvalues[b, i]`
    the largest eigenvalue of H_bb (Lanczos error bound `residuals[b, i]`) and `traces[b, i]` ± `half_widths[b, i]`
    its trace (95%); `converged[b, i]` where both stops were reached. NaN for a block that owns no parameters (the
    zoo's stem and head name the whole model: their parameters are the rest's). `rest_*`: the same of the parameters
    of no block. `num_hvps`: the products of every block and minibatch, each of one block's parameters."""

    kinds: list[str]
    names: list[str]
    parameters: list[int]
    top_eigenvalues: np.ndarray
    residuals: np.ndarray
    traces: np.ndarray
    half_widths: np.ndarray
    converged: np.ndarray
    rest_parameters: int
    rest_top_eigenvalues: np.ndarray
    rest_traces: np.ndarray
    rest_half_widths: np.ndarray
    num_hvps: int
    weight_decay: float = 0.0
    penalty: str = "reference"
    batchnorm: str = "train"


def block_curvature(
    model: nn.Module,
    data,
    *,
    adapter=None,
    loss_fn=None,
    weight_decay: float = 0.0,
    penalty: str = "reference",
    batchnorm: str = "train",
    tol: float = 1e-3,
    lanczos_steps: int = 100,
    rtol: float = 1e-2,
    min_samples: int = 10,
    max_samples: int = 1000,
    deflation_steps: int = 30,
    max_batches: int | None = None,
    seed: int = 0,
    device: str | torch.device | None = None,
    progress: bool = False,
) -> BlockCurvatureResult:
    """The top eigenvalue (Lanczos to `tol`, at most `lanczos_steps`) and the trace (`analysis.hessian.trace_of`, the
    deflated estimator to `rtol`) of each block's diagonal Hessian block, and of the rest's, on every minibatch of
    `data` (each minibatch's gradient graph built once, shared by every block). Warns where a stop was not
    reached, naming the blocks."""
    blocks, owned, rest = block_parameters(model, adapter)
    groups = [*owned, rest]
    trace_options = dict(rtol=rtol, min_samples=min_samples, max_samples=max_samples, deflation_steps=deflation_steps)
    tops, residuals, traces, widths, converged, num_hvps = [], [], [], [], [], 0
    with analysis_mode(model, batchnorm=batchnorm, device=device) as device:
        batches = shared.batches(data, max_batches=max_batches, enabled=progress, desc="block curvature")
        for index, (inputs, targets) in enumerate(batches):
            whole = HessianOperator(
                model,
                [(inputs.to(device), targets.to(device))],
                loss_fn=loss_fn,
                weight_decay=weight_decay,
                penalty=penalty,
            )
            row = [[np.nan] * 5 for _ in groups]
            for position, parameters in enumerate(groups):
                if not parameters:
                    continue
                block = whole.restricted(parameters)
                steps = min(lanczos_steps, block.dimension)
                top = _lanczos_extremes(block, top_k=1, tol=tol, steps=steps, seed=seed + index)
                with warnings.catch_warnings():  # one warning naming every block follows
                    warnings.simplefilter("ignore")
                    trace = trace_of(block, seed=seed + index, **trace_options)
                row[position] = [top.eigenvalues[0], top.residuals[0], trace.trace, trace.half_width, 0.0]
                row[position][4] = float(top.converged and trace.converged)
                num_hvps += block.num_hvps
            row = np.array(row, dtype=float)
            tops.append(row[:, 0])
            residuals.append(row[:, 1])
            traces.append(row[:, 2])
            widths.append(row[:, 3])
            converged.append(row[:, 4] == 1.0)
    if not tops:
        raise ValueError("the data gave no batches")
    tops, residuals, traces, widths, converged = map(np.array, (tops, residuals, traces, widths, converged))
    result = BlockCurvatureResult(
        [b.kind for b in blocks],
        [b.name for b in blocks],
        [sum(p.numel() for p in ps) for ps in owned],
        tops[:, :-1],
        residuals[:, :-1],
        traces[:, :-1],
        widths[:, :-1],
        converged[:, :-1],
        sum(p.numel() for p in rest),
        tops[:, -1],
        traces[:, -1],
        widths[:, -1],
        num_hvps,
        weight_decay,
        penalty,
        batchnorm,
    )
    unreached = [name for name, ps, ok in zip(result.names, owned, converged[:, :-1].T) if ps and not ok.all()]
    if rest and not converged[:, -1].all():
        unreached.append("the rest")
    if unreached:
        warnings.warn(
            f"the block curvature did not reach its stops (Lanczos tol={tol:g}, trace rtol={rtol:g}) for "
            f"{', '.join(unreached)}: their values are less accurate (see residuals and half_widths)",
            stacklevel=2,
        )
    return result


# --- as the analysis commands run it (analysis.registry) -------------------------------------------------------


def curvature_analysis(model: nn.Module, inputs, settings, *, on_partial=None, **common) -> BlockCurvatureResult:
    return block_curvature(
        model,
        inputs.train(),
        adapter=inputs.adapter,
        **hessian_loss(settings),
        tol=settings.hessian_tol,
        lanczos_steps=settings.lanczos_steps,
        rtol=settings.trace_rtol,
        max_samples=settings.trace_max_samples,
        deflation_steps=settings.deflation_steps,
        max_batches=settings.hessian_batches,
        seed=settings.seed,
        **common,
    )


def _over_minibatches(values: np.ndarray) -> np.ndarray:
    """Each block's mean over minibatches (NaN for a block without parameters, without numpy's warning)."""
    values = np.asarray(values, dtype=float)
    counts = np.isfinite(values).sum(axis=0)
    return np.where(counts > 0, np.nansum(values, axis=0) / np.maximum(counts, 1), np.nan)


def plot_curvature(result: BlockCurvatureResult, axes=None):
    """The top eigenvalue and the trace of each block's Hessian by depth (means over minibatches, the trace with its
    95% interval), MSA and downsampling blocks shaded."""
    from matplotlib.ticker import MaxNLocator

    if axes is None:
        _, axes = shared.row_of_axes(2, 5, 3.5)
    tops, traces = _over_minibatches(result.top_eigenvalues), _over_minibatches(result.traces)
    widths = np.sqrt(np.nansum(np.asarray(result.half_widths, dtype=float) ** 2, axis=0)) / len(result.traces)
    shared.plot_by_depth(
        tops, result.kinds, axes[0], ylabel="top eigenvalue of the block", title="Curvature per block", color="tab:red"
    )
    shared.plot_by_depth(
        traces, result.kinds, axes[1], ylabel="trace of the block", title="Hessian trace per block", color="tab:blue"
    )
    axes[1].errorbar(np.arange(len(traces)), traces, yerr=widths, fmt="none", color="tab:blue", capsize=2)
    for ax in axes:
        ax.set_xlabel("block (0: the stem, counted with the rest)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # blocks, not fractions of one
    return axes[0].figure


def curvature_figure(result: BlockCurvatureResult):
    return plot_curvature(result)


def kind_means(result: BlockCurvatureResult, values: np.ndarray) -> dict[str, float]:
    """{block kind: the mean over its blocks of `values` (one per block)}, kinds in order of depth."""
    kinds = np.asarray(result.kinds)
    found = {}
    for kind in dict.fromkeys(result.kinds):
        chosen = values[(kinds == kind) & np.isfinite(values)]
        if chosen.size:
            found[kind] = float(chosen.mean())
    return found


def curvature_summary(result: BlockCurvatureResult) -> str:
    tops = kind_means(result, _over_minibatches(result.top_eigenvalues))
    traces = _over_minibatches(result.traces)
    total = np.nansum(traces) + np.nanmean(result.rest_traces) if result.rest_parameters else np.nansum(traces)
    shares = {kind: np.nansum(traces[np.asarray(result.kinds) == kind]) / total for kind in tops}
    parts = [f"{kind} λmax {top:.3g} ({100 * shares[kind]:.0f}% of the trace)" for kind, top in tops.items()]
    text = "hessian-blocks: mean top eigenvalue per block by kind: " + ", ".join(parts)
    if result.rest_parameters:
        text += f"; the rest (stem, head, norms) {100 * np.nanmean(result.rest_traces) / total:.0f}%"
    unreached = int((~result.converged).sum())
    return text + (f" (a stop not reached on {unreached} block-minibatches)" if unreached else "")


def curvature_estimate(costs: dict, settings) -> tuple[float, str] | None:
    """An upper bound: every Lanczos step and trace sample allowed for every block, as many as a whole product each
    (a block's product is cheaper: its backward stops at the block)."""
    if "hvp" not in costs or "num_blocks" not in costs:
        return None
    blocks, batches = costs["num_blocks"] + 1, settings.hessian_batches
    per_block = settings.lanczos_steps + settings.deflation_steps + settings.trace_max_samples
    how = (
        f"at most {shared.minibatches(batches)} × {blocks} parameter groups × ({settings.lanczos_steps} "
        f"+ {settings.deflation_steps} Lanczos steps + {settings.trace_max_samples} samples), about "
        f"{costs['hvp']:.2g} s per Hessian-vector product"
    )
    return batches * blocks * per_block * costs["hvp"], how


def curvature_by_depth(found: dict[str, BlockCurvatureResult]):
    tops = {name: _over_minibatches(r.top_eigenvalues) for name, r in found.items()}
    positive = all((values[np.isfinite(values)] > 0).all() for values in tops.values())
    return shared.by_depth_figure(
        {name: (values, found[name].kinds) for name, values in tops.items()},
        ylabel="top eigenvalue of the block's Hessian",
        title="Curvature per block by depth: where the sharpness sits",
        log=positive,  # spans decades between blocks; linear where a block's top is not positive
    )


def block_traces_by_depth(found: dict[str, BlockCurvatureResult]):
    return shared.by_depth_figure(
        {name: (_over_minibatches(r.traces), r.kinds) for name, r in found.items()},
        ylabel="trace of the block's Hessian",
        title="Hessian trace per block by depth",
    )
