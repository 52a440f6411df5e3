"""The paper's claims (docs/paper.md), decided on the models of a comparison, with the numbers that decide them.

A check counts only where its difference exceeds `NOISE_MULTIPLE` standard errors (each claim's `rule` says of what
spread), else the claim reads `WITHIN_NOISE`; one whose analysis or kind of model is missing is not decidable. A
model's `role` comes from its block kinds; downsampling blocks (`pool`) are reported apart from the convs, and a model
below `competence` × chance accuracy is named with every verdict that rests on it.
"""

from dataclasses import asdict, dataclass, field

import numpy as np

from .shared import minibatches

HOLDS, FAILS, MIXED, UNDECIDED = "holds", "does not hold", "mixed", "not decidable"
WITHIN_NOISE = "undecided — the difference is within the noise"
NOISE_MULTIPLE = 2.0  # a difference counts when it exceeds this many standard errors (about 95%)
COMPETENCE = 2.0  # a model below this multiple of chance accuracy is named as near chance


def decide(difference: float, standard_error: float) -> bool | None:
    """True if `difference` is above `NOISE_MULTIPLE` standard errors, False if below minus that, else None."""
    margin = NOISE_MULTIPLE * (standard_error if np.isfinite(standard_error) else 0.0)
    if difference > margin:
        return True
    if difference < -margin:
        return False
    return None


def mean_and_error(values) -> tuple[float, float]:
    """Mean and its standard error (0 for a single value: nothing to estimate a spread from)."""
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    if values.size < 2:
        return (float(values.mean()) if values.size else float("nan")), 0.0
    return float(values.mean()), float(values.std(ddof=1) / np.sqrt(values.size))


def larger_error(over_blocks: float, over_images: float | None, blocks: int) -> tuple[float, str]:
    """The standard error a per-block statistic is judged by: the larger of its spread over the blocks (how much
    blocks of one kind differ; none for a single block) and over the images (how much the mean would move on
    other test images; none from one image), and what it is."""
    candidates = {}
    if blocks > 1:
        candidates["over blocks"] = over_blocks
    if over_images is not None and np.isfinite(over_images):
        candidates["over images"] = over_images
    if not candidates:
        return 0.0, "no spread: decided by sign"
    source = max(candidates, key=candidates.get)
    return float(candidates[source]), source


def binomial_error(accuracy: float, samples: int) -> float:
    """Standard error of an accuracy measured on `samples` images."""
    return float(np.sqrt(max(accuracy * (1 - accuracy), 0.0) / max(samples, 1)))


@dataclass
class Claim:
    """One claim: what the paper says (`statement`, `source`), how it is decided here (`rule`), the
    outcome of each check (`checks`: description -> True/False), the evidence lines and the numbers."""

    key: str
    statement: str
    source: str
    rule: str
    checks: dict[str, bool | None] = field(default_factory=dict)  # None: within the noise
    evidence: list[str] = field(default_factory=list)
    numbers: dict = field(default_factory=dict)
    below_competence: list[str] = field(default_factory=list)  # models it rests on that are near chance

    @property
    def verdict(self) -> str:
        outcomes = list(self.checks.values())
        if not outcomes:
            return UNDECIDED
        if True in outcomes and False in outcomes:
            return MIXED
        if None in outcomes:
            return WITHIN_NOISE
        return HOLDS if all(outcomes) else FAILS

    def to_dict(self) -> dict:
        return {**asdict(self), "verdict": self.verdict}


def role(kinds: list[str]) -> str:
    has_msa, has_conv = "msa" in kinds, "conv" in kinds
    return "hybrid" if has_msa and has_conv else "transformer" if has_msa else "cnn" if has_conv else "other"


def block_changes(result, kind: str) -> np.ndarray:
    """Each block's change of ΔlogA at π (state after minus state before), for the blocks of `kind`."""
    kinds = np.asarray(result.kinds[1:])
    return np.asarray(result.delta_log_amplitude)[:, -1][kinds == kind]


def variance_ratios(values, kinds: list[str], kind: str) -> np.ndarray:
    """Variance after each block of `kind` over the variance before it."""
    values, kinds = np.asarray(values, dtype=float), np.asarray(kinds)
    positions = np.flatnonzero(kinds[1:] == kind) + 1
    return values[positions] / values[positions - 1]


def _geometric_mean(values: np.ndarray) -> float:
    values = values[np.isfinite(values) & (values > 0)]
    return float(np.exp(np.log(values).mean())) if values.size else float("nan")


