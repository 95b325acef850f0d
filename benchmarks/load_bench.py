"""Load benchmark of `cone serve` on loopback with wrk, and the service's overhead, in one run.

1. In-process: the same Entry.search the service calls (encode the query + FAISS search), unbatched, median
   per query: the single-query loop every service figure is a ratio against.
2. `cone serve` in a subprocess per batching setting (default: none, i.e. --max-batch 1; then window 0 and
   2 ms): wrk with 1 connection (overhead: p50 / in-process) and with 16 connections for 30 s (errors,
   p50, p99, throughput), optionally with /admin/reload every S seconds.

With --limit, the service against the machine's limit instead (issue 43). The limit: the rate at which this one
process encodes the dataset's test queries in batches of 64 (the index's own encoder: sentence-transformers'
``encode``, on the runtime the index was built with) and searches them with FAISS (k = 10), the better of one call
on torch's default threads and one thread per core each encoding its share on one torch thread. Then one `cone
serve` (the default batching, or the one --batching setting) gets the same queries from wrk (k = 10) at each
--connections count (default 16,64) for --seconds, and each rate is a ratio to the limit. wrk runs on the same
cores as the server: part of what is measured. Both are also counted per CPU-second (the limit's process; the
server and wrk), which says what a query costs whatever share of the cores other work on the machine left.

Usage: python benchmarks/load_bench.py --indexes DIR --model minilm [--seconds 30] [--connections 16]
       [--batching none,0,2] [--reload-every S]
       python benchmarks/load_bench.py --indexes DIR --model minilm --limit [--connections 16,64]
Needs wrk (Debian package `wrk`). Queries: the dataset's test queries, read from --data-dir.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import resource
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from record import run_benchmark  # this script's folder is on the path: the one runner and record

from cone.cli.options import positive_int
from cone.data.loaders import data_dir, load_beir
from cone.errors import ConeError, InputError
from cone.service.batching import DEFAULT_MAX_BATCH, BatchSettings
from cone.service.registry import Entry, load_entries

# The loopback helpers live with the tests (they are not part of the installed package).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from local_service import free_port, stop, wait_ready  # noqa: E402

UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}
# --limit's clients wait as long for an answer as the service gives a request (--request-timeout's default): 64
# clients of a service that answers ~50 a second queue for over a second each, which wrk's own 2 s would count as
# failures of the service.
CLIENT_TIMEOUT_S = 10


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


def run_wrk(url: str, script: Path, connections: int, seconds: int, timeout_s: int | None = None) -> dict:
    """wrk's figures; ``timeout_s``: how long it waits for an answer before counting a timeout (wrk's own 2 s)."""
    threads = min(2, connections)
    command = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(script), url]
    command += [f"--timeout={timeout_s}s"] if timeout_s else []
    return parse_wrk(subprocess.run(command, capture_output=True, text=True, check=True).stdout)


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a running process, all its threads (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def loaded_run(url: str, script: Path, connections: int, seconds: int, server: subprocess.Popen) -> dict:
    """wrk's figures, and the CPU seconds the server and wrk used meanwhile: on a machine that other work shares,
    queries per CPU-second say what the service costs, whatever share of the cores it got."""
    server_before, wrk_before = process_cpu_s(server.pid), children_cpu_s()
    loaded = run_wrk(url, script, connections, seconds, CLIENT_TIMEOUT_S)
    server_cpu, wrk_cpu = process_cpu_s(server.pid) - server_before, children_cpu_s() - wrk_before
    return {
        "connections": connections,
        "loaded": loaded,
        "server_cpu_s": server_cpu,
        "wrk_cpu_s": wrk_cpu,
        "queries_per_cpu_s": loaded["requests"] / (server_cpu + wrk_cpu),
    }


def open_entry(indexes: Path, checkpoints: Path | None, model: str) -> Entry:
    entry = load_entries(indexes, checkpoints, BatchSettings(max_batch=1))[0][model]
    if not entry.available:
        raise SystemExit(f"model {model!r} unavailable: {entry.reason}")
    return entry


def in_process_ms(indexes: Path, checkpoints: Path | None, model: str, queries: list[str]) -> float:
    entry = open_entry(indexes, checkpoints, model)
    for q in queries[:5]:
        entry.search(q, 10)  # warm-up
    times = []
    for q in queries:
        start = time.perf_counter()
        entry.search(q, 10)
        times.append((time.perf_counter() - start) * 1e3)
    return float(np.median(times))


def limit_rate(indexes: Path, checkpoints: Path | None, model: str, queries: list[str], rounds: int) -> dict:
    """The machine's limit for this query stream, in queries/s: the better of two ways this one process can encode
    all of them in batches of the encoder's default size and search them with FAISS (k = 10). ``one_call``: one
    call on torch's default threads (every core), as sentence-transformers' ``encode`` runs a corpus; ``per_core``:
    one thread per core, each encoding its share on one torch thread (torch.set_num_threads is per thread). Each
    the median of ``rounds`` rounds, after a warm-up; also per CPU-second of this process (every thread's)."""
    index = open_entry(indexes, checkpoints, model).index
    batch_size = inspect.signature(index.encoder.encode).parameters["batch_size"].default
    cores = torch.get_num_threads()
    shares = [queries[i::cores] for i in range(cores)]

    def per_core() -> None:
        def search(share: list[str]) -> None:
            torch.set_num_threads(1)
            index.search(share, 10)
            torch.set_num_threads(cores)  # what threads started later begin with again (the count is per thread)

        workers = [threading.Thread(target=search, args=(share,)) for share in shares]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()

    ways = {"one_call": lambda: index.search(queries, 10), "per_core": per_core}
    found = {}
    for name, run in ways.items():
        run()  # warm-up
        rates, cpu_rates = [], []
        for _ in range(rounds):
            start, cpu_start = time.perf_counter(), time.process_time()
            run()
            rates.append(len(queries) / (time.perf_counter() - start))
            cpu_rates.append(len(queries) / (time.process_time() - cpu_start))
        found[name] = {
            "qps": float(np.median(rates)),
            "rounds_qps": rates,
            "queries_per_cpu_s": float(np.median(cpu_rates)),
        }
    return {
        "qps": max(way["qps"] for way in found.values()),
        "queries_per_cpu_s": max(way["queries_per_cpu_s"] for way in found.values()),
        **found,
        "batch_size": batch_size,
        "torch_threads": cores,
        "runtime": index.encoder.runtime.tag,
    }


def batching_flags(setting: str) -> list[str]:
    """``none`` (every request alone) or a window in ms."""
    if setting == "none":
        return ["--max-batch", "1"]
    return ["--batch-window-ms", setting, "--max-batch", str(DEFAULT_MAX_BATCH)]


@contextmanager
def serving(args: argparse.Namespace, setting: str) -> Iterator[tuple[str, str, subprocess.Popen]]:
    """One `cone serve` with this batching, ready: its URL, admin key and process."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    admin_key = secrets.token_hex(8)
    server = subprocess.Popen(
        [sys.executable, "-m", "cone", "serve", "--indexes", str(args.indexes), "--port", str(port)]
        + batching_flags(setting)
        + ["--parallel-batches", str(args.parallel_batches)]
        + (["--checkpoints", str(args.checkpoints)] if args.checkpoints else []),
        stdout=subprocess.DEVNULL,
        env={**os.environ, "CONE_ADMIN_KEY": admin_key},
    )
    try:
        wait_ready(url)
        yield url, admin_key, server
    except (ConeError, TimeoutError) as exc:
        raise SystemExit(str(exc)) from None
    finally:
        stop(server)


def serve_and_load(args: argparse.Namespace, script: Path, setting: str) -> dict:
    """One `cone serve` with this batching: 1 client, then the full load (with reloads if asked)."""
    with serving(args, setting) as (url, admin_key, _):
        single = run_wrk(url, script, 1, min(10, args.seconds))
        stop_reloads, reloads = threading.Event(), {"ok": 0, "failed": 0}
        if args.reload_every:
            threading.Thread(
                target=reload_loop, args=(url, admin_key, args.reload_every, stop_reloads, reloads)
            ).start()
        try:
            loaded = run_wrk(url, script, args.connections[0], args.seconds)
        finally:
            stop_reloads.set()
    return {"batching": setting, "one_client": single, "loaded": loaded, "reloads": reloads}


def against_limit(args: argparse.Namespace, queries: list[str], script: Path) -> dict:
    """The limit, then one server under each connection count: its rate as a ratio to the limit."""
    limit = limit_rate(args.indexes, args.checkpoints, args.model, queries, args.limit_rounds)
    setting = args.batching or "0"
    with serving(args, setting) as (url, _, server):
        run_wrk(url, script, args.connections[0], min(5, args.seconds))  # warm-up: the first batches' allocations
        runs = [loaded_run(url, script, n, args.seconds, server) for n in args.connections]
    for run in runs:
        run["ratio_to_limit"] = run["loaded"]["rps"] / limit["qps"]
        run["cpu_ratio_to_limit"] = run["queries_per_cpu_s"] / limit["queries_per_cpu_s"]
    return {
        "model": args.model,
        "queries": len(queries),
        "seconds": args.seconds,
        "client_timeout_s": CLIENT_TIMEOUT_S,
        "batching": setting,
        "parallel_batches": args.parallel_batches,
        "limit": limit,
        "runs": runs,
    }


def connection_counts(text: str) -> list[int]:
    counts = [int(part) for part in text.split(",")]
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: connection counts are positive integers")
    return counts


def measure(args: argparse.Namespace) -> dict:
    args = with_defaults(args)
    if shutil.which("wrk") is None:
        raise InputError("wrk not found: `make install` installs it (the Debian package wrk)")
    ds = load_beir(data_dir(args.data_dir), args.dataset)
    queries = [ds.queries[q] for q in sorted(ds.qrels)]
    if not args.limit:
        queries = queries[:100]
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as handle:
        handle.write(lua_script(args.model, queries))
    if args.limit:
        return against_limit(args, queries, Path(handle.name))
    local_ms = in_process_ms(args.indexes, args.checkpoints, args.model, queries)
    runs = [serve_and_load(args, Path(handle.name), setting) for setting in args.batching.split(",")]
    for run in runs:
        run["overhead_p50_ratio"] = run["one_client"]["p50_ms"] / local_ms
        run["load_rps_vs_in_process"] = run["loaded"]["rps"] / (1e3 / local_ms)
    return {
        "model": args.model,
        "in_process_ms": local_ms,
        "connections": args.connections[0],
        "parallel_batches": args.parallel_batches,
        "runs": runs,
    }


def show(found: dict) -> str:
    return show_limit(found) if "limit" in found else show_batching(found)


def show_limit(found: dict) -> str:
    limit = found["limit"]
    lines = [
        f"model {found['model']}: limit {limit['qps']:.1f} queries/s ({found['queries']} queries, batch "
        f"{limit['batch_size']}, {limit['runtime']}; one call on {limit['torch_threads']} torch threads "
        f"{limit['one_call']['qps']:.1f}, one thread per core {limit['per_core']['qps']:.1f}); "
        f"{limit['queries_per_cpu_s']:.1f} queries per CPU-second"
    ]
    for run in found["runs"]:
        loaded = run["loaded"]
        lines.append(
            f"{run['connections']} clients x {found['seconds']} s: {loaded['requests']} requests, errors "
            f"{loaded['errors']}, {loaded['rps']:.1f} req/s = {run['ratio_to_limit']:.2f}x the limit, p50 "
            f"{loaded['p50_ms']:.1f} ms, p99 {loaded['p99_ms']:.1f} ms; {run['queries_per_cpu_s']:.1f} queries "
            f"per CPU-second (server {run['server_cpu_s']:.1f} s, wrk {run['wrk_cpu_s']:.1f} s) = "
            f"{run['cpu_ratio_to_limit']:.2f}x the limit's"
        )
    return "\n".join(lines)


def show_batching(found: dict) -> str:
    local_ms = found["in_process_ms"]
    lines = [f"model {found['model']}: in-process encode+search median {local_ms:.2f} ms ({1e3 / local_ms:.1f} q/s)"]
    for run in found["runs"]:
        single, loaded, reloads = run["one_client"], run["loaded"], run["reloads"]
        lines.append(
            f"batching {run['batching']}: 1 client p50 {single['p50_ms']:.2f} ms (overhead "
            f"{run['overhead_p50_ratio']:.2f}); {found['connections']} clients: {loaded['requests']} "
            f"requests, errors {loaded['errors']}, {loaded['rps']:.1f} req/s "
            f"({run['load_rps_vs_in_process']:.2f}x the in-process loop), p50 {loaded['p50_ms']:.1f} ms, "
            f"p99 {loaded['p99_ms']:.1f} ms"
            + (f", reloads {reloads['ok']} ok / {reloads['failed']} failed" if sum(reloads.values()) else "")
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--indexes", type=Path, required=True)
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--checkpoints", type=Path, default=None, help="default: $CONE_CHECKPOINTS or the shipped ones")
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--dataset", default="scifact")
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument(
        "--connections", type=connection_counts, default=None, help="wrk's connections (default 16; --limit: 16,64)"
    )
    parser.add_argument(
        "--batching",
        default=None,
        help="comma list: none (--max-batch 1) or a window in ms (default none,0,2; --limit: one setting, default 0)",
    )
    parser.add_argument(
        "--parallel-batches", type=positive_int, default=1, help="the server's --parallel-batches (default 1)"
    )
    parser.add_argument("--limit", action="store_true", help="the service against the machine's limit (see above)")
    parser.add_argument("--limit-rounds", type=int, default=3, help="rounds of each way of the limit (median)")
    parser.add_argument("--reload-every", type=float, default=0, help="seconds between /admin/reload calls (0: none)")
    run_benchmark(parser, measure, show)


def with_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """The mode's defaults, and the combinations refused: --limit loads 16 then 64 clients and serves one batching
    setting; else one --connections count (16) and three settings."""
    if args.limit and args.batching and "," in args.batching:
        raise InputError("--limit serves one batching setting")
    if not args.limit and args.connections and len(args.connections) > 1:
        raise InputError("one --connections count, or --limit")
    args.connections = args.connections or ([16, 64] if args.limit else [16])
    args.batching = args.batching or (None if args.limit else "none,0,2")
    return args


if __name__ == "__main__":
    main()
