"""Similarity distributions: what scores a search user sees for random and for related pairs."""

from __future__ import annotations

import numpy as np

from cone.errors import InputError
from cone.geometry.instruments import as_matrix, unit_rows

HISTOGRAM_BINS = 100


def pair_cosines(x: object, y: object | None = None, n_pairs: int = 20_000, seed: int = 0) -> np.ndarray:
    """Cosines of ``n_pairs`` random pairs: (x_i, y_j) when ``y`` is given, else distinct (x_i, x_j).

    The distribution a search user sees for unrelated items: in a cone it sits in a narrow band
    near +1, so no absolute score means "related".
    """
    x = as_matrix(x)
    rng = np.random.default_rng(seed)
    i = rng.integers(0, x.shape[0], size=n_pairs)
    if y is None:
        if x.shape[0] < 2:
            raise InputError("need at least 2 rows for pairs")
        other, j = x, (i + rng.integers(1, x.shape[0], size=n_pairs)) % x.shape[0]
    else:
        other = as_matrix(y)
        j = rng.integers(0, other.shape[0], size=n_pairs)
    a = unit_rows(x[i].astype(np.float64))
    b = unit_rows(other[j].astype(np.float64))
    return (a * b).sum(axis=1)


def spread(values: np.ndarray) -> dict[str, float]:
    """Mean, std and the 1st/50th/99th percentiles of a sample of scores."""
    v = np.asarray(values, dtype=np.float64)
    p1, p50, p99 = np.percentile(v, [1, 50, 99])
    return {"mean": float(v.mean()), "std": float(v.std()), "p1": float(p1), "p50": float(p50), "p99": float(p99)}


def histogram(values: np.ndarray, bins: int = HISTOGRAM_BINS) -> dict[str, list[float]]:
    """Counts over ``bins`` equal bins of [-1, 1] (cosines), JSON-ready."""
    counts, edges = np.histogram(np.clip(values, -1.0, 1.0), bins=bins, range=(-1.0, 1.0))
    return {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts]}