def below_competence(results: dict[str, dict], summaries: dict[str, dict], competence: float = COMPETENCE) -> dict:
    """{model: (accuracy, threshold)} for the models whose test accuracy is below `competence` × chance
    (1 / the number of labels, from the summaries' `num_labels`)."""
    found = {}
    for name, analyses in results.items():
        labels = summaries.get(name, {}).get("num_labels")
        if "accuracy" in analyses and labels:
            threshold = min(competence / labels, 1.0)
            if analyses["accuracy"].accuracy < threshold:
                found[name] = (analyses["accuracy"].accuracy, threshold)
    return found


def evaluate_claims(
    results: dict[str, dict], summaries: dict[str, dict] | None = None, *, competence: float = COMPETENCE
) -> list[Claim]:
    """Decide every claim on `results` ({model: {analysis: result}}, each model's as `analysis.runner.analyse`
    returns it); `summaries` ({model: {"kinds": ..., "num_labels": ...}}) default to the kinds the results carry.
    Each claim names the models it rests on whose accuracy is below `competence` × chance."""
    summaries = summaries or {name: {"kinds": _kinds_of(found)} for name, found in results.items()}
    roles = {name: role(summary["kinds"]) for name, summary in summaries.items()}
    weak = below_competence(results, summaries, competence)
    claims = [
        _filter_claim(results, ("msa",), low_pass=True),
        _filter_claim(results, ("conv", "mlp"), low_pass=False),
        _variance_claim(results, ("msa",), reduces=True),
        _variance_claim(results, ("conv", "mlp"), reduces=False),
        _hessian_flatness(results, roles),
        _negative_eigenvalues(results, roles),
        _trace_flatness(results, roles),
        _block_flatness(results),
        _landscape_flatness(results, roles),
        _high_frequency_robustness(results, roles),
        _stage_end_lesion(results, roles),
        _ranking(results, roles, "accuracy"),
        _ranking(results, roles, "robustness"),
    ]
    for claim in claims:
        claim.below_competence = [name for name in weak if any(name in check.split() for check in claim.checks)]
    return claims


def _measured(results: dict[str, dict], analysis: str) -> list[tuple[str, object]]:
    """(model, result) of every model whose results hold `analysis`."""
    return [(name, found[analysis]) for name, found in results.items() if analysis in found]


def _kinds_of(found: dict) -> list[str]:
    for analysis in ("fourier", "variance"):
        if analysis in found:
            return list(found[analysis].kinds[1:])
    if "lesion" in found:
        return list(found["lesion"].kinds)
    if "cka" in found:
        return list(found["cka"].kinds_a)
    return []


def _filter_claim(results, kinds: tuple[str, ...], *, low_pass: bool) -> Claim:
    claim = Claim(
        key="msa-low-pass" if low_pass else "conv-high-pass",
        statement=(
            "MSAs are low-pass filters: they reduce the high-frequency amplitude of feature maps"
            if low_pass
            else "Convs and MLPs are high-pass filters: they amplify high frequencies"
        ),
        source="Fig. 2 and 8; docs/paper.md §6 (Fourier ΔlogA)",
        rule=(
            f"the mean change of ΔlogA at π over a model's {'/'.join(kinds)} blocks is "
            f"{'below' if low_pass else 'above'} 0 by more than {NOISE_MULTIPLE:g} standard errors (over its blocks or "
            "over the test images, whichever is larger; downsampling blocks apart)"
        ),
    )
    for name, result in _measured(results, "fourier"):
        for kind in kinds:
            changes = block_changes(result, kind)
            if not changes.size:
                continue
            mean, over_blocks = mean_and_error(changes)
            over_images = getattr(result, "kind_change_error", {}).get(kind)
            error, spread_of = larger_error(over_blocks, over_images, changes.size)
            claim.checks[f"{name} {kind}"] = decide(-mean if low_pass else mean, error)
            claim.numbers.setdefault(name, {})[kind] = {
                "mean": mean,
                "standard_error": error,
                "standard_error_over_blocks": over_blocks,
                "standard_error_over_images": over_images,
                "blocks": int(changes.size),
                "values": changes.tolist(),
            }
            claim.evidence.append(
                f"{name}: {kind.upper() if kind == 'msa' else kind} {mean:+.3f} ± {error:.3f} ({spread_of}) on "
                f"average over {changes.size} block{'s' if changes.size > 1 else ''}"
                + (f" ({changes.min():+.2f} … {changes.max():+.2f})" if changes.size > 1 else "")
            )
        pools = block_changes(result, "pool")
        if pools.size and not low_pass:
            claim.evidence.append(f"{name}: downsampling blocks (not counted) {pools.mean():+.3f} on average")
    return claim


