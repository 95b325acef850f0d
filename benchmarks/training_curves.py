"""Plot validation loss and table anisotropy against tokens for checkpoints' training logs.

Usage: python benchmarks/training_curves.py OUT.png CHECKPOINT [CHECKPOINT ...]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from matplotlib.figure import Figure

from cone.models.checkpoint import read_log


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the figure to write (PNG)")
    parser.add_argument("runs", type=Path, nargs="+", metavar="CHECKPOINT", help="checkpoints with a train_log.jsonl")
    args = parser.parse_args()
    out, runs = args.out, args.runs
    fig = Figure(figsize=(10, 3.4))
    axes = fig.subplots(1, 3)
    for run in runs:
        log = read_log(run)
        tokens = [r["tokens"] / 1e6 for r in log]
        for ax, key in zip(axes, ("val_loss", "anisotropy", "effective_rank"), strict=True):
            ax.plot(tokens, [r[key] for r in log], label=run.name)
            ax.set(title=key, xlabel="training tokens (M)")
    axes[1].set_yscale("log")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
