"""What each regularizer term adds to a `cone train` step, at the reference shapes (vocab 16,392, width 256, batch
32 x 128, 512 sampled rows), as a share of the step without any term. Same process, same batches, same weights.

Two figures per term: the term's own forward + backward on the table, timed alone (precise), and the whole step
with the term at λ = 1 against the step at λ = 0, interleaved round by round so that drift on a shared machine
falls on both (noisier: the difference of two step times). Medians over ``--steps`` rounds.

Usage: python benchmarks/regularizer_cost.py [--steps 10] [--threads 1] [--json | --record OUT]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from dataclasses import replace

import torch
from record import run_benchmark  # this script's folder is on the path: the one runner and record

from cone.cpu import bf16_is_fast
from cone.geometry.regularizer import TERMS, regularizer_terms
from cone.models.gpt import GPT, GPTConfig
from cone.models.train import TrainConfig, make_optimizer, train_step


def term_alone_s(weight: torch.Tensor, name: str, rows: int, steps: int) -> float:
    times = []
    for step in range(steps + 1):
        start = time.perf_counter()
        regularizer_terms(weight, [name], rows, torch.Generator().manual_seed(step))[name].backward()
        times.append(time.perf_counter() - start)
        weight.grad = None
    return statistics.median(times[1:])


def measure(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    base_cfg = TrainConfig(reg_cos=0.0, bf16=bf16_is_fast())
    configs = {"none": base_cfg} | {name: replace(base_cfg, reg_cos=0.0, reg={name: 1.0}) for name in TERMS}
    configs["reg_cos"] = replace(base_cfg, reg_cos=1.0)
    base = GPT(GPTConfig())
    runners = {}
    for name, cfg in configs.items():
        model = copy.deepcopy(base)
        runners[name] = (model, make_optimizer(model, cfg), cfg)
    batches = [torch.randint(0, base.cfg.vocab_size, (32, base.cfg.block_size + 1)) for _ in range(args.steps + 1)]
    step_times: dict[str, list[float]] = {name: [] for name in configs}
    for i, x in enumerate(batches):  # round robin: one step of every variant per round; round 0 warms up
        for name, (model, opt, cfg) in runners.items():
            start = time.perf_counter()
            train_step(model, opt, cfg, x, i)
            if i:
                step_times[name].append(time.perf_counter() - start)
    step = {name: statistics.median(times) for name, times in step_times.items()}
    weight = copy.deepcopy(base).wte.weight
    alone = {name: term_alone_s(weight, name, base_cfg.reg_rows, args.steps) for name in TERMS}
    rows = {
        name: {
            "term_ms": 1e3 * alone[name],
            "term_share_of_step": alone[name] / step["none"],
            "step_ratio": step[name] / step["none"],
        }
        for name in TERMS
    }
    meta = {
        "threads": args.threads,
        "bf16": base_cfg.bf16,
        "rows": base_cfg.reg_rows,
        "step_s_without_term": step["none"],
        "rounds": args.steps,
    }
    return {**meta, "terms": rows}


def show(found: dict) -> str:
    head = (
        f"{found['threads']} thread(s), bf16 autocast {found['bf16']}, {found['rows']} rows, "
        f"step without a term {found['step_s_without_term']:.3f} s (median of {found['rounds']})\n\n"
        "| term | term alone (fwd + bwd) | share of a step | step with term ÷ without |\n|---|---|---|---|"
    )
    rows = [
        f"| {name} | {row['term_ms']:.1f} ms | {100 * row['term_share_of_step']:.2f}% | {row['step_ratio']:.3f}× |"
        for name, row in found["terms"].items()
    ]
    return "\n".join([head, *rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the runs use 1)")
    run_benchmark(parser, measure, show)


if __name__ == "__main__":
    main()
