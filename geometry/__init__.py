"""Instruments that say whether an embedding space is healthy, and where each is blind."""

from cone.geometry.instruments import (
    INSTRUMENTS,
    Estimate,
    anisotropy,
    as_matrix,
    decorrelation,
    effective_rank,
    mean_vector_ratio,
    measure,
    moments,
    row_norms,
    sigreg,
    sigreg_centered,
    sigreg_noise_floor,
    top_pc_share,
    uniformity,
    unit_rows,
)
from cone.geometry.similarity import histogram, pair_cosines, spread

__all__ = [
    "Estimate",
    "INSTRUMENTS",
    "anisotropy",
    "as_matrix",
    "decorrelation",
    "effective_rank",
    "histogram",
    "measure",
    "mean_vector_ratio",
    "moments",
    "pair_cosines",
    "row_norms",
    "sigreg",
    "sigreg_centered",
    "sigreg_noise_floor",
    "spread",
    "top_pc_share",
    "uniformity",
    "unit_rows",
]