def _variance_claim(results, kinds: tuple[str, ...], *, reduces: bool) -> Claim:
    claim = Claim(
        key="msa-reduce-variance" if reduces else "conv-increase-variance",
        statement=(
            "MSAs reduce the variance of feature maps (they ensemble and smooth them)"
            if reduces
            else "Convs and MLPs increase the variance of feature maps"
        ),
        source="Fig. 9; docs/paper.md §6 (feature-map variance)",
        rule=(
            f"the geometric mean of variance after / before a model's {'/'.join(kinds)} blocks is "
            f"{'below' if reduces else 'above'} 1 by more than {NOISE_MULTIPLE:g} standard errors of its log (over the "
            "blocks or the test images, whichever is larger; our definition, the reference notebook's in brackets)"
        ),
    )
    for name, result in _measured(results, "variance"):
        for kind in kinds:
            ratios = variance_ratios(result.variance, result.kinds, kind)
            if not ratios.size:
                continue
            ours = _geometric_mean(ratios)
            reference = (
                _geometric_mean(variance_ratios(result.reference_variance, result.kinds, kind))
                if result.reference_variance is not None
                else float("nan")
            )
            logs = np.log(ratios[np.isfinite(ratios) & (ratios > 0)])
            mean_log, over_blocks = mean_and_error(logs)
            over_images = getattr(result, "kind_log_ratio_error", {}).get(kind)
            error, spread_of = larger_error(over_blocks, over_images, logs.size)
            claim.checks[f"{name} {kind}"] = decide(-mean_log if reduces else mean_log, error)
            claim.numbers.setdefault(name, {})[kind] = {
                "ratio": ours,
                "reference_ratio": reference,
                "log_standard_error": error,
                "log_standard_error_over_blocks": over_blocks,
                "log_standard_error_over_images": over_images,
                "ratios": ratios.tolist(),
            }
            claim.evidence.append(
                f"{name}: {kind.upper() if kind == 'msa' else kind} ×{ours:.4g} (×/÷{np.exp(error):.3g}, {spread_of}; "
                f"reference definition ×{reference:.4g}) over {ratios.size} block{'s' if ratios.size > 1 else ''}"
                + (f", ×{ratios.min():.4g} … ×{ratios.max():.4g}" if ratios.size > 1 else "")
            )
    return claim


def variance_definitions_agree(results: dict[str, dict]) -> dict:
    """Per model and kind, the variance ratios under our definition and the reference notebook's on the
    same maps, and whether they point the same way (both above or both below 1): if they do, a
    difference from the paper comes from the models, not from the metric."""
    rows = {}
    for name, result in _measured(results, "variance"):
        if result.reference_variance is None:
            continue
        for kind in ("msa", "conv", "mlp", "pool"):
            ours = variance_ratios(result.variance, result.kinds, kind)
            if not ours.size:
                continue
            reference = variance_ratios(result.reference_variance, result.kinds, kind)
            rows[f"{name} {kind}"] = {
                "ours": ours.tolist(),
                "reference": reference.tolist(),
                "same_direction": bool(np.all((ours > 1) == (reference > 1))),
                "largest_relative_difference": float(np.max(np.abs(reference / ours - 1))),
            }
    return rows


def _pairs(roles: dict, measured, chosen=("transformer", "hybrid")):
    """(model, CNN) pairs among the `measured` models: each model of a `chosen` role against each CNN."""
    cnns = [n for n in measured if roles[n] == "cnn"]
    return [(other, cnn) for other in measured if roles[other] in chosen for cnn in cnns]


def _pair_checks(claim: Claim, roles: dict, key: str, *, larger: bool, chosen=("transformer", "hybrid")) -> Claim:
    """Check every (model, CNN) pair of `_pairs`: the model's `claim.numbers[key]` above (`larger`) or below the
    CNN's by more than `NOISE_MULTIPLE` standard errors of the difference; returns the claim."""
    for other, cnn in _pairs(roles, claim.numbers, chosen):
        a, b = claim.numbers[other], claim.numbers[cnn]
        difference = a[key] - b[key] if larger else b[key] - a[key]
        error = np.hypot(a["standard_error"], b["standard_error"])
        claim.checks[f"{other} {'>' if larger else '<'} {cnn}"] = decide(difference, error)
    return claim


