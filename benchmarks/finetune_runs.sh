#!/usr/bin/env bash
# Fine-tune one sentence encoder per line of a plan, JOBS at a time with one thread each; a finished run (a folder
# with modules.json) is kept, an unfinished one is started again (cone finetune refuses a folder that holds one).
# Usage: benchmarks/finetune_runs.sh OUT_DIR NAME=CHECKPOINT@SEED...   e.g.
#   benchmarks/finetune_runs.sh runs/regs-ft center-seed0=runs/regs/center-seed0@0
# (NAME is START-seedS, the form benchmarks/finetune_table.py groups by; docs/regularizers.md gives the plan.)
set -euo pipefail
out=${1:?usage: finetune_runs.sh OUT_DIR NAME=CHECKPOINT@SEED...}
shift
mkdir -p "$out"
run_one() {
  local out=$1 plan=$2
  local name=${plan%%=*} rest=${plan#*=}
  local source=${rest%@*} seed=${rest##*@}
  [[ -f "$out/$name/modules.json" ]] && { echo "kept $name"; return; }
  rm -rf "${out:?}/$name"
  cone finetune --from "$source" --out "$out/$name" --seed "$seed" --threads 1 --no-progress \
    >"$out/$name.log" 2>&1 && echo "done $name" || echo "FAILED $name (see $out/$name.log)"
}
export -f run_one
printf '%s\n' "$@" | xargs -P "${JOBS:-2}" -I{} bash -c 'run_one "$@"' _ "$out" {}
