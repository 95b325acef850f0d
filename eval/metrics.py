"""Metrics over a run: retrieval (ranx), STS, absolute similarity and hubness. No retrieval here.

A run is BEIR's plain dict, ``{query id: {doc id: score}}``; qrels are ``{query id: {doc id: grade}}``.
"""

from __future__ import annotations

import warnings

import numpy as np
from ranx import Qrels, Run, evaluate
from scipy.sparse import csr_matrix
from scipy.stats import spearmanr

RETRIEVAL_METRICS = {"ndcg_at_10": "ndcg@10", "mrr_at_10": "mrr@10", "recall_at_100": "recall@100"}
HUB_K = 10
HUB_TOP_DOCS = 10


def _ranx(qrels: dict, scored: dict, metrics: list[str] | str, return_mean: bool = True):
    with warnings.catch_warnings():
        # numba's "unsafe cast from uint64 to int64" inside ranx's compiled metrics says nothing about the numbers.
        warnings.filterwarnings("ignore", message="unsafe cast from")
        return evaluate(Qrels({q: qrels[q] for q in scored}), Run(scored), metrics, return_mean=return_mean)


def _scored(qrels: dict, run: dict) -> dict:
    # ranx refuses empty result lists; a query that retrieved nothing scores 0 on every metric anyway.
    return {q: run[q] for q in sorted(qrels) if run.get(q)}


def retrieval(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]]) -> dict[str, float]:
    """nDCG@10, MRR@10 and Recall@100 by ranx (trec_eval definitions), over the queries in ``qrels``."""
    scored = _scored(qrels, run)
    if not scored:
        return dict.fromkeys(RETRIEVAL_METRICS, 0.0)
    values = _ranx(qrels, scored, list(RETRIEVAL_METRICS.values()))
    share = len(scored) / len(qrels)
    return {key: float(values[name]) * share for key, name in RETRIEVAL_METRICS.items()}


def per_query_ndcg(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]]) -> np.ndarray:
    """nDCG@10 of every query of ``qrels`` in sorted id order (0 for one that retrieved nothing): the paired
    samples of a significance test; their mean is ``retrieval``'s ndcg_at_10."""
    scored = _scored(qrels, run)
    values = dict.fromkeys(qrels, 0.0)
    if scored:
        values.update(zip(scored, np.atleast_1d(_ranx(qrels, scored, "ndcg@10", return_mean=False)), strict=True))
    return np.array([values[q] for q in sorted(qrels)], dtype=np.float64)


def overlap_at_k(found: np.ndarray, exact: np.ndarray, k: int = 10) -> float:
    """Mean share of the exact search's top k that an approximate index also returns in its top k."""
    shares = [
        len((set(a[:k]) & set(b[:k])) - {-1}) / max(1, len(set(b[:k]) - {-1}))
        for a, b in zip(found, exact, strict=True)
    ]
    return float(np.mean(shares))


def sts_spearman(cosines: np.ndarray, gold: list[float]) -> float:
    """Spearman correlation of model cosines with gold similarity scores."""
    return float(spearmanr(cosines, gold).statistic)


def threshold_f1(relevant: np.ndarray, random: np.ndarray) -> tuple[float, float]:
    """(best threshold, its F1) for "score >= t means relevant", the two classes weighted equally.

    With equal weights F1 = 2 TPR / (1 + TPR + FPR): 0.667 means no threshold beats calling
    every pair relevant, 1.0 means one global score cut-off separates the classes perfectly.
    """
    thresholds = np.unique(relevant)[::-1]
    counts = [
        np.bincount(threshold_bins(thresholds, x), minlength=len(thresholds) + 1)[None] for x in (relevant, random)
    ]
    best, f1 = best_f1(*counts)
    return float(thresholds[best[0]]), float(f1[0])


def threshold_bins(thresholds: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Each score's bin: how many of the thresholds (distinct, from high to low) lie above it, so that the
    threshold of that index is the first whose "score >= t" counts it (len(thresholds) for a score below all).
    The best threshold is always a relevant pair's score: between two of them, a lower t only adds false hits."""
    return len(thresholds) - np.searchsorted(thresholds[::-1], scores, side="right")


def best_f1(relevant_counts: np.ndarray, random_counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of bin counts (``threshold_bins`` counted: the pairs as measured, or one bootstrap draw of them),
    the index of the best threshold and its F1."""
    tpr = np.cumsum(relevant_counts[:, :-1], axis=1) / relevant_counts.sum(axis=1, keepdims=True)
    fpr = np.cumsum(random_counts[:, :-1], axis=1) / random_counts.sum(axis=1, keepdims=True)
    f1 = 2 * tpr / (1 + tpr + fpr)
    return f1.argmax(axis=1), f1.max(axis=1)


def separation(relevant: np.ndarray, random: np.ndarray) -> float:
    """d' = (mean_rel - mean_rand) / sqrt((var_rel + var_rand) / 2): the gap in units of spread."""
    pooled = np.sqrt((relevant.var() + random.var()) / 2)
    return float((relevant.mean() - random.mean()) / max(pooled, 1e-12))


def k_occurrences(top_rows: np.ndarray, n_docs: int, query_counts: np.ndarray | None = None) -> np.ndarray:
    """N_k of every document (k = 10): how often it is in a query's top k, each query counted once, or, per row of
    ``query_counts``, as many times as a bootstrap draw picked it."""
    top = top_rows[:, :HUB_K]
    counts = np.ones((1, len(top))) if query_counts is None else query_counts
    queries, ranks = np.nonzero(top >= 0)
    hits = csr_matrix((np.ones(len(queries)), (queries, top[queries, ranks])), shape=(len(top), n_docs))
    return np.asarray((hits.T @ counts.T).T)


def occurrence_skew(occurrences: np.ndarray) -> np.ndarray:
    """Skewness of each row's N_k (Fisher-Pearson, biased: scipy.stats.skew's default), 0 where every document
    occurs equally often. By hand because scipy's takes ~2 s on the 1,000 rows of a bootstrap (its precision
    checks), ten times this; a test holds the two equal."""
    centered = occurrences - occurrences.mean(axis=1, keepdims=True)
    squared = centered * centered
    m2, m3 = squared.mean(axis=1), (squared * centered).mean(axis=1)
    spread = m2 > 1e-12 * np.maximum(1.0, np.abs(occurrences).max(axis=1)) ** 2
    return np.where(spread, m3 / np.where(spread, m2, 1.0) ** 1.5, 0.0)


def hubness(top_rows: np.ndarray, n_docs: int) -> dict[str, float]:
    """Skewness of the k-occurrence N_k (how often each document is in a query's top k, k = 10),
    and the share of queries whose top hit is one of the 10 most frequent documents."""
    occurrences = k_occurrences(top_rows, n_docs)[0]
    hubs = np.argsort(-occurrences, kind="stable")[:HUB_TOP_DOCS]
    return {
        "hubness_skew": float(occurrence_skew(occurrences[None])[0]),
        "hub_top1_share": float(np.isin(top_rows[:, 0], hubs).mean()),
        "max_k_occurrence": int(occurrences.max()),
    }
