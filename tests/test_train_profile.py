"""benchmarks/train_profile.py's grouping, on one real step: every matrix product lands in its group, checked by
the FLOPs the profiler counts against the model's own shapes."""

import runpy
import sys
from pathlib import Path

import pytest
import torch

from cone.models.gpt import GPT, GPTConfig
from cone.models.train import TrainConfig, make_optimizer

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.mark.slow  # a step of the full-size model (its vocabulary keys the groups)
def test_each_matmul_of_a_step_lands_in_its_group(monkeypatch):
    """One plain fp32 step of the full-size model (the groups are keyed on its vocabulary): the output layer's
    products are its forward and the two of its backward, 4,096 x 256 x 16,392 each; the blocks' are each layer's
    qkv, proj and two MLP products, forward and backward (three apiece)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the script imports train_speed.py beside it
    profile = runpy.run_path(str(BENCHMARKS / "train_profile.py"), run_name="benchmark_under_test")
    cfg = GPTConfig()
    torch.manual_seed(0)
    model = GPT(cfg)
    opt = make_optimizer(model, TrainConfig())
    x = torch.randint(0, cfg.vocab_size, (8, cfg.block_size + 1))  # 1,024 positions: not reg_rows (512)
    _, seconds, flops = profile["profiled_step"](lambda: profile["plain_fp32_step"](model, opt, x))
    n, c = 8 * cfg.block_size, cfg.n_embd
    assert flops[profile["OUTPUT_MATMULS"]] == 3 * 2 * n * c * cfg.vocab_size
    per_layer = 2 * n * c * (3 * c + c + 4 * c + 4 * c)
    assert flops["block matmuls (qkv, proj, MLP)"] == 3 * cfg.n_layer * per_layer
    assert seconds["optimizer (AdamW step, zero_grad)"] > 0 and seconds["attention (SDPA)"] > 0
    assert set(seconds) <= set(profile["GROUPS"])
    assert "benchmark_under_test" not in sys.modules
