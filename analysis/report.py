"""A comparison written to disk: one JSON with every number, the figures (PNG), and a short Markdown report
that states per claim of the paper the numbers that decide it and whether it holds on these models."""

import json
from pathlib import Path

import numpy as np

from alternet_hf.utils import write_json

from .claims import (
    COMPETENCE,
    HOLDS,
    NOISE_MULTIPLE,
    Claim,
    below_competence,
    evaluate_claims,
    role,
    variance_definitions_agree,
)
from .registry import ANALYSES
from .shared import plain

# Each comparison figure's caption in the report, by file stem (`analysis.registry`).
FIGURE_CAPTIONS = {stem: caption for entry in ANALYSES.values() for stem, _, caption in entry.comparisons}


def comparison_figures(results: dict[str, dict]) -> dict[str, object]:
    """The paper's figures with every model in one plot, {file stem: matplotlib figure}, for the analyses present in
    `results` ({model: {analysis: result}}), each drawn by its analysis's comparison (`analysis.registry`)."""
    figures = {}
    for name, entry in ANALYSES.items():
        found = {model: measured[name] for model, measured in results.items() if name in measured}
        for stem, function, _ in entry.comparisons if found else ():
            drawn = entry.load(function)(found)
            figures[stem] = getattr(drawn, "figure", drawn)  # an Axes draws into its Figure
    return figures


def write_comparison(
    out: str | Path,
    results: dict[str, dict],
    summaries: dict[str, dict],
    *,
    meta: dict | None = None,
    notes: list[str] | None = None,
    competence: float = COMPETENCE,
) -> dict[str, Path]:
    """Write `comparison.json`, the figures and `report.md` into `out`; return their paths. `summaries`: {model:
    {"kinds", "parameters", "source", ...}} (`analysis.runner.summary_of` and what describes the model); `meta`: the
    run's settings and data; `notes`: lines listed under the report's settings; `competence`: as `evaluate_claims`."""
    import matplotlib.pyplot as plt

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    claims = evaluate_claims(results, summaries, competence=competence)
    meta = {
        **(meta or {}),
        "competence": competence,
        "below_competence": below_competence(results, summaries, competence),
    }
    definitions = variance_definitions_agree(results)
    written = {}
    for stem, figure in comparison_figures(results).items():
        written[stem] = out / f"{stem}.png"
        figure.savefig(written[stem], dpi=120)
        plt.close(figure)
    payload = {
        "meta": meta,
        "notes": notes or [],
        "models": {
            name: {
                **summaries[name],
                "role": role(summaries[name]["kinds"]),
                "results": {analysis: result.to_dict() for analysis, result in found.items()},
            }
            for name, found in results.items()
        },
        "claims": [claim.to_dict() for claim in claims],
        "variance_definitions": definitions,
    }
    written["json"] = out / "comparison.json"
    write_json(written["json"], plain(payload, nulls=True))
    written["report"] = out / "report.md"
    written["report"].write_text(report_markdown(results, summaries, claims, definitions, written, meta, notes))
    return written


