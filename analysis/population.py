"""The paper's claims decided across many models (an atlas of probes, `alternet_hf.apps.atlas`), and the measures of
one model's probe they rest on.

One model's probe gives a few numbers (`model_measures`): how its MSA and convolutional blocks change the
high-frequency amplitude and the feature-map variance, how many predictions it keeps under low- and high-frequency
noise, and where its curve ends. A claim about kinds of models is a claim about those numbers over models: the unit is
the model (blocks of one model are not independent draws), the test a permutation test (sign flips for "below zero",
shuffled labels for "A above B"), the effect's uncertainty a bootstrap over models. An effect counts by the rule every
reading of the package uses (`analysis.claims`): only where its 95% interval excludes zero (two standard errors for
one model's blocks; here the bootstrap's percentiles, with the test's p below 0.05 as well); it is "against the paper"
where the interval lies wholly on the other side, "within the noise" otherwise, and not decidable with fewer than
`MIN_MODELS` models of a kind.
"""

import itertools
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from .claims import FAILS, HOLDS, UNDECIDED, WITHIN_NOISE, decide, mean_and_error, role, variance_ratios

KINDS = {"cnn": "convolution", "transformer": "attention", "hybrid": "hybrid", "other": "other"}
LOW_BAND, HIGH_BAND = 0.3, 0.7  # noise at or below LOW_BAND·π is low-frequency, at or above HIGH_BAND·π high
LATE = 2 / 3  # the late stage: normalised depth at or beyond this
DEPTH_BINS = (0.0, 1 / 3, 2 / 3, 1.0 + 1e-9)  # early, middle, late: "at the same depth"
MIN_MODELS = 3
CONFIDENCE = 0.95
SIGNIFICANCE = 0.05
RESAMPLES = 2000
FILTERS = {True: "low-pass", False: "high-pass", None: "no clear change"}


def model_kind(kinds: Sequence[str]) -> str:
    """convolution (only), attention (only), hybrid or other, from a model's block kinds."""
    return KINDS[role(list(kinds))]


