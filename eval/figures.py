"""The eval's figures: where random and relevant pairs score, the instruments, the cone map (where retrieval
breaks as the cone tightens) and each model's profile over its layers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure  # the object API: no GUI backend, safe in threads and headless

from cone.encoders.base import layer_order
from cone.eval.results import EvalResult, headline_sts_key
from cone.geometry import INSTRUMENTS
from cone.indexing.postprocess import is_synthetic

FIGURES = "figures"
BINS = np.linspace(-1.0, 1.0, 201)


def _hist_pair(result: EvalResult, path: Path) -> None:
    m, samples = result.metrics, result.samples
    fig = Figure(figsize=(6, 3.4))
    ax = fig.subplots()
    # stepfilled: one polygon per histogram, drawn as the 200 adjacent bars were, a third of their CPU to lay out
    # and render (issue 43)
    filled = {"bins": BINS, "density": True, "alpha": 0.6, "histtype": "stepfilled"}
    ax.hist(samples.random, **filled, label="random (query, doc) pairs")
    ax.hist(samples.relevant, **filled, label="relevant pairs")
    ax.axvline(m["threshold"], color="k", lw=1, ls="--", label=f"best threshold (F1 {m['threshold_f1']:.2f})")
    ax.set(xlabel="cosine similarity", ylabel="density", title=result.label, xlim=(-1, 1))
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _random_overlay(results: list[EvalResult], spec: str, path: Path) -> None:
    """Where unrelated pairs score: on the whole cosine range (a cone's spike near +1 shows where it sits), and
    zoomed on where they fall (the spike's shape, which no scale of the whole range can show), both linear."""
    fig = Figure(figsize=(11, 3.8))
    whole, zoomed = fig.subplots(1, 2)
    low, high = np.percentile(np.concatenate([r.samples.random for r in results]), [0.5, 99.5])
    pad = max((high - low) * 0.05, 1e-4)
    zoom_bins = np.linspace(low - pad, high + pad, 101)
    for r in results:
        whole.hist(r.samples.random, bins=BINS, density=True, histtype="step", lw=1.5, label=r.label)
        zoomed.hist(r.samples.random, bins=zoom_bins, density=True, histtype="step", lw=1.5, label=r.label)
    whole.set(xlabel="cosine similarity of random (query, document) pairs", ylabel="density", xlim=(-1, 1))
    whole.set_title("the whole range", fontsize=10)
    zoomed.set(xlabel="cosine similarity (zoomed)", xlim=(zoom_bins[0], zoom_bins[-1]))
    zoomed.set_title(f"zoomed: 99% of the pairs lie in {low:.3f} to {high:.3f}", fontsize=10)
    whole.legend(fontsize=8, loc="upper left")
    fig.suptitle(f"Where unrelated pairs score (post-processing: {spec})")
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


# x of the cone map: -log10(1 - cos) spreads 0.9, 0.99 and 0.999 apart, where the cone's regime is.
_CONE_TICKS = [0.0, 0.5, 0.9, 0.99, 0.999]


def _cone_x(cos: np.ndarray) -> np.ndarray:
    return -np.log10(1.0 - np.minimum(np.asarray(cos, dtype=float), 0.99999))


def _cone_x_inverse(x: np.ndarray) -> np.ndarray:
    return 1.0 - 10.0 ** (-np.asarray(x, dtype=float))


def _degraded_only(spec: str) -> bool:
    """A point on a model's cone curve: its plain space, or a synthetic degradation with no repair after it."""
    return spec == "none" or all(is_synthetic(stage) for stage in spec.split("+"))


def _cone_map(results: list[EvalResult], path: Path) -> None:
    """Each measured space at (random doc-pair mean cosine, nDCG@10), and (same, threshold F1). Every index type has
    its own colour and marker; a model's plain and degraded rows of one type are joined by a line, in cone order;
    a repaired row (cone:0.99+center) stands alone, outlined in black and labelled."""
    fig = Figure(figsize=(13, 4.8))
    retrieval, threshold = fig.subplots(1, 2, sharex=True)
    factories = list(dict.fromkeys(r.factory for r in results))
    markers = "osD^vPX*h<>p"

    def style(factory: str) -> dict:
        number = factories.index(factory)
        return {"color": f"C{number % 10}", "marker": markers[number % len(markers)]}

    for model in dict.fromkeys(r.model for r in results):
        for factory in factories:
            mine = [r for r in results if r.model == model and r.factory == factory and r.layer == "last"]
            curve = sorted(
                (r for r in mine if _degraded_only(r.postprocess)), key=lambda r: r.metrics["doc_pair_cos_mean"]
            )
            x = [r.metrics["doc_pair_cos_mean"] for r in curve]
            retrieval.plot(x, [r.metrics["ndcg_at_10"] for r in curve], lw=1, ms=6, alpha=0.85, **style(factory))
    for r in results:
        x = r.metrics["doc_pair_cos_mean"]
        if r.layer != "last" or not _degraded_only(r.postprocess):
            retrieval.scatter([x], [r.metrics["ndcg_at_10"]], s=40, edgecolors="k", linewidths=0.8, **style(r.factory))
            if r.factory == "Flat":
                retrieval.annotate(
                    r.postprocess,
                    (x, r.metrics["ndcg_at_10"]),
                    fontsize=6,
                    alpha=0.8,
                    xytext=(4, -8),
                    textcoords="offset points",
                )
        if r.metrics.get("threshold_f1") is not None:
            threshold.scatter([x], [r.metrics["threshold_f1"]], s=30, **style(r.factory))
    flat = sorted(
        (r for r in results if r.metrics.get("threshold_f1") is not None), key=lambda r: r.metrics["doc_pair_cos_mean"]
    )
    for number, r in enumerate(flat):  # alternate above and below: neighbours' labels do not pile up
        name = r.postprocess if r.layer == "last" else f"[{r.layer}] {r.postprocess}"
        threshold.annotate(
            name,
            (r.metrics["doc_pair_cos_mean"], r.metrics["threshold_f1"]),
            fontsize=6,
            alpha=0.8,
            xytext=(3, 6 if number % 2 else -10),
            textcoords="offset points",
        )
    for ax, what in ((retrieval, "nDCG@10"), (threshold, "best global threshold's F1 (exact index)")):
        ax.set_xscale("function", functions=(_cone_x, _cone_x_inverse))
        ax.set_xticks(_CONE_TICKS, [f"{t:g}" for t in _CONE_TICKS])
        ax.set(xlabel="mean cosine of random document pairs (the cone)", ylabel=what, ylim=(0, None))
        ax.grid(alpha=0.3)
    handles = [retrieval.plot([], [], lw=1, label=f, **style(f))[0] for f in factories]
    handles.append(retrieval.scatter([], [], color="w", edgecolors="k", label="repaired or corrected row"))
    fig.legend(handles=handles, fontsize=7, loc="center right", title="index type", title_fontsize=8)
    retrieval.set_title("Where retrieval breaks as the cone tightens")
    threshold.set_title("Where a similarity threshold stops separating")
    fig.tight_layout(rect=(0, 0, 0.86, 1))
    fig.savefig(path, dpi=110)


def _layer_profile(model: str, results: list[EvalResult], path: Path) -> None:
    """One model's spaces against depth (Flat index), one line per post-processing."""
    sts = headline_sts_key(results[0].metrics)
    panels = [("anisotropy", "anisotropy"), ("random_cos_mean", "random (query, doc) cosine")]
    panels += [("effective_rank", "effective rank"), ("ndcg_at_10", "nDCG@10")]
    panels += [(sts, "STS Spearman ρ")] if sts else []
    fig = Figure(figsize=(3.1 * len(panels), 3.2))
    axes = fig.subplots(1, len(panels))
    layers = sorted(dict.fromkeys(r.layer for r in results), key=layer_order)
    for spec in dict.fromkeys(r.postprocess for r in results):
        rows = {r.layer: r for r in results if r.postprocess == spec}
        at = [i for i, layer in enumerate(layers) if layer in rows]
        for ax, (key, _) in zip(axes, panels, strict=True):
            ax.plot(at, [rows[layers[i]].metrics.get(key) for i in at], marker="o", label=spec)
    for ax, (_, title) in zip(axes, panels, strict=True):
        ax.set_xticks(range(len(layers)), [str(layer) for layer in layers])
        ax.set(title=title, xlabel="layer")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"{model}: the space of each layer (mean-pooled hidden states)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def write_figures(out: Path, results: list[EvalResult]) -> list[Path]:
    """Per dense result its random-vs-relevant histogram; per post-processing the overlay; the instruments;
    the cone map; per model measured on several layers its profile."""
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
    mapped = [r for r in results if r.available and r.metrics.get("doc_pair_cos_mean") is not None]
    if mapped:
        written.append(folder / "cone-map.png")
        _cone_map(mapped, written[-1])
    for model in dict.fromkeys(r.model for r in dense):
        rows = [r for r in dense if r.model == model]
        if len({r.layer for r in rows}) > 1:
            written.append(folder / f"layers-{model.replace(':', '').replace('/', '_')}.png")
            _layer_profile(model, rows, written[-1])
    for stale in set(folder.glob("*.png")) - set(written):  # an earlier run's figures would pass for this one's
        stale.unlink()
    return written


def doctor_figure(trials: list, target: float, path: Path) -> None:
    """``cone doctor``'s trade-off: recall@10 against bytes per vector, one marker per repair, each type named
    once (on the no-repair point), the target as a line."""
    fig = Figure(figsize=(9.5, 4.8))
    ax = fig.subplots()
    markers = "os^Dv<>ph"
    for number, repair in enumerate(dict.fromkeys(t.repair for t in trials)):
        mine = [t for t in trials if t.repair == repair]
        ax.scatter(
            [t.bytes_per_vector for t in mine],
            [t.recall_at_10 for t in mine],
            marker=markers[number % len(markers)],
            s=36 if repair == "none" else 22,
            alpha=0.85,
            label="as is" if repair == "none" else repair,
        )
    for t in trials:
        if t.repair == "none":
            ax.annotate(
                t.factory, (t.bytes_per_vector, t.recall_at_10), fontsize=7, xytext=(4, -9), textcoords="offset points"
            )
    ax.axhline(target, color="k", lw=1, ls="--", label=f"target {target:g}")
    ax.set(
        xscale="log",
        xlabel="bytes per vector (log)",
        ylabel="recall@10 vs exact search",
        ylim=(-0.02, 1.02),
        title="What each index type keeps of exact search, as is and repaired",
    )
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # outside: no point or label hidden
    fig.tight_layout()
    fig.savefig(path, dpi=110)
