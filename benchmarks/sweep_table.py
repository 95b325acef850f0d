"""Summarise a λ sweep: final validation loss and table geometry of each run against the run without a regularizer,
and, per regularizer, the λ the rule picks: the largest λ whose validation-loss cost stays under ``--max-cost``
percent (1% by default: the rule docs/regularizers.md wrote down before its sweep; reg_cos's λ = 3 met it at +0.85%
in fp32, +0.87% in bf16).

Every run folder under SWEEP_DIR with a train_log.jsonl counts; its regularizers are read from its config.json, so
reg_cos_sweep.sh's lambda-L folders and regularizer_runs.sh's NAME-L folders both work.

Usage: python benchmarks/sweep_table.py SWEEP_DIR [--max-cost 1.0]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cone.models.checkpoint import read_config, read_log
from cone.models.train import format_regularizers


def final_records(root: Path) -> dict[str, dict]:
    """--reg spelling -> the last log line of that run."""
    found = {}
    for run in sorted(root.iterdir()):
        if run.is_dir() and (log := read_log(run)):
            found[format_regularizers(read_config(run)["train"])] = log[-1]
    return found


def chosen_lambdas(records: dict[str, dict], max_cost: float) -> dict[str, float | None]:
    """Per single-term regularizer, the largest λ whose cost vs ``none`` is under ``max_cost`` % (None: none is)."""
    base = records["none"]["val_loss"]
    best: dict[str, float | None] = {}
    for spec, record in records.items():
        if spec == "none" or "," in spec:
            continue
        name, lam = spec.split(":")
        best.setdefault(name, None)
        if 100 * (record["val_loss"] / base - 1) < max_cost and float(lam) > (best[name] or 0.0):
            best[name] = float(lam)
    return best


def _order(spec: str) -> tuple:
    """``none`` first, then by term and by λ as a number (reg_cos:3 before reg_cos:10)."""
    terms = [term.partition(":") for term in spec.split(",")]
    return (spec != "none", [(name, float(lam or 0)) for name, _, lam in terms])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep", type=Path)
    parser.add_argument("--max-cost", type=float, default=1.0, help="validation-loss cost allowed, in percent")
    args = parser.parse_args()
    records = final_records(args.sweep)
    if "none" not in records:
        parser.error(f"no run without a regularizer (λ = 0) under {args.sweep}")
    base = records["none"]
    columns = ("anisotropy", "effective_rank", "decorrelation", "top_pc_share", "uniformity", "sigreg")
    present = [c for c in columns if c in base]
    print("| run | tokens | val loss | cost vs λ=0 | " + " | ".join(present) + " |")
    print("|---|---|---|---|" + "---|" * len(present))
    for spec, r in sorted(records.items(), key=lambda item: _order(item[0])):
        cost = 100 * (r["val_loss"] / base["val_loss"] - 1)
        cells = " | ".join(f"{r[c]:.4f}" if abs(r[c]) < 10 else f"{r[c]:.1f}" for c in present)
        print(f"| {spec} | {r['tokens']:,} | {r['val_loss']:.4f} | {cost:+.2f}% | {cells} |")
    print(f"\nλ chosen (the largest with a cost under {args.max_cost:g}%):")
    for name, lam in chosen_lambdas(records, args.max_cost).items():
        print(f"  {name}: {'none of the grid' if lam is None else f'{lam:g}'}")


if __name__ == "__main__":
    main()
