"""Reload soak of `cone serve`: RSS and open descriptors over many /admin/reload under a light search load.

`cone serve` runs in a subprocess on 127.0.0.1; a few client threads search its indexes (round robin over the
models and a handful of queries) while the main thread POSTs /admin/reload --reloads times, reading the server's
RSS (/proc/PID/status VmRSS) and open descriptors (/proc/PID/fd) after each. Both must level off: a reload that
leaked its old indexes (encoders, document tables, mapped lists) grows them without bound. Every loop is bounded
by a count and by --max-seconds. The result keeps reloads 0, 10 and 200; --rows OUT writes every reload's figures.

Usage: python benchmarks/reload_soak.py --indexes DIR [--reloads 200] [--clients 3] [--max-seconds 1800]
       [--rows OUT.json] [--json | --record OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import urllib.parse
from pathlib import Path

from record import run_benchmark  # this script's folder is on the path: the one runner and record

# The loopback helpers live with the tests (they are not part of the installed package).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from local_service import Served, rss_mib, served, timed_request  # noqa: E402

QUERIES = ["vitamin D deficiency", "cell protein expression", "gene therapy trial", "tumor growth in mice"]
KEPT = (0, 10, 200)  # the reloads whose figures the result keeps


def client_loop(server: Served, stop: threading.Event, counts: dict, lock: threading.Lock) -> None:
    """Search until told to stop; each request bounded by a 60 s timeout."""
    i = 0
    while not stop.is_set():
        query = {"model": server.models[i % len(server.models)], "q": QUERIES[i % len(QUERIES)], "k": 10}
        i += 1
        _, status = timed_request(server.port, "GET", "/search?" + urllib.parse.urlencode(query))
        with lock:
            counts["requests"] += 1
            counts["errors"] += status != 200


def figures(server: Served, reload: int, seconds: float) -> dict:
    """The server's RSS and open descriptors after reload ``reload``."""
    fds = len(os.listdir(f"/proc/{server.process.pid}/fd"))
    return {"reload": reload, "rss_mb": rss_mib(server.process.pid), "fds": fds, "seconds": seconds}


def soak(args: argparse.Namespace, server: Served, counts: dict, lock: threading.Lock) -> list[dict]:
    """Reload after reload until --reloads or --max-seconds: the figures after each (reload 0: before the first)."""
    rows, started = [figures(server, 0, 0.0)], time.monotonic()
    for n in range(1, args.reloads + 1):
        if time.monotonic() - started > args.max_seconds:
            print(f"stopped at reload {n - 1}: --max-seconds {args.max_seconds:g} reached", file=sys.stderr)
            break
        _, status = timed_request(server.port, "POST", "/admin/reload", {"X-API-Key": server.key}, timeout=300)
        if status != 200:
            raise RuntimeError(f"reload {n} answered {status}")
        rows.append(figures(server, n, time.monotonic() - started))
        if n in (1, 10, 50, 100, 150, 200) or n == args.reloads:
            with lock:
                done = dict(counts)
            print(
                f"reload {n:4d}: RSS {rows[-1]['rss_mb']:7.1f} MB, {rows[-1]['fds']:4d} fds, {rows[-1]['seconds']:6.1f}"
                f" s, {done['requests']} requests, {done['errors']} errors",
                file=sys.stderr,
            )
    return rows


def measure(args: argparse.Namespace) -> dict:
    stop, lock, counts = threading.Event(), threading.Lock(), {"requests": 0, "errors": 0}
    with served(args.indexes) as server:
        clients = [
            threading.Thread(target=client_loop, args=(server, stop, counts, lock), daemon=True)
            for _ in range(args.clients)
        ]
        try:
            for thread in clients:
                thread.start()
            rows = soak(args, server, counts, lock)
        finally:
            stop.set()
            for thread in clients:
                thread.join(90)
    if args.rows:
        args.rows.write_text(json.dumps(rows, indent=2))
    at = {str(r["reload"]): {"rss_mb": round(r["rss_mb"], 1), "fds": r["fds"]} for r in rows if r["reload"] in KEPT}
    found = {"indexes": str(args.indexes), "models": server.models, "clients": args.clients, "reloads": len(rows) - 1}
    return found | counts | {"at": at}


def show(found: dict) -> str:
    at = found["at"]
    lines = [f"reload {n:>4}: RSS {at[n]['rss_mb']:7.1f} MB, {at[n]['fds']:4d} fds" for n in at]
    done = f"{found['reloads']} reloads, {found['requests']} searches, {found['errors']} errors"
    return "\n".join([f"{done} ({found['clients']} clients over {', '.join(found['models'])})", *lines])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--indexes", type=Path, required=True)
    parser.add_argument("--reloads", type=int, default=200)
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--max-seconds", type=float, default=1800)
    parser.add_argument("--rows", type=Path, default=None, help="write every reload's figures here (JSON)")
    run_benchmark(parser, measure, show)


if __name__ == "__main__":
    main()