def report_markdown(results, summaries, claims: list[Claim], definitions: dict, written: dict, meta, notes) -> str:
    meta, notes = meta or {}, notes or []
    lines = [f"# Comparison of {', '.join(results)}", ""]
    if meta.get("dataset"):
        lines.append(f"Data: `{meta['dataset']}`; device: {meta.get('device', '?')}.")
        lines.append("")
    lines += ["| model | source | role | parameters | blocks | test accuracy |", "|---|---|---|---|---|---|"]
    for name, found in results.items():
        summary = summaries[name]
        counts = ", ".join(
            f"{count} {kind}" for kind, count in summary["block_counts"].items() if kind not in ("stem", "head")
        )
        accuracy = f"{100 * found['accuracy'].accuracy:.2f}%" if "accuracy" in found else "–"
        lines.append(
            f"| {name} | `{summary.get('source', '')}` | {role(summary['kinds'])} | {summary['parameters']:,} | "
            f"{counts} | {accuracy} |"
        )
    weak = meta.get("below_competence") or {}
    if weak:
        named = ", ".join(
            f"{name} ({100 * accuracy:.1f}% < {100 * threshold:.1f}%)" for name, (accuracy, threshold) in weak.items()
        )
        multiple = meta.get("competence", COMPETENCE)
        lines += [
            "",
            f"**Near chance**: {named} — below {multiple:g}× chance accuracy. Verdicts that rest on these "
            "models say nothing about the paper's claims.",
        ]
    lines += ["", "## Claims of the paper on these models", ""]
    lines += [
        f"A check counts only where its difference exceeds {NOISE_MULTIPLE:g} standard errors; otherwise the "
        "claim is undecided, with the numbers (value ± standard error).",
        "",
    ]
    lines += ["| claim (paper) | verdict | the numbers that decide it |", "|---|---|---|"]
    for claim in claims:
        verdict = f"**{claim.verdict}**" if claim.verdict == HOLDS else claim.verdict
        if claim.below_competence:
            verdict += f" (rests on {', '.join(claim.below_competence)}, near chance)"
        evidence = "<br>".join(claim.evidence) or "(not measured)"
        lines.append(f"| {claim.statement} ({claim.source}) | {verdict} | {evidence}<br>*rule: {claim.rule}* |")
    failing = [c for c in claims if any(ok is False for ok in c.checks.values())]
    if failing:
        lines += [
            "",
            "Claims that do not hold (or not on every model) here: "
            + "; ".join(f"{c.key} ({', '.join(k for k, ok in c.checks.items() if ok is False)})" for c in failing)
            + ". The verdicts are about these models on this data, not the paper's models.",
        ]
    lines += ["", "## Feature-map variance: the metric or the models?", "", variance_paragraph(definitions), ""]
    lines += ["## Settings", ""]
    for key in ("augmentation", "landscape_protocol", "settings"):
        if key in meta:
            lines.append(f"- {key.replace('_', ' ')}: `{json.dumps(plain(meta[key]))}`")
    lines += [f"- {note}" for note in notes]
    lines += ["", "## Figures", ""]
    for stem, caption in FIGURE_CAPTIONS.items():
        if stem in written:
            lines += [f"![{stem}]({written[stem].name})", "", caption, ""]
    return "\n".join(lines) + "\n"


def variance_paragraph(definitions: dict) -> str:
    """Item 6 of the comparison: our variance and the reference notebook's, on the same feature maps."""
    if not definitions:
        return "The variance analysis was not run."
    msa = {key: row for key, row in definitions.items() if key.endswith(" msa")}
    rows = msa or definitions
    parts = []
    for key, row in rows.items():
        ours, reference = np.asarray(row["ours"]), np.asarray(row["reference"])
        parts.append(f"{key}: ×{_span(ours)} ours, ×{_span(reference)} the reference's")
    disagree = [key for key, row in definitions.items() if not row["same_direction"]]
    largest = max(row["largest_relative_difference"] for row in definitions.values())
    text = (
        "Our definition divides by H·W (a map is the whole population of its positions) in float64; the reference "
        "notebook's `latent.var(dim=[-1, -2])` divides by H·W − 1 in float32. On the same feature maps, the "
        f"ratios of variance after / before each block are {'; '.join(parts)} (largest relative difference "
        f"between the definitions, over every block: {100 * largest:.1f}%). "
    )
    if disagree:
        return text + f"They point different ways for {', '.join(disagree)}: there the metric decides the answer."
    return text + (
        "Both definitions point the same way for every block, so where MSAs raise the variance here, that is the "
        "models, not the metric."
    )


def _span(values: np.ndarray) -> str:
    return (
        f"{values.min():.4g}"
        if values.size == 1 or np.ptp(values) < 1e-12
        else f"{values.min():.4g}–{values.max():.4g}"
    )
