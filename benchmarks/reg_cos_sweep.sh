#!/usr/bin/env bash
# The small sweep behind the default --reg-cos: equal short budgets, same seed and data order.
# Usage: benchmarks/reg_cos_sweep.sh OUT_DIR [TOKENS]   (then: python benchmarks/sweep_table.py OUT_DIR)
set -euo pipefail
out=${1:?usage: reg_cos_sweep.sh OUT_DIR [TOKENS]}
tokens=${2:-409600}
for lam in 0 0.1 1 3 10; do
  cone train --out "$out/lambda-$lam" --reg-cos "$lam" --tokens "$tokens" --eval-interval 25 \
    --threads "${THREADS:-1}" --no-progress
done
