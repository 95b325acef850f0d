"""The eval's outputs: report.json (its schema: cone.eval.schema, docs/eval.md), report.md and PNG figures."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cone import __version__
from cone.eval.figures import write_figures
from cone.eval.results import GEOMETRY_KEYS, EvalResult, sts_keys
from cone.eval.schema import ComparisonRecord, Delta, Report
from cone.eval.significance import Comparison
from cone.output import dump_json, format_value

COLUMNS = {
    # then each STS set
    "retrieval": ("ndcg_at_10", "mrr_at_10", "recall_at_100", "recall_at_10_vs_flat", "bytes_per_vector"),
    "similarity": (
        "doc_pair_cos_mean",
        "random_cos_mean",
        "random_cos_std",
        "random_cos_p1",
        "random_cos_p99",
        "relevant_cos_mean",
        "separation",
        "threshold",
        "threshold_f1",
    ),
    "hubness": ("hubness_skew", "hub_top1_share", "max_k_occurrence"),
    "geometry": GEOMETRY_KEYS,
}


@dataclass(frozen=True)
class ReportFiles:
    json: Path
    markdown: Path
    figures: list[Path]


def payload(
    dataset: str, quick: bool, results: list[EvalResult], command: str, comparisons: list[Comparison] = ()
) -> Report:
    """report.json's content, checked against its schema (cone.eval.schema; docs/eval.md) as it is made."""
    return Report(
        dataset=dataset,
        quick=quick,
        cone_version=__version__,
        command=command,
        results=[r.to_json() for r in results],
        comparisons=[c.to_json() for c in comparisons],
    )


def write_report(out: Path, report: Report, results: list[EvalResult]) -> ReportFiles:
    """report.json, the PNG figures and report.md under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.json"
    path.write_text(dump_json(report.to_json()))
    figures = write_figures(out, results)
    return ReportFiles(path, write_markdown(out, report, results, figures), figures)


def _md_table(results: list[EvalResult], columns: tuple[str, ...]) -> list[str]:
    lines = ["| model | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for r in results:
        if all(r.metrics.get(c) is None for c in columns):
            continue  # e.g. BM25 in the cosine tables: nothing to show
        values = [format_value(r.metrics.get(c)) if r.metrics.get(c) is not None else "—" for c in columns]
        lines.append(f"| {r.label} | " + " | ".join(values) + " |")
    return lines


SYNTHETIC_NOTE = (
    "Rows marked *(synthetic)* are deliberate degradations (`cone:C`, `rogue:K:S`) of a real model's vectors, "
    "applied identically to corpus and queries: a controlled cone, never a model of its own."
)
COMPARISONS_NOTE = (
    "Each row against its model's plain row (and the regularized LM against the baseline; a row run by ONNX / "
    "OpenVINO against the same row run by torch; a synthetic damage such as cone:0.99 [PQ32] against the healthy "
    "row of its factory, [PQ32]; a repaired row such as cone:0.99+center [PQ32] against the damaged row it repairs "
    "and against that healthy row). nDCG@10: paired Fisher randomization test over the test queries "
    "(10,000 seeded sign flips), p adjusted by Benjamini-Hochberg over this table; "
    "STS ρ, threshold F1 (exact rows) and hubness skew: paired bootstrap 95% interval of the difference (STS and "
    "threshold pairs, or queries, resampled; the same draws for both rows). **yes** = significant at 0.05."
)


def _interval_cell(deltas: list[Delta]) -> str:
    cells = []
    for d in deltas:
        low, high = d.ci95
        mark = "**yes**" if d.significant else "no"
        name = f"{d.name}: " if len(deltas) > 1 else ""
        cells.append(f"{name}{d.delta:+.4f} [{low:+.4f}, {high:+.4f}] {mark}")
    return "; ".join(cells) or "—"


def _comparison_table(comparisons: list[ComparisonRecord]) -> list[str]:
    lines = [
        "| b vs a | Δ nDCG@10 | p (adjusted) | significant | Δ STS ρ [95% interval] significant "
        "| Δ threshold F1 [95% interval] | Δ hubness skew [95% interval] |"
    ]
    lines.append("|---|---|---|---|---|---|---|")
    for c in comparisons:
        significant = "**yes**" if c.ndcg_significant else "no"
        f1, hubs = (_interval_cell([delta] if delta else []) for delta in (c.threshold_f1, c.hubness_skew))
        lines.append(
            f"| {c.b} vs {c.a} | {c.ndcg_delta:+.4f} | {c.ndcg_p:.4f} ({c.ndcg_p_adjusted:.4f}) | "
            f"{significant} | {_interval_cell(c.sts)} | {f1} | {hubs} |"
        )
    return lines


def write_markdown(out: Path, report: Report, results: list[EvalResult], figures: list[Path]) -> Path:
    available = [r for r in results if r.available]
    missing = [r for r in results if not r.available]
    lines = [f"# cone eval: {report.dataset}", "", f"Command: `{report.command}`", ""]
    if report.quick:
        lines += ["**Quick subset** (docs/eval.md): it exercises the path; its figures are not the benchmark's.", ""]
    if any(r.synthetic for r in available):
        lines += [SYNTHETIC_NOTE, ""]
    sts = tuple(dict.fromkeys(k for r in available for k in sts_keys(r.metrics)))
    for title, columns in COLUMNS.items():
        columns = (*columns, *sts) if title == "retrieval" else columns
        lines += [f"## {title.capitalize()}", "", *_md_table(available, columns), ""]
    if report.comparisons:
        lines += ["## Comparisons", "", COMPARISONS_NOTE, "", *_comparison_table(report.comparisons), ""]
    if missing:
        lines += ["## Unavailable", ""]
        reasons = {(r.model if r.index is None and r.postprocess == "none" else r.label): r.reason for r in missing}
        lines += [f"- {name}: {reason}" for name, reason in reasons.items()]
        lines.append("")
    if figures:
        lines += ["## Figures", ""]
        lines += [f"![{p.stem}]({p.relative_to(out).as_posix()})" for p in figures]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
