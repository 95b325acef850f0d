"""Whether two rows of an eval really differ: nDCG@10 by a paired randomization (sign-flip) test over the test
queries, STS ρ by a paired bootstrap 95% interval of the difference; the p-values are corrected for the number
of comparisons in the report (Benjamini-Hochberg)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

import numpy as np
from scipy.stats import bootstrap, false_discovery_control, permutation_test, rankdata, spearmanr

from cone.encoders.base import TORCH, layer_order
from cone.eval import metrics
from cone.eval.results import EvalResult, Samples
from cone.indexing.postprocess import is_synthetic
from cone.indexing.spec import EXACT, IndexSpec

PERMUTATIONS = 10_000
RESAMPLES = 1_000
DRAWS_AT_ONCE = 100
ALPHA = 0.05
SEED = 0


@dataclass(frozen=True)
class Delta:
    """One figure's difference in a comparison (b - a) and its paired bootstrap 95% interval: an STS set's ρ
    (named by the set), the threshold F1 or the hubness skew."""

    name: str
    delta: float
    ci95: tuple[float, float]

    @property
    def significant(self) -> bool:
        return not (self.ci95[0] <= 0.0 <= self.ci95[1])

    def to_json(self) -> dict:
        return {"name": self.name, "delta": self.delta, "ci95": list(self.ci95), "significant": self.significant}


@dataclass(frozen=True)
class Comparison:
    """Row ``b`` against row ``a`` (its reference: the same model's plain row, the layer below, the baseline
    LM, or the same row run by torch)."""

    a: str
    b: str
    ndcg_delta: float  # b - a
    ndcg_p: float  # two-sided, from PERMUTATIONS random swaps of the paired per-query scores
    ndcg_p_adjusted: float  # Benjamini-Hochberg over every comparison of the report
    sts: tuple[Delta, ...] = ()  # one per STS set both rows were measured on
    threshold_f1: Delta | None = None  # both rows exact (the cosines of relevant and random pairs measured)
    hubness_skew: Delta | None = None

    @property
    def ndcg_significant(self) -> bool:
        return self.ndcg_p_adjusted < ALPHA

    def to_json(self) -> dict:
        return {
            "a": self.a,
            "b": self.b,
            "ndcg_delta": self.ndcg_delta,
            "ndcg_p": self.ndcg_p,
            "ndcg_p_adjusted": self.ndcg_p_adjusted,
            "ndcg_significant": self.ndcg_significant,
            "sts": [d.to_json() for d in self.sts],
            "threshold_f1": self.threshold_f1 and self.threshold_f1.to_json(),
            "hubness_skew": self.hubness_skew and self.hubness_skew.to_json(),
        }


def _plain_spec(spec: IndexSpec) -> IndexSpec:
    """The plain row of a row's model, runtime and layer: no post-processing, the exact Flat index."""
    return replace(spec, postprocess="none").with_type(EXACT)


def _plain(rows: list[EvalResult]) -> dict[IndexSpec, EvalResult]:
    """Each (model, runtime, layer)'s plain row, by its spec."""
    return {r.spec: r for r in reversed(rows) if r.spec == _plain_spec(r.spec)}


def pairs(results: list[EvalResult]) -> list[tuple[EvalResult, EvalResult]]:
    """What the report compares: each row with its model's plain row (same runtime and layer, no
    post-processing, Flat); each layer's plain row with the model's next shallower one; the regularized LM with
    the baseline on the same layer, post-processing and factory; and a row run by ONNX / OpenVINO with the same
    row run by torch (the quality cost of the faster runtime); and a repaired row (``cone:0.99+center``) with
    the damaged row it repairs (``cone:0.99``, same factory) and with the healthy row of that factory (the model
    with no post-processing, same factory): "improves" and "repairs" are two different claims. Rows are found by
    their specs: a row's counterpart is its spec with one field changed."""
    rows = [r for r in results if r.available and r.samples is not None]
    plain = _plain(rows)
    own = [(plain.get(_plain_spec(r.spec)), r) for r in rows]
    found = [(a, b) for a, b in own if a not in (None, b)]
    for model, runtime in dict.fromkeys((r.model, r.spec.runtime) for r in rows):
        depth = [r for spec, r in plain.items() if (spec.model, spec.runtime) == (model, runtime)]
        found += list(itertools.pairwise(sorted(depth, key=lambda r: layer_order(r.layer))))
    key = {r.spec: r for r in rows}
    for r in rows:
        if r.model == "baseline" and (other := key.get(replace(r.spec, model="regularized"))):
            found.append((r, other))
        if r.spec.runtime != TORCH and (reference := key.get(replace(r.spec, runtime=TORCH))):
            found.append((reference, r))
        found += [pair for pair in _damage_and_repair(r, key) if pair[0] is not plain.get(_plain_spec(r.spec))]
    return found


