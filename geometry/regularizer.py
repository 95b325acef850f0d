"""Anti-collapse regularizers for the language model's embedding table: ``reg_cos`` (the remedy for the cone)
and the family it belongs to, each a differentiable term added to the loss as λ · term.

Every term reads the same ``n`` rows sampled per step (``sample_rows``), and every term is invariant to the
table's scale: the tied output layer sets that scale (the logits are rows · hidden), so a term that could be
lowered by shrinking or growing the table would fight cross-entropy over the wrong thing, and λ would not be
comparable between terms. Where a term's paper has a fixed unit (VICReg's γ = 1, SIGReg's N(0, 1)), the unit
here is the sampled rows' own RMS, and each docstring says so.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from cone.geometry.instruments import SIGREG_KNOTS

SIGREG_LOSS_DIRECTIONS = 64  # K random directions per step, fresh each step (LeJEPA draws them per step too)
UNIFORMITY_T = 2.0


def sample_rows(weight: torch.Tensor, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """``n`` rows drawn without replacement (all rows if fewer), in float32 (float64 stays float64)."""
    rows = weight.shape[0]
    if rows < 2:
        raise ValueError("a regularizer needs a table with at least 2 rows")
    idx = torch.randperm(rows, generator=generator, device="cpu")[: min(n, rows)].to(weight.device)
    sample = weight[idx]
    return sample if sample.dtype == torch.float64 else sample.float()


def _off_diagonal_mean(m: torch.Tensor) -> torch.Tensor:
    k = m.shape[0]
    return (m.sum() - m.diagonal().sum()) / (k * (k - 1))


def mean_cosine(rows: torch.Tensor) -> torch.Tensor:
    """Mean off-diagonal cosine of the rows (the cone itself: ~0 isotropic, → 1 in a narrow cone)."""
    unit = F.normalize(rows, dim=1)
    return _off_diagonal_mean(unit @ unit.T)


def reg_cos(weight: torch.Tensor, n: int = 512, generator: torch.Generator | None = None) -> torch.Tensor:
    """Mean off-diagonal cosine among ``n`` rows sampled (without replacement) from ``weight``.

    Minimising it pushes the sampled rows apart in direction, which counters the shared push that
    cross-entropy gives all rare tokens. With fewer than ``n`` rows, all rows are used.
    """
    return mean_cosine(sample_rows(weight, n, generator))


def _centered(rows: torch.Tensor) -> torch.Tensor:
    return rows - rows.mean(dim=0, keepdim=True)


def vicreg_var(rows: torch.Tensor) -> torch.Tensor:
    """VICReg's variance hinge, mean over dimensions of relu(1 − std_j / γ), with γ the RMS of the columns' stds.

    VICReg's γ = 1 assumes a unit scale the table does not have; relative to its own RMS the hinge asks that no
    dimension's spread falls below the typical one (dimensional collapse). Blind to a cone: an offset mean leaves
    every column's std as it was.
    """
    std = _centered(rows).square().mean(dim=0).add(1e-12).sqrt()
    gamma = std.square().mean().sqrt()
    return F.relu(1.0 - std / gamma).mean()


def vicreg_cov(rows: torch.Tensor) -> torch.Tensor:
    """VICReg's covariance term, mean squared off-diagonal covariance, on the covariance divided by its mean
    variance (the scale-free form; VICReg sums over pairs and divides by d). Sees linear redundancy weighted by
    variance; blind to a cone."""
    z = _centered(rows)
    cov = z.T @ z / (z.shape[0] - 1)
    cov = cov / cov.diagonal().mean().clamp_min(1e-12)
    return _off_diagonal_mean(cov.square())


def barlow(rows: torch.Tensor) -> torch.Tensor:
    """Barlow Twins' redundancy reduction without a second view: mean squared off-diagonal entry of the columns'
    correlation matrix over the sampled rows (~1/n for independent columns; 1 when all columns are copies)."""
    z = _centered(rows)
    z = z / z.square().mean(dim=0, keepdim=True).add(1e-12).sqrt()
    corr = z.T @ z / z.shape[0]
    return _off_diagonal_mean(corr.square())


def _epps_pulley(z: torch.Tensor) -> torch.Tensor:
    """Epps-Pulley distance of each column of z to N(0, 1), the instrument's quadrature, differentiable."""
    knots = torch.as_tensor(SIGREG_KNOTS, dtype=z.dtype, device=z.device)
    target = torch.exp(-0.5 * knots.square())
    tz = z.unsqueeze(-1) * knots  # (n, K, knots)
    err = (tz.cos().mean(dim=0) - target).square() + tz.sin().mean(dim=0).square()
    return 2.0 * torch.trapezoid(err * target, knots, dim=-1)


def sigreg(rows: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """The SigReg instrument as a loss: mean Epps-Pulley distance of ``SIGREG_LOSS_DIRECTIONS`` random 1-D
    projections to N(0, 1), on the rows divided by the RMS of their entries (the unit; the scale is the logits').

    Like the instrument it is never centered, so an offset mean (a cone) counts against it; it asks every
    projection to be Gaussian, so it also sees collapse and heavy tails.
    """
    directions = torch.randn(rows.shape[1], SIGREG_LOSS_DIRECTIONS, generator=generator, dtype=rows.dtype)
    directions = F.normalize(directions, dim=0).to(rows.device)
    unit_scale = rows / rows.square().mean().add(1e-12).sqrt()
    return _epps_pulley(unit_scale @ directions).mean()


def uniformity(rows: torch.Tensor, t: float = UNIFORMITY_T) -> torch.Tensor:
    """Wang & Isola's uniformity, log mean over pairs of exp(−t ||u_i − u_j||²) on unit rows (t = 2): about
    −t·2 for rows spread on the sphere, 0 when all point one way. Sees a cone and clumps; blind to correlations
    between coordinates that leave the directions spread."""
    unit = F.normalize(rows, dim=1)
    sq = (2.0 - 2.0 * unit @ unit.T).clamp_min(0.0)
    k = sq.shape[0]
    off = ~torch.eye(k, dtype=torch.bool, device=sq.device)
    return torch.logsumexp(-t * sq[off], dim=0) - torch.log(torch.tensor(k * (k - 1.0), dtype=sq.dtype))


def center(rows: torch.Tensor) -> torch.Tensor:
    """Plain centering, ||mean row||² over the mean ||row||²: the share of the rows' second moment that the mean
    direction holds (0 centered, 1 all rows equal). Unlike ``reg_cos`` the rows count by their norms."""
    return rows.mean(dim=0).square().sum() / rows.square().sum(dim=1).mean().clamp_min(1e-12)


# name -> term of the sampled rows (and the step's generator, for a term that draws more than rows).
TERMS: dict[str, Callable[[torch.Tensor, torch.Generator | None], torch.Tensor]] = {
    "reg_cos": lambda rows, gen: mean_cosine(rows),
    "vicreg_var": lambda rows, gen: vicreg_var(rows),
    "vicreg_cov": lambda rows, gen: vicreg_cov(rows),
    "barlow": lambda rows, gen: barlow(rows),
    "sigreg": sigreg,
    "uniformity": lambda rows, gen: uniformity(rows),
    "center": lambda rows, gen: center(rows),
}


def regularizer_terms(
    weight: torch.Tensor, names: list[str], n: int = 512, generator: torch.Generator | None = None
) -> dict[str, torch.Tensor]:
    """Each named term on one sample of ``n`` rows of ``weight`` (the sample drawn first from ``generator``)."""
    rows = sample_rows(weight, n, generator)
    return {name: TERMS[name](rows, generator) for name in names}
