"""Load benchmark of `cone serve` on loopback with wrk, and the service's overhead, in one run.

1. In-process: the same Entry.search the service calls (encode the query + FAISS search), unbatched, median
   per query: the single-query loop every service figure is a ratio against.
2. `cone serve` in a subprocess per batching setting (default: none, i.e. --max-batch 1; then window 0 and
   2 ms): wrk with 1 connection (overhead: p50 / in-process) and with 16 connections for 30 s (errors,
   p50, p99, throughput), optionally with /admin/reload every S seconds.

Usage: python benchmarks/load_bench.py --indexes DIR --model minilm [--seconds 30] [--connections 16]
       [--batching none,0,2] [--reload-every S]
Needs wrk (Debian package `wrk`). Queries: the dataset's test queries, read from --data-dir.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np

from cone.data.loaders import data_dir, load_beir
from cone.errors import ConeError
from cone.service.batching import DEFAULT_MAX_BATCH, BatchSettings
from cone.service.registry import load_entries

# The loopback helpers live with the tests (they are not part of the installed package).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from local_service import free_port, wait_ready  # noqa: E402

UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def lua_script(model: str, queries: list[str]) -> str:
    paths = [f"/search?model={model}&k=10&q={urllib.parse.quote(q)}" for q in queries]
    items = ",\n".join(json.dumps(p) for p in paths)
    return (
        f"local paths = {{\n{items}\n}}\nlocal i = 0\nrequest = function()\n  i = i + 1\n"
        "  return wrk.format('GET', paths[(i % #paths) + 1])\nend\n"
    )


def parse_wrk(output: str) -> dict:
    def ms(label: str) -> float:
        value, unit = re.search(rf"^\s+{label}%\s+([\d.]+)(us|ms|s)\s*$", output, re.M).groups()
        return float(value) * UNITS[unit]

    requests = int(re.search(r"(\d+) requests in", output).group(1))
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    socket_errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output)
    errors = (int(non_2xx.group(1)) if non_2xx else 0) + (sum(map(int, socket_errors.groups())) if socket_errors else 0)
    return {
        "requests": requests,
        "errors": errors,
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1)),
        "p50_ms": ms("50"),
        "p99_ms": ms("99"),
    }


def reload_loop(url: str, key: str, every: float, stop: threading.Event, counts: dict) -> None:
    """POST /admin/reload every ``every`` seconds while wrk runs: the swap must cost no request."""
    while not stop.wait(every):
        request = urllib.request.Request(url + "/admin/reload", method="POST", headers={"X-API-Key": key})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                counts["ok" if response.status == 200 else "failed"] += 1
        except OSError:
            counts["failed"] += 1


def run_wrk(url: str, script: Path, connections: int, seconds: int) -> dict:
    threads = min(2, connections)
    command = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(script), url]
    return parse_wrk(subprocess.run(command, capture_output=True, text=True, check=True).stdout)


def in_process_ms(indexes: Path, checkpoints: Path | None, model: str, queries: list[str]) -> float:
    entry = load_entries(indexes, checkpoints, BatchSettings(max_batch=1))[0][model]
    if not entry.available:
        raise SystemExit(f"model {model!r} unavailable: {entry.reason}")
    for q in queries[:5]:
        entry.search(q, 10)  # warm-up
    times = []
    for q in queries:
        start = time.perf_counter()
        entry.search(q, 10)
        times.append((time.perf_counter() - start) * 1e3)
    return float(np.median(times))


def batching_flags(setting: str) -> list[str]:
    """``none`` (every request alone) or a window in ms."""
    if setting == "none":
        return ["--max-batch", "1"]
    return ["--batch-window-ms", setting, "--max-batch", str(DEFAULT_MAX_BATCH)]


def serve_and_load(args: argparse.Namespace, script: Path, setting: str) -> dict:
    """One `cone serve` with this batching: 1 client, then the full load (with reloads if asked)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    admin_key = secrets.token_hex(8)
    server = subprocess.Popen(
        [sys.executable, "-m", "cone", "serve", "--indexes", str(args.indexes), "--port", str(port)]
        + batching_flags(setting)
        + (["--checkpoints", str(args.checkpoints)] if args.checkpoints else []),
        stdout=subprocess.DEVNULL,
        env={**os.environ, "CONE_ADMIN_KEY": admin_key},
    )
    try:
        wait_ready(url)
        single = run_wrk(url, script, 1, min(10, args.seconds))
        stop, reloads = threading.Event(), {"ok": 0, "failed": 0}
        if args.reload_every:
            threading.Thread(target=reload_loop, args=(url, admin_key, args.reload_every, stop, reloads)).start()
        try:
            loaded = run_wrk(url, script, args.connections, args.seconds)
        finally:
            stop.set()
    except (ConeError, TimeoutError) as exc:
        raise SystemExit(str(exc)) from None
    finally:
        server.terminate()
        server.wait(30)
    return {"batching": setting, "one_client": single, "loaded": loaded, "reloads": reloads}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--indexes", type=Path, required=True)
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--checkpoints", type=Path, default=None, help="default: $CONE_CHECKPOINTS or the shipped ones")
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--dataset", default="scifact")
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument(
        "--batching", default="none,0,2", help="comma list: none (--max-batch 1) or a window in ms (default none,0,2)"
    )
    parser.add_argument("--reload-every", type=float, default=0, help="seconds between /admin/reload calls (0: none)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk not found: apt-get install wrk")
    ds = load_beir(data_dir(args.data_dir), args.dataset)
    queries = [ds.queries[q] for q in sorted(ds.qrels)][:100]
    local_ms = in_process_ms(args.indexes, args.checkpoints, args.model, queries)
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as handle:
        handle.write(lua_script(args.model, queries))
    runs = [serve_and_load(args, Path(handle.name), setting) for setting in args.batching.split(",")]
    for run in runs:
        run["overhead_p50_ratio"] = run["one_client"]["p50_ms"] / local_ms
        run["load_rps_vs_in_process"] = run["loaded"]["rps"] / (1e3 / local_ms)
    result = {"model": args.model, "in_process_ms": local_ms, "connections": args.connections, "runs": runs}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"model {args.model}: in-process encode+search median {local_ms:.2f} ms ({1e3 / local_ms:.1f} q/s)")
    for run in runs:
        single, loaded = run["one_client"], run["loaded"]
        print(
            f"batching {run['batching']}: 1 client p50 {single['p50_ms']:.2f} ms (overhead "
            f"{run['overhead_p50_ratio']:.2f}); {args.connections} clients x {args.seconds} s: {loaded['requests']} "
            f"requests, errors {loaded['errors']}, {loaded['rps']:.1f} req/s "
            f"({run['load_rps_vs_in_process']:.2f}x the in-process loop), p50 {loaded['p50_ms']:.1f} ms, "
            f"p99 {loaded['p99_ms']:.1f} ms"
            + (f", reloads {run['reloads']['ok']} ok / {run['reloads']['failed']} failed" if args.reload_every else "")
        )


if __name__ == "__main__":
    main()
