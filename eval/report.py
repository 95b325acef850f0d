"""The eval's outputs: report.json (schema in docs/eval.md), report.md and PNG figures."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure  # the object API: no GUI backend, safe in threads and headless

from cone import __version__
from cone.output import format_value

FIGURES = "figures"
BINS = np.linspace(-1.0, 1.0, 201)
INSTRUMENTS = ("anisotropy", "decorrelation", "effective_rank", "sigreg")
COLUMNS = {
    "retrieval": ("ndcg_at_10", "mrr_at_10", "recall_at_100", "stsb_spearman"),
    "similarity": (
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
    "geometry": ("anisotropy", "decorrelation", "effective_rank", "sigreg", "sigreg_x_floor", "uniformity"),
}


def label(result: dict) -> str:
    name = result["model"] if result.get("layer", "last") == "last" else f"{result['model']}[{result['layer']}]"
    return name if result["postprocess"] == "none" else f"{name}+{result['postprocess']}"


def slug(result: dict) -> str:
    return label(result).replace("+", "-").replace(":", "").replace("/", "_").replace("[", "-").replace("]", "")


def write_json(out: Path, payload: dict) -> Path:
    path = out / "report.json"
    path.write_text(json.dumps(payload, indent=2))
    return path


def payload(dataset: str, quick: bool, results: list[dict], command: str) -> dict:
    return {"dataset": dataset, "quick": quick, "cone_version": __version__, "command": command, "results": results}


def _hist_pair(result: dict, path: Path) -> None:
    m = result["metrics"]
    fig = Figure(figsize=(6, 3.4))
    ax = fig.subplots()
    ax.hist(m["_random"], bins=BINS, density=True, alpha=0.6, label="random (query, doc) pairs")
    ax.hist(m["_relevant"], bins=BINS, density=True, alpha=0.6, label="relevant pairs")
    ax.axvline(m["threshold"], color="k", lw=1, ls="--", label=f"best threshold (F1 {m['threshold_f1']:.2f})")
    ax.set(xlabel="cosine similarity", ylabel="density", title=label(result), xlim=(-1, 1))
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _random_overlay(results: list[dict], spec: str, path: Path) -> None:
    fig = Figure(figsize=(7, 3.8))
    ax = fig.subplots()
    for r in results:
        ax.hist(r["metrics"]["_random"], bins=BINS, density=True, histtype="step", lw=1.5, label=label(r))
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


def _instruments(results: list[dict], path: Path) -> None:
    fig = Figure(figsize=(4 * len(INSTRUMENTS), 0.35 * len(results) + 1.6))
    axes = fig.subplots(1, len(INSTRUMENTS))
    names = [label(r) for r in results]
    for ax, key in zip(axes, INSTRUMENTS, strict=True):
        ax.barh(names, [r["metrics"][key] for r in results])
        ax.set_title(key)
        ax.invert_yaxis()
        if key == "sigreg":
            ax.set_xscale("log")
        if key != INSTRUMENTS[0]:
            ax.set_yticklabels([])
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def write_figures(out: Path, results: list[dict]) -> list[Path]:
    """Per dense result its random-vs-relevant histogram; per post-processing the overlay; the instruments."""
    folder = out / FIGURES
    folder.mkdir(parents=True, exist_ok=True)
    dense = [r for r in results if r["available"] and "_random" in r["metrics"]]
    written = []
    for r in dense:
        written.append(folder / f"hist-{slug(r)}.png")
        _hist_pair(r, written[-1])
    for spec in dict.fromkeys(r["postprocess"] for r in dense):
        written.append(folder / f"random-pairs-{spec.replace(':', '')}.png")
        _random_overlay([r for r in dense if r["postprocess"] == spec], spec, written[-1])
    if dense:
        written.append(folder / "instruments.png")
        _instruments(dense, written[-1])
    return written


def _md_table(results: list[dict], columns: tuple[str, ...]) -> list[str]:
    lines = ["| model | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for r in results:
        if all(r["metrics"].get(c) is None for c in columns):
            continue  # e.g. BM25 in the cosine tables: nothing to show
        values = [format_value(r["metrics"].get(c)) if r["metrics"].get(c) is not None else "—" for c in columns]
        lines.append(f"| {label(r)} | " + " | ".join(values) + " |")
    return lines


def write_markdown(out: Path, report: dict, figures: list[Path]) -> Path:
    available = [r for r in report["results"] if r["available"]]
    missing = [r for r in report["results"] if not r["available"]]
    lines = [f"# cone eval: {report['dataset']}", "", f"Command: `{report['command']}`", ""]
    if report["quick"]:
        lines += ["**Quick subset** (docs/eval.md): it exercises the path; its figures are not the benchmark's.", ""]
    for title, columns in COLUMNS.items():
        lines += [f"## {title.capitalize()}", "", *_md_table(available, columns), ""]
    if missing:
        lines += ["## Unavailable", ""]
        reasons = {r["model"]: r["reason"] for r in missing}
        lines += [f"- {model}: {reason}" for model, reason in reasons.items()]
        lines.append("")
    if figures:
        lines += ["## Figures", ""]
        lines += [f"![{p.stem}]({p.relative_to(out).as_posix()})" for p in figures]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
