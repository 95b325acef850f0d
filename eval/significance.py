"""Whether two rows of an eval really differ: nDCG@10 by ranx's paired Fisher randomization test over the test
queries, STS ρ by a paired bootstrap 95% interval of the difference; the p-values are corrected for the number
of comparisons in the report (Benjamini-Hochberg)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ranx.statistical_tests import fisher_randomization_test
from scipy.stats import bootstrap, false_discovery_control, spearmanr

from cone.eval.results import EvalResult

PERMUTATIONS = 10_000
RESAMPLES = 1_000
ALPHA = 0.05
SEED = 0


@dataclass(frozen=True)
class Comparison:
    """Row ``b`` against row ``a`` (its reference: the same model's plain row, or the baseline LM)."""

    a: str
    b: str
    ndcg_delta: float  # b - a
    ndcg_p: float  # two-sided, from PERMUTATIONS random swaps of the paired per-query scores
    ndcg_p_adjusted: float  # Benjamini-Hochberg over every comparison of the report
    sts_delta: float | None = None  # b - a, Spearman ρ
    sts_ci95: tuple[float, float] | None = None  # paired bootstrap over the STS pairs

    @property
    def ndcg_significant(self) -> bool:
        return self.ndcg_p_adjusted < ALPHA

    @property
    def sts_significant(self) -> bool | None:
        return None if self.sts_ci95 is None else not (self.sts_ci95[0] <= 0.0 <= self.sts_ci95[1])

    def to_json(self) -> dict:
        return {
            "a": self.a,
            "b": self.b,
            "ndcg_delta": self.ndcg_delta,
            "ndcg_p": self.ndcg_p,
            "ndcg_p_adjusted": self.ndcg_p_adjusted,
            "ndcg_significant": self.ndcg_significant,
            "sts_delta": self.sts_delta,
            "sts_ci95": list(self.sts_ci95) if self.sts_ci95 else None,
            "sts_significant": self.sts_significant,
        }


def pairs(results: list[EvalResult]) -> list[tuple[EvalResult, EvalResult]]:
    """What the report compares: each row with its model's plain row (same layer, no post-processing, Flat),
    and the regularized LM with the baseline on the same layer, post-processing and factory."""
    rows = [r for r in results if r.available and r.samples is not None]
    plain = {(r.model, r.layer): r for r in reversed(rows) if r.postprocess == "none" and r.factory == "Flat"}
    found = [(plain[(r.model, r.layer)], r) for r in rows if plain.get((r.model, r.layer)) not in (None, r)]
    key = {(r.model, r.layer, r.postprocess, r.factory): r for r in rows}
    for r in rows:
        if r.model == "baseline" and (other := key.get(("regularized", r.layer, r.postprocess, r.factory))):
            found.append((r, other))
    return found


def _sts_interval(a: np.ndarray, b: np.ndarray, gold: np.ndarray) -> tuple[float, float]:
    def delta(x: np.ndarray, y: np.ndarray, g: np.ndarray) -> float:
        return spearmanr(y, g).statistic - spearmanr(x, g).statistic

    found = bootstrap(
        (a, b, gold), delta, paired=True, vectorized=False, n_resamples=RESAMPLES, method="percentile", rng=SEED
    )
    return float(found.confidence_interval.low), float(found.confidence_interval.high)


def compare(results: list[EvalResult], sts_gold: list[float] | None) -> list[Comparison]:
    chosen = pairs(results)
    raw = []
    for a, b in chosen:
        p, _ = fisher_randomization_test(a.samples.ndcg, b.samples.ndcg, PERMUTATIONS, ALPHA, SEED)
        raw.append(max(float(p), 1.0 / PERMUTATIONS))  # no finite test says p = 0: its floor is 1 / permutations
    adjusted = false_discovery_control(raw) if raw else []
    comparisons = []
    for (a, b), p, p_adj in zip(chosen, raw, adjusted, strict=True):
        sts_delta = interval = None
        if sts_gold is not None and a.samples.sts is not None and b.samples.sts is not None:
            gold = np.asarray(sts_gold)
            sts_delta = float(spearmanr(b.samples.sts, gold).statistic - spearmanr(a.samples.sts, gold).statistic)
            interval = _sts_interval(a.samples.sts, b.samples.sts, gold)
        delta = float(b.samples.ndcg.mean() - a.samples.ndcg.mean())
        comparisons.append(Comparison(a.label, b.label, delta, p, float(p_adj), sts_delta, interval))
    return comparisons
