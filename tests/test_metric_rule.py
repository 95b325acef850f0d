"""The rule under docs/results.md section 6, on a synthetic pure-offset cone, store by store. What a cone does to
a compressed code is decided by two of its properties: its step (fitted to each dimension's spread, or one grid for
every dimension?) and its score (does it carry the shared direction?).

Why: every code has an error e (x̂ = x + e). A cone u = c·m + s·x (s = sqrt(1 - c²)) shrinks the gaps between
neighbours by s² (50× at 0.99). Under ``dot`` the score is q·x + q·e, and a coned query is mostly the shared
direction m (q ≈ c·m), so q·e ≈ c·(e·m): the code's error along m lands on every score. Under ``l2`` (|q - x̂|²) the
error enters as (x - q)·e, and under ``cosine`` (x̂/|x̂|) as (q - x)·e to first order: x - q has no component along
m, so the shared part cancels and what is left shrinks by s. The error itself shrinks by s where the step follows
each dimension's spread (FAISS SQ's trained minimum and range per dimension, PQ's k-means centroids, residuals from
list centres), and not where one grid serves every dimension (USearch i8 and sqlite-vec's int8: 1/127 for every
coordinate; Qdrant's int8 and LanceDB's IVF_HNSW_SQ: one range over all coordinates, which the shared offset fills).
Against gaps of s², the error weighs (healthy: 1):

    step     score:       l2 or cosine                          inner product
    per dimension    1: holds (PQ, SQ4, Lance IVF_PQ,      1/s, 7×: coarse codes lose (PQ8, IVF4,PQ8, SQ4,
                     Qdrant pq under Euclid)                Lance IVF_PQ, Qdrant pq); SQ8's fine step bends
    one grid         1/s: part lost, how much by the       1/s², 50×: loses (USearch i8, Qdrant int8,
                     step (USearch i8, sqlite int8 most,    Lance IVF_HNSW_SQ)
                     Qdrant int8, IVF_HNSW_SQ least)

A range fitted over all coordinates narrows with the cone only as far as the offset's own spread over the
dimensions lets it (IVF_HNSW_SQ's, the coordinates' min to max, read back below: 0.66 of its healthy width
here), a fixed grid not at all.

Residual coding is not what saves a code: FAISS's IVF,PQ (residuals from the list centres) loses as much as PQ
under ``dot``. Qdrant (below): a "cosine" that is the inner product of vectors normalized before coding (the decoded
x̂ is never renormalized) is ``dot`` for the rule; its 1.5-bit binary and TurboQuant codes, which record a centre per
dimension, hold under Dot (below; under Cosine in docs/eval-stores-db; how Qdrant's scorer uses the centre is not
read here), as RaBitQ, which codes the direction from a centroid, holds under every metric; sign
codes with no centre (Qdrant's bq1, sqlite-vec's bit) lose under every metric. Floating-point codes (f16) err by
2^-11 of each coordinate: even 50× that is below the gaps.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import faiss
import numpy as np
import pytest

from cone.indexing.factory import build_codes
from cone.indexing.spec import parse_index_type

D, N, QUERIES, CLUSTERS = 64, 2048, 100, 16

# recall@10 against exact search of the same coned vectors, divided by the same type's recall on the healthy
# (c = 0) space. Measured (seed 0): the codes that lose keep 0.21-0.30 of their healthy recall (PQ8 0.24, IVF4,PQ8
# 0.29, lance:IVF_PQ@dot 0.30, usearch i8@dot 0.21), those that hold 0.94-1.04; the healthy recalls are 0.32-0.46
# (8 bytes for 64 dimensions) and 100 queries move recall@10 by about ±0.03, so a ratio below 0.5 is a loss no
# sampling explains and one above 0.85 is within the noise. Between the two lie the codes that lose part: one grid
# under l2 or cosine (usearch i8 0.74, sqlite int8 0.73, qdrant int8@l2 0.84) and FAISS SQ8 under the inner product
# (0.88, against 0.99 under l2): asserted as what they are, not as holding.
LOSES, HOLDS = 0.5, 0.85


def coned(c: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """u_i = normalize(c·m + sqrt(1 - c²)·x_i), x_i clustered unit vectors: documents and held-out queries."""
    rng = np.random.default_rng(seed)
    m = rng.standard_normal(D)
    m /= np.linalg.norm(m)
    centres = rng.standard_normal((CLUSTERS, D))
    x = centres[rng.integers(0, CLUSTERS, N + QUERIES)] + 0.6 * rng.standard_normal((N + QUERIES, D))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    u = c * m + np.sqrt(1 - c * c) * x
    u = (u / np.linalg.norm(u, axis=1, keepdims=True)).astype(np.float32)
    return u[:N], u[N:]


@pytest.fixture(scope="module")
def spaces() -> dict[float, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Healthy and coned (0.99): documents, queries and the exact top 10."""
    found = {}
    for c in (0.0, 0.99):
        docs, queries = coned(c)
        found[c] = docs, queries, build_codes(docs, parse_index_type("Flat")).search(queries, 10)[1]
    return found


