"""The one-pass / Gram-matrix instruments give the values the old implementation gave.

Values only, never time: speed is measured by benchmarks/geometry_bench.py (docs/benchmarks.md).
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from cone.errors import InputError
from cone.geometry import decorrelation, effective_rank, measure, sigreg_noise_floor, top_pc_share, uniformity
from cone.geometry import instruments as g


def mixed(n: int, d: int, seed: int) -> np.ndarray:
    """Correlated, offset rows: Gaussian sources through a random mixing, plus a mean vector."""
    rng = np.random.default_rng(seed)
    mixing = rng.standard_normal((d, d)) / np.sqrt(d) + np.eye(d)
    return (rng.standard_normal((n, d)) @ mixing + 0.3).astype(np.float32)


def cone(n: int, d: int, seed: int) -> np.ndarray:
    """Isotropic noise around a far apex, as geometry.synthetic's cone."""
    rng = np.random.default_rng(seed)
    apex = rng.standard_normal(d)
    apex *= 10.0 * np.sqrt(d) / 4 / np.linalg.norm(apex)
    return (apex + rng.standard_normal((n, d))).astype(np.float32)


def with_constant_column(x: np.ndarray) -> np.ndarray:
    x = x.copy()
    x[:, 1] = 2.5  # zero variance: its correlations count as 0
    return x


CASES = {
    "mixed_3000x64": lambda: mixed(3000, 64, 11),
    "cone_3000x64": lambda: cone(3000, 64, 12),
    "wide_3x2000": lambda: mixed(3, 2000, 13),
    "wide_20x500_constant_column": lambda: with_constant_column(cone(20, 500, 14)),
}

# The old implementation's output: measure(x, with_centered=True) of geometry/instruments.py at commit 3f4a745
# (streamed d x d covariance, one pass per instrument), run on CASES above with numpy 2.4.6. Derived by running
# that code, not by hand: they pin what the rewrite must not change.
OLD = {
    "mixed_3000x64": {
        "n": 3000.0,
        "d": 64.0,
        "anisotropy": 0.044610699316239164,
        "decorrelation": 0.08658811125730005,
        "effective_rank": 54.43208302082737,
        "sigreg": 0.08751351392840695,
        "sigreg_noise_floor": 0.00033143571035468804,
        "sigreg_x_floor": 264.04370800827047,
        "row_norm_mean": 11.423858429014372,
        "row_norm_std": 1.2952932156628023,
        "mean_vector_ratio": 0.21257344084085453,
        "top_pc_share": 0.04983073999201313,
        "uniformity": -3.617239762644314,
        "uniformity_stderr": 0.001531705100112115,
        "sigreg_centered": 0.0031298933277453156,
    },
    "cone_3000x64": {
        "n": 3000.0,
        "d": 64.0,
        "anisotropy": 0.8631371454745905,
        "decorrelation": 0.014676311829143796,
        "effective_rank": 63.82403254830949,
        "sigreg": 1.2788318881126706,
        "sigreg_noise_floor": 0.00033143571035468804,
        "sigreg_x_floor": 3858.461379264535,
        "row_norm_mean": 21.48809264929635,
        "row_norm_std": 0.9679983980271296,
        "mean_vector_ratio": 0.9292173232409588,
        "top_pc_share": 0.02042152271709442,
        "uniformity": -0.542847666581702,
        "uniformity_stderr": 0.00021360429286327047,
        "sigreg_centered": 0.000188794012576999,
    },
    "wide_3x2000": {
        "n": 3.0,
        "d": 2000.0,
        "anisotropy": 0.04594505867689155,
        "decorrelation": 0.6374403526833033,
        "effective_rank": 1.9995016864845017,
        "sigreg": 0.6213060824376216,
        "sigreg_noise_floor": 0.33977243549101815,
        "sigreg_x_floor": 1.8285947226406063,
        "row_norm_mean": 63.922995080420236,
        "row_norm_std": 0.9010892643276688,
        "mean_vector_ratio": 0.6032159640870858,
        "top_pc_share": 0.523258517219503,
        "uniformity": -3.813142588191298,
        "uniformity_stderr": 0.0001723380204876375,
        "sigreg_centered": 0.22500718498928005,
    },
    "wide_20x500_constant_column": {
        "n": 20.0,
        "d": 500.0,
        "anisotropy": 0.8612462399830183,
        "decorrelation": 0.1840364195646754,
        "effective_rank": 18.921094532893935,
        "sigreg": 1.270771200818142,
        "sigreg_noise_floor": 0.05405343712642438,
        "sigreg_x_floor": 23.509535533253207,
        "row_norm_mean": 59.85987749160241,
        "row_norm_std": 0.8248369131169688,
        "mean_vector_ratio": 0.931773266397174,
        "top_pc_share": 0.06944192331518612,
        "uniformity": -0.5545999270227019,
        "uniformity_stderr": 6.68163936562047e-05,
        "sigreg_centered": 0.02749557232777055,
    },
}
# When N < d the old code took eigenvalues of the d x d covariance: its d - N + 1 zero eigenvalues came back as
# roundoff (~1e-13), whose square roots entered the entropy and raised the effective rank by 2.2e-5 (3 x 2000)
# and 1.9e-6 (20 x 500) relative to the SVD of the centered data. The N x N Gram path has no such zeros, so
# there the reference is the SVD, and the old value is only required within its own roundoff error.
OLD_ROUNDOFF = {("wide_3x2000", "effective_rank"): 5e-5, ("wide_20x500_constant_column", "effective_rank"): 5e-6}


