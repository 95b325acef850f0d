"""``reg_cos``: the remedy for the cone, added to the language-model loss."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def reg_cos(weight: torch.Tensor, n: int = 512, generator: torch.Generator | None = None) -> torch.Tensor:
    """Mean off-diagonal cosine among ``n`` rows sampled (without replacement) from ``weight``.

    Differentiable. Minimising it pushes the sampled rows apart in direction, which
    counters the shared push that cross-entropy gives all rare tokens. With fewer than
    ``n`` rows, all rows are used.
    """
    rows = weight.shape[0]
    if rows < 2:
        raise ValueError("reg_cos needs a table with at least 2 rows")
    n = min(n, rows)
    idx = torch.randperm(rows, generator=generator, device="cpu")[:n].to(weight.device)
    unit = F.normalize(weight[idx].float(), dim=1)
    cos = unit @ unit.T
    return (cos.sum() - cos.diagonal().sum()) / (n * (n - 1))
