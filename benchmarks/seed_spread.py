"""Pre-training's own noise: the same budget trained with several seeds per λ, and whether the regularizer's
effects (validation-loss cost, table anisotropy ratio, effective-rank gain) lie outside the seed-to-seed spread.

The runs (3 seeds x λ in {0, 3}, 1M tokens each; `cone train --out DIR/lambdaL-seedS --reg-cos L --seed S
--tokens 1000000`) are read from their checkpoint folders: the last line of each train_log.jsonl. A difference is
called outside the spread when Welch's t-test over the seeds gives p < 0.05. The same seed means the same initial
weights and batches on both sides, so the paired t-test over the shared seeds is given beside it: it asks whether
the difference is consistent seed by seed, which a difference smaller than the spread can still be.

The same runs are part of the regularizer study (docs/regularizers.md: `none-seedS` and `reg_cos-seedS`, 1M tokens,
the same seeds and data order), whose per-run rows are committed: --from-json docs/regularizers/runs.json gives
the table in seconds, without the checkpoints.

Usage: python benchmarks/seed_spread.py RUNS_DIR [--json | --record OUT]
       python benchmarks/seed_spread.py --from-json docs/regularizers/runs.json [--json | --record OUT]
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np
from record import run_benchmark  # this script's folder is on the path: the one runner and record
from scipy.stats import ttest_ind, ttest_rel

from cone.errors import InputError
from cone.models.checkpoint import read_config, read_log

RUN = re.compile(r"^lambda(?P<lam>[0-9.]+)-seed(?P<seed>\d+)$")
METRICS = ("val_loss", "anisotropy", "effective_rank", "decorrelation")


def final_rows(runs: Path) -> dict[float, list[dict]]:
    """λ -> the last log line of each finished seed's run (one still training is left out)."""
    found: dict[float, list[dict]] = {}
    for folder in sorted(runs.iterdir()):
        match = RUN.match(folder.name)
        if not (match and folder.is_dir() and (log := read_log(folder))):
            continue
        if log[-1]["tokens"] >= read_config(folder)["train"]["tokens"]:
            found.setdefault(float(match["lam"]), []).append({"seed": int(match["seed"]), **log[-1]})
    return found


def rows_from_json(path: Path) -> dict[float, list[dict]]:
    """λ -> rows, from a regularizers_table.py --write-json file: its runs of λ = 0 and of reg_cos alone."""
    found: dict[float, list[dict]] = {}
    for row in json.loads(path.read_text())["runs"]:
        if row["reg"] == "none" or re.fullmatch(r"reg_cos:[0-9.]+", row["reg"]):
            lam = 0.0 if row["reg"] == "none" else float(row["reg"].split(":")[1])
            found.setdefault(lam, []).append(row)
    return found


def spread(rows: dict[float, list[dict]], base: float, other: float) -> dict:
    table = {}
    shared = sorted({r["seed"] for r in rows[base]} & {r["seed"] for r in rows[other]})
    for metric in METRICS:
        a = np.array([r[metric] for r in rows[base]])
        b = np.array([r[metric] for r in rows[other]])
        test = ttest_ind(b, a, equal_var=False)
        by_seed = [{r["seed"]: r[metric] for r in rows[lam]} for lam in (base, other)]
        paired = ttest_rel([by_seed[1][s] for s in shared], [by_seed[0][s] for s in shared])
        table[metric] = {
            f"lambda_{base:g}": {"mean": float(a.mean()), "std": float(a.std(ddof=1)), "values": a.tolist()},
            f"lambda_{other:g}": {"mean": float(b.mean()), "std": float(b.std(ddof=1)), "values": b.tolist()},
            "delta": float(b.mean() - a.mean()),
            "ratio": float(a.mean() / b.mean()),
            "welch_p": float(test.pvalue),
            "outside_spread": bool(test.pvalue < 0.05),
            "paired_seeds": shared,
            "paired_p": float(paired.pvalue),
            "paired_significant": bool(paired.pvalue < 0.05),
        }
    return table


def measure(args: argparse.Namespace) -> dict:
    if (args.runs is None) == (args.from_json is None):
        raise InputError("give RUNS_DIR or --from-json FILE")
    rows = rows_from_json(args.from_json) if args.from_json else final_rows(args.runs)
    if len(rows) < 2 or min(len(v) for v in rows.values()) < 2:
        source = args.runs or args.from_json
        raise InputError(f"need at least 2 finished seeds of 2 λ values in {source}, found {sorted(rows)}")
    base, other = sorted(rows)[:2]
    tokens = sorted({r["tokens"] for v in rows.values() for r in v})
    return {"tokens": tokens, "seeds": {str(k): len(v) for k, v in rows.items()}, **spread(rows, base, other)}


def show(found: dict) -> str:
    base, other = sorted(float(lam) for lam in found["seeds"])[:2]
    seeds = [found["seeds"][str(lam)] for lam in (base, other)]
    columns = f"λ={base:g} mean ± std | λ={other:g} mean ± std | Δ | ratio λ{base:g}/λ{other:g} | Welch p"
    lines = [
        f"{seeds[0]} + {seeds[1]} seeds, {', '.join(f'{t:,}' for t in found['tokens'])} tokens each\n",
        f"| metric | {columns} | outside the seed spread | paired t p (same seeds) | consistent seed by seed |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for metric in METRICS:
        row = found[metric]
        a, b = row[f"lambda_{base:g}"], row[f"lambda_{other:g}"]
        lines.append(
            f"| {metric} | {a['mean']:.4f} ± {a['std']:.4f} | {b['mean']:.4f} ± {b['std']:.4f} | {row['delta']:+.4f} "
            f"| {row['ratio']:.2f}× | {row['welch_p']:.2g} | {'**yes**' if row['outside_spread'] else 'no'} "
            f"| {row['paired_p']:.2g} | {'**yes**' if row['paired_significant'] else 'no'} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=Path, nargs="?")
    parser.add_argument("--from-json", type=Path, help="a regularizers_table.py --write-json file, instead of RUNS")
    run_benchmark(parser, measure, show)


if __name__ == "__main__":
    main()