def block_changes(values, kinds: Sequence[str], kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(normalised depth, change of `values`) of each block of `kind`: the state after it minus the state before,
    where both are finite; depth is the block's output's."""
    values = np.asarray(values, dtype=float)
    positions = np.array([i for i in range(1, len(kinds)) if kinds[i] == kind], dtype=int)
    if not positions.size:
        return np.zeros(0), np.zeros(0)
    changes = values[positions] - values[positions - 1]
    depth = positions / max(len(kinds) - 1, 1)
    finite = np.isfinite(changes)
    return depth[finite], changes[finite]


def band_means(frequencies, kept) -> tuple[float, float]:
    """The share of predictions kept under low-frequency noise (≤ LOW_BAND·π) and under high-frequency noise
    (≥ HIGH_BAND·π)."""
    frequencies, kept = np.asarray(frequencies, dtype=float), np.asarray(kept, dtype=float)
    return float(kept[frequencies <= LOW_BAND + 1e-9].mean()), float(kept[frequencies >= HIGH_BAND - 1e-9].mean())


def filter_effect(result, kind: str) -> tuple[float | None, float, bool | None]:
    """(mean change of ΔlogA at π over the blocks of `kind`, its standard error over those blocks, True where they
    lower it beyond two standard errors (a low-pass filter), False where they raise it, None where neither);
    (None, 0, None) for a model without such blocks."""
    _, changes = block_changes(result.delta_log_amplitude, result.kinds, kind)
    if not changes.size:
        return None, 0.0, None
    change, error = mean_and_error(changes)
    return change, error, decide(-change, error)


def variance_effect(result, kind: str) -> tuple[float | None, float, bool | None]:
    """(mean log variance ratio over the blocks of `kind`, its standard error, True where they lower the feature-map
    variance beyond two standard errors, False where they raise it, None otherwise); (None, 0, None) without any."""
    ratios = variance_ratios(result.variance, result.kinds, kind)
    logs = np.log(ratios[np.isfinite(ratios) & (ratios > 0)])
    if not logs.size:
        return None, 0.0, None
    change, error = mean_and_error(logs)
    return change, error, decide(-change, error)


def _finite_or_none(value) -> float | None:
    return float(value) if value is not None and np.isfinite(value) else None


def model_measures(result) -> dict:
    """The scalars of one probe (`analysis.probe.ProbeResult`) that an atlas compares across models; None where a
    model has nothing to measure (no MSA block, no finite value)."""
    kinds = list(result.kinds)
    blocks = [k for k in kinds[1:] if k in ("msa", "conv", "mlp")]
    depth = np.asarray(result.depth, dtype=float)
    amplitude = np.asarray(result.delta_log_amplitude, dtype=float)
    finite = np.isfinite(amplitude)
    late = finite & (depth >= LATE - 1e-9)
    slope = np.polyfit(depth[finite], amplitude[finite], 1)[0] if finite.sum() >= 2 else None
    low, high = band_means(result.noise_frequencies, result.prediction_kept)
    measures = {
        "kind": model_kind(kinds),
        "attention_share": blocks.count("msa") / len(blocks) if blocks else None,
        "late_delta_log_amplitude": float(amplitude[late].mean()) if late.any() else None,
        "delta_log_amplitude_slope": _finite_or_none(slope),
    }
    for kind in ("msa", "conv"):
        change, _, lowers = filter_effect(result, kind)
        log_ratio, _, _ = variance_effect(result, kind)
        measures[f"{kind}_delta_log_amplitude_change"] = _finite_or_none(change)
        measures[f"{kind}_filter"] = FILTERS[lowers] if change is not None else None
        measures[f"{kind}_variance_factor"] = _finite_or_none(np.exp(log_ratio)) if log_ratio is not None else None
    measures |= {"low_frequency_kept": low, "high_frequency_kept": high, "noise_gap": low - high}
    return measures


@dataclass
class PopulationClaim:
    """One claim decided over models: the `effect` (its `units`) with its bootstrap `interval`, the permutation
    test's two-sided `p_value`, how many models of each group it rests on (`models`), and its `verdict`."""

    key: str
    statement: str
    test: str
    units: str
    expected: str  # "positive" or "negative": the sign the paper predicts
    models: dict[str, int] = field(default_factory=dict)
    effect: float | None = None
    interval: tuple[float, float] | None = None
    p_value: float | None = None
    verdict: str = UNDECIDED
    note: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    def sentence(self) -> str:
        """The verdict with its numbers, in one line."""
        counts = ", ".join(f"{n} {group}" for group, n in self.models.items())
        if self.effect is None:
            return f"{self.verdict}: {self.note} ({counts})"
        low, high = self.interval
        return (
            f"{self.verdict}: {self.effect:+.3f} {self.units} (95% interval {low:+.3f} to {high:+.3f}, "
            f"p = {self.p_value:.3g}; {counts})"
        )


def _verdict(effect_sign: int, interval: tuple[float, float], p_value: float) -> str:
    """holds / does not hold / within the noise, by the rule of the module's docstring; `effect_sign` is +1 where
    the paper predicts a positive effect, -1 a negative one."""
    low, high = sorted((effect_sign * interval[0], effect_sign * interval[1]))
    if p_value < SIGNIFICANCE and low > 0:
        return HOLDS
    if p_value < SIGNIFICANCE and high < 0:
        return FAILS
    return WITHIN_NOISE


def _percentiles(values: np.ndarray) -> tuple[float, float]:
    """The central CONFIDENCE interval of the finite `values` (a resample may lack a group in every stratum)."""
    values = values[np.isfinite(values)]
    tail = 100 * (1 - CONFIDENCE) / 2
    return float(np.percentile(values, tail)), float(np.percentile(values, 100 - tail))


def sign_flip_test(values, rng: np.random.Generator) -> tuple[float, tuple[float, float], float]:
    """(mean, bootstrap interval of the mean, two-sided p of "the mean is zero" by flipping signs): exact where
    2^n ≤ RESAMPLES, else RESAMPLES random flips."""
    values = np.asarray(values, dtype=float)
    observed = values.mean()
    if 2 ** len(values) <= RESAMPLES:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=len(values))))
        p_value = float(np.mean(np.abs((signs * values).mean(1)) >= abs(observed) - 1e-12))
    else:
        signs = rng.choice((1.0, -1.0), size=(RESAMPLES, len(values)))
        exceed = np.sum(np.abs((signs * values).mean(1)) >= abs(observed) - 1e-12)
        p_value = float((exceed + 1) / (RESAMPLES + 1))
    resampled = values[rng.integers(0, len(values), size=(RESAMPLES, len(values)))].mean(1)
    return float(observed), _percentiles(resampled), p_value


