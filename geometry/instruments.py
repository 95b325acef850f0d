"""The instruments: each says whether an embedding space is healthy, and each is blind to
a failure another one sees.

All functions take an ``(N, d)`` array (numpy or torch) and never modify it. ``measure`` reads
the rows once: each row chunk is copied into one reused float64 buffer of a few MB (no float64
copy of the matrix is ever made) and gives the row norms, the sum of unit rows and, when
N >= d, the shifted sum and Gram matrix X^T X, all accumulated in float64. When N < d the d x d
covariance is never formed: the centered singular values come from the N x N Gram matrix
X X^T and decorrelation from tiles of the correlation matrix (see ``decorrelation``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from cone.errors import InputError
from cone.geometry.summary import Geometry

# The four instruments of the mission, each blind to a failure another one sees.
INSTRUMENTS = ("anisotropy", "decorrelation", "effective_rank", "sigreg")
# Bytes of one float64 chunk of rows (or of columns when N < d). A few MB reused beats fresh
# 128 MB chunks, whose page faults cost more than their GEMM.
CHUNK_BYTES = 16 * 2**20
# Working memory of one tile of the d x d correlation matrix when N < d (see ``decorrelation``).
CORRELATION_TILE_BYTES = 64 * 2**20
SIGREG_KNOTS = np.linspace(0.0, 3.0, 17)  # LeJEPA's quadrature grid for Epps-Pulley
SIGREG_DIRECTIONS = 256
SIGREG_MAX_ROWS = 32_768
SIGREG_SEED = 0
UNIFORMITY_PAIRS = 200_000
PAIR_CHUNK = 8_192


def _chunk_rows(d: int) -> int:
    return max(1, CHUNK_BYTES // (8 * d))


def _chunks(x: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(first row, rows) of ``x`` in chunks of about CHUNK_BYTES once in float64."""
    step = _chunk_rows(x.shape[1])
    for start in range(0, x.shape[0], step):
        yield start, x[start : start + step]


def _column_blocks(x: np.ndarray, width: int) -> Iterator[slice]:
    for start in range(0, x.shape[1], width):
        yield slice(start, min(start + width, x.shape[1]))


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
    # In chunks: one isfinite mask over a million rows would be a 256 MB temporary.
    bad = [(start, c) for start, c in _chunks(arr) if not np.isfinite(c).all()]
    if bad:
        held = []
        for test, what in ((np.isnan, "NaN"), (np.isinf, "inf")):  # named apart: a NaN and an inf differ in cause
            rows = np.concatenate([np.flatnonzero(test(c).any(axis=1)) + start for start, c in bad])
            if len(rows):
                held.append(f"{what} in {_rows_named(rows, len(arr))}")
        raise InputError(f"{'; '.join(held)}: every instrument needs finite values")
    return arr


def _rows_named(rows: np.ndarray, n: int) -> str:
    shown = ", ".join(str(r) for r in rows[:5]) + (", ..." if len(rows) > 5 else "")
    return f"row{'s' * (len(rows) > 1)} {shown} ({len(rows)} of {n})"


def refuse_unmeasurable_rows(x: np.ndarray) -> None:
    """Rows no instrument can measure honestly: all zero (no direction, so no cosine), or so large that their
    squared norm overflows float64 (every sum over them would be inf or NaN)."""
    zero = np.concatenate([np.flatnonzero(~c.any(axis=1)) + start for start, c in _chunks(x)])
    if len(zero):
        raise InputError(f"{_rows_named(zero, len(x))} all zero: a zero vector has no direction; drop or fix them")
    if x.dtype == np.float64:  # float32 values cannot overflow a float64 sum of squares
        with np.errstate(over="ignore"):
            squares = np.concatenate([np.einsum("ij,ij->i", c, c) for _, c in _chunks(x)])
        huge = np.flatnonzero(~np.isfinite(squares))
        if len(huge):
            raise InputError(f"{_rows_named(huge, len(x))} overflow float64 when squared; rescale the matrix")


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