def _damage_and_repair(row: EvalResult, key: dict[IndexSpec, EvalResult]) -> list[tuple[EvalResult, EvalResult]]:
    """What a synthetic degradation costs each index type and what a repair gives back: (healthy, damaged) for a
    degraded row (cone:C [PQ32] against [PQ32]); (damaged, repaired) and (healthy, repaired) for a row whose
    post-processing ends in a repair stage after a degradation (cone:C+center), when the other rows were measured."""
    if not is_synthetic(row.postprocess):
        return []
    *before, last = row.postprocess.split("+")
    damage = "+".join(before)
    if is_synthetic(last):  # the row is itself a damage
        specs: tuple[str, ...] = ("none",)
    else:  # a repair stage after a damage
        specs = (damage, "none") if before and is_synthetic(damage) else ()
    found = []
    for spec in specs:
        if (other := key.get(replace(row.spec, postprocess=spec))) is not None:
            found.append((other, row))
    return found


def _centered_ranks(x: np.ndarray, axis: int) -> np.ndarray:
    ranks = rankdata(x, axis=axis)  # ties averaged, as spearmanr ranks them
    return ranks - ranks.mean(axis=axis, keepdims=True)


def _pearson(rx: np.ndarray, rg: np.ndarray, axis: int) -> np.ndarray:
    return (rx * rg).sum(axis=axis) / np.sqrt((rx * rx).sum(axis=axis) * (rg * rg).sum(axis=axis))


def _sts_interval(a: np.ndarray, b: np.ndarray, gold: np.ndarray) -> tuple[float, float]:
    def delta(x: np.ndarray, y: np.ndarray, g: np.ndarray, axis: int = -1) -> np.ndarray:
        """Δρ of every resample at once: Spearman's ρ is the Pearson correlation of the ranks (spearmanr's
        definition), and the gold's ranks serve both sides. spearmanr takes one pair per call, and its Python loop
        over the resamples was most of an eval's comparisons (issue 43)."""
        rg = _centered_ranks(g, axis)
        return _pearson(_centered_ranks(y, axis), rg, axis) - _pearson(_centered_ranks(x, axis), rg, axis)

    found = bootstrap(
        (a, b, gold), delta, paired=True, vectorized=True, n_resamples=RESAMPLES, method="percentile", rng=SEED
    )
    return float(found.confidence_interval.low), float(found.confidence_interval.high)


def _sts_deltas(a: EvalResult, b: EvalResult, sts_gold: dict[str, list[float]]) -> tuple[Delta, ...]:
    deltas = []
    for name, scores in sts_gold.items():
        if a.samples.sts and b.samples.sts and name in a.samples.sts and name in b.samples.sts:
            x, y, gold = a.samples.sts[name], b.samples.sts[name], np.asarray(scores)
            delta = float(spearmanr(y, gold).statistic - spearmanr(x, gold).statistic)
            deltas.append(Delta(name, delta, _sts_interval(x, y, gold)))
    return tuple(deltas)


def _draw_counts(rng: np.random.Generator, n: int, draws: int) -> np.ndarray:
    """How many times each of n items is picked in each of ``draws`` resamples of n with replacement."""
    return _binned(rng.integers(0, n, size=(draws, n)), n)


def _binned(bins: np.ndarray, n_bins: int) -> np.ndarray:
    """Per row of bin numbers, how many fall in each bin."""
    offsets = bins + n_bins * np.arange(len(bins))[:, None]
    return np.bincount(offsets.ravel(), minlength=len(bins) * n_bins).reshape(len(bins), n_bins).astype(np.float64)


def _interval(name: str, delta: float, draws: np.ndarray) -> Delta:
    low, high = np.percentile(draws, [2.5, 97.5])
    return Delta(name, delta, (float(low), float(high)))


