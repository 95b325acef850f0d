"""Metrics over a run: retrieval (ranx), STS, absolute similarity and hubness. No retrieval here.

A run is BEIR's plain dict, ``{query id: {doc id: score}}``; qrels are ``{query id: {doc id: grade}}``.
"""

from __future__ import annotations

import warnings

import numpy as np
from ranx import Qrels, Run, evaluate
from scipy.stats import skew, spearmanr

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
    scores = np.concatenate([relevant, random])
    is_rel = np.concatenate([np.ones(len(relevant)), np.zeros(len(random))])
    order = np.argsort(-scores, kind="stable")
    scores, is_rel = scores[order], is_rel[order]
    tpr = np.cumsum(is_rel) / len(relevant)
    fpr = np.cumsum(1 - is_rel) / len(random)
    # A threshold can only fall between distinct scores: keep the last position of each tie.
    last_of_tie = np.append(scores[1:] != scores[:-1], True)
    f1 = np.where(last_of_tie, 2 * tpr / (1 + tpr + fpr), -1.0)
    best = int(np.argmax(f1))
    return float(scores[best]), float(f1[best])


def separation(relevant: np.ndarray, random: np.ndarray) -> float:
    """d' = (mean_rel - mean_rand) / sqrt((var_rel + var_rand) / 2): the gap in units of spread."""
    pooled = np.sqrt((relevant.var() + random.var()) / 2)
    return float((relevant.mean() - random.mean()) / max(pooled, 1e-12))


def hubness(top_rows: np.ndarray, n_docs: int) -> dict[str, float]:
    """Skewness of the k-occurrence N_k (how often each document is in a query's top k, k = 10),
    and the share of queries whose top hit is one of the 10 most frequent documents."""
    top = top_rows[:, :HUB_K]
    occurrences = np.bincount(top[top >= 0].ravel(), minlength=n_docs)
    hubs = np.argsort(-occurrences, kind="stable")[:HUB_TOP_DOCS]
    return {
        "hubness_skew": float(skew(occurrences)) if occurrences.std() > 0 else 0.0,
        "hub_top1_share": float(np.isin(top[:, 0], hubs).mean()),
        "max_k_occurrence": int(occurrences.max()),
    }
