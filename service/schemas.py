"""Pydantic models for every request and response of the service."""

from __future__ import annotations

import re

from pydantic import BaseModel, Field, field_validator

from cone.geometry.summary import Geometry
from cone.service.registry import SPREAD_DOCS

MAX_QUERY_CHARS = 1000
MAX_MODEL_CHARS = 200
MAX_K = 100
MAX_BODY_BYTES = 64 * 1024  # a request body above this is answered 413 before it is read (--max-body-bytes)
# "Not only white space" in the OpenAPI schema, with white space spelled out as ECMA-262 (the schema's regex
# dialect) defines it: Python's \s also counts \x1c-\x1f and \x85, so the two would disagree on "\x1e".
ECMA_WHITESPACE = "\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
NOT_BLANK = f"[^{ECMA_WHITESPACE}]"


class SearchQuery(BaseModel):
    q: str = Field(
        min_length=1,
        max_length=MAX_QUERY_CHARS,
        pattern=NOT_BLANK,
        description=f"query text, 1..{MAX_QUERY_CHARS} chars, not only white space",
    )
    k: int = Field(10, ge=1, le=MAX_K, description=f"number of hits, 1..{MAX_K}")

    @field_validator("q", mode="before")  # before the pattern, so a blank query gets this message
    @classmethod
    def not_blank(cls, value: object) -> object:
        if isinstance(value, str) and value and not re.search(NOT_BLANK, value):
            raise ValueError("query must not be empty or whitespace")
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate ("\ud800") is valid JSON but no text to search for
                raise ValueError("query is not valid Unicode text (it holds a lone surrogate)") from None
        return value


class SearchRequest(SearchQuery):
    model: str = Field(min_length=1, max_length=MAX_MODEL_CHARS, description="an index name from GET /models")

    @field_validator("k", mode="before")  # a query string's k is text by nature: SearchQuery's stays as it is
    @classmethod
    def json_integer(cls, value: object) -> object:
        """In a JSON body, k is what the README and the schema say, an integer written as one: lax validation would
        also take true as 1, "3" as 3 and 3.0 or 1e1 (JSON numbers with a fraction or an exponent) as 3 and 10."""
        if isinstance(value, bool | str | float):
            kind = {bool: "boolean", str: "string", float: "number with a fraction or an exponent"}[type(value)]
            raise ValueError(f"k must be a JSON integer, not a {kind}")
        return value


class SearchHit(BaseModel):
    rank: int
    doc_id: str
    title: str
    snippet: str
    score: float = Field(description="cosine similarity (BM25 score for bm25)")


class Spread(BaseModel):
    """This query's scores over the corpus: in a cone, min and max nearly meet."""

    min: float
    median: float
    max: float
    n: int = Field(
        description=f"documents it covers: the whole corpus up to {SPREAD_DOCS:,}, else the top {SPREAD_DOCS:,}"
    )


class SearchResponse(BaseModel):
    model: str
    synthetic: bool = Field(description="the index holds a deliberate degradation (cone:, rogue:) of a model's vectors")
    query: str
    k: int
    metric: str
    hits: list[SearchHit]
    spread: Spread


class BuildState(BaseModel):
    """A model whose indexes are still being built (``cone demo``): it joins the service when they are written."""

    model: str
    state: str = Field(description="queued | encoding (its corpus) | indexing (writing its indexes)")
    done: int = Field(description="corpus documents encoded so far")
    total: int = Field(description="documents in the corpus")
    seconds_left: float | None = Field(description="the encoding's time left at its rate so far; null before then")


class ModelInfo(BaseModel):
    name: str = Field(description="the index's name: what /search, /compare and /histogram take")
    model: str | None = Field(description="the model whose vectors it holds (the page groups indexes by it)")
    layer: str | int | None = Field(description="the model's space: last (its own output), emb, or a block number")
    index_factory: str | None = Field(
        description="the index type and its metric, TYPE@METRIC where the metric is not FAISS's inner product "
        "(Flat = exact; lance:IVF_PQ@l2, usearch:i8@cosine)"
    )
    available: bool
    reason: str | None
    dim: int | None
    n_docs: int | None
    postprocess: str | None
    synthetic: bool = Field(description="a deliberate degradation (cone:, rogue:) of a model's vectors, not a model")
    metric: str | None
    geometry: Geometry | None
    building: BuildState | None = Field(None, description="its build, while it is not served yet (cone demo)")


class ModelsResponse(BaseModel):
    models: list[ModelInfo]


class CompareResponse(BaseModel):
    query: str
    k: int
    results: list[SearchResponse]
    unavailable: list[ModelInfo]


class GeometryResponse(BaseModel):
    name: str
    geometry: Geometry = Field(description="instruments on the indexed (corrected) vectors")
    geometry_raw: Geometry = Field(description="instruments on the encoder's raw vectors")


class Histogram(BaseModel):
    name: str
    edges: list[float]
    counts: list[int]
    n_pairs: int
    mean: float
    std: float
    p1: float
    p50: float
    p99: float


class HistogramsResponse(BaseModel):
    histograms: list[Histogram]


class ErrorResponse(BaseModel):
    detail: str


class Status(BaseModel):
    status: str


class Readiness(Status):
    status: str = Field(description="loading | ready")
    available: int | None = Field(None, description="models that answer (once ready)")
    unavailable: int | None = Field(None, description="models listed with the reason they do not (once ready)")
    recovered: list[str] = Field(default_factory=list, description="indexes put back after an interrupted build")
    background: str | None = Field(
        None,
        description="cone demo's work beside the service: building | evaluating (every index built: the report "
        "is being written) | done | failed: REASON | stopped; null when nothing is built in the background",
    )
    building: list[BuildState] = Field(default_factory=list, description="models still to join, in build order")
    report: str | None = Field(None, description="where the eval report is served (/report), once written")


class ReloadResponse(BaseModel):
    models: int
    available: int
