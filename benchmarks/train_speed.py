"""Training tokens/s of `cone train`'s step against a plain fp32 PyTorch loop, same process.

Every variant trains the same 16,392 x 256 model on the same batches from the same initial
weights; only how the step is computed differs. The variants take turns step by step (the compiled ones among
themselves), so that a load that changes during the run weighs on each alike. Usage:
    python benchmarks/train_speed.py [--steps 12] [--threads 2] [--compile] [--json | --record OUT]
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
import torch.nn.functional as F
from record import run_benchmark  # this script's folder is on the path: the one runner and record

from cone.cpu import bf16_is_fast
from cone.models.gpt import GPT, GPTConfig
from cone.models.train import TrainConfig, make_optimizer, train_step


def plain_fp32_step(model: GPT, opt: torch.optim.Optimizer, x: torch.Tensor) -> float:
    logits = model.logits(model(x[:, :-1]))
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return float(loss.detach())


def tokens_per_s(step_fns: dict, batches: list[torch.Tensor], warmup: int = 2) -> dict[str, float]:
    """Each variant's tokens/s over ``batches`` after ``warmup`` of them, the variants taking turns step by step: a
    load that comes or goes during the run (other work on the machine) slows every variant alike."""
    for step_fn in step_fns.values():
        for x in batches[:warmup]:
            step_fn(x, 0)
    seconds = dict.fromkeys(step_fns, 0.0)
    for i, x in enumerate(batches[warmup:]):
        for name, step_fn in step_fns.items():
            start = time.perf_counter()
            step_fn(x, i)
            seconds[name] += time.perf_counter() - start
    tokens = sum(x[:, :-1].numel() for x in batches[warmup:])
    return {name: tokens / spent for name, spent in seconds.items()}


def measure(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = GPTConfig()
    base = GPT(cfg)
    batches = [torch.randint(0, cfg.vocab_size, (32, cfg.block_size + 1)) for _ in range(args.steps + 2)]

    def variant(name: str, reg: float, bf16: bool, compiled: bool = False):
        model = copy.deepcopy(base)
        if compiled:
            model.compile()  # in place: model(x) now runs the compiled forward
        tcfg = TrainConfig(reg_cos=reg, bf16=bf16)
        opt = make_optimizer(model, tcfg)
        if name.startswith("plain"):
            return lambda x, i: plain_fp32_step(model, opt, x)
        return lambda x, i: train_step(model, opt, tcfg, x, i)

    native = bf16_is_fast()
    # Emulated bf16 takes minutes per step: without native support it is timed on one step only.
    bf16_batches = batches if native else batches[:3]
    variants = [
        ("plain fp32 loop (baseline)", 0.0, False),
        ("cone train step, fp32, λ=0", 0.0, False),
        ("cone train step, fp32, λ=3 (default λ)", 3.0, False),
        ("cone train step, bf16 autocast, λ=3", 3.0, True),
    ]
    together = {name: variant(name, reg, bf16) for name, reg, bf16 in variants if native or not bf16}
    results = tokens_per_s(together, batches)
    results.update(tokens_per_s({n: variant(n, r, b) for n, r, b in variants if n not in together}, bf16_batches))
    if args.compile:
        compiled = {
            f"cone train step, {'bf16' if bf16 else 'fp32'} + torch.compile, λ=3": bf16
            for bf16 in ((False, True) if native else (False,))
        }
        results.update(tokens_per_s({n: variant(n, 3.0, b, compiled=True) for n, b in compiled.items()}, batches, 3))
    baseline = results["plain fp32 loop (baseline)"]
    rows = [{"variant": name, "tokens_per_s": tps, "ratio": tps / baseline} for name, tps in results.items()]
    return {"threads": args.threads, "steps": args.steps, "native_bf16": native, "rows": rows}


def show(found: dict) -> str:
    cfg = GPTConfig()
    head = (
        f"threads={found['threads']}, batch 32 x {cfg.block_size}, vocab {cfg.vocab_size}, width {cfg.n_embd}, "
        f"native bf16: {found['native_bf16']} (cone train uses bf16 autocast only then)"
    )
    rows = [f"  {row['variant']:48s} {row['tokens_per_s']:8.0f} tok/s  {row['ratio']:5.2f}x" for row in found["rows"]]
    return "\n".join([head, *rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--compile", action="store_true", help="also time torch.compile on the bf16 step")
    run_benchmark(parser, measure, show)


if __name__ == "__main__":
    main()
