"""Where `cone train`'s step spends its time: train_speed.py's plain fp32 loop, cone's step in fp32 and in bf16
autocast, each under torch.profiler, its operators' own times grouped by what they compute; and how fast this CPU
multiplies matrices in each precision.

The same 16,392 x 256 model and batch (32 x 128) as benchmarks/train_speed.py, λ = 3 (reg_cos), the configured
threads. Each variant is profiled after --warmup unprofiled steps, the variants taking turns round by round, the
median of --rounds profiled steps per group; "peak" is a 4,096 x 4,096 x 4,096 matrix product in fp32 and in bf16
on the same threads, the fastest this CPU's oneDNN/BLAS kernels reach. From these: the share of the bf16 step that is
matrix products and the rate they reach, and the bound on what bf16 can give here: cone's fp32 step with its
matrix products at the bf16 peak and everything else as it is in fp32.

Usage: python benchmarks/train_profile.py [--threads 2] [--warmup 2] [--rounds 3] [--json | --record OUT]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections import defaultdict

import torch
from record import run_benchmark  # this script's folder is on the path: the one runner and record
from torch.autograd.profiler_util import FunctionEvent
from torch.profiler import ProfilerActivity, profile
from train_speed import plain_fp32_step  # this script's folder is on the path: the same baseline as train_speed.py

from cone.cpu import bf16_is_fast
from cone.models.gpt import GPT, GPTConfig
from cone.models.train import TrainConfig, make_optimizer, train_step

MATMULS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"}
OUTPUT_MATMULS = "output layer matmuls (tied 16,392-vocab table)"
REST_OF_OUTPUT = "the rest of the output layer (casts, log-softmax, NLL, fills)"
GROUPS = (
    OUTPUT_MATMULS,
    REST_OF_OUTPUT,
    "block matmuls (qkv, proj, MLP)",
    "attention (SDPA)",
    "layer norm",
    "GELU",
    "other dtype casts and copies",
    "embedding lookup and its gradient",
    "optimizer (AdamW step, zero_grad)",
    "gradient clipping",
    "reg_cos term (512 sampled rows)",
    "other (adds, sums, autograd)",
)
MATMUL_GROUPS = (OUTPUT_MATMULS, "block matmuls (qkv, proj, MLP)")


def _scopes(event: FunctionEvent) -> list[str]:
    found, parent = [], event.cpu_parent
    while parent is not None:
        found.append(parent.name)
        parent = parent.cpu_parent
    return found


def group_of(event: FunctionEvent, vocab: int, reg_rows: int) -> str:
    """The group of one operator, from its name, its input shapes and the operators or scopes it runs under. The
    reg_cos term's operators are told by their ``reg_rows`` sampled rows, so a step must not have that many
    positions (the benchmark's has 4,096)."""
    name, shapes, scopes = event.name, [s for s in event.input_shapes or [] if s], _scopes(event)
    if any(s.startswith("Optimizer.") for s in [name, *scopes]):
        return "optimizer (AdamW step, zero_grad)"
    if any(s.startswith("aten::_foreach") for s in [name, *scopes]):  # clip_grad_norm_ (AdamW's are above)
        return "gradient clipping"
    if any(vocab in s for s in shapes) and not name.startswith(("aten::embedding", "aten::index")):
        return OUTPUT_MATMULS if name in MATMULS else REST_OF_OUTPUT
    if "softmax" in name or "nll_loss" in name:
        return REST_OF_OUTPUT
    if any(s[0] == reg_rows for s in shapes) or any("diagonal" in s for s in [name, *scopes]):
        return "reg_cos term (512 sampled rows)"
    if "scaled_dot_product" in name or any("scaled_dot_product" in s for s in scopes):
        return "attention (SDPA)"
    if name in MATMULS:
        return "block matmuls (qkv, proj, MLP)"
    if "layer_norm" in name:
        return "layer norm"
    if "gelu" in name:
        return "GELU"
    if "embedding" in name or "index_select" in name:
        return "embedding lookup and its gradient"
    if name in {"aten::to", "aten::_to_copy", "aten::copy_", "aten::clone"}:
        return "other dtype casts and copies"
    return "other (adds, sums, autograd)"


def profiled_step(step_fn) -> tuple[float, dict[str, float], dict[str, float]]:
    """One step under the profiler: its wall seconds, each group's own seconds and each group's matmul FLOPs."""
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=True) as prof:
        start = time.perf_counter()
        step_fn()
        wall = time.perf_counter() - start
    seconds: dict[str, float] = defaultdict(float)
    flops: dict[str, float] = defaultdict(float)
    for event in prof.events():
        group = group_of(event, GPTConfig().vocab_size, TrainConfig().reg_rows)
        seconds[group] += event.self_cpu_time_total / 1e6
        flops[group] += event.flops or 0
    return wall, seconds, flops


