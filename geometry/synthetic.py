"""Five synthetic distributions, each a failure that some instrument cannot see."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from cone.errors import InputError
from cone.geometry.instruments import measure, sigreg_noise_floor

CONE_OFFSET = 10.0  # distance of the cone's apex point from the origin, in noise units
CONE_NOISE = 1.0
RANK_K = 8
REDUNDANT_SOURCES = 8
POINT_NOISE = 1e-3


def gaussian(n: int, d: int, rng: np.random.Generator) -> np.ndarray:
    """Isotropic N(0, I): the target every instrument should call healthy."""
    return rng.standard_normal((n, d))


def cone(n: int, d: int, rng: np.random.Generator) -> np.ndarray:
    """Isotropic noise around a point far from the origin: every vector points one way."""
    apex = rng.standard_normal(d)
    apex *= CONE_OFFSET / np.linalg.norm(apex) * np.sqrt(d) / 4
    return apex + CONE_NOISE * rng.standard_normal((n, d))


def rank_collapse(n: int, d: int, rng: np.random.Generator) -> np.ndarray:
    """Zero-mean data in a random k-dim subspace, scaled to the Gaussian's total variance."""
    basis, _ = np.linalg.qr(rng.standard_normal((d, RANK_K)))
    return rng.standard_normal((n, RANK_K)) @ basis.T * np.sqrt(d / RANK_K)


def redundant(n: int, d: int, rng: np.random.Generator) -> np.ndarray:
    """A few independent sources, each copied into many dimensions with mixing weights."""
    sources = rng.standard_normal((n, REDUNDANT_SOURCES))
    owner = np.arange(d) % REDUNDANT_SOURCES
    weights = 1.0 + 0.1 * rng.standard_normal(d)
    noise = 0.1 * rng.standard_normal((n, d))
    return sources[:, owner] * weights + noise


def point(n: int, d: int, rng: np.random.Generator) -> np.ndarray:
    """Collapse to a point: one vector plus tiny isotropic jitter."""
    return rng.standard_normal(d) + POINT_NOISE * rng.standard_normal((n, d))


DISTRIBUTIONS: dict[str, Callable[[int, int, np.random.Generator], np.ndarray]] = {
    "gaussian": gaussian,
    "cone": cone,
    "rank_collapse": rank_collapse,
    "redundant": redundant,
    "point": point,
}


def sample(name: str, n: int = 4096, d: int = 256, seed: int = 0) -> np.ndarray:
    """Draw ``n`` rows of distribution ``name`` in float32, reproducibly from ``seed``."""
    if name not in DISTRIBUTIONS:
        raise InputError(f"unknown distribution {name!r}; choose from {', '.join(DISTRIBUTIONS)}")
    return DISTRIBUTIONS[name](n, d, np.random.default_rng(seed)).astype(np.float32)


def synthetic_report(n: int = 4096, d: int = 256, seed: int = 0) -> dict:
    """The blind-spot proof: every instrument (and the centered-SigReg bug) on each distribution."""
    if n < 2 or d < 2:
        raise InputError("--n and --d must both be at least 2")
    return {
        "noise_floor": sigreg_noise_floor(n, d),
        "distributions": {
            name: measure(sample(name, n, d, seed), with_centered=True).model_dump() for name in DISTRIBUTIONS
        },
    }
