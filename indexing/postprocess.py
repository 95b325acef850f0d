"""Geometry corrections fitted on corpus vectors and applied identically to queries.

none; center (subtract the corpus mean); whiten (BERT-whitening, Su et al. 2021:
x -> (x - mu) U S^-1/2 from cov = U S U^T); abtt:K (all-but-the-top, Mu & Viswanath 2018:
remove the mean and the projections on the top K principal directions).
"""

from __future__ import annotations

import re

import numpy as np

from cone.errors import InputError
from cone.geometry import moments

_ABTT = re.compile(r"^abtt:(\d+)$")
WHITEN_EPS = 1e-6


def parse(spec: str) -> str:
    """Validate a post-processing name; returns it normalised."""
    spec = spec.strip()
    if spec in ("none", "center", "whiten"):
        return spec
    match = _ABTT.match(spec)
    if match and int(match.group(1)) >= 1:
        return spec
    raise InputError(f"unknown --postprocess {spec!r}; choose none, center, whiten or abtt:K (K >= 1)")


def param_names(spec: str) -> list[str]:
    """The arrays ``fit`` returns for ``spec``, sorted."""
    spec = parse(spec)
    extra = {"none": [], "center": [], "whiten": ["transform"]}.get(spec, ["directions"])
    return sorted(extra + (["mean"] if spec != "none" else []))


def fit(vectors: np.ndarray, spec: str) -> dict[str, np.ndarray]:
    """The parameters of ``spec`` on the corpus vectors (float64 arrays, saved with the index)."""
    spec = parse(spec)
    if spec == "none":
        return {}
    stats = moments(vectors)
    params = {"mean": stats.mean}
    if spec == "whiten":
        eigval, eigvec = np.linalg.eigh(stats.cov)
        params["transform"] = eigvec / np.sqrt(np.maximum(eigval, 0.0) + WHITEN_EPS)
    elif spec.startswith("abtt:"):
        k = int(spec.split(":")[1])
        if k >= vectors.shape[1]:
            raise InputError(f"abtt:{k} removes every direction of a {vectors.shape[1]}-dim space")
        _, eigvec = np.linalg.eigh(stats.cov)
        params["directions"] = eigvec[:, ::-1][:, :k].copy()
    return params


def apply(vectors: np.ndarray, params: dict[str, np.ndarray]) -> np.ndarray:
    """Apply fitted parameters; the output is a new float32 array (not yet normalised)."""
    x = np.asarray(vectors, dtype=np.float64)
    if "mean" in params:
        x = x - params["mean"]
    if "transform" in params:
        x = x @ params["transform"]
    if "directions" in params:
        u = params["directions"]
        x = x - (x @ u) @ u.T
    return x.astype(np.float32)
