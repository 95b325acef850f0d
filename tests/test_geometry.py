from __future__ import annotations

import numpy as np
import pytest
import torch

from cone.errors import InputError
from cone.geometry import (
    anisotropy,
    decorrelation,
    effective_rank,
    measure,
    sigreg,
    sigreg_centered,
    sigreg_noise_floor,
    uniformity,
)
from cone.geometry.regularizer import reg_cos
from cone.geometry.synthetic import DISTRIBUTIONS, sample

N, D = 4096, 256


@pytest.fixture(scope="module")
def synthetic() -> dict[str, dict[str, float]]:
    return {name: measure(sample(name, N, D, seed=0), with_centered=True).model_dump() for name in DISTRIBUTIONS}


def test_anisotropy_is_exact_mean_pair_cosine():
    x = np.random.default_rng(1).standard_normal((50, 7)) + 0.5
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    cos = u @ u.T
    brute = cos[np.triu_indices(50, 1)].mean()
    est = anisotropy(x)
    assert est.exact and est.n_pairs == 50 * 49 // 2
    assert est.value == pytest.approx(brute, abs=1e-12)


def test_decorrelation_matches_corrcoef_and_survives_constant_dims():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((300, 6))
    x[:, 1] = x[:, 0] * 2 + 0.1 * rng.standard_normal(300)
    c = np.corrcoef(x, rowvar=False)
    expected = (np.abs(c).sum() - 6) / 30
    assert decorrelation(x) == pytest.approx(expected, rel=1e-9)
    x[:, 3] = 5.0
    value = decorrelation(x)
    assert np.isfinite(value) and 0 <= value <= 1


def test_effective_rank_matches_svd_and_ranges():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((400, 10))
    s = np.linalg.svd(x - x.mean(0), compute_uv=False)
    p = s / s.sum()
    assert effective_rank(x) == pytest.approx(np.exp(-(p * np.log(p)).sum()), rel=1e-9)
    line = np.outer(rng.standard_normal(400), rng.standard_normal(10))
    assert effective_rank(line) == pytest.approx(1.0, abs=1e-3)
    assert 9.0 < effective_rank(rng.standard_normal((20000, 10))) <= 10.0


def test_noise_floor_matches_theory():
    # E[EP] on N(0,1) data is (1/n) * int (1 - e^{-t^2}) e^{-t^2/2} dt = 1.0594 / n
    for n in (1000, 8000):
        assert sigreg_noise_floor(n, 64) == pytest.approx(1.0594 / n, rel=0.25)


def test_sigreg_rejects_scale_and_offset_but_not_gaussian():
    rng = np.random.default_rng(4)
    g = rng.standard_normal((4000, 32))
    floor = sigreg_noise_floor(4000, 32)
    assert sigreg(g) < 2 * floor
    assert sigreg(3 * g) > 10 * floor
    assert sigreg(g + 1.0) > 10 * floor


def test_accepts_torch_tensors():
    x = torch.randn(100, 8)
    assert anisotropy(x).value == pytest.approx(anisotropy(x.numpy()).value, abs=1e-9)


@pytest.mark.parametrize(
    "bad", [np.zeros((1, 4)), np.zeros(5), np.array([["a", "b"], ["c", "d"]]), np.array([[1.0, np.nan], [0.0, 1.0]])]
)
def test_bad_input_is_refused(bad):
    with pytest.raises(InputError):
        measure(bad)


def test_uniformity_of_identical_rows_is_zero():
    assert uniformity(np.ones((10, 4))).value == pytest.approx(0.0, abs=1e-12)


# The blind-spot proof: each instrument misses a failure that another one catches.
def test_anisotropy_blind_to_rank_collapse_and_redundancy(synthetic):
    for name in ("rank_collapse", "redundant"):
        assert abs(synthetic[name]["anisotropy"]) < 0.02
    assert synthetic["cone"]["anisotropy"] > 0.5


def test_decorrelation_blind_to_the_cone(synthetic):
    gauss = synthetic["gaussian"]["decorrelation"]
    assert synthetic["cone"]["decorrelation"] < 1.5 * gauss
    assert synthetic["redundant"]["decorrelation"] > 5 * gauss
    assert synthetic["rank_collapse"]["decorrelation"] > 5 * gauss


def test_effective_rank_blind_to_collapse_to_a_point(synthetic):
    assert synthetic["point"]["effective_rank"] > 0.95 * D
    assert synthetic["rank_collapse"]["effective_rank"] < 0.1 * D


def test_uncentered_sigreg_flags_every_failure(synthetic):
    floor = sigreg_noise_floor(N, D)
    assert synthetic["gaussian"]["sigreg"] < 2 * floor
    for name in ("cone", "rank_collapse", "redundant", "point"):
        assert synthetic[name]["sigreg"] >= 10 * floor, name


def test_regression_centered_sigreg_cannot_see_the_cone(synthetic):
    floor = sigreg_noise_floor(N, D)
    assert synthetic["cone"]["sigreg_centered"] < 2 * floor
    assert synthetic["gaussian"]["sigreg_centered"] < 2 * floor
    assert synthetic["cone"]["sigreg"] >= 100 * synthetic["gaussian"]["sigreg"]
    assert sigreg_centered(sample("cone", N, D)) < 2 * floor


def _optimise_reg_cos(table: torch.Tensor, steps: int = 40) -> torch.Tensor:
    w = table.clone().requires_grad_(True)
    opt = torch.optim.Adam([w], lr=0.5)
    for step in range(steps):
        loss = reg_cos(w, 512, generator=torch.Generator().manual_seed(step))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return w.detach()


def test_reg_cos_opens_a_cone_and_leaves_isotropy_alone():
    cone = torch.from_numpy(sample("cone", 1024, 64, seed=1))
    before = anisotropy(cone).value
    after = anisotropy(_optimise_reg_cos(cone)).value
    assert after < before / 3
    iso = torch.from_numpy(sample("gaussian", 1024, 64, seed=1))
    assert abs(anisotropy(_optimise_reg_cos(iso)).value - anisotropy(iso).value) < 0.01


def test_reg_cos_is_mean_off_diagonal_cosine():
    w = torch.randn(20, 5, requires_grad=True)
    value = reg_cos(w, n=20)
    u = torch.nn.functional.normalize(w.detach(), dim=1)
    c = u @ u.T
    assert float(value.detach()) == pytest.approx(float((c.sum() - 20) / 380), abs=1e-6)
    value.backward()
    assert w.grad is not None and torch.isfinite(w.grad).all()