def recall_at_10(codes, space: tuple[np.ndarray, np.ndarray, np.ndarray]) -> float:
    """The built codes' recall@10 against exact search of the space they were built on."""
    _, queries, exact = space
    rows = codes.search(queries, 10)[1]
    return float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(rows, exact, strict=True)]))


def recalls(spaces, factory: str, params: str = "") -> dict[float, float]:
    """The type's recall@10 against exact search on the healthy and the 0.99-coned space."""
    return {
        c: recall_at_10(build_codes(space[0], parse_index_type(factory), params), space) for c, space in spaces.items()
    }


def kept(spaces, factory: str, params: str = "") -> float:
    """The share of its healthy recall@10 the type keeps at a 0.99 cone."""
    recall = recalls(spaces, factory, params)
    return recall[0.99] / recall[0.0]


@pytest.mark.parametrize(("factory", "params"), [("PQ8", ""), ("IVF4,PQ8", "nprobe=4")])
def test_faiss_pq_loses_under_the_inner_product_with_or_without_residuals_and_holds_under_l2(spaces, factory, params):
    assert kept(spaces, factory, params) < LOSES
    assert kept(spaces, f"{factory}@l2", params) > HOLDS


def sq_ranges(codes) -> np.ndarray:
    """A FAISS scalar quantizer's trained range per dimension (its ``trained`` is every dimension's minimum, then
    every dimension's range)."""
    trained = faiss.vector_to_array(codes.index.sq.trained)
    return trained[codes.index.d :]


def test_faiss_sq_steps_per_dimension_so_it_holds_under_l2_and_bends_or_breaks_under_the_inner_product(spaces):
    """SQ keeps a trained minimum and range for every dimension: the shared offset goes into the minima, and the
    range, so the step, shrinks with the spread (by s = sqrt(1 - c²): read back). Under l2 that leaves nothing; under
    the inner product its error along m still weighs 1/s = 7× as much against the gaps: 4 bits lose, 8 bits bend
    (SQ8 keeps 0.88-0.90 of its healthy recall at seeds 0-2, 0.99-1.00 under l2; SQ4 0.30-0.32 and 0.98-1.00)."""
    healthy, cone = (sq_ranges(build_codes(spaces[c][0], parse_index_type("SQ8"))) for c in (0.0, 0.99))
    assert np.median(cone / healthy) == pytest.approx(np.sqrt(1 - 0.99**2), rel=0.2)
    assert kept(spaces, "SQ8@l2") > HOLDS and kept(spaces, "SQ4@l2") > HOLDS
    assert kept(spaces, "SQ4") < LOSES
    assert LOSES < kept(spaces, "SQ8") < kept(spaces, "SQ8@l2") - 0.05  # measured 0.10-0.12 below, seeds 0-2


def test_rabitq_centres_and_normalizes_before_its_bits_so_no_metric_loses(spaces):
    """RaBitQ codes the unit direction of x - centroid (the data's mean, read back, or the partition's centre), so
    the offset is gone before a bit is taken: FAISS's keeps 1.05 of its healthy recall by either metric (seed 0).
    LanceDB's IVF_RQ draws its rotation afresh each build (0.90-1.18 over four builds under each metric), so it is
    asserted not to lose, and its coned recall below a scan's 1.0 (its healthy one is 0.34-0.43: 1 bit a dimension)."""
    docs = spaces[0.99][0]
    codes = build_codes(docs, parse_index_type("RaBitQ"))
    assert faiss.vector_to_array(codes.index.center) == pytest.approx(docs.mean(axis=0), abs=1e-5)  # read back
    assert kept(spaces, "RaBitQ") > HOLDS and kept(spaces, "RaBitQ@l2") > HOLDS
    pytest.importorskip("lancedb")
    for metric in ("dot", "l2", "cosine"):
        recall = recalls(spaces, f"lance:IVF_RQ@{metric}")
        assert recall[0.99] < 0.9 and recall[0.99] / recall[0.0] > LOSES


