"""Idle sockets against `cone serve`: /healthz and a search timed while N clients hold sockets that send nothing.

One `cone serve` runs in a subprocess on 127.0.0.1 under a descriptor limit (`ulimit -n`, --nofile: the service
holds a quarter of it as connections). --sockets threads each connect, send nothing, and connect again as soon as the
server closes them (a 408), so the listen queue stays full of idle sockets. Once every thread has connected, a probe
GETs /healthz and then a search on a fresh connection each, every half second for --seconds; each answer's time is
recorded (one that does not come within --timeout counts as a failure).

Usage: python benchmarks/idle_sockets.py --indexes DIR [--sockets 200] [--nofile 256] [--seconds 20]
       [--json | --record OUT]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import numpy as np
from record import run_benchmark  # this script's folder is on the path: the one runner and record

# The loopback helpers live with the tests (they are not part of the installed package).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from local_service import hold_idle, served, timed_request  # noqa: E402


def summary(times: list[float | None]) -> dict:
    answered = np.array([t for t in times if t is not None]) * 1e3
    return {
        "probes": len(times),
        "failed": sum(t is None for t in times),
        "p50_ms": float(np.percentile(answered, 50)) if len(answered) else None,
        "max_ms": float(answered.max()) if len(answered) else None,
    }


def measure(args: argparse.Namespace) -> dict:
    stop, opened = threading.Event(), []
    times: dict[str, list[float | None]] = {"healthz": [], "search": []}
    with served(args.indexes, args.checkpoints, nofile=args.nofile) as server:
        query = {"model": server.models[0], "q": "cell protein expression", "k": 10}
        paths = {"healthz": "/healthz", "search": "/search?" + urllib.parse.urlencode(query)}
        holders = [
            threading.Thread(target=hold_idle, args=(server.port, stop, opened), daemon=True)
            for _ in range(args.sockets)
        ]
        try:
            for holder in holders:
                holder.start()
            while len(opened) < args.sockets:  # every holder has connected once
                time.sleep(0.05)
            end = time.monotonic() + args.seconds
            while time.monotonic() < end:
                for name, path in paths.items():
                    seconds, status = timed_request(server.port, "GET", path, timeout=args.timeout)
                    times[name].append(seconds if status == 200 else None)
                time.sleep(0.5)
        finally:
            stop.set()
            for holder in holders:
                holder.join(10)
    found = {"indexes": str(args.indexes), "model": query["model"], "sockets": args.sockets, "nofile": args.nofile}
    found |= {"seconds": args.seconds, "connections_opened": len(opened)}
    return found | {name: summary(answers) for name, answers in times.items()}


def show(found: dict) -> str:
    lines = [
        f"{name}: {r['probes']} probes, {r['failed']} failed, p50 {r['p50_ms']} ms, worst {r['max_ms']} ms"
        for name, r in ((name, found[name]) for name in ("healthz", "search"))
    ]
    opened = f"{found['connections_opened']} connections opened in all"
    return "\n".join([*lines, f"{found['sockets']} idle sockets under nofile {found['nofile']}: {opened}"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--indexes", type=Path, required=True)
    parser.add_argument("--checkpoints", type=Path, default=None)
    parser.add_argument("--sockets", type=int, default=200)
    parser.add_argument("--nofile", type=int, default=256, help="the server's descriptor limit (ulimit -n)")
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--timeout", type=float, default=10, help="seconds a probe waits before it counts as failed")
    run_benchmark(parser, measure, show)


if __name__ == "__main__":
    main()