@dataclass(frozen=True)
class Moments:
    """Mean and covariance of the rows, from one streaming pass (shifted for precision)."""

    n: int
    mean: np.ndarray
    cov: np.ndarray


@dataclass(frozen=True)
class _Scan:
    """One pass over the rows: their L2 norms, the sum of the unit rows, the mean, and (if asked) the moments."""

    norms: np.ndarray
    unit_sum: np.ndarray
    mean: np.ndarray
    stats: Moments | None


def _scan(x: np.ndarray, gram: bool) -> _Scan:
    """Everything the exact instruments need from one pass over validated ``x``, in float64.

    Sums are shifted by the first row (as ``moments`` always was) so that a far offset, as in a
    cone, does not cancel the covariance away. With ``gram`` the d x d matrix is accumulated too:
    O(N d^2) flops, the only part above O(N d).
    """
    n, d = x.shape
    buf = np.empty((min(n, _chunk_rows(d)), d), dtype=np.float64)
    shift = x[0].astype(np.float64)
    norms = np.empty(n, dtype=np.float64)
    unit_sum = np.zeros(d, dtype=np.float64)
    s1 = np.zeros(d, dtype=np.float64)
    s2 = np.zeros((d, d), dtype=np.float64) if gram else None
    for start, chunk in _chunks(x):
        c = buf[: len(chunk)]
        np.copyto(c, chunk)
        rows = norms[start : start + len(chunk)]
        np.sqrt(np.einsum("ij,ij->i", c, c), out=rows)
        unit_sum += (1.0 / np.maximum(rows, 1e-12)) @ c
        c -= shift
        s1 += c.sum(axis=0)
        if s2 is not None:
            s2 += c.T @ c
    m = s1 / n
    stats = None
    if s2 is not None:
        cov = s2 / n - np.outer(m, m)
        stats = Moments(n=n, mean=m + shift, cov=(cov + cov.T) / 2)
    return _Scan(norms=norms, unit_sum=unit_sum, mean=m + shift, stats=stats)


@dataclass(frozen=True)
class _Wide:
    """N x N Gram matrices of a matrix with N < d, and each column's variance."""

    raw: np.ndarray  # X X^T
    centered: np.ndarray  # (X - mean)(X - mean)^T: its eigenvalues are the centered sigma^2
    var: np.ndarray  # biased variance of each column