@pytest.mark.parametrize("metric", ["dot", "l2", "cosine"])
def test_lance_builds_its_index_under_the_metric_asked_and_searches_through_it(spaces, metric):
    """What the rule's LanceDB half measures is the index: a table built under one metric and searched under another
    is searched by brute force (LanceDB logs the mismatch and scans), at recall 1.0, and the rule would hold for a
    reason that is not the code's."""
    pytest.importorskip("lancedb")
    codes = build_codes(spaces[0.0][0], parse_index_type(f"lance:IVF_PQ@{metric}"))
    table = codes.index
    (config,) = table.list_indices()
    assert str(table.index_stats(config.name).distance_type).lower() == metric  # read back from Lance itself
    assert recalls(spaces, f"lance:IVF_PQ@{metric}")[0.0] < 0.9  # 8 bytes for 64 dimensions: not an exhaustive scan


def test_lance_ivf_pq_loses_under_dot_and_holds_under_l2_and_cosine(spaces):
    pytest.importorskip("lancedb")
    assert kept(spaces, "lance:IVF_PQ@dot") < LOSES
    assert kept(spaces, "lance:IVF_PQ@l2") > HOLDS
    assert kept(spaces, "lance:IVF_PQ@cosine") > HOLDS


def lance_sq_bounds(table) -> list[tuple[float, float]]:
    """Every range an IVF_HNSW_SQ index of the table scaled its codes against, as Lance recorded it (the
    ``storage_metadata`` of the index's auxiliary file: ``{"dim": d, "num_bits": 8, "bounds": {"start", "end"}}``,
    one per quantizer, not one per dimension)."""
    number = rb"(-?[0-9.]+(?:[eE][-+]?[0-9]+)?)"
    pattern = re.compile(rb'bounds\\*":\{\\*"start\\*":' + number + rb',\\*"end\\*":' + number)
    found = []
    for aux in Path(table.uri).glob("_indices/*/auxiliary.idx"):
        found += [(float(a), float(b)) for a, b in pattern.findall(aux.read_bytes())]
    return found


@pytest.mark.parametrize(("metric", "loses"), [("dot", True), ("l2", False), ("cosine", False)])
def test_lance_ivf_hnsw_sq_is_one_range_for_every_dimension_and_loses_under_dot(spaces, metric, loses):
    """IVF_HNSW_SQ is a scalar quantizer, not a product one: one range over every coordinate of the raw vectors
    (read back: not a range per dimension, not residuals from the partition centre, under every metric), which the
    shared offset fills, so its step barely shrinks with the cone: under dot it loses (0.39-0.43 of its healthy
    recall at seeds 0-2), under l2 and cosine it keeps 0.90-0.93. Each table's own metric is read back and the coned
    recall is below a scan's 1.0: the graph and its codes were searched."""
    pytest.importorskip("lancedb")
    built = {c: build_codes(space[0], parse_index_type(f"lance:IVF_HNSW_SQ@{metric}")) for c, space in spaces.items()}
    recall = {c: recall_at_10(codes, spaces[c]) for c, codes in built.items()}
    docs, table = spaces[0.99][0], built[0.99].index
    (config,) = table.list_indices()
    assert str(table.index_stats(config.name).distance_type).lower() == metric
    assert recall[0.99] < 0.95
    assert lance_sq_bounds(table) == [pytest.approx((docs.min(), docs.max()), abs=1e-6)]
    share = recall[0.99] / recall[0.0]
    assert share < LOSES if loses else share > HOLDS


def test_usearch_scalar_codes_lose_under_dot_where_their_rounding_is_coarse(spaces):
    """i8's error along m is about its step, 1/127, and under ip it lands on every score; f16's is 2^-11 and
    no metric sees it."""
    pytest.importorskip("usearch")
    assert kept(spaces, "usearch:exact:i8@dot") < LOSES
    assert kept(spaces, "usearch:exact:f16@dot") > HOLDS
    assert kept(spaces, "usearch:exact:f16@cosine") > HOLDS


