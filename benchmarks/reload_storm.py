"""Reload storm against `cone serve`: search latency with and without /admin/reload fired twice a second.

One `cone serve` runs in a subprocess on 127.0.0.1. --clients threads search its available indexes (round robin
over the models and a few queries, each on its own keep-alive connection) for --seconds with no reloads, then for
--seconds more while /admin/reload is POSTed --rate times a second, each from its own thread without waiting for
the previous one (a storm: requests pile up unless the service coalesces them). /healthz is timed twice a second
throughout. Both phases run against the same process, so their search percentiles compare like with like.
A reload keeps the indexes whose files did not change; --touch NAME rewrites NAME's manifest time before each
reload request, so that every reload opens that index again (its encoder is the one serving, where the weights are
the same files). The server's RSS is read before and after the storm.

Usage: python benchmarks/reload_storm.py --indexes DIR [--clients 16] [--seconds 20] [--rate 2] [--touch NAME]
       [--json | --record OUT]
"""

from __future__ import annotations

import argparse
import http.client
import os
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import numpy as np
from record import run_benchmark  # this script's folder is on the path: the one runner and record

# The loopback helpers live with the tests (they are not part of the installed package).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from local_service import rss_mib, served, timed_request  # noqa: E402

QUERIES = ["vitamin D deficiency", "cell protein expression", "gene therapy trial", "tumor growth in mice"]
TIMEOUT = 60.0  # seconds any one request may take before it counts as an error


class Phase:
    """What one phase measured: search latencies and failures, /healthz and reload latencies."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.searches: list[float] = []
        self.search_errors = 0
        self.health: list[float] = []
        self.health_errors = 0
        self.reloads: list[float] = []
        self.reload_errors = 0

    def summary(self, seconds: float) -> dict:
        searches, reloads = np.array(self.searches) * 1e3, np.array(self.reloads) * 1e3
        return {
            "requests": len(self.searches) + self.search_errors,
            "errors": self.search_errors,
            "rps": len(self.searches) / seconds,
            "p50_ms": float(np.percentile(searches, 50)),
            "p99_ms": float(np.percentile(searches, 99)),
            "max_ms": float(searches.max()),
            "healthz_checks": len(self.health) + self.health_errors,
            "healthz_errors": self.health_errors,
            "healthz_max_ms": float(max(self.health) * 1e3),
            "reloads": len(self.reloads) + self.reload_errors,
            "reload_errors": self.reload_errors,
            "reload_p50_ms": float(np.percentile(reloads, 50)) if len(reloads) else None,
            "reload_max_ms": float(reloads.max()) if len(reloads) else None,
        }


def searcher(port: int, models: list[str], offset: int, stop: threading.Event, phase: list[Phase]) -> None:
    connection, i = None, offset
    while not stop.is_set():
        model, query = models[i % len(models)], QUERIES[i % len(QUERIES)]
        i += 1
        path = "/search?" + urllib.parse.urlencode({"model": model, "q": query, "k": 10})
        start = time.perf_counter()
        try:
            connection = connection or http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
            connection.request("GET", path)
            response = connection.getresponse()
            response.read()
            ok = response.status == 200
        except (OSError, http.client.HTTPException):
            ok, connection = False, None
        elapsed, current = time.perf_counter() - start, phase[0]
        with current.lock:
            if ok:
                current.searches.append(elapsed)
            else:
                current.search_errors += 1


def prober(port: int, stop: threading.Event, phase: list[Phase]) -> None:
    while not stop.wait(0.5):
        elapsed, status = timed_request(port, "GET", "/healthz", timeout=TIMEOUT)
        current = phase[0]
        with current.lock:
            if status == 200:
                current.health.append(elapsed)
            else:
                current.health_errors += 1


def reloader(
    port: int, key: str, rate: float, stop: threading.Event, phase: Phase, fired: list, touch: Path | None
) -> None:
    def one() -> None:
        if touch is not None:
            os.utime(touch)
        elapsed, status = timed_request(port, "POST", "/admin/reload", {"X-API-Key": key}, TIMEOUT)
        with phase.lock:
            if status == 200:
                phase.reloads.append(elapsed)
            else:
                phase.reload_errors += 1

    while not stop.wait(1 / rate):
        thread = threading.Thread(target=one, daemon=True)
        thread.start()
        fired.append(thread)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--indexes", type=Path, required=True)
    parser.add_argument("--checkpoints", type=Path, default=None)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--rate", type=float, default=2, help="reload requests a second in the storm phase")
    parser.add_argument("--touch", default=None, help="an index whose manifest is touched before each reload")
    run_benchmark(parser, measure, show)


def measure(args: argparse.Namespace) -> dict:
    stop = threading.Event()
    quiet, storm = Phase(), Phase()
    current = [quiet]
    threads: list[threading.Thread] = []
    fired: list[threading.Thread] = []
    with served(args.indexes, args.checkpoints) as server:
        port, models = server.port, server.models
        threads = [
            threading.Thread(target=searcher, args=(port, models, n, stop, current), daemon=True)
            for n in range(args.clients)
        ]
        threads.append(threading.Thread(target=prober, args=(port, stop, current), daemon=True))
        try:
            for thread in threads:
                thread.start()
            time.sleep(args.seconds)
            rss = {"before_storm": rss_mib(server.process.pid)}
            current[0] = storm
            storming = threading.Event()
            touch = args.indexes / args.touch / "manifest.json" if args.touch else None
            reloading = (port, server.key, args.rate, storming, storm, fired, touch)
            firing = threading.Thread(target=reloader, args=reloading, daemon=True)
            firing.start()
            time.sleep(args.seconds)
            storming.set()
            firing.join()
            for thread in fired:  # the storm's last reloads are answered before the phase ends
                thread.join(TIMEOUT)
            rss["after_storm"] = rss_mib(server.process.pid)
        finally:
            stop.set()
            for thread in threads:
                thread.join(TIMEOUT)
    result = {
        "indexes": str(args.indexes),
        "models": models,
        "clients": args.clients,
        "seconds": args.seconds,
        "reload_rate": args.rate,
        "touched": args.touch,
        "quiet": quiet.summary(args.seconds),
        "storm": storm.summary(args.seconds),
        "rss_mib": rss,
    }
    result["p99_ratio"] = result["storm"]["p99_ms"] / result["quiet"]["p99_ms"]
    result["p50_ratio"] = result["storm"]["p50_ms"] / result["quiet"]["p50_ms"]
    return result


def show(result: dict) -> str:
    lines = []
    for name in ("quiet", "storm"):
        r = result[name]
        lines.append(
            f"{name}: {r['requests']} searches, {r['errors']} errors, {r['rps']:.1f}/s, p50 {r['p50_ms']:.1f} ms, "
            f"p99 {r['p99_ms']:.1f} ms; /healthz max {r['healthz_max_ms']:.1f} ms ({r['healthz_errors']} failed); "
            f"{r['reloads']} reloads ({r['reload_errors']} failed), p50 {r['reload_p50_ms']} ms"
        )
    lines.append(f"storm / quiet: p50 x{result['p50_ratio']:.2f}, p99 x{result['p99_ratio']:.2f}")
    if rss := result.get("rss_mib"):  # records before issue 48 have none
        lines.append(
            f"server RSS: {rss['before_storm']:.0f} MiB before the storm, {rss['after_storm']:.0f} MiB after it"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
