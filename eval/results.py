"""One typed result per (model, layer, post-processing), and the one list of geometry keys the eval reports."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from cone.geometry import INSTRUMENTS
from cone.indexing.postprocess import is_synthetic

# The index's instruments the eval copies into each dense result (from the manifest of the index it searched).
GEOMETRY_KEYS = (*INSTRUMENTS, "sigreg_x_floor", "uniformity")


@dataclass(frozen=True)
class Samples:
    """The raw values behind a result's metrics: for the figures and the significance tests, never in JSON."""

    ndcg: np.ndarray  # nDCG@10 of each test query, in sorted query-id order
    random: np.ndarray | None = None  # cosines of random (test query, document) pairs
    relevant: np.ndarray | None = None  # cosines of (test query, relevant document) pairs
    sts: np.ndarray | None = None  # the STS pairs' cosines, in file order


@dataclass
class EvalResult:
    model: str
    postprocess: str
    index: str | None  # the index folder's name; None when the model is unavailable
    layer: str | int = "last"
    reason: str | None = None  # why the model is unavailable; None when it was evaluated
    metrics: dict[str, float | int | None] = field(default_factory=dict)
    samples: Samples | None = field(default=None, repr=False)
    factory: str = "Flat"  # the FAISS index type searched

    @property
    def synthetic(self) -> bool:
        """A deliberate degradation (cone:, rogue:) of a real model's vectors, not a model of its own."""
        return is_synthetic(self.postprocess)

    @property
    def available(self) -> bool:
        return self.reason is None

    @property
    def label(self) -> str:
        """model[layer]+postprocess, as the report's tables and figures name a result."""
        name = self.model if self.layer == "last" else f"{self.model}[{self.layer}]"
        name = name if self.postprocess == "none" else f"{name}+{self.postprocess}"
        name = name if self.factory == "Flat" else f"{name} [{self.factory}]"
        return f"{name} (synthetic)" if self.synthetic else name

    def to_json(self) -> dict:
        """The report.json record (docs/eval.md); the raw samples stay out."""
        return {
            "model": self.model,
            "layer": self.layer,
            "postprocess": self.postprocess,
            "factory": self.factory,
            "synthetic": self.synthetic,
            "index": self.index,
            "available": self.available,
            "reason": self.reason,
            "metrics": self.metrics,
        }
