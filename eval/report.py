"""The eval's outputs: report.json (schema in docs/eval.md), report.md and PNG figures."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure  # the object API: no GUI backend, safe in threads and headless

from cone import __version__
from cone.eval.results import GEOMETRY_KEYS, EvalResult
from cone.eval.significance import Comparison
from cone.geometry import INSTRUMENTS
from cone.output import dump_json, format_value

FIGURES = "figures"
BINS = np.linspace(-1.0, 1.0, 201)
COLUMNS = {
    "retrieval": ("ndcg_at_10", "mrr_at_10", "recall_at_100", "recall_at_10_vs_flat", "stsb_spearman"),
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
) -> dict:
    """report.json's content (schema in docs/eval.md)."""
    return {
        "dataset": dataset,
        "quick": quick,
        "cone_version": __version__,
        "command": command,
        "results": [r.to_json() for r in results],
        "comparisons": [c.to_json() for c in comparisons],
    }


def write_report(out: Path, report: dict, results: list[EvalResult]) -> ReportFiles:
    """report.json, the PNG figures and report.md under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.json"
    path.write_text(dump_json(report))
    figures = write_figures(out, results)
    return ReportFiles(path, write_markdown(out, report, results, figures), figures)


def _hist_pair(result: EvalResult, path: Path) -> None:
    m, samples = result.metrics, result.samples
    fig = Figure(figsize=(6, 3.4))
    ax = fig.subplots()
    ax.hist(samples.random, bins=BINS, density=True, alpha=0.6, label="random (query, doc) pairs")
    ax.hist(samples.relevant, bins=BINS, density=True, alpha=0.6, label="relevant pairs")
    ax.axvline(m["threshold"], color="k", lw=1, ls="--", label=f"best threshold (F1 {m['threshold_f1']:.2f})")
    ax.set(xlabel="cosine similarity", ylabel="density", title=result.label, xlim=(-1, 1))
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _random_overlay(results: list[EvalResult], spec: str, path: Path) -> None:
    fig = Figure(figsize=(7, 3.8))
    ax = fig.subplots()
    for r in results:
        ax.hist(r.samples.random, bins=BINS, density=True, histtype="step", lw=1.5, label=r.label)
    ax.set(
        xlabel="cosine similarity of random (query, document) pairs",
        ylabel="density",
        title=f"Where unrelated pairs score (post-processing: {spec})",
        xlim=(-1, 1),
    )
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _instruments(results: list[EvalResult], path: Path) -> None:
    fig = Figure(figsize=(4 * len(INSTRUMENTS), 0.35 * len(results) + 1.6))
    axes = fig.subplots(1, len(INSTRUMENTS))
    names = [r.label for r in results]
    for ax, key in zip(axes, INSTRUMENTS, strict=True):
        ax.barh(names, [r.metrics[key] for r in results])
        ax.set_title(key)
        ax.invert_yaxis()
        if key == "sigreg":
            ax.set_xscale("log")
        if key != INSTRUMENTS[0]:
            ax.set_yticklabels([])
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def write_figures(out: Path, results: list[EvalResult]) -> list[Path]:
    """Per dense result its random-vs-relevant histogram; per post-processing the overlay; the instruments."""
    folder = out / FIGURES
    folder.mkdir(parents=True, exist_ok=True)
    dense = [r for r in results if r.samples is not None and r.samples.random is not None]
    written = []
    for r in dense:
        written.append(folder / f"hist-{r.index}.png")
        _hist_pair(r, written[-1])
    for spec in dict.fromkeys(r.postprocess for r in dense):
        written.append(folder / f"random-pairs-{spec.replace(':', '')}.png")
        _random_overlay([r for r in dense if r.postprocess == spec], spec, written[-1])
    if dense:
        written.append(folder / "instruments.png")
        _instruments(dense, written[-1])
    for stale in set(folder.glob("*.png")) - set(written):  # an earlier run's figures would pass for this one's
        stale.unlink()
    return written


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
    "Each row against its model's plain row (and the regularized LM against the baseline). nDCG@10: paired "
    "Fisher randomization test over the test queries (ranx), p adjusted by Benjamini-Hochberg over this table; "
    "STS: paired bootstrap 95% interval of Δρ. **yes** = significant at 0.05."
)


def _comparison_table(comparisons: list[dict]) -> list[str]:
    lines = ["| b vs a | Δ nDCG@10 | p (adjusted) | significant | Δ STS ρ | 95% interval | significant |"]
    lines.append("|---|---|---|---|---|---|---|")
    for c in comparisons:
        sts = ("—", "—", "—")
        if c["sts_ci95"]:
            low, high = c["sts_ci95"]
            sts = (f"{c['sts_delta']:+.4f}", f"[{low:+.4f}, {high:+.4f}]", "**yes**" if c["sts_significant"] else "no")
        significant = "**yes**" if c["ndcg_significant"] else "no"
        lines.append(
            f"| {c['b']} vs {c['a']} | {c['ndcg_delta']:+.4f} | {c['ndcg_p']:.4f} ({c['ndcg_p_adjusted']:.4f}) | "
            f"{significant} | " + " | ".join(sts) + " |"
        )
    return lines


def write_markdown(out: Path, report: dict, results: list[EvalResult], figures: list[Path]) -> Path:
    available = [r for r in results if r.available]
    missing = [r for r in results if not r.available]
    lines = [f"# cone eval: {report['dataset']}", "", f"Command: `{report['command']}`", ""]
    if report["quick"]:
        lines += ["**Quick subset** (docs/eval.md): it exercises the path; its figures are not the benchmark's.", ""]
    if any(r.synthetic for r in available):
        lines += [SYNTHETIC_NOTE, ""]
    for title, columns in COLUMNS.items():
        lines += [f"## {title.capitalize()}", "", *_md_table(available, columns), ""]
    if report.get("comparisons"):
        lines += ["## Comparisons", "", COMPARISONS_NOTE, "", *_comparison_table(report["comparisons"]), ""]
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