def _hessian_flatness(results, roles) -> Claim:
    claim = Claim(
        key="msa-flat-hessian",
        statement="MSAs flatten the loss landscape: models with MSAs have smaller Hessian eigenvalues than CNNs",
        source="Fig. 1b and 4; docs/paper.md §6 (Hessian max-eigenvalue spectra)",
        rule=f"the mean over minibatches of the largest Hessian eigenvalue of each model with MSAs is below the "
        f"CNN's by more than {NOISE_MULTIPLE:g} standard errors of the difference",
    )
    for name, result in _measured(results, "hessian"):
        tops = np.asarray(result.eigenvalues, dtype=float)[:, 0]
        (mean, error), median = mean_and_error(tops), float(np.median(tops))
        claim.numbers[name] = {
            "median_top_eigenvalue": median,
            "mean_top_eigenvalue": mean,
            "standard_error": error,
            "minibatches": int(tops.size),
        }
        claim.evidence.append(
            f"{name} ({roles[name]}): λmax {mean:.4g} ± {error:.2g} (mean of {minibatches(tops.size)}, median "
            f"{median:.4g})"
        )
    return _pair_checks(claim, roles, "mean_top_eigenvalue", larger=False)


def _negative_eigenvalues(results, roles) -> Claim:
    claim = Claim(
        key="vit-negative-eigenvalues",
        statement="ViTs have negative Hessian eigenvalues (a non-convex loss) where CNNs have hardly any",
        source="Fig. 1b and 4; docs/paper.md §6 (negative values appear for ViTs)",
        rule=f"|most negative eigenvalue| / largest (per minibatch, then the mean) is larger for each ViT-like model "
        f"than for the CNN by more than {NOISE_MULTIPLE:g} standard errors of the difference",
    )
    for name, result in _measured(results, "hessian"):
        if not np.size(result.smallest_eigenvalues):
            continue
        smallest = np.asarray(result.smallest_eigenvalues, dtype=float)[:, 0]
        largest = np.abs(np.asarray(result.eigenvalues, dtype=float)[:, 0])
        ratio, error = mean_and_error(np.maximum(-smallest, 0.0) / largest)
        claim.numbers[name] = {
            "median_smallest_eigenvalue": float(np.median(smallest)),
            "negative_ratio": ratio,
            "standard_error": error,
        }
        claim.evidence.append(
            f"{name} ({roles[name]}): λmin {np.median(smallest):.4g} (median), |λmin|/λmax {ratio:.3g} ± {error:.2g}"
        )
    return _pair_checks(claim, roles, "negative_ratio", larger=True, chosen=("transformer",))


def _trace_flatness(results, roles) -> Claim:
    claim = Claim(
        key="msa-flat-trace",
        statement="MSAs flatten the loss landscape: models with MSAs have a smaller Hessian trace (the sum of every "
        "eigenvalue, the mean curvature) than CNNs",
        source="Fig. 1b and 4 summed over the whole spectrum; docs/paper.md §6 (hessian-trace)",
        rule=f"the mean over minibatches of the Hessian trace of each model with MSAs is below the CNN's by more than "
        f"{NOISE_MULTIPLE:g} standard errors of the difference (each the larger of the spread over minibatches and the "
        "trace estimator's own)",
    )
    for name, result in _measured(results, "hessian-trace"):
        traces = np.asarray(result.traces, dtype=float)
        mean, spread = mean_and_error(traces)
        estimator = float(np.sqrt(np.mean(np.square(result.standard_errors)) / traces.size))
        error = max(spread, estimator)
        claim.numbers[name] = {"mean_trace": mean, "standard_error": error, "minibatches": int(traces.size)}
        claim.evidence.append(
            f"{name} ({roles[name]}): tr H {mean:.4g} ± {error:.2g} (mean of {minibatches(traces.size)})"
        )
    return _pair_checks(claim, roles, "mean_trace", larger=False)