def test_usearch_i8_is_one_grid_so_l2_and_cosine_lose_part_of_what_dot_loses(spaces):
    """USearch's i8 is each coordinate times 127, cut to an integer (read back: every decoded coordinate a multiple of
    1/127 on the coned vectors): one step for every dimension, whatever their spread. Under l2 and cosine its error
    along m cancels and what is left weighs 1/s against the gaps: it keeps 0.73-0.74 of its healthy recall under
    both (seeds 0-2; sqlite-vec's 'unit' int8, the same grid, 0.73), neither whole nor lost as under dot (0.21)."""
    pytest.importorskip("usearch")
    codes = build_codes(spaces[0.99][0], parse_index_type("usearch:exact:i8@l2"))
    grid = np.asarray(codes.index.get(np.arange(codes.ntotal), dtype=np.float32)) * 127
    assert np.abs(grid - np.round(grid)).max() < 1e-3 and np.abs(grid).max() > 10
    l2, cosine = kept(spaces, "usearch:exact:i8@l2"), kept(spaces, "usearch:exact:i8@cosine")
    assert LOSES < l2 < HOLDS and LOSES < cosine < HOLDS and abs(l2 - cosine) < 0.1


# Qdrant (cone.indexing.qdrant_store): the codes searched through the graph (hnsw_ef well above k) without rescoring,
# so that what is measured is the code. Qdrant's Cosine is the inner product of the vectors it normalized on upsert
# (its segments record distance_type Dot), so under Cosine a code is scored as under Dot. What decides is read from
# the shard's own quantization metadata: int8 keeps one scale and offset for every dimension and PQ codes raw
# coordinates (both lose under Dot and Cosine, not under Euclid); the 1.5- and 2-bit binary encodings keep each
# dimension's mean and deviation and TurboQuant a shift per (rotated) dimension: centred per dimension, they hold
# at every metric; one-bit codes are signs, which a 0.99 cone makes all alike, so no metric saves them.
QDRANT_CODE = "hnsw_ef=512,rescore=false"


@pytest.mark.parametrize(
    ("factory", "loses"),
    [
        ("qdrant:int8@dot", True),
        ("qdrant:int8@cosine", True),
        ("qdrant:int8@l2", False),
        ("qdrant:pq16@dot", True),
        ("qdrant:pq16@cosine", True),
        ("qdrant:bq1@l2", True),
    ],
)
def test_qdrant_codes_without_a_per_dimension_centre_lose_under_dot_and_cosine(spaces, factory, loses):
    pytest.importorskip("qdrant_edge")
    share = kept(spaces, factory, QDRANT_CODE)
    assert share < LOSES if loses else share > LOSES  # int8 under Euclid keeps 0.84 of its healthy recall (seed 0)


def test_qdrant_pq_holds_under_euclid(spaces):
    pytest.importorskip("qdrant_edge")
    assert kept(spaces, "qdrant:pq16@l2", QDRANT_CODE) > HOLDS


@pytest.mark.parametrize(("factory", "centre"), [("qdrant:bq1.5@dot", "vector_stats"), ("qdrant:tq1@dot", "shift")])
def test_qdrant_codes_centred_per_dimension_hold_under_the_inner_product(spaces, factory, centre):
    pytest.importorskip("qdrant_edge")
    assert kept(spaces, factory, QDRANT_CODE) > HOLDS
    codes = build_codes(spaces[0.99][0], parse_index_type(factory), QDRANT_CODE)
    meta = [json.loads(f.read_text()) for f in codes.path.glob("segments/*/vector_storage/quantized.meta.json")]
    (counted,) = [m for m in meta if m["vector_parameters"].get("count")]  # the indexed segment's codes
    if centre == "vector_stats":
        means = [s["mean"] for s in counted["vector_stats"]["elements_stats"]]
    else:
        means = counted["error_correction"]["shift"]
    assert np.abs(means).max() > 0.05  # a centre fitted on the coned vectors, not zero
    codes.close()


def test_sqlite_vec_has_no_inner_product_and_its_int8_keeps_part_alike_under_l2_and_cosine(spaces):
    """vec0 offers l2 and cosine only; 'unit' int8 has one fixed step (1/127) for every coordinate and no centre, so
    under both it keeps part, about 0.73 of its healthy recall (seed 0; USearch's i8, the same grid, 0.74), neither
    whole nor lost; sign bits lose."""
    pytest.importorskip("sqlite_vec")
    l2, cosine = kept(spaces, "sqlite:int8@l2"), kept(spaces, "sqlite:int8@cosine")
    assert LOSES < l2 < HOLDS and LOSES < cosine < HOLDS and abs(l2 - cosine) < 0.1
    assert kept(spaces, "sqlite:bit") < LOSES
