"""The instruments: each says whether an embedding space is healthy, and each is blind to
a failure another one sees.

All functions take an ``(N, d)`` array (numpy or torch) and never modify it. Sums are
accumulated in float64 over row chunks, so a million rows of d = 256 stay in a few
hundred MB of working memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from cone.errors import InputError

# The four instruments of the mission, each blind to a failure another one sees.
INSTRUMENTS = ("anisotropy", "decorrelation", "effective_rank", "sigreg")
CHUNK_ROWS = 65_536
SIGREG_KNOTS = np.linspace(0.0, 3.0, 17)  # LeJEPA's quadrature grid for Epps-Pulley
SIGREG_DIRECTIONS = 256
SIGREG_MAX_ROWS = 32_768
SIGREG_SEED = 0
UNIFORMITY_PAIRS = 200_000
PAIR_CHUNK = 8_192


def as_matrix(x: object) -> np.ndarray:
    """Return ``x`` as a validated 2-D float array (float32 or float64; torch accepted)."""
    if hasattr(x, "detach"):  # torch.Tensor without importing torch here
        x = x.detach().float().cpu().numpy()
    arr = np.asarray(x)
    if arr.dtype.kind not in "fiu":
        raise InputError(f"expected a numeric array, got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise InputError(f"expected a 2-D (N, d) array, got shape {arr.shape}")
    if arr.shape[0] < 2:
        raise InputError(f"need at least 2 rows, got {arr.shape[0]}")
    if arr.shape[1] < 1:
        raise InputError("need at least 1 column")
    if arr.dtype not in (np.float32, np.float64):
        arr = arr.astype(np.float64)
    if not np.isfinite(arr).all():
        raise InputError("array contains NaN or inf")
    return arr


def _rows_named(rows: np.ndarray, n: int) -> str:
    shown = ", ".join(str(r) for r in rows[:5]) + (", ..." if len(rows) > 5 else "")
    return f"row{'s' * (len(rows) > 1)} {shown} ({len(rows)} of {n})"


def refuse_unmeasurable_rows(x: np.ndarray) -> None:
    """Rows no instrument can measure honestly: all zero (no direction, so no cosine), or so large that their
    squared norm overflows float64 (every sum over them would be inf or NaN)."""
    zero = np.flatnonzero(~x.any(axis=1))
    if len(zero):
        raise InputError(f"{_rows_named(zero, len(x))} all zero: a zero vector has no direction; drop or fix them")
    if x.dtype == np.float64:  # float32 values cannot overflow a float64 sum of squares
        with np.errstate(over="ignore"):
            squares = np.concatenate([np.einsum("ij,ij->i", c, c) for c in _chunks(x)])
        huge = np.flatnonzero(~np.isfinite(squares))
        if len(huge):
            raise InputError(f"{_rows_named(huge, len(x))} overflow float64 when squared; rescale the matrix")


def _chunks(x: np.ndarray):
    for start in range(0, x.shape[0], CHUNK_ROWS):
        yield x[start : start + CHUNK_ROWS]


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (zero rows stay zero), in the input's precision."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


@dataclass(frozen=True)
class Estimate:
    """A measured value with its standard error (0 when exact) and how many pairs it used."""

    value: float
    stderr: float
    n_pairs: int
    exact: bool

    def __float__(self) -> float:
        return self.value


def anisotropy(x: object) -> Estimate:
    """Mean cosine over all distinct pairs, exact.

    mean_{i<j} cos(x_i, x_j) = (||sum_i u_i||^2 - N) / (N (N - 1)), u_i = x_i / ||x_i||,
    so the exact value costs O(N d) and no pair sampling is needed at any N.
    Near 1: a cone. Blind spot: rank collapse and redundancy around the origin score ~0.
    """
    x = as_matrix(x)
    n = x.shape[0]
    total = np.zeros(x.shape[1], dtype=np.float64)
    for chunk in _chunks(x):
        total += unit_rows(chunk.astype(np.float64)).sum(axis=0)
    value = (float(total @ total) - n) / (n * (n - 1))
    return Estimate(value=value, stderr=0.0, n_pairs=n * (n - 1) // 2, exact=True)


@dataclass(frozen=True)
class Moments:
    """Mean and covariance of the rows, from one streaming pass (shifted for precision)."""

    n: int
    mean: np.ndarray
    cov: np.ndarray


def moments(x: object) -> Moments:
    """Streaming mean and (biased) covariance, accumulated in float64."""
    x = as_matrix(x)
    shift = x[0].astype(np.float64)
    d = x.shape[1]
    s1 = np.zeros(d, dtype=np.float64)
    s2 = np.zeros((d, d), dtype=np.float64)
    for chunk in _chunks(x):
        c = chunk.astype(np.float64) - shift
        s1 += c.sum(axis=0)
        s2 += c.T @ c
    n = x.shape[0]
    m = s1 / n
    cov = s2 / n - np.outer(m, m)
    return Moments(n=n, mean=m + shift, cov=(cov + cov.T) / 2)


def decorrelation(x: object, stats: Moments | None = None) -> float:
    """Mean |Pearson correlation| over off-diagonal pairs of dimensions.

    corr_ab = cov_ab / sqrt(cov_aa cov_bb); a constant dimension correlates with nothing
    (its entries count as 0, not NaN). Near 0: decorrelated. Blind spot: an offset from
    the origin (a cone of isotropic noise around a far point scores ~0).
    """
    stats = stats or moments(x)
    d = stats.cov.shape[0]
    if d < 2:
        return 0.0
    var = np.diag(stats.cov)
    live = var > 1e-12 * max(float(var.max()), 1e-300)
    std = np.where(live, np.sqrt(np.maximum(var, 0.0)), 1.0)
    corr = stats.cov / np.outer(std, std)
    corr[~live, :] = 0.0
    corr[:, ~live] = 0.0
    off = np.abs(corr).sum() - np.abs(np.diag(corr)).sum()
    return float(off / (d * (d - 1)))


def _centered_spectrum(stats: Moments) -> np.ndarray:
    """Singular values of the centered data, from the covariance: sigma = sqrt(N lambda)."""
    eig = np.clip(np.linalg.eigvalsh(stats.cov), 0.0, None)[::-1]
    return np.sqrt(eig * stats.n)


def effective_rank(x: object, stats: Moments | None = None) -> float:
    """exp(H(p)), p = sigma / sum(sigma), sigma the singular values of the centered data.

    Ranges 1..d (Roy & Vetterli 2007). Blind spot: it centers first, so a collapse to a
    point with isotropic jitter looks full-rank.
    """
    sigma = _centered_spectrum(stats or moments(x))
    total = sigma.sum()
    if total <= 0:
        return 1.0
    p = sigma[sigma > 0] / total
    return float(np.exp(-(p * np.log(p)).sum()))


def top_pc_share(x: object, stats: Moments | None = None) -> float:
    """Share of the centered variance on the top principal direction (1/d when isotropic)."""
    eig = np.clip(np.linalg.eigvalsh((stats or moments(x)).cov), 0.0, None)
    return float(eig[-1] / eig.sum()) if eig.sum() > 0 else 1.0


def _random_directions(d: int, n_directions: int, seed: int) -> np.ndarray:
    a = np.random.default_rng(seed).standard_normal((d, n_directions))
    return a / np.linalg.norm(a, axis=0, keepdims=True)


def _row_sample(n: int, max_rows: int, seed: int) -> np.ndarray | None:
    if n <= max_rows:
        return None
    return np.sort(np.random.default_rng(seed).choice(n, size=max_rows, replace=False))


def _epps_pulley(z: np.ndarray) -> np.ndarray:
    """Epps-Pulley statistic of each column of z (rows = samples) against N(0, 1).

    EP = int_R |phi_N(t) - exp(-t^2/2)|^2 exp(-t^2/2) dt, phi_N the empirical
    characteristic function; the integrand is even, so 2x the trapezoid over [0, 3].
    """
    target = np.exp(-0.5 * SIGREG_KNOTS**2)
    err = np.empty((SIGREG_KNOTS.size, z.shape[1]), dtype=np.float64)
    for k, t in enumerate(SIGREG_KNOTS):
        tz = t * z
        re = np.cos(tz).mean(axis=0, dtype=np.float64)
        im = np.sin(tz).mean(axis=0, dtype=np.float64)
        err[k] = ((re - target[k]) ** 2 + im**2) * target[k]
    return 2.0 * np.trapezoid(err, SIGREG_KNOTS, axis=0)


def sigreg(
    x: object,
    n_directions: int = SIGREG_DIRECTIONS,
    max_rows: int = SIGREG_MAX_ROWS,
    seed: int = SIGREG_SEED,
) -> float:
    """Mean Epps-Pulley distance of random 1-D projections <x, a> to N(0, 1) (SIGReg).

    By Cramer-Wold, x ~ N(0, I) iff every projection is N(0, 1). The data is NOT
    centered or rescaled: zero mean and unit scale are part of the target, so a cone
    (offset mean) is flagged. Directions come from a fixed seed; above ``max_rows`` rows a
    fixed-seed row sample is used. Compare with ``sigreg_noise_floor`` of the same size.
    Blind spot: only the marginals of projections are tested, not which basis they use.
    """
    x = as_matrix(x)
    rows = _row_sample(x.shape[0], max_rows, seed)
    sample = x if rows is None else x[rows]
    z = sample.astype(np.float32) @ _random_directions(x.shape[1], n_directions, seed).astype(np.float32)
    return float(_epps_pulley(z).mean())


def sigreg_centered(x: object, **kwargs: int) -> float:
    """The measurement error, kept to show it: subtract the mean, divide by the global std.

    This normalises away exactly what a cone is (the offset), so a cone scores like a
    Gaussian. Never use it as a health check.
    """
    x = as_matrix(x).astype(np.float64)
    c = x - x.mean(axis=0)
    return sigreg(c / max(c.std(), 1e-12), **kwargs)


@lru_cache(maxsize=64)
def sigreg_noise_floor(
    n: int,
    d: int,
    n_directions: int = SIGREG_DIRECTIONS,
    max_rows: int = SIGREG_MAX_ROWS,
    seed: int = SIGREG_SEED,
) -> float:
    """``sigreg`` of a true N(0, I) sample of the same size: the score of perfect data.

    Its expectation is about 1.06 / min(n, max_rows) (the finite-sample variance of the
    empirical characteristic function), so read a score as "k x the noise floor".
    """
    rows = min(n, max_rows)
    sample = np.random.default_rng(seed + 1).standard_normal((rows, d)).astype(np.float32)
    return sigreg(sample, n_directions=n_directions, max_rows=max_rows, seed=seed)


def row_norms(x: object) -> tuple[float, float]:
    """Mean and std of the row L2 norms."""
    x = as_matrix(x)
    norms = np.concatenate([np.linalg.norm(c.astype(np.float64), axis=1) for c in _chunks(x)])
    return float(norms.mean()), float(norms.std())


def mean_vector_ratio(x: object, stats: Moments | None = None) -> float:
    """||mean row|| / mean ||row||: 0 around the origin, 1 when every row is the same."""
    mean_norm, _ = row_norms(x)
    return float(np.linalg.norm((stats or moments(x)).mean) / max(mean_norm, 1e-12))


def uniformity(x: object, t: float = 2.0, n_pairs: int = UNIFORMITY_PAIRS, seed: int = 0) -> Estimate:
    """log E[exp(-t ||u_i - u_j||^2)] on unit rows (Wang & Isola 2020), from random pairs.

    More negative is more uniform on the sphere (about -3.9 at t = 2 for large d); 0 means
    every row points the same way. Standard error by the delta method.
    """
    x = as_matrix(x)
    rng = np.random.default_rng(seed)
    n = x.shape[0]
    i = rng.integers(0, n, size=n_pairs)
    j = (i + rng.integers(1, n, size=n_pairs)) % n  # j != i, uniform over the others
    # Normalize the rows once, then gather pairs in small chunks: gathering 200,000 float64 pairs at once
    # moved ~1 GB per call. The difference form keeps precision where rows are nearly parallel (a cone).
    u = unit_rows(x.astype(np.float64))
    sq = np.empty(n_pairs, dtype=np.float64)
    for start in range(0, n_pairs, PAIR_CHUNK):
        pairs = slice(start, start + PAIR_CHUNK)
        sq[pairs] = ((u[i[pairs]] - u[j[pairs]]) ** 2).sum(axis=1)
    v = np.exp(-t * sq)
    m = v.mean()
    stderr = float(v.std(ddof=1) / np.sqrt(n_pairs) / max(m, 1e-300))
    return Estimate(value=float(np.log(max(m, 1e-300))), stderr=stderr, n_pairs=n_pairs, exact=False)


def measure(x: object, with_centered: bool = False) -> dict[str, float]:
    """Every instrument on one matrix, as a flat dict of floats (one pass for moments). Refuses all-zero or
    overflowing rows, which would make the cosine instruments meaningless."""
    x = as_matrix(x)
    refuse_unmeasurable_rows(x)
    stats = moments(x)
    aniso = anisotropy(x)
    unif = uniformity(x)
    norm_mean, norm_std = row_norms(x)
    sig = sigreg(x)
    floor = sigreg_noise_floor(x.shape[0], x.shape[1])
    result = {
        "n": float(x.shape[0]),
        "d": float(x.shape[1]),
        "anisotropy": aniso.value,
        "decorrelation": decorrelation(x, stats),
        "effective_rank": effective_rank(x, stats),
        "sigreg": sig,
        "sigreg_noise_floor": floor,
        "sigreg_x_floor": sig / floor,
        "row_norm_mean": norm_mean,
        "row_norm_std": norm_std,
        "mean_vector_ratio": mean_vector_ratio(x, stats),
        "top_pc_share": top_pc_share(x, stats),
        "uniformity": unif.value,
        "uniformity_stderr": unif.stderr,
    }
    if with_centered:
        result["sigreg_centered"] = sigreg_centered(x)
    return result