def label_shuffle_test(
    units: Sequence[tuple[int, int, float, int]],
    statistic: Callable[[np.ndarray, np.ndarray, np.ndarray], float],
    rng: np.random.Generator,
) -> tuple[float, tuple[float, float], float]:
    """(statistic, bootstrap interval, two-sided p) of `statistic(groups, strata, values)` over `units` (model,
    stratum, value, group 0 or 1): group labels are shuffled within each stratum (RESAMPLES times) for the test,
    models resampled with replacement, all their units with them, for the interval."""
    units = np.asarray(units, dtype=float)
    models, strata, values = units[:, 0].astype(int), units[:, 1].astype(int), units[:, 2]
    groups = units[:, 3].astype(int)
    observed = statistic(groups, strata, values)
    exceed = 0
    for _ in range(RESAMPLES):
        shuffled = groups.copy()
        for stratum in np.unique(strata):
            where = np.flatnonzero(strata == stratum)
            shuffled[where] = rng.permutation(groups[where])
        exceed += abs(statistic(shuffled, strata, values)) >= abs(observed) - 1e-12
    p_value = float((exceed + 1) / (RESAMPLES + 1))
    unique = np.unique(models)
    rows_of = {model: np.flatnonzero(models == model) for model in unique}
    resampled = []
    for _ in range(RESAMPLES):
        chosen = np.concatenate([rows_of[m] for m in rng.choice(unique, size=len(unique))])
        resampled.append(statistic(groups[chosen], strata[chosen], values[chosen]))
    return float(observed), _percentiles(np.asarray(resampled, dtype=float)), p_value


def _difference_of_means(groups: np.ndarray, strata: np.ndarray, values: np.ndarray) -> float:
    """The mean over strata holding both groups of (mean of group 1 − mean of group 0); NaN where none does."""
    differences = []
    for stratum in np.unique(strata):
        inside = strata == stratum
        ones, zeros = values[inside & (groups == 1)], values[inside & (groups == 0)]
        if ones.size and zeros.size:
            differences.append(ones.mean() - zeros.mean())
    return float(np.mean(differences)) if differences else float("nan")


def _one_sample(claim: PopulationClaim, values: list[float], group: str, rng) -> PopulationClaim:
    claim.models = {group: len(values)}
    if len(values) < MIN_MODELS:
        claim.note = f"fewer than {MIN_MODELS} {group}"
        return claim
    claim.effect, claim.interval, claim.p_value = sign_flip_test(values, rng)
    claim.verdict = _verdict(1 if claim.expected == "positive" else -1, claim.interval, claim.p_value)
    return claim


def _two_groups(claim: PopulationClaim, units: list, names: tuple[str, str], rng) -> PopulationClaim:
    """`units`: (model, stratum, value, group) with group 1 `names[0]`, 0 `names[1]`; counts models per group."""
    claim.models = {name: len({u[0] for u in units if u[3] == g}) for name, g in zip(names, (1, 0))}
    if min(claim.models.values()) < MIN_MODELS:
        claim.note = f"fewer than {MIN_MODELS} models of a group"
        return claim
    table = np.asarray(units, dtype=float)
    if not np.isfinite(_difference_of_means(table[:, 3].astype(int), table[:, 1].astype(int), table[:, 2])):
        claim.note = "no depth third holds blocks of both kinds"
        return claim
    claim.effect, claim.interval, claim.p_value = label_shuffle_test(units, _difference_of_means, rng)
    claim.verdict = _verdict(1 if claim.expected == "positive" else -1, claim.interval, claim.p_value)
    return claim