@pytest.fixture(scope="module")
def measured() -> dict[str, dict[str, float]]:
    return {name: measure(make(), with_centered=True).model_dump() for name, make in CASES.items()}


def reference(x: np.ndarray) -> dict[str, float]:
    """Each instrument straight from its definition in float64, all pairs where it is exact (slow, small x)."""
    n, d = x.shape
    x64 = x.astype(np.float64)
    norms = np.linalg.norm(x64, axis=1)
    u = x64 / norms[:, None]
    cos = u @ u.T
    centered = x64 - x64.mean(axis=0)
    std = centered.std(axis=0)
    live = std > 1e-6 * std.max()
    corr = np.corrcoef(x64[:, live], rowvar=False)  # a constant column correlates with nothing: its entries are 0
    s = np.linalg.svd(centered, compute_uv=False)
    p = s[s > 0] / s.sum()
    return {
        "anisotropy": (cos.sum() - np.trace(cos)) / (n * (n - 1)),
        "decorrelation": (np.abs(corr).sum() - live.sum()) / (d * (d - 1)),
        "effective_rank": np.exp(-(p * np.log(p)).sum()),
        "top_pc_share": s[0] ** 2 / (s**2).sum(),
        "row_norm_mean": norms.mean(),
        "row_norm_std": norms.std(),
        "mean_vector_ratio": np.linalg.norm(x64.mean(axis=0)) / norms.mean(),
        "uniformity": reference_uniformity(u),
        "sigreg": reference_sigreg(x),
    }


def reference_uniformity(u: np.ndarray) -> float:
    """log mean exp(-2 ||u_i - u_j||^2) over uniformity's seeded pairs (difference form), from unit rows u."""
    n = len(u)
    rng = np.random.default_rng(0)
    i = rng.integers(0, n, size=g.UNIFORMITY_PAIRS)
    j = (i + rng.integers(1, n, size=g.UNIFORMITY_PAIRS)) % n
    if n * n < g.UNIFORMITY_PAIRS:  # few rows: every ordered pair once, rather than 200,000 gathered long rows
        sq = ((u[:, None, :] - u[None, :, :]) ** 2).sum(axis=2)[i, j]
    else:
        sq = ((u[i] - u[j]) ** 2).sum(axis=1)
    return float(np.log(np.exp(-2.0 * sq).mean()))


def reference_rank(x: np.ndarray) -> float:
    centered = x.astype(np.float64) - x.astype(np.float64).mean(axis=0)
    s = np.linalg.svd(centered, compute_uv=False)
    p = s[s > 0] / s.sum()
    return float(np.exp(-(p * np.log(p)).sum()))


def reference_sigreg(x: np.ndarray) -> float:
    """Epps-Pulley of the float32 projections on 256 seeded unit directions, one knot at a time (x <= 32,768 rows)."""
    a = np.random.default_rng(g.SIGREG_SEED).standard_normal((x.shape[1], g.SIGREG_DIRECTIONS))
    z = x.astype(np.float32) @ (a / np.linalg.norm(a, axis=0)).astype(np.float32)
    target = np.exp(-0.5 * g.SIGREG_KNOTS**2)
    phi = np.array([np.exp(1j * t * z.astype(np.float64)).mean(axis=0) for t in g.SIGREG_KNOTS])
    err = np.abs(phi - target[:, None]) ** 2 * target[:, None]
    return float((2.0 * np.trapezoid(err, g.SIGREG_KNOTS, axis=0)).mean())


@pytest.mark.parametrize("case", CASES)
def test_measure_gives_the_old_values(measured, case):
    new = measured[case]
    assert set(new) == set(OLD[case])
    for key, old in OLD[case].items():
        tolerance = OLD_ROUNDOFF.get((case, key), 1e-6)
        assert new[key] == pytest.approx(old, rel=tolerance, abs=1e-12), key


