"""Idle sockets against `cone serve`: /healthz and a search timed while N clients hold sockets that send nothing.

One `cone serve` runs in a subprocess on 127.0.0.1 under a descriptor limit (`ulimit -n`, --nofile: the service
holds a quarter of it as connections). --sockets threads each connect, send nothing, and connect again as soon as the
server closes them (a 408), so the listen queue stays full of idle sockets. Once every thread has connected, a probe
GETs /healthz and then a search on a fresh connection each, every half second for --seconds; each answer's time is
recorded (one that does not come within --timeout counts as a failure).

Usage: python benchmarks/idle_sockets.py --indexes DIR [--sockets 200] [--nofile 256] [--seconds 20] [--json]
"""

from __future__ import annotations

import argparse
import http.client
import json
import resource
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import numpy as np

from cone.cpu import cpu_name

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from local_service import free_port, hold_idle, wait_ready  # noqa: E402
from local_service import stop as stop_server  # noqa: E402 (`stop` here is the holders' Event)


def timed_get(port: int, path: str, timeout: float) -> float | None:
    """Seconds for one GET on a fresh connection, None if no 200 came within ``timeout``."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    start = time.perf_counter()
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        response.read()
        ok = response.status == 200
    except (OSError, http.client.HTTPException):
        ok = False
    finally:
        connection.close()
    return time.perf_counter() - start if ok else None


def summary(times: list[float | None]) -> dict:
    answered = np.array([t for t in times if t is not None]) * 1e3
    return {
        "probes": len(times),
        "failed": sum(t is None for t in times),
        "p50_ms": float(np.percentile(answered, 50)) if len(answered) else None,
        "max_ms": float(answered.max()) if len(answered) else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--indexes", type=Path, required=True)
    parser.add_argument("--checkpoints", type=Path, default=None)
    parser.add_argument("--sockets", type=int, default=200)
    parser.add_argument("--nofile", type=int, default=256, help="the server's descriptor limit (ulimit -n)")
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--timeout", type=float, default=10, help="seconds a probe waits before it counts as failed")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()

    port = free_port()
    command = [sys.executable, "-m", "cone", "serve", "--indexes", str(args.indexes), "--port", str(port)]
    command += ["--checkpoints", str(args.checkpoints)] if args.checkpoints else []

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (args.nofile, args.nofile))

    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=limit)
    stop, opened = threading.Event(), []
    holders = [threading.Thread(target=hold_idle, args=(port, stop, opened), daemon=True) for _ in range(args.sockets)]
    health: list[float | None] = []
    searches: list[float | None] = []
    try:
        wait_ready(f"http://127.0.0.1:{port}", timeout=600)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        connection.request("GET", "/models")
        model = next(m["name"] for m in json.loads(connection.getresponse().read())["models"] if m["available"])
        connection.close()
        search = "/search?" + urllib.parse.urlencode({"model": model, "q": "cell protein expression", "k": 10})
        for holder in holders:
            holder.start()
        while len(opened) < args.sockets:  # every holder has connected once
            time.sleep(0.05)
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            health.append(timed_get(port, "/healthz", args.timeout))
            searches.append(timed_get(port, search, args.timeout))
            time.sleep(0.5)
    finally:
        stop.set()
        for holder in holders:
            holder.join(10)
        stop_server(server)
    result = {
        "cpu": cpu_name(),
        "indexes": str(args.indexes),
        "model": model,
        "sockets": args.sockets,
        "nofile": args.nofile,
        "seconds": args.seconds,
        "connections_opened": len(opened),
        "healthz": summary(health),
        "search": summary(searches),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for name in ("healthz", "search"):
        r = result[name]
        print(f"{name}: {r['probes']} probes, {r['failed']} failed, p50 {r['p50_ms']} ms, worst {r['max_ms']} ms")
    print(f"{args.sockets} idle sockets under nofile {args.nofile}: {len(opened)} connections opened in all")


if __name__ == "__main__":
    main()