def _wide(x: np.ndarray, mean: np.ndarray) -> _Wide:
    """The N x N Gram matrices, in float64 column blocks of about CHUNK_BYTES; O(N^2 d)."""
    n, d = x.shape
    raw = np.zeros((n, n), dtype=np.float64)
    centered = np.zeros((n, n), dtype=np.float64)
    var = np.empty(d, dtype=np.float64)
    for cols in _column_blocks(x, max(1, CHUNK_BYTES // (8 * n))):
        c = x[:, cols].astype(np.float64)
        raw += c @ c.T
        c -= mean[cols]  # centered per column, not from raw: a far offset would cancel the variance away
        centered += c @ c.T
        var[cols] = np.einsum("ij,ij->j", c, c) / n
    return _Wide(raw=(raw + raw.T) / 2, centered=(centered + centered.T) / 2, var=var)


def _anisotropy_from(unit_sum: np.ndarray, n: int) -> Estimate:
    value = (float(unit_sum @ unit_sum) - n) / (n * (n - 1))
    return Estimate(value=value, stderr=0.0, n_pairs=n * (n - 1) // 2, exact=True)


def anisotropy(x: object) -> Estimate:
    """Mean cosine over all distinct pairs, exact.

    mean_{i<j} cos(x_i, x_j) = (||sum_i u_i||^2 - N) / (N (N - 1)), u_i = x_i / ||x_i||,
    so the exact value costs O(N d) and no pair sampling is needed at any N.
    Near 1: a cone. Blind spot: rank collapse and redundancy around the origin score ~0.
    """
    x = as_matrix(x)
    return _anisotropy_from(_scan(x, gram=False).unit_sum, x.shape[0])


def _moments(x: np.ndarray) -> Moments:
    stats = _scan(x, gram=True).stats
    if stats is None:  # unreachable: gram=True always fills it; keeps the type checker honest
        raise RuntimeError("moments: the scan returned no covariance")
    return stats


def moments(x: object) -> Moments:
    """Streaming mean and (biased) d x d covariance, accumulated in float64."""
    return _moments(as_matrix(x))


def _live_columns(var: np.ndarray) -> np.ndarray:
    return var > 1e-12 * max(float(var.max()), 1e-300)


def _decorrelation_from_cov(cov: np.ndarray) -> float:
    d = cov.shape[0]
    if d < 2:
        return 0.0
    var = np.diag(cov)
    live = _live_columns(var)
    std = np.where(live, np.sqrt(np.maximum(var, 0.0)), 1.0)
    corr = cov / np.outer(std, std)
    corr[~live, :] = 0.0
    corr[:, ~live] = 0.0
    off = np.abs(corr).sum() - np.abs(np.diag(corr)).sum()
    return float(off / (d * (d - 1)))


def _tile_width(n: int, d: int) -> int:
    # Two N x w float64 column blocks and one w x w tile: 8 (2 N w + w^2) <= CORRELATION_TILE_BYTES.
    w = int(-n + np.sqrt(n * n + CORRELATION_TILE_BYTES / 8))
    return max(1, min(w, d))


def _decorrelation_tiled(x: np.ndarray, mean: np.ndarray, var: np.ndarray) -> float:
    """Mean |off-diagonal correlation| from w x w tiles of the d x d correlation matrix, upper triangle only.

    z_a = (x_a - mean_a) / (std_a sqrt(N)) makes corr_ab = z_a . z_b; a constant column's z is zero,
    so its correlations count as 0, as in ``_decorrelation_from_cov``.
    """
    n, d = x.shape
    if d < 2:
        return 0.0
    live = _live_columns(var)
    scale = np.zeros(d, dtype=np.float64)
    scale[live] = 1.0 / np.sqrt(var[live] * n)

    def z(cols: slice) -> np.ndarray:
        block = x[:, cols].astype(np.float64)
        block -= mean[cols]
        block *= scale[cols]
        return block

    blocks = list(_column_blocks(x, _tile_width(n, d)))
    total = 0.0
    for a, rows in enumerate(blocks):
        za = z(rows)
        for cols in blocks[a:]:
            tile = za.T @ (za if cols == rows else z(cols))
            np.abs(tile, out=tile)
            if cols == rows:
                np.fill_diagonal(tile, 0.0)
                total += float(tile.sum())
            else:
                total += 2.0 * float(tile.sum())  # the tile below the diagonal is its transpose
    return total / (d * (d - 1))


def decorrelation(x: object, stats: Moments | None = None) -> float:
    """Mean |Pearson correlation| over off-diagonal pairs of dimensions.

    corr_ab = cov_ab / sqrt(cov_aa cov_bb); a constant dimension correlates with nothing
    (its entries count as 0, not NaN). Near 0: decorrelated. Blind spot: an offset from
    the origin (a cone of isotropic noise around a far point scores ~0).

    From ``stats`` (or N >= d) it reads the d x d covariance. When N < d without ``stats`` it never
    holds the d x d matrix: a mean of absolute values has no Gram-matrix shortcut, so the exact
    value is summed over tiles of the correlation matrix, O(N d^2 / 2) flops in float64 and about
    CORRELATION_TILE_BYTES of memory (3 x 20,000: 2 x 10^8 correlations, about a second).
    """
    if stats is not None:
        return _decorrelation_from_cov(stats.cov)
    x = as_matrix(x)
    if x.shape[0] >= x.shape[1]:
        return _decorrelation_from_cov(_moments(x).cov)
    mean = _scan(x, gram=False).mean
    return _decorrelation_tiled(x, mean, _wide(x, mean).var)


def _sigma_squared_from_cov(stats: Moments) -> np.ndarray:
    """Squared singular values of the centered data, descending: N x the covariance's eigenvalues."""
    return np.clip(np.linalg.eigvalsh(stats.cov), 0.0, None)[::-1] * stats.n


def _sigma_squared_from_gram(centered_gram: np.ndarray) -> np.ndarray:
    """The same from the N x N centered Gram matrix: its eigenvalues are the nonzero sigma^2 (N < d).

    Centering leaves at least one exact zero, which eigvalsh returns as roundoff of about eps x the
    largest; its square root (~1e-8 sigma_max) would add ~1e-7 to the entropy, so eigenvalues under
    N eps x the largest count as zero. A true sigma that small cannot be told from roundoff here.
    """
    sq = np.clip(np.linalg.eigvalsh(centered_gram), 0.0, None)[::-1]
    sq[sq <= centered_gram.shape[0] * np.finfo(np.float64).eps * sq[0]] = 0.0
    return sq


def _sigma_squared(x: np.ndarray) -> np.ndarray:
    if x.shape[0] >= x.shape[1]:
        return _sigma_squared_from_cov(_moments(x))
    return _sigma_squared_from_gram(_wide(x, _scan(x, gram=False).mean).centered)


def _effective_rank_from(sigma_squared: np.ndarray) -> float:
    sigma = np.sqrt(sigma_squared)
    total = sigma.sum()
    if total <= 0:
        return 1.0
    p = sigma[sigma > 0] / total
    return float(np.exp(-(p * np.log(p)).sum()))


def _top_pc_share_from(sigma_squared: np.ndarray) -> float:
    total = sigma_squared.sum()
    return float(sigma_squared[0] / total) if total > 0 else 1.0


def effective_rank(x: object, stats: Moments | None = None) -> float:
    """exp(H(p)), p = sigma / sum(sigma), sigma the singular values of the centered data.

    Ranges 1..d (Roy & Vetterli 2007). Blind spot: it centers first, so a collapse to a
    point with isotropic jitter looks full-rank. When N < d (and no ``stats``) sigma comes from the
    N x N centered Gram matrix, which has the same nonzero singular values as the data.
    """
    sq = _sigma_squared_from_cov(stats) if stats is not None else _sigma_squared(as_matrix(x))
    return _effective_rank_from(sq)


def top_pc_share(x: object, stats: Moments | None = None) -> float:
    """Share of the centered variance on the top principal direction (1/d when isotropic)."""
    sq = _sigma_squared_from_cov(stats) if stats is not None else _sigma_squared(as_matrix(x))
    return _top_pc_share_from(sq)


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

    The knots are t_k = k h (equally spaced from 0), so exp(i t_k z) = exp(i h z)^k: one cos and
    one sin per sample instead of one per knot (float64 cos/sin are scalar libm calls here, the
    cost that dominated), then one complex multiply per knot. In float64 the powers drift by
    about k ulp, far below the statistic's sampling noise. phi_N(0) = 1 = target: no error at t = 0.
    """
    n = z.shape[0]
    h = SIGREG_KNOTS[1]
    target = np.exp(-0.5 * SIGREG_KNOTS**2)
    err = np.zeros((SIGREG_KNOTS.size, z.shape[1]), dtype=np.float64)
    hz = np.empty(n, dtype=np.float64)
    step = np.empty(n, dtype=np.complex128)
    power = np.empty(n, dtype=np.complex128)
    for j, samples in enumerate(np.ascontiguousarray(z.T)):  # one direction's samples contiguous, in cache
        np.multiply(samples, h, out=hz, dtype=np.float64)
        np.cos(hz, out=step.real)
        np.sin(hz, out=step.imag)
        power[:] = step
        for k in range(1, SIGREG_KNOTS.size):
            if k > 1:
                power *= step
            phi = power.sum() / n
            err[k, j] = ((phi.real - target[k]) ** 2 + phi.imag**2) * target[k]
    return 2.0 * np.trapezoid(err, SIGREG_KNOTS, axis=0)


def _sigreg(x: np.ndarray, n_directions: int, max_rows: int, seed: int) -> float:
    rows = _row_sample(x.shape[0], max_rows, seed)
    sample = x if rows is None else x[rows]
    z = sample.astype(np.float32) @ _random_directions(x.shape[1], n_directions, seed).astype(np.float32)
    return float(_epps_pulley(z).mean())


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
    return _sigreg(as_matrix(x), n_directions, max_rows, seed)


def _sigreg_settings(
    n_directions: int = SIGREG_DIRECTIONS, max_rows: int = SIGREG_MAX_ROWS, seed: int = SIGREG_SEED
) -> tuple[int, int, int]:
    return n_directions, max_rows, seed


def sigreg_centered(x: object, **kwargs: int) -> float:
    """The measurement error, kept to show it: subtract the mean, divide by the global std.

    This normalises away exactly what a cone is (the offset), so a cone scores like a
    Gaussian. Never use it as a health check.
    """
    x = as_matrix(x)
    n_directions, max_rows, seed = _sigreg_settings(**kwargs)
    mean = _scan(x, gram=False).mean
    # The global std of the centered entries, streamed: a centered float64 copy of 1M x 256 was 2 GB.
    squares = sum(float(np.square(c.astype(np.float64) - mean).sum()) for _, c in _chunks(x))
    std = max(float(np.sqrt(squares / x.size)), 1e-12)
    rows = _row_sample(x.shape[0], max_rows, seed)  # the rows sigreg would sample from the full centered matrix
    sample = x if rows is None else x[rows]
    return _sigreg((sample.astype(np.float64) - mean) / std, n_directions, max_rows, seed)


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
    # Keyed on the rows actually scored: every n above max_rows shares one floor.
    return _noise_floor(min(n, max_rows), d, n_directions, max_rows, seed)


@lru_cache(maxsize=64)
def _noise_floor(rows: int, d: int, n_directions: int, max_rows: int, seed: int) -> float:
    sample = np.random.default_rng(seed + 1).standard_normal((rows, d)).astype(np.float32)
    return _sigreg(sample, n_directions, max_rows, seed)


def _norm_stats(norms: np.ndarray) -> tuple[float, float]:
    return float(norms.mean()), float(norms.std())


def row_norms(x: object) -> tuple[float, float]:
    """Mean and std of the row L2 norms."""
    return _norm_stats(_scan(as_matrix(x), gram=False).norms)


def mean_vector_ratio(x: object, stats: Moments | None = None) -> float:
    """||mean row|| / mean ||row||: 0 around the origin, 1 when every row is the same."""
    scan = _scan(as_matrix(x), gram=False)
    mean = scan.mean if stats is None else stats.mean
    return float(np.linalg.norm(mean) / max(_norm_stats(scan.norms)[0], 1e-12))


def _unit_in_place(rows: np.ndarray) -> np.ndarray:
    """``unit_rows`` without its temporaries, on a float64 array the caller owns."""
    rows /= np.maximum(np.sqrt(np.einsum("ij,ij->i", rows, rows)), 1e-12)[:, None]
    return rows


def _uniformity(x: np.ndarray, t: float, n_pairs: int, seed: int, wide: _Wide | None = None) -> Estimate:
    rng = np.random.default_rng(seed)
    n = x.shape[0]
    i = rng.integers(0, n, size=n_pairs)
    j = (i + rng.integers(1, n, size=n_pairs)) % n  # j != i, uniform over the others
    if wide is not None:
        # N < d: rows as long as d make gathering pairs cost n_pairs x d (10^9 floats at 3 x 20,000); the N x N
        # Gram matrix holds every pair instead: ||u_i - u_j||^2 = |u_i|^2 + |u_j|^2 - 2 u_i.u_j (a zero row has
        # |u| = 0). The expansion loses the difference form's precision only for rows parallel to ~1e-8.
        norms = np.sqrt(np.diag(wide.raw))
        inv = 1.0 / np.maximum(norms, 1e-12)
        unit = wide.raw * np.outer(inv, inv)
        length = np.diag(unit)
        sq = np.maximum(length[i] + length[j] - 2.0 * unit[i, j], 0.0)
    else:
        # Gather pairs in chunks of rows, normalizing only the gathered ones: a float64 copy of the matrix
        # (2 GB at 1M x 256) was the peak memory. The difference form keeps precision where rows are nearly
        # parallel (a cone).
        sq = np.empty(n_pairs, dtype=np.float64)
        step = min(PAIR_CHUNK, _chunk_rows(x.shape[1]))
        for start in range(0, n_pairs, step):
            pairs = slice(start, start + step)
            a = _unit_in_place(x[i[pairs]].astype(np.float64))
            a -= _unit_in_place(x[j[pairs]].astype(np.float64))
            sq[pairs] = np.einsum("ij,ij->i", a, a)
    v = np.exp(-t * sq)
    m = v.mean()
    stderr = float(v.std(ddof=1) / np.sqrt(n_pairs) / max(m, 1e-300))
    return Estimate(value=float(np.log(max(m, 1e-300))), stderr=stderr, n_pairs=n_pairs, exact=False)


def uniformity(x: object, t: float = 2.0, n_pairs: int = UNIFORMITY_PAIRS, seed: int = 0) -> Estimate:
    """log E[exp(-t ||u_i - u_j||^2)] on unit rows (Wang & Isola 2020), from random pairs.

    More negative is more uniform on the sphere (about -3.9 at t = 2 for large d); 0 means
    every row points the same way. Standard error by the delta method.
    """
    x = as_matrix(x)
    wide = _wide(x, _scan(x, gram=False).mean) if x.shape[0] < x.shape[1] else None
    return _uniformity(x, t, n_pairs, seed, wide)


def measure(x: object, with_centered: bool = False) -> Geometry:
    """Every instrument on one matrix, as a typed record (``Geometry``). Refuses all-zero or overflowing rows, which
    would make the cosine instruments meaningless.

    One float64 pass over the rows serves anisotropy, the row norms, the mean and (N >= d) the covariance;
    when N < d, column blocks give the N x N Gram matrices instead (see ``decorrelation``). SigReg and its
    noise floor score 32,768 sampled rows; uniformity 200,000 sampled pairs.
    """
    x = as_matrix(x)
    refuse_unmeasurable_rows(x)
    n, d = x.shape
    scan = _scan(x, gram=n >= d)
    wide = None
    if scan.stats is not None:
        sq = _sigma_squared_from_cov(scan.stats)
        decor = _decorrelation_from_cov(scan.stats.cov)
    else:
        wide = _wide(x, scan.mean)
        sq = _sigma_squared_from_gram(wide.centered)
        decor = _decorrelation_tiled(x, scan.mean, wide.var)
    unif = _uniformity(x, 2.0, UNIFORMITY_PAIRS, 0, wide)
    norm_mean, norm_std = _norm_stats(scan.norms)
    sig = _sigreg(x, SIGREG_DIRECTIONS, SIGREG_MAX_ROWS, SIGREG_SEED)
    floor = sigreg_noise_floor(n, d)
    result = {
        "n": float(n),
        "d": float(d),
        "anisotropy": _anisotropy_from(scan.unit_sum, n).value,
        "decorrelation": decor,
        "effective_rank": _effective_rank_from(sq),
        "sigreg": sig,
        "sigreg_noise_floor": floor,
        "sigreg_x_floor": sig / floor,
        "row_norm_mean": norm_mean,
        "row_norm_std": norm_std,
        "mean_vector_ratio": float(np.linalg.norm(scan.mean) / max(norm_mean, 1e-12)),
        "top_pc_share": _top_pc_share_from(sq),
        "uniformity": unif.value,
        "uniformity_stderr": unif.stderr,
    }
    if with_centered:
        result["sigreg_centered"] = sigreg_centered(x)
    return Geometry(**result)
