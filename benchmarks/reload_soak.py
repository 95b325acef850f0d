"""Reload soak of `cone serve`: RSS and open descriptors over many /admin/reload under a light search load.

`cone serve` runs in a subprocess on 127.0.0.1; a few client threads search its indexes (round robin over the
models and a handful of queries) while the main thread POSTs /admin/reload --reloads times, reading the server's
RSS (/proc/PID/status VmRSS) and open descriptors (/proc/PID/fd) after each. Both must level off: a reload that
leaked its old indexes (encoders, document tables, mapped lists) grows them without bound. Every loop is bounded
by a count and by --max-seconds.

Usage: python benchmarks/reload_soak.py --indexes DIR [--reloads 200] [--clients 3] [--max-seconds 1800]
       [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from cone.cpu import cpu_name

# The loopback helpers live with the tests (they are not part of the installed package).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from local_service import free_port, wait_ready  # noqa: E402
from local_service import stop as stop_server  # noqa: E402 (each benchmark's own `stop` is its Event)

QUERIES = ["vitamin D deficiency", "cell protein expression", "gene therapy trial", "tumor growth in mice"]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def client_loop(url: str, models: list[str], stop: threading.Event, counts: dict, lock: threading.Lock) -> None:
    """Search until told to stop; each request bounded by a 60 s timeout."""
    i = 0
    while not stop.is_set():
        model, query = models[i % len(models)], QUERIES[i % len(QUERIES)]
        i += 1
        params = urllib.parse.urlencode({"model": model, "q": query, "k": 10})
        try:
            with urllib.request.urlopen(f"{url}/search?{params}", timeout=60) as response:
                ok = response.status == 200
        except (urllib.error.URLError, OSError):
            ok = False
        with lock:
            counts["requests"] += 1
            counts["errors"] += not ok


def reload(url: str, key: str) -> dict:
    request = urllib.request.Request(url + "/admin/reload", method="POST", headers={"X-API-Key": key})
    with urllib.request.urlopen(request, timeout=300) as response:
        return json.loads(response.read())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--indexes", type=Path, required=True)
    parser.add_argument("--reloads", type=int, default=200)
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--max-seconds", type=float, default=1800)
    parser.add_argument("--json", type=Path, default=None, help="write every reload's figures here")
    args = parser.parse_args()

    port, key = free_port(), secrets.token_hex(16)
    env = {**os.environ, "CONE_ADMIN_KEY": key}
    command = [sys.executable, "-m", "cone", "serve", "--indexes", str(args.indexes), "--port", str(port)]
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    stop, lock = threading.Event(), threading.Lock()
    counts = {"requests": 0, "errors": 0}
    rows: list[dict] = []
    threads: list[threading.Thread] = []
    models: list[str] = []
    try:
        wait_ready(url, timeout=600)
        with urllib.request.urlopen(url + "/models", timeout=60) as response:
            models = [m["name"] for m in json.loads(response.read())["models"] if m["available"]]
        rows.append({"reload": 0, "rss_mb": rss_mb(server.pid), "fds": open_fds(server.pid), "seconds": 0.0})
        threads = [
            threading.Thread(target=client_loop, args=(url, models, stop, counts, lock), daemon=True)
            for _ in range(args.clients)
        ]
        for thread in threads:
            thread.start()
        started = time.monotonic()
        for n in range(1, args.reloads + 1):
            if time.monotonic() - started > args.max_seconds:
                print(f"stopped at reload {n - 1}: --max-seconds {args.max_seconds:g} reached", file=sys.stderr)
                break
            answer = reload(url, key)
            row = {
                "reload": n,
                "rss_mb": rss_mb(server.pid),
                "fds": open_fds(server.pid),
                "seconds": time.monotonic() - started,
                "available": answer["available"],
            }
            rows.append(row)
            if n in (1, 10, 50, 100, 150, 200) or n == args.reloads:
                with lock:
                    done = dict(counts)
                print(
                    f"reload {n:4d}: RSS {row['rss_mb']:7.1f} MB, {row['fds']:4d} fds, {row['seconds']:6.1f} s, "
                    f"{done['requests']} requests, {done['errors']} errors",
                    file=sys.stderr,
                )
    finally:
        stop.set()
        for thread in threads:
            thread.join(90)
        stop_server(server)
    summary = {
        "cpu": cpu_name(),
        "indexes": str(args.indexes),
        "models": models,
        "clients": args.clients,
        "reloads": len(rows) - 1,
        "requests": counts["requests"],
        "errors": counts["errors"],
        "at": {
            str(r["reload"]): {"rss_mb": round(r["rss_mb"], 1), "fds": r["fds"]}
            for r in rows
            if r["reload"] in (0, 10, 200)
        },
    }
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
