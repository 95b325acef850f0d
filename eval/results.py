"""One typed result per (model, layer, post-processing), and the one list of geometry keys the eval reports."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from cone.geometry import INSTRUMENTS
from cone.indexing.postprocess import is_synthetic
from cone.indexing.spec import IndexSpec

# The index's instruments the eval copies into each dense result (from the manifest of the index it searched).
GEOMETRY_KEYS = (*INSTRUMENTS, "sigreg_x_floor", "uniformity")
STS_MEAN = "sts_mean_spearman"  # the mean over the STS sets, as MTEB reports it, when there are several


def sts_name(text: str) -> str:
    """An STS set's name as it appears in metric keys: lower case, [a-z0-9_]."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_") or "sts"


def sts_key(name: str) -> str:
    """The metric key of one STS set's Spearman ρ (stsb_spearman for STS-B)."""
    return f"{name}_spearman"


def sts_keys(metrics: dict) -> list[str]:
    """The STS keys of a row, each set's first, then their mean."""
    found = [k for k in metrics if k.endswith("_spearman") and k != STS_MEAN]
    return found + ([STS_MEAN] if STS_MEAN in metrics else [])


def headline_sts_key(metrics: dict) -> str | None:
    """The one STS figure a plot shows: the mean over the sets, or the only set's ρ."""
    keys = sts_keys(metrics)
    return keys[-1] if keys else None


@dataclass(frozen=True)
class Samples:
    """The raw values behind a result's metrics: for the figures and the significance tests, never in JSON."""

    ndcg: np.ndarray  # nDCG@10 of each test query, in sorted query-id order
    random: np.ndarray | None = None  # cosines of random (test query, document) pairs
    relevant: np.ndarray | None = None  # cosines of (test query, relevant document) pairs
    sts: dict[str, np.ndarray] | None = None  # each STS set's pair cosines, in file order
    top: np.ndarray | None = None  # every query's top 10 rows (hubness), in sorted query-id order
    n_docs: int = 0  # documents in the index the top rows point into


@dataclass
class EvalResult:
    """One row of the eval: the index it searched (``spec``), its folder's name (None when the model or the type
    is unavailable, ``reason`` saying why), its metrics and the samples behind them."""

    spec: IndexSpec
    index: str | None
    reason: str | None = None
    metrics: dict[str, float | int | None] = field(default_factory=dict)
    samples: Samples | None = field(default=None, repr=False)

    @property
    def model(self) -> str:
        return self.spec.model

    @property
    def postprocess(self) -> str:
        return self.spec.postprocess

    @property
    def layer(self) -> str | int:
        return self.spec.layer

    @property
    def factory(self) -> str:
        """The index type searched, with its metric (Flat: the exact reference)."""
        return self.spec.factory

    @property
    def runtime(self) -> str:
        """What ran the encoder (Runtime.tag: torch, openvino-int8, ...)."""
        return self.spec.runtime.tag

    @property
    def synthetic(self) -> bool:
        """A deliberate degradation (cone:, rogue:) of a real model's vectors, not a model of its own."""
        return is_synthetic(self.postprocess)

    @property
    def available(self) -> bool:
        return self.reason is None

    @property
    def label(self) -> str:
        """How the report's tables and figures name the row (cone.indexing.spec.IndexSpec.label)."""
        return self.spec.label

    def to_json(self) -> dict:
        """The report.json record (docs/eval.md); the raw samples stay out."""
        return {
            "model": self.model,
            "layer": self.layer,
            "postprocess": self.postprocess,
            "factory": self.factory,
            "runtime": self.runtime,
            "synthetic": self.synthetic,
            "index": self.index,
            "available": self.available,
            "reason": self.reason,
            "metrics": self.metrics,
        }
