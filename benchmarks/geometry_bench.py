"""Seconds and peak RSS of every instrument on N x 256 float32 (N = 10k and 1M).

Each size runs in its own subprocess so its peak RSS is its own.
Usage: python benchmarks/geometry_bench.py [--sizes 10000 1000000] [--json]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import numpy as np

D = 256


def gaussian_rows(n: int, seed: int = 0) -> np.ndarray:
    out = np.empty((n, D), dtype=np.float32)
    rng = np.random.default_rng(seed)
    for start in range(0, n, 65_536):
        stop = min(n, start + 65_536)
        out[start:stop] = rng.standard_normal((stop - start, D), dtype=np.float32)
    return out + 0.3  # a mild offset, so nothing is trivially zero


def run_one(n: int) -> dict:
    from cone.geometry import instruments as g

    x = gaussian_rows(n)
    timings: dict[str, float] = {}

    def timed(name, fn):
        t = time.perf_counter()
        value = fn()
        timings[name] = time.perf_counter() - t
        return value

    stats = timed("moments (shared by the next three)", lambda: g.moments(x))
    timed("anisotropy (exact)", lambda: g.anisotropy(x))
    timed("decorrelation (exact)", lambda: g.decorrelation(x, stats))
    timed("effective_rank (exact)", lambda: g.effective_rank(x, stats))
    timed("top_pc_share (exact)", lambda: g.top_pc_share(x, stats))
    timed(f"sigreg ({g.SIGREG_MAX_ROWS} rows sampled)", lambda: g.sigreg(x))
    timed("sigreg_noise_floor", lambda: g.sigreg_noise_floor(n, D))
    timed("row_norms", lambda: g.row_norms(x))
    unif = timed(f"uniformity ({g.UNIFORMITY_PAIRS} pairs)", lambda: g.uniformity(x))
    total = time.perf_counter()
    g.measure(x)
    timings["measure() end to end"] = time.perf_counter() - total
    return {
        "n": n,
        "d": D,
        "seconds": timings,
        "uniformity_stderr": unif.stderr,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "input_mb": x.nbytes / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 1_000_000])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one)))
        return
    results = []
    for n in args.sizes:
        out = subprocess.run([sys.executable, __file__, "--one", str(n)], capture_output=True, text=True, check=True)
        results.append(json.loads(out.stdout))
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for r in results:
        print(
            f"N = {r['n']:,} x d = {r['d']} float32 (input {r['input_mb']:.0f} MB), peak RSS {r['peak_rss_mb']:.0f} MB"
        )
        for name, sec in r["seconds"].items():
            print(f"  {name:40s} {sec:8.2f} s")


if __name__ == "__main__":
    main()