def peak_gflops(dtype: torch.dtype, n: int = 4096, rounds: int = 3) -> float:
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    torch.mm(a, b)
    best = min(_timed(lambda: torch.mm(a, b)) for _ in range(rounds))
    return 2 * n**3 / best / 1e9


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def step_of(base: GPT, name: str):
    """``name``: "plain fp32 loop" (train_speed.py's baseline), "fp32" or "bf16" (cone train's step, λ = 3): a step
    function of a copy of ``base`` with its own optimizer."""
    model = copy.deepcopy(base)
    tcfg = TrainConfig(reg_cos=3.0, bf16=name == "bf16")
    opt = make_optimizer(model, tcfg)
    if name == "plain fp32 loop":
        return lambda x, i: plain_fp32_step(model, opt, x)
    return lambda x, i: train_step(model, opt, tcfg, x, i)


def profile_variants(base: GPT, names: tuple[str, ...], batches: list[torch.Tensor], warmup: int) -> dict:
    """Each variant's profiled steps, the variants taking turns round by round (a load that changes during the run
    weighs on each alike): the median step and each group's median own time and its FLOPs."""
    steps = {name: step_of(base, name) for name in names}
    for step in steps.values():
        for i, x in enumerate(batches[:warmup]):
            step(x, i)
    runs = {name: [] for name in names}
    for i, x in enumerate(batches[warmup:], start=warmup):
        for name, step in steps.items():
            runs[name].append(profiled_step(lambda step=step, x=x, i=i: step(x, i)))
    return {name: _summary(found) for name, found in runs.items()}


def _summary(runs: list[tuple[float, dict[str, float], dict[str, float]]]) -> dict:
    median = {g: statistics.median(seconds.get(g, 0.0) for _, seconds, _ in runs) for g in GROUPS}
    flops = {g: runs[0][2].get(g, 0.0) for g in GROUPS}
    return {
        "step_s": statistics.median(wall for wall, _, _ in runs),
        "step_s_runs": [wall for wall, _, _ in runs],
        "groups": {
            g: {
                "seconds": median[g],
                "gflop": flops[g] / 1e9,
                "gflops_per_s": flops[g] / 1e9 / median[g] if flops[g] else None,
            }
            for g in GROUPS
        },
    }


def measure(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = GPTConfig()
    base = GPT(cfg)
    batches = [torch.randint(0, cfg.vocab_size, (32, cfg.block_size + 1)) for _ in range(args.warmup + args.rounds)]
    peak = {"fp32": peak_gflops(torch.float32), "bf16": peak_gflops(torch.bfloat16)}
    steps = profile_variants(base, ("plain fp32 loop", "fp32", "bf16"), batches, args.warmup)
    plain, fp32, bf16 = steps["plain fp32 loop"]["step_s"], steps["fp32"], steps["bf16"]
    profiled = sum(g["seconds"] for g in bf16["groups"].values())
    matmul_s = sum(bf16["groups"][g]["seconds"] for g in MATMUL_GROUPS)
    matmul_gflop = sum(bf16["groups"][g]["gflop"] for g in MATMUL_GROUPS)
    # The bound: cone's fp32 step with every matmul at the bf16 peak and everything else as it is in fp32.
    fp32_profiled = sum(g["seconds"] for g in fp32["groups"].values())
    fp32_matmul_s = sum(fp32["groups"][g]["seconds"] for g in MATMUL_GROUPS)
    fp32_gflop = sum(fp32["groups"][g]["gflop"] for g in MATMUL_GROUPS)
    bound = fp32["step_s"] * (1 - fp32_matmul_s / fp32_profiled) + fp32_gflop / peak["bf16"]
    return {
        "threads": args.threads,
        "rounds": args.rounds,
        "native_bf16": bf16_is_fast(),
        "peak_gflops": peak,
        "steps": steps,
        "vs_plain_fp32": {name: plain / step["step_s"] for name, step in steps.items()},
        "bf16_matmul_share": matmul_s / profiled,
        "bf16_matmul_gflops_per_s": matmul_gflop / matmul_s,
        "bf16_vs_fp32": fp32["step_s"] / bf16["step_s"],
        "fp32_step_s_with_matmuls_at_bf16_peak": bound,
        "bound_vs_fp32": fp32["step_s"] / bound,
    }


def show(result: dict) -> str:
    peak, bound = result["peak_gflops"], result["fp32_step_s_with_matmuls_at_bf16_peak"]
    lines = [
        f"peak matmul: fp32 {peak['fp32']:.0f} GFLOP/s, bf16 {peak['bf16']:.0f} GFLOP/s ({result['threads']} threads)"
    ]
    for name, step in result["steps"].items():
        lines.append(f"{name}: step {step['step_s']:.3f} s")
        for g, row in step["groups"].items():
            rate = f"  {row['gflops_per_s']:.0f} GFLOP/s" if row["gflops_per_s"] else ""
            lines.append(f"  {g:48s} {row['seconds'] * 1e3:8.1f} ms{rate}")
    share = result["bf16_matmul_share"]
    lines.append(f"bf16 step / fp32 step {result['bf16_vs_fp32']:.2f}x; matmuls {share:.0%} of bf16's")
    lines.append(
        f"fp32 step with its matmuls at the bf16 peak: {bound:.3f} s, {result['bound_vs_fp32']:.2f}x the fp32 step"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    run_benchmark(parser, measure, show)


if __name__ == "__main__":
    main()
