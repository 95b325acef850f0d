"""The instruments' results as typed records: what ``measure`` returns, an index's manifest keeps and the service
answers with. Strict: a count is an int (never a boolean), a measure a finite number."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, NonNegativeInt


def _integral(value: object) -> object:
    """Manifests written before the instruments were typed stored n and d as floats (5183.0): still a count."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Count = Annotated[int, BeforeValidator(_integral), Field(ge=0)]


class Record(BaseModel):
    """Frozen, strict, no NaN or inf; unknown keys refused (a key that no reader reads is a damaged file)."""

    model_config = ConfigDict(frozen=True, strict=True, allow_inf_nan=False, extra="forbid")


class Geometry(Record):
    """Every instrument on one (N, d) matrix (``cone.geometry.measure``)."""

    n: Count
    d: Count
    anisotropy: float = Field(description="mean cosine over distinct pairs (≈ 0 healthy, → 1 in a cone)")
    decorrelation: float = Field(description="mean |off-diagonal Pearson correlation| (≈ 0 healthy)")
    effective_rank: float = Field(description="exp entropy of the centered singular values (≈ d healthy)")
    sigreg: float = Field(description="Epps–Pulley distance of random 1-D projections to N(0, 1), uncentered")
    sigreg_noise_floor: float
    sigreg_x_floor: float = Field(description="sigreg / its noise floor at this N and d")
    row_norm_mean: float
    row_norm_std: float
    mean_vector_ratio: float = Field(description="‖mean row‖ / mean ‖row‖: the shared offset's share")
    top_pc_share: float = Field(description="share of the centered variance on the first principal direction")
    uniformity: float = Field(description="log E exp(-2‖u - v‖²) over random unit-row pairs (Wang & Isola)")
    uniformity_stderr: float
    sigreg_centered: float | None = Field(
        None, description="SigReg after centering (the bug the synthetic shows)", exclude_if=lambda v: v is None
    )


def _edges_one_longer(histogram: Histogram) -> Histogram:
    if len(histogram.edges) != len(histogram.counts) + 1 or not histogram.counts:
        raise ValueError("a histogram needs edges one longer than counts")
    return histogram


class Histogram(Record):
    edges: list[float]
    counts: list[NonNegativeInt]


class PairCosines(Record):
    """Spread and histogram of the cosines between random distinct documents, as an index scores them."""

    mean: float
    std: float
    p1: float
    p50: float
    p99: float
    n_pairs: NonNegativeInt
    histogram: Annotated[Histogram, AfterValidator(_edges_one_longer)]