def _block_flatness(results) -> Claim:
    claim = Claim(
        key="msa-blocks-flat",
        statement="Within a model, MSA blocks are flatter than its Conv blocks: the Hessians of their own parameters "
        "have smaller top eigenvalues",
        source="Fig. 1b and 4 read block by block (hessian-blocks: the paper measures whole models)",
        rule=f"in each model with both, the mean over its MSA blocks of the top eigenvalue of the block's own Hessian "
        f"is below the mean over its Conv blocks by more than {NOISE_MULTIPLE:g} standard errors (over blocks)",
    )
    for name, result in _measured(results, "hessian-blocks"):
        tops, kinds = np.asarray(result.top_eigenvalues, dtype=float), np.asarray(result.kinds)
        per_block = np.array([np.nanmean(c) if np.isfinite(c).any() else np.nan for c in tops.T])  # over minibatches
        measured = np.isfinite(per_block)  # a block without parameters of its own has none
        msa, conv = per_block[(kinds == "msa") & measured], per_block[(kinds == "conv") & measured]
        if not msa.size or not conv.size:
            continue
        (msa_mean, msa_error), (conv_mean, conv_error) = mean_and_error(msa), mean_and_error(conv)
        error = float(np.hypot(msa_error, conv_error))
        claim.numbers[name] = {"msa_top": msa_mean, "conv_top": conv_mean, "standard_error": error}
        claim.evidence.append(
            f"{name}: block λmax MSA {msa_mean:.4g} ± {msa_error:.2g} ({msa.size} blocks), Conv {conv_mean:.4g} ± "
            f"{conv_error:.2g} ({conv.size})"
        )
        claim.checks[f"{name} msa < conv"] = decide(conv_mean - msa_mean, error)
    return claim


