"""Seconds and peak RSS of ``measure()`` on N x d float32, the current code against a baseline revision.

The baseline is geometry/instruments.py as committed at ``--baseline`` (default: the last commit before the
one-pass rewrite), read with ``git show`` and loaded as its own module, so both run in the same command.
Every (size, implementation, repeat) runs in its own fresh subprocess, interleaved, so each peak RSS is its
own and each ``measure()`` is cold (SigReg's noise floor not yet cached: one more SigReg call).
Peak RSS is the process's high-water mark (ru_maxrss); the input matrix alone is N x d x 4 bytes.
Usage: python benchmarks/geometry_bench.py [--shapes 10000x256 1000000x256 3x5000] [--repeats 2] [--profile]
       [--blas-threads 1] [--no-baseline] [--json | --record OUT]
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.util
import io
import json
import os
import pstats
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from record import run_benchmark  # this script's folder is on the path: the one runner and record

BASELINE = "3f4a745"  # geometry/instruments.py before the one-pass rewrite
ROOT = Path(__file__).resolve().parents[1]


def gaussian_rows(n: int, d: int, seed: int = 0) -> np.ndarray:
    out = np.empty((n, d), dtype=np.float32)
    rng = np.random.default_rng(seed)
    for start in range(0, n, 65_536):
        stop = min(n, start + 65_536)
        out[start:stop] = rng.standard_normal((stop - start, d), dtype=np.float32)
    out += 0.3  # a mild offset, so nothing is trivially zero; in place, so the input is the only big buffer
    return out


def load_instruments(path: str):
    """geometry/instruments.py from ``path`` (the current file, or a baseline written out by ``git show``)."""
    spec = importlib.util.spec_from_file_location("bench_instruments", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_instruments"] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_one(n: int, d: int, path: str, profile: bool) -> dict:
    g = load_instruments(path)
    x = gaussian_rows(n, d)
    before = rss_mb()
    profiler = cProfile.Profile() if profile else None
    start = time.perf_counter()
    if profiler:
        profiler.enable()
    values = g.measure(x)
    values = values.model_dump() if hasattr(values, "model_dump") else values  # the baseline returned a dict
    if profiler:
        profiler.disable()
    seconds = time.perf_counter() - start
    result = {"n": n, "d": d, "seconds": seconds, "rss_before_mb": before, "peak_rss_mb": rss_mb(), "values": values}
    if profiler:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(8)
        result["profile"] = out.getvalue()
    return result


def child(n: int, d: int, path: str, profile: bool, blas_threads: int | None) -> dict:
    cmd = [sys.executable, __file__, "--one", f"{n}x{d}", "--impl", path, "--json"] + (["--profile"] if profile else [])
    env = dict(os.environ)
    if blas_threads:  # read by OpenBLAS when numpy loads it, so it must be set before the child starts
        env.update({name: str(blas_threads) for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")})
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT, env=env)
    return json.loads(out.stdout)


def parse_shape(text: str) -> tuple[int, int]:
    n, d = (int(part) for part in text.lower().split("x"))
    return n, d


def measure(args: argparse.Namespace) -> dict:
    """Every (shape, implementation) row: the median and peak RSS of its fresh runs, and the runs themselves; with
    --one, one run in this process (what each child does)."""
    if args.one:
        return run_one(*parse_shape(args.one), args.impl, args.profile)
    git_show = ["git", "show", f"{args.baseline}:geometry/instruments.py"]
    old_source = subprocess.run(git_show, capture_output=True, text=True, check=True, cwd=ROOT).stdout
    with tempfile.TemporaryDirectory() as tmp:
        old_path = Path(tmp) / "instruments_baseline.py"
        old_path.write_text(old_source)
        impls = {f"old ({args.baseline})": str(old_path), "new (working tree)": str(ROOT / "geometry/instruments.py")}
        if args.no_baseline:
            del impls[f"old ({args.baseline})"]
        runs: dict[tuple[int, int, str], list[dict]] = {}
        for n, d in map(parse_shape, args.shapes):
            for repeat in range(args.repeats):
                for name, path in impls.items():  # interleaved, so drift in machine load hits both alike
                    run = child(n, d, path, args.profile and repeat == 0, args.blas_threads)
                    runs.setdefault((n, d, name), []).append(run)
    rows = [
        {
            "n": n,
            "d": d,
            "impl": name,
            "median_s": statistics.median(x["seconds"] for x in r),
            "peak_rss_mb": max(x["peak_rss_mb"] for x in r),
            "runs": r,
        }
        for (n, d, name), r in runs.items()
    ]
    return {"blas_threads": args.blas_threads, "rows": rows}


def largest_change(old: dict, new: dict) -> float:
    """The largest relative difference of any instrument between the old and the new code's first runs."""
    before, after = old["runs"][0]["values"], new["runs"][0]["values"]
    return max(abs(after[k] - before[k]) / max(abs(before[k]), 1e-300) for k in before)


def show(found: dict) -> str:
    lines = [f"BLAS threads {found['blas_threads'] or 'default'}"]
    for n, d in dict.fromkeys((row["n"], row["d"]) for row in found["rows"]):
        rows = {row["impl"].split(" ")[0]: row for row in found["rows"] if (row["n"], row["d"]) == (n, d)}
        lines.append(f"\nN = {n:,} x d = {d:,} (input {n * d * 4 / 2**20:.1f} MB)")
        for row in rows.values():
            secs = ", ".join(f"{x['seconds']:.2f}" for x in row["runs"])
            lines.append(
                f"  {row['impl']:22s} measure() {row['median_s']:7.2f} s (runs {secs}), peak RSS "
                f"{row['peak_rss_mb']:6.0f} MB (before measure() {max(x['rss_before_mb'] for x in row['runs']):.0f} MB)"
            )
        if {"old", "new"} <= set(rows):
            ratio, change = rows["old"]["median_s"] / rows["new"]["median_s"], largest_change(rows["old"], rows["new"])
            lines.append(f"  old / new time: {ratio:.1f}x; largest value change {change:.0e}")
        profiled = [row for row in rows.values() if "profile" in row["runs"][0]]
        lines += [f"\n  cProfile, {r['impl']}, {n:,} x {d:,}:\n{r['runs'][0]['profile']}" for r in profiled]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", default=["10000x256", "1000000x256"], help="N x d, as 3x5000")
    parser.add_argument("--repeats", type=int, default=2, help="fresh runs per size and implementation (default 2)")
    parser.add_argument("--baseline", default=BASELINE, help=f"git revision of the old code (default {BASELINE})")
    parser.add_argument("--profile", action="store_true", help="print each implementation's top cProfile rows")
    parser.add_argument("--blas-threads", type=int, help="OpenBLAS threads in the children (default: its own)")
    parser.add_argument("--no-baseline", action="store_true", help="time the working tree only")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--impl", help=argparse.SUPPRESS)
    run_benchmark(parser, measure, show)


if __name__ == "__main__":
    main()
