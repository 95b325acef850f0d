#!/usr/bin/env bash
# Seconds from `cone demo` (the venv present, no index built, a fresh embedding cache) to the first answered BM25
# query and to the eval report (every index built). Stops the demo with Ctrl-C (SIGINT) at the end. Progress on
# stderr; on stdout one JSON object: first_answer_s, report_s (null where not reached), demo_exit (after the Ctrl-C).
# Usage: benchmarks/demo_time.sh [OUT_DIR] [PORT]   (OUT_DIR is emptied first; default /tmp/demo-time, 8765)
set -u
out=${1:-/tmp/demo-time}
port=${2:-8765}
rm -rf "$out" "$out-cache"
start=$(date +%s.%N)
CONE_CACHE_DIR="$out-cache" cone demo --out "$out" --port "$port" >"$out.log" 2>&1 &
pid=$!
first=""
report=""
while kill -0 "$pid" 2>/dev/null; do
  now=$(date +%s.%N)
  if [ -z "$first" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/search?model=bm25&q=vitamin%20d&k=3")" = 200 ]; then
    first=$(echo "$now - $start" | bc)
    echo "first answer after $first s" >&2
  fi
  if [ -f "$out/scifact/eval/report.json" ]; then
    report=$(echo "$now - $start" | bc)
    echo "every index built and the report written after $report s" >&2
    break
  fi
  sleep 2
done
kill -INT "$pid" 2>/dev/null
wait "$pid"
status=$?
echo "{\"first_answer_s\": ${first:-null}, \"report_s\": ${report:-null}, \"demo_exit\": $status}"
