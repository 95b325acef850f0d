#!/usr/bin/env bash
# Train one checkpoint per line of a plan, JOBS at a time with one thread each; a run already finished is kept,
# one cut short is resumed (cone train --resume continues it exactly).
# Usage: benchmarks/regularizer_runs.sh OUT_DIR TOKENS PLAN...   where each PLAN is NAME=SPEC@SEED, e.g.
#   benchmarks/regularizer_runs.sh runs/reg-sweep 409600 none=none@0 barlow-0.1=barlow:0.1@0
# (SPEC is cone train's --reg value; docs/regularizers.md gives the plans of the sweep and of the runs.)
set -euo pipefail
out=${1:?usage: regularizer_runs.sh OUT_DIR TOKENS NAME=SPEC@SEED...}
tokens=${2:?tokens}
shift 2
mkdir -p "$out"
run_one() {
  local out=$1 tokens=$2 plan=$3
  local name=${plan%%=*} rest=${plan#*=}
  local spec=${rest%@*} seed=${rest##*@}
  local resume=()
  [[ -f "$out/$name/config.json" ]] && resume=(--resume)
  cone train --out "$out/$name" --reg "$spec" --seed "$seed" --tokens "$tokens" --eval-interval 25 \
    --threads 1 --no-progress "${resume[@]}" >"$out/$name.log" 2>&1 && echo "done $name" || echo "FAILED $name (see $out/$name.log)"
}
export -f run_one
printf '%s\n' "$@" | xargs -P "${JOBS:-2}" -I{} bash -c 'run_one "$@"' _ "$out" "$tokens" {}