@pytest.mark.parametrize("case", CASES)
def test_measure_matches_a_plain_numpy_reference(measured, case):
    expected = reference(CASES[case]())
    for key, value in expected.items():
        assert measured[case][key] == pytest.approx(value, rel=1e-6, abs=1e-12), key


def test_the_gram_path_drops_the_old_roundoff_in_effective_rank(measured):
    # The old d x d eigenvalues overstated the rank; the new value is the SVD's to ~1e-14, not the old one.
    for case, tolerance in OLD_ROUNDOFF.items():
        name = case[0]
        assert measured[name]["effective_rank"] != pytest.approx(OLD[name]["effective_rank"], rel=1e-7)
        assert measured[name]["effective_rank"] == pytest.approx(reference_rank(CASES[name]()), rel=1e-9)
        assert tolerance > 1e-6  # each exception is a documented roundoff, not a loosened check


def test_public_functions_take_the_wide_path_with_the_same_values(measured):
    x = CASES["wide_20x500_constant_column"]()
    values = measured["wide_20x500_constant_column"]
    assert decorrelation(x) == pytest.approx(values["decorrelation"], rel=1e-12)
    assert effective_rank(x) == pytest.approx(values["effective_rank"], rel=1e-12)
    assert top_pc_share(x) == pytest.approx(values["top_pc_share"], rel=1e-12)
    assert uniformity(x).value == pytest.approx(values["uniformity"], rel=1e-12)


def test_correlation_tiles_cover_the_matrix_with_ragged_edges(monkeypatch, measured):
    # Tiles of ~300 columns over d = 2000: seven blocks, the last one short, diagonal and off-diagonal tiles.
    monkeypatch.setattr(g, "CORRELATION_TILE_BYTES", 8 * (2 * 3 * 300 + 300**2))
    assert g._tile_width(3, 2000) == 300
    assert decorrelation(CASES["wide_3x2000"]()) == pytest.approx(OLD["wide_3x2000"]["decorrelation"], rel=1e-9)


def test_row_chunks_cover_every_row(monkeypatch):
    # Chunks of 7 rows over 100: the last chunk is short; sums and norms must still see every row once.
    monkeypatch.setattr(g, "CHUNK_BYTES", 8 * 64 * 7)
    x = CASES["mixed_3000x64"]()[:100]
    expected = reference(x)
    got = measure(x).model_dump()
    for key in ("anisotropy", "decorrelation", "effective_rank", "row_norm_mean", "row_norm_std", "mean_vector_ratio"):
        assert got[key] == pytest.approx(expected[key], rel=1e-9), key


def test_a_zero_row_in_a_later_chunk_is_named(monkeypatch):
    monkeypatch.setattr(g, "CHUNK_BYTES", 8 * 16 * 10)
    x = np.ones((50, 16), dtype=np.float32)
    x[37] = 0.0
    with pytest.raises(InputError, match=r"row 37 \(1 of 50\) all zero"):
        measure(x)


def test_three_rows_of_twenty_thousand_dimensions_in_bounded_memory():
    x = np.random.default_rng(5).standard_normal((3, 20_000)).astype(np.float32)
    tracemalloc.start()  # numpy reports its buffers to tracemalloc; the old d x d covariance alone was 3.2 GB
    try:
        values = measure(x).model_dump()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 400 * 2**20
    # Three iid Gaussian rows: each standardized column is a unit vector at a uniform angle in a plane, so a
    # correlation is cos(angle difference) and E|corr| = 2/pi; over 2 x 10^8 pairs the mean sits within ~1e-4.
    assert values["decorrelation"] == pytest.approx(2 / np.pi, abs=2e-3)
    x64 = x.astype(np.float64)
    s = np.linalg.svd(x64 - x64.mean(axis=0), compute_uv=False)[:2]  # centered: rank 2
    assert values["effective_rank"] == pytest.approx(np.exp(-(s / s.sum() * np.log(s / s.sum())).sum()), rel=1e-9)
    assert values["top_pc_share"] == pytest.approx(s[0] ** 2 / (s**2).sum(), rel=1e-9)
    u = x64 / np.linalg.norm(x64, axis=1, keepdims=True)
    assert values["anisotropy"] == pytest.approx((u[0] @ u[1] + u[0] @ u[2] + u[1] @ u[2]) / 3, rel=1e-9)
    assert values["uniformity"] == pytest.approx(reference_uniformity(u), rel=1e-9)


def test_every_n_above_the_sample_shares_one_noise_floor():
    assert sigreg_noise_floor(5000, 8, max_rows=1000) == sigreg_noise_floor(1000, 8, max_rows=1000)
    assert sigreg_noise_floor(999, 8, max_rows=1000) != sigreg_noise_floor(1000, 8, max_rows=1000)
