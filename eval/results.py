"""One typed result per (model, layer, post-processing), and the one list of geometry keys the eval reports."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from cone.geometry import INSTRUMENTS

# The index's instruments the eval copies into each dense result (from the manifest of the index it searched).
GEOMETRY_KEYS = (*INSTRUMENTS, "sigreg_x_floor", "uniformity")


@dataclass(frozen=True)
class CosineSamples:
    """The raw cosines behind a result's similarity metrics: kept for the figures, never written to JSON."""

    random: np.ndarray  # random (test query, document) pairs
    relevant: np.ndarray  # (test query, relevant document) pairs


@dataclass
class EvalResult:
    model: str
    postprocess: str
    index: str | None  # the index folder's name; None when the model is unavailable
    layer: str | int = "last"
    reason: str | None = None  # why the model is unavailable; None when it was evaluated
    metrics: dict[str, float | int | None] = field(default_factory=dict)
    samples: CosineSamples | None = field(default=None, repr=False)

    @property
    def available(self) -> bool:
        return self.reason is None

    @property
    def label(self) -> str:
        """model[layer]+postprocess, as the report's tables and figures name a result."""
        name = self.model if self.layer == "last" else f"{self.model}[{self.layer}]"
        return name if self.postprocess == "none" else f"{name}+{self.postprocess}"

    def to_json(self) -> dict:
        """The report.json record (docs/eval.md); the raw samples stay out."""
        return {
            "model": self.model,
            "layer": self.layer,
            "postprocess": self.postprocess,
            "index": self.index,
            "available": self.available,
            "reason": self.reason,
            "metrics": self.metrics,
        }