def landscape_rise(result) -> float:
    """Mean rise of the loss over the grid from its value at the trained weights: larger is sharper."""
    loss = np.asarray(result.loss, dtype=float)
    centre = loss[(len(result.coordinates) // 2,) * loss.ndim]
    return float(np.nanmean(loss - centre))


def _landscape_flatness(results, roles) -> Claim:
    claim = Claim(
        key="msa-flat-landscape",
        statement="MSAs flatten the loss landscape: the NLL + L2 surface of models with MSAs is flatter than a CNN's",
        source="Fig. 1a; docs/paper.md §6 (loss landscape)",
        rule="the mean rise of NLL + L2 over the grid from the trained weights is smaller than the CNN's (one surface "
        "per model: no spread to weigh the difference against)",
    )
    for name, result in _measured(results, "landscape"):
        rise = landscape_rise(result)
        claim.numbers[name] = {"mean_rise": rise, "protocol": result.protocol}
        claim.evidence.append(f"{name} ({roles[name]}): mean rise {rise:.4g} ({result.protocol} protocol)")
    for other, cnn in _pairs(roles, claim.numbers):
        claim.checks[f"{other} < {cnn}"] = claim.numbers[other]["mean_rise"] < claim.numbers[cnn]["mean_rise"]
    return claim


HIGH_FREQUENCIES = 0.7  # units of π: the bands where the paper's ViT loses least and ResNet most


def _high_frequency_robustness(results, roles) -> Claim:
    claim = Claim(
        key="msa-robust-high-frequency",
        statement="MSAs are robust to high-frequency noise, Convs vulnerable: a ViT loses less accuracy than a "
        "ResNet under high-frequency noise",
        source="Fig. 2b; docs/paper.md §6 (frequency-band noise)",
        rule=f"the mean Δaccuracy over noise bands ≥ {HIGH_FREQUENCIES}π of each ViT-like model is above (less "
        f"negative than) the CNN's by more than {NOISE_MULTIPLE:g} standard errors (over the bands) of the difference",
    )
    for name, result in _measured(results, "frequency-noise"):
        frequencies, delta = np.asarray(result.frequencies), np.asarray(result.delta_accuracy)
        high = delta[frequencies >= HIGH_FREQUENCIES - 1e-9]
        if not high.size:
            continue
        mean, error = mean_and_error(high)
        claim.numbers[name] = {
            "mean_high_frequency_delta": mean,
            "standard_error": error,
            "delta_accuracy": delta.tolist(),
        }
        claim.evidence.append(
            f"{name} ({roles[name]}): {100 * mean:+.1f} ± {100 * error:.1f} points at ≥ {HIGH_FREQUENCIES}π "
            f"({100 * delta[-1]:+.1f} at {frequencies[-1]:.1f}π)"
        )
    return _pair_checks(claim, roles, "mean_high_frequency_delta", larger=True, chosen=("transformer",))


def stage_ends(kinds: list[str]) -> list[int]:
    """Blocks that end a stage: those followed by a downsampling block or by the head (or the end)."""
    ends = []
    for index, kind in enumerate(kinds):
        following = kinds[index + 1] if index + 1 < len(kinds) else "head"
        if kind not in ("stem", "head", "pool") and following in ("pool", "head"):
            ends.append(index)
    return ends


def _stage_end_lesion(results, roles) -> Claim:
    claim = Claim(
        key="stage-end-msa-lesion",
        statement="MSAs at the end of a stage play a key role: removing one costs more accuracy than removing "
        "another block",
        source="Fig. 11 (lesion study); docs/paper.md §6 (lesion)",
        rule="for a multi-stage model with MSAs, the mean accuracy drop of its stage-end MSAs exceeds that of "
        f"its other removable blocks (downsampling blocks apart) by more than {NOISE_MULTIPLE:g} standard errors "
        "(binomial, over the test images)",
    )
    for name, result in _measured(results, "lesion"):
        if roles.get(name) not in ("hybrid", "transformer") or "pool" not in result.kinds:
            continue
        drops = np.asarray(result.accuracy_drop, dtype=float)
        ends = [i for i in stage_ends(list(result.kinds)) if result.kinds[i] == "msa" and np.isfinite(drops[i])]
        removable = [i for i in range(len(drops)) if np.isfinite(drops[i]) and i not in ends]
        others = [i for i in removable if result.kinds[i] != "pool"]
        pools = [i for i in removable if result.kinds[i] == "pool"]
        if not ends or not others:
            continue
        end_drop, other_drop = float(drops[ends].mean()), float(drops[others].mean())
        lesioned = np.asarray(result.accuracy, dtype=float)
        error = float(
            np.hypot(*(_mean_binomial_error(lesioned[group], result.num_samples) for group in (ends, others)))
        )
        claim.checks[name] = decide(end_drop - other_drop, error)
        claim.numbers[name] = {
            "stage_end_msa_drop": end_drop,
            "other_drop": other_drop,
            "standard_error": error,
            "stage_end_msas": ends,
        }
        claim.evidence.append(
            f"{name}: stage-end MSAs −{100 * end_drop:.1f} points on average ({len(ends)}), other blocks "
            f"−{100 * other_drop:.1f} ({len(others)}); difference ± {100 * error:.1f}"
            + (f"; downsampling blocks (not counted) −{100 * drops[pools].mean():.1f} ({len(pools)})" if pools else "")
        )
    return claim


def _mean_binomial_error(accuracies: np.ndarray, samples: int) -> float:
    """Standard error of a mean of accuracies, each measured on `samples` images."""
    errors = [binomial_error(accuracy, samples) for accuracy in accuracies]
    return float(np.sqrt(np.sum(np.square(errors))) / len(errors))


def _ranking(results, roles, what: str) -> Claim:
    accuracy = what == "accuracy"
    claim = Claim(
        key="accuracy-order" if accuracy else "robustness-order",
        statement=(
            "AlterNet is more accurate than the ResNet, which is more accurate than ViT"
            if accuracy
            else "AlterNet is more robust to corruptions than the ResNet, which is more robust than ViT"
        ),
        source=(
            "docs/paper.md §1 (CIFAR-100 top-1: AlterNet 84.0, ResNet 82.5, ViT-Ti 66.5)"
            if accuracy
            else "docs/paper.md §1 (CIFAR-100-C mean accuracy: AlterNet 66.7, ResNet 65.0, ViT-Ti 51.9)"
        ),
        rule=(
            "test accuracy: every hybrid ≥ every CNN > every ViT-like model"
            if accuracy
            else "mean accuracy over the corruptions: every hybrid ≥ every CNN > every ViT-like model"
        )
        + f", each by more than {NOISE_MULTIPLE:g} standard errors of the difference ("
        + ("binomial, over the test images)" if accuracy else "over the corruptions and severities)"),
    )
    values, errors = {}, {}
    for name, found in results.items():
        if accuracy and "accuracy" in found:
            values[name] = found["accuracy"].accuracy
            errors[name] = binomial_error(values[name], found["accuracy"].num_samples)
        elif not accuracy and "robustness" in found:
            values[name] = found["robustness"].mean_accuracy
            errors[name] = mean_and_error(np.asarray(found["robustness"].accuracy).ravel())[1]
    for name, value in values.items():
        claim.numbers[name] = {"value": value, "standard_error": errors[name]}
        claim.evidence.append(f"{name} ({roles[name]}): {100 * value:.2f}% ± {100 * errors[name]:.2f}")
    by_role = {r: [n for n in values if roles[n] == r] for r in ("hybrid", "cnn", "transformer")}
    for better, worse, sign in (("hybrid", "cnn", "≥"), ("cnn", "transformer", ">")):
        for a in by_role[better]:
            for b in by_role[worse]:
                claim.checks[f"{a} {sign} {b}"] = decide(values[a] - values[b], np.hypot(errors[a], errors[b]))
    return claim