def population_claims(results: Sequence, *, seed: int = 0) -> list[PopulationClaim]:
    """Every claim the atlas' columns speak to, decided over `results` (one `ProbeResult` per model): the same
    results in the same order give the same numbers for a seed."""
    rng = np.random.default_rng(seed)
    filters = {kind: [filter_effect(r, kind)[0] for r in results] for kind in ("msa", "conv")}
    variances = {kind: [variance_effect(r, kind)[0] for r in results] for kind in ("msa", "conv")}
    claims = [
        _one_sample(
            PopulationClaim(
                "msa-low-pass",
                "MSAs are low-pass filters: across models, MSA blocks lower the high-frequency amplitude",
                "sign-flip permutation test of the mean over models; bootstrap over models",
                "ΔlogA at π per MSA block (mean over models)",
                "negative",
            ),
            [v for v in filters["msa"] if v is not None],
            "models with MSA blocks",
            rng,
        ),
        _one_sample(
            PopulationClaim(
                "conv-high-pass",
                "Convolutions are high-pass filters: across models, convolutional blocks raise the high-frequency "
                "amplitude",
                "sign-flip permutation test of the mean over models; bootstrap over models",
                "ΔlogA at π per convolutional block (mean over models)",
                "positive",
            ),
            [v for v in filters["conv"] if v is not None],
            "models with convolutional blocks",
            rng,
        ),
    ]
    same_depth = []
    for model, result in enumerate(results):
        for kind, group in (("msa", 1), ("conv", 0)):
            depth, changes = block_changes(result.delta_log_amplitude, result.kinds, kind)
            for stratum in range(len(DEPTH_BINS) - 1):
                inside = (depth >= DEPTH_BINS[stratum]) & (depth < DEPTH_BINS[stratum + 1])
                if inside.any():
                    same_depth.append((model, stratum, float(changes[inside].mean()), group))
    claims.append(
        _two_groups(
            PopulationClaim(
                "msa-below-conv-same-depth",
                "At the same depth, MSA blocks lower ΔlogA at π more than convolutional blocks do",
                "label permutation within depth thirds (early, middle, late); bootstrap over models",
                "ΔlogA at π, MSA minus convolution (mean over depth thirds)",
                "negative",
            ),
            same_depth,
            ("with MSA blocks", "with convolutional blocks"),
            rng,
        )
    )
    variance_units = [
        (model, 0, value, group)
        for kind, group in (("msa", 1), ("conv", 0))
        for model, value in enumerate(variances[kind])
        if value is not None
    ]
    claims.append(
        _two_groups(
            PopulationClaim(
                "variance-by-kind",
                "MSA blocks lower the feature-map variance and convolutional blocks raise it: the log variance ratio "
                "of MSA blocks is below that of convolutional blocks",
                "label permutation over models; bootstrap over models",
                "log variance ratio per block, MSA minus convolution",
                "negative",
            ),
            variance_units,
            ("with MSA blocks", "with convolutional blocks"),
            rng,
        )
    )
    robustness_units = [
        (model, 0, band_means(r.noise_frequencies, r.prediction_kept)[1], int("msa" in r.kinds))
        for model, r in enumerate(results)
        if "msa" in r.kinds or "conv" in r.kinds
    ]
    claims.append(
        _two_groups(
            PopulationClaim(
                "attention-robust-high-frequency",
                "Models with MSA blocks keep more predictions under high-frequency noise than convolution-only models",
                "label permutation over models; bootstrap over models",
                f"share of top-1 kept under noise ≥ {HIGH_BAND:g}π, with MSAs minus convolution only",
                "positive",
            ),
            robustness_units,
            ("with MSA blocks", "convolution only"),
            rng,
        )
    )
    return claims