def _f1_delta(a: Samples, b: Samples) -> Delta | None:
    """Δ threshold F1 and its percentile interval over RESAMPLES draws of the pairs, the relevant and the random
    ones each resampled (the F1 weighs the two classes equally), the same draw for both rows: the pairs are the
    same (query, document) pairs in both. Drawn by hand, not by scipy's bootstrap: each pair's threshold bin is
    found once and a draw only counts bins, where scipy would sort 21,000 scores a thousand times per comparison."""
    if any(s.relevant is None or s.random is None for s in (a, b)):
        return None
    if (len(a.relevant), len(a.random)) != (len(b.relevant), len(b.random)):
        return None
    binned = []
    for s in (a, b):
        thresholds = np.unique(s.relevant)[::-1]
        binned.append([metrics.threshold_bins(thresholds, x) for x in (s.relevant, s.random)] + [len(thresholds) + 1])
    rng = np.random.default_rng(SEED)
    draws = []
    for _ in range(RESAMPLES // DRAWS_AT_ONCE):  # in pieces: a thousand draws of 20,000 pairs at once is 160 MB
        picks = [rng.integers(0, len(x), size=(DRAWS_AT_ONCE, len(x))) for x in (a.relevant, a.random)]
        best = [metrics.best_f1(_binned(rel[picks[0]], n), _binned(rand[picks[1]], n))[1] for rel, rand, n in binned]
        draws.append(best[1] - best[0])
    delta = metrics.threshold_f1(b.relevant, b.random)[1] - metrics.threshold_f1(a.relevant, a.random)[1]
    return _interval("threshold_f1", delta, np.concatenate(draws))


def _hubness_delta(a: Samples, b: Samples) -> Delta | None:
    """Δ hubness skew and its percentile interval over RESAMPLES draws of the queries, the same draw for both."""
    if a.top is None or b.top is None or len(a.top) != len(b.top):
        return None
    counts = _draw_counts(np.random.default_rng(SEED), len(a.top), RESAMPLES)

    def skews(s: Samples, weights: np.ndarray | None) -> np.ndarray:
        return metrics.occurrence_skew(metrics.k_occurrences(s.top, s.n_docs, weights))

    delta = float(skews(b, None)[0] - skews(a, None)[0])
    return _interval("hubness_skew", delta, skews(b, counts) - skews(a, counts))


def _mean_difference(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(b - a, axis=axis)


def paired_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided p of mean(b - a) under random swaps of each pair (Fisher's randomization test, PERMUTATIONS
    draws, seeded). scipy's, not ranx's: ranx draws its permutations in numba threads whose generators its seed
    never reaches, so the same rows gave a different p on every call. p is never 0: twice the smaller tail's
    (hits + 1) / (draws + 1), at least 2 / 10,001."""
    found = permutation_test(
        (np.asarray(a), np.asarray(b)),
        _mean_difference,
        permutation_type="samples",
        vectorized=True,
        n_resamples=PERMUTATIONS,
        rng=SEED,
    )
    return float(found.pvalue)


def compare(results: list[EvalResult], sts_gold: dict[str, list[float]]) -> list[Comparison]:
    """Every pair of ``pairs`` tested: nDCG@10 over the test queries, and Δρ on each STS set (name -> gold)."""
    return compare_pairs(pairs(results), sts_gold)


def compare_pairs(chosen: list[tuple[EvalResult, EvalResult]], sts_gold: dict[str, list[float]]) -> list[Comparison]:
    """Each (a, b) tested as ``compare`` does, the p-values adjusted over ``chosen``."""
    raw = []
    for a, b in chosen:
        raw.append(paired_p(a.samples.ndcg, b.samples.ndcg))
    adjusted = false_discovery_control(raw) if raw else []
    comparisons = []
    for (a, b), p, p_adj in zip(chosen, raw, adjusted, strict=True):
        delta = float(b.samples.ndcg.mean() - a.samples.ndcg.mean())
        comparisons.append(
            Comparison(
                a.label,
                b.label,
                delta,
                p,
                float(p_adj),
                _sts_deltas(a, b, sts_gold),
                _f1_delta(a.samples, b.samples),
                _hubness_delta(a.samples, b.samples),
            )
        )
    return comparisons
