"""Summarise a reg_cos sweep: final validation loss and table geometry for each λ vs λ = 0.

Usage: python benchmarks/sweep_table.py SWEEP_DIR   (the folder reg_cos_sweep.sh wrote)
"""

from __future__ import annotations

import sys
from pathlib import Path

from cone.models.checkpoint import read_log


def final_record(run: Path) -> dict:
    return read_log(run)[-1]


def main() -> None:
    root = Path(sys.argv[1])
    runs = sorted(root.glob("lambda-*"), key=lambda p: float(p.name.split("-", 1)[1]))
    base = final_record(root / "lambda-0")
    print("| λ | tokens | val loss | cost vs λ=0 | table anisotropy | ÷ vs λ=0 | effective rank | decorrelation |")
    print("|---|---|---|---|---|---|---|---|")
    for run in runs:
        r = final_record(run)
        cost = 100 * (r["val_loss"] / base["val_loss"] - 1)
        print(
            f"| {run.name.split('-', 1)[1]} | {r['tokens']:,} | {r['val_loss']:.4f} | {cost:+.2f}% | "
            f"{r['anisotropy']:.4f} | {base['anisotropy'] / r['anisotropy']:.1f}× | {r['effective_rank']:.1f} | "
            f"{r['decorrelation']:.4f} |"
        )


if __name__ == "__main__":
    main()
