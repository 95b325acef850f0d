"""Peak memory of a streamed build against the in-memory build of the same index, and of serving each, on a
synthetic corpus of a million documents.

Encoding a million texts with a transformer would take hours on 2 cores, so the encoder is the cheapest real
one cone has: the baseline LM at layer ``emb`` (the mean of its token embeddings; no transformer block runs).
Its vectors, the correction, FAISS and the files go through exactly the code `cone index` runs. The documents
are made here (random words of the baseline tokenizer's vocabulary, 8-40 per document, a title of 2-5), so
nothing of a dataset is copied. Both builds are `cone index` subprocesses with the same factory; each peak is
the child's own maximum resident set (wait4), split by sampling /proc into anonymous memory and pages of
mapped files (FAISS maps the inverted lists while it merges them; the kernel can drop those pages). The
streamed build then runs again inside a memory cgroup limited to a quarter of the in-memory peak (root and
cgroup v1 only; skipped with the reason otherwise): completing there is what it needs. Each index is then
served by `cone serve`, asked one /search, and its resident memory read from /proc.

Usage: python benchmarks/stream_bench.py [--docs 1000000] [--factory IVF1024,Flat] [--limit-fraction 0.24] [--work DIR]
       [--json | --record OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
from record import run_benchmark  # this script's folder is on the path: the one runner and record
from tokenizers import Tokenizer

from cone.indexing.spec import IndexSpec, parse_index_type
from cone.models.checkpoint import checkpoints_dir

MODEL, LAYER = "baseline", "emb"


def vocabulary() -> list[str]:
    tokenizer = Tokenizer.from_file(str(checkpoints_dir() / MODEL / "tokenizer.json"))
    words = [w.lstrip("Ġ") for w in tokenizer.get_vocab()]
    return sorted({w for w in words if w.isascii() and w.isalpha() and len(w) >= 3})


def write_corpus(folder: Path, n_docs: int, seed: int = 0) -> Path:
    """A BEIR folder of ``n_docs`` made-up documents (and one query, which `cone index` does not read)."""
    words = np.array(vocabulary())
    rng = np.random.default_rng(seed)
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    with (folder / "corpus.jsonl").open("w") as out:
        for start in range(0, n_docs, 10_000):
            rows = min(10_000, n_docs - start)
            lengths, titles = rng.integers(8, 41, rows), rng.integers(2, 6, rows)
            drawn = words[rng.integers(0, len(words), int(lengths.sum() + titles.sum()))]
            at = 0
            for i in range(rows):
                title = " ".join(drawn[at : at + titles[i]])
                at += titles[i]
                text = " ".join(drawn[at : at + lengths[i]])
                at += lengths[i]
                out.write(json.dumps({"_id": f"s{start + i}", "title": title, "text": text}) + "\n")
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "q0", "text": " ".join(words[:5])}) + "\n")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\ts0\t1\n")
    return folder


MEMORY_CGROUP = Path("/sys/fs/cgroup/memory")  # cgroup v1's memory controller (root only)


def peak_build(folder: Path, out: Path, factory: str, stream: bool, cache: Path, cgroup: Path | None = None) -> dict:
    argv = [sys.executable, "-m", "cone", "index", "--model", MODEL, "--layer", LAYER, "--dataset", str(folder)]
    argv += ["--out", str(out), "--index-factory", factory, "--search-params", "nprobe=16", "--no-progress"]
    argv += ["--stream"] if stream else []
    start = time.perf_counter()
    join = None if cgroup is None else lambda: (cgroup / "cgroup.procs").write_text(str(os.getpid()))
    env = {**os.environ, "CONE_CACHE_DIR": str(cache)}
    # The build's own summary goes to stderr with its progress: stdout is this benchmark's JSON alone.
    child = subprocess.Popen(argv, env=env, preexec_fn=join, stdout=sys.stderr)
    peaks = {"RssAnon": 0, "RssFile": 0}
    while True:  # sampled: what of the resident set is the process's own, what is mapped files
        done, status, usage = os.wait4(child.pid, os.WNOHANG)
        if done:
            break
        peaks = {key: max(value, resident(child.pid).get(key, 0)) for key, value in peaks.items()}
        time.sleep(0.2)
    if status != 0 and cgroup is None:
        raise SystemExit(f"build failed ({status}): {' '.join(argv)}")
    peak = usage.ru_maxrss  # this child's own peak resident set, in KiB
    return {
        "completed": status == 0,
        "seconds": round(time.perf_counter() - start, 1),
        "peak_rss_mib": round(peak / 1024, 1),
        "peak_anonymous_mib": round(peaks["RssAnon"] / 1024, 1),
        "peak_file_backed_mib": round(peaks["RssFile"] / 1024, 1),
    }


def limited_build(folder: Path, out: Path, factory: str, cache: Path, limit_mib: float) -> dict:
    """The streamed build again, in a memory cgroup of ``limit_mib``: the kernel must then reclaim mapped index
    pages instead of letting them pile up, so completing shows what the build needs, not what it touched."""
    group = MEMORY_CGROUP / f"cone-stream-bench-{os.getpid()}"
    try:
        group.mkdir()
        (group / "memory.limit_in_bytes").write_text(str(int(limit_mib * 2**20)))
    except OSError as exc:
        return {"skipped": f"no memory cgroup to run in ({exc.strerror}: needs root and cgroup v1's memory controller)"}
    try:
        result = peak_build(folder, out, factory, True, cache, group)
        result["limit_mib"] = round(limit_mib, 1)
        result["times_the_limit_was_hit"] = int((group / "memory.failcnt").read_text())
        return result
    finally:
        group.rmdir()


def resident(pid: int) -> dict[str, int]:
    """/proc/PID/status memory lines, in KiB; empty once the process is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    return {line.split(":")[0]: int(line.split()[1]) for line in status.splitlines() if line.startswith(("Vm", "Rss"))}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def served(indexes: Path, factory: str) -> dict:
    """`cone serve` over ``indexes``: its resident memory after loading and after one search."""
    name = IndexSpec(MODEL, parse_index_type(factory), layer=LAYER).folder_name()
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "cone", "serve", "--indexes", str(indexes), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                models = json.load(urllib.request.urlopen(f"{base}/models", timeout=5))["models"]
                if any(m["name"] == name and m["available"] for m in models):
                    break
            except OSError:
                pass
            time.sleep(1)
        else:
            raise SystemExit(f"cone serve did not offer {name} within 600 s")
        query = urllib.parse.urlencode({"model": name, "q": "protein folding energy", "k": 5})
        hits = json.load(urllib.request.urlopen(f"{base}/search?{query}", timeout=60))["hits"]
        memory = resident(server.pid)
        return {
            "rss_mib": round(memory["VmRSS"] / 1024, 1),
            "anonymous_mib": round(memory["RssAnon"] / 1024, 1),
            "file_backed_mib": round(memory["RssFile"] / 1024, 1),
            "hits": len(hits),
            "top_hit": hits[0]["doc_id"] if hits else None,
        }
    finally:
        server.terminate()
        server.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--factory", default="IVF1024,Flat")
    parser.add_argument(
        "--limit-fraction", type=float, default=0.24, help="of the in-memory peak, for the cgroup run (default 0.24)"
    )
    parser.add_argument("--work", type=Path, default=None, help="scratch folder (default a temporary one, removed)")
    run_benchmark(parser, measure, show)


def measure(args: argparse.Namespace) -> dict:
    work = args.work or Path(tempfile.mkdtemp(prefix="cone-stream-bench-"))
    try:
        folder = write_corpus(work / "synthetic", args.docs)
        result = {"docs": args.docs, "factory": args.factory, "encoder": f"{MODEL} layer {LAYER}"}
        for name, stream in (("in_memory", False), ("streamed", True)):
            result[name] = peak_build(folder, work / name, args.factory, stream, work / "cache")
            result[name]["serve"] = served(work / name, args.factory)
            shutil.rmtree(work / "cache", ignore_errors=True)
        streamed, in_memory = result["streamed"], result["in_memory"]
        limit = args.limit_fraction * in_memory["peak_rss_mib"]
        result["streamed_under_limit"] = limited_build(folder, work / "limited", args.factory, work / "cache", limit)
        result["ratios"] = {
            "build_peak_rss": round(streamed["peak_rss_mib"] / in_memory["peak_rss_mib"], 3),
            "build_peak_anonymous": round(streamed["peak_anonymous_mib"] / in_memory["peak_anonymous_mib"], 3),
            "serve_rss": round(streamed["serve"]["rss_mib"] / in_memory["serve"]["rss_mib"], 3),
            "serve_anonymous": round(streamed["serve"]["anonymous_mib"] / in_memory["serve"]["anonymous_mib"], 3),
        }
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    return result


def show(result: dict) -> str:
    lines = [f"{result['docs']:,} documents, {result['factory']}, encoder {result['encoder']} (MiB)"]
    for name in ("in_memory", "streamed"):
        r, served_by = result[name], result[name]["serve"]
        lines.append(
            f"  {name:9}  build {r['seconds']:6.1f} s, peak RSS {r['peak_rss_mib']:7.1f} (anonymous "
            f"{r['peak_anonymous_mib']:7.1f}, mapped files {r['peak_file_backed_mib']:7.1f});  serve RSS "
            f"{served_by['rss_mib']:7.1f} (anonymous {served_by['anonymous_mib']:7.1f}), {served_by['hits']} hits"
        )
    ratios = result["ratios"]
    lines.append(
        f"  streamed / in-memory: build peak RSS {ratios['build_peak_rss']:.3f}x, anonymous "
        f"{ratios['build_peak_anonymous']:.3f}x; serve RSS {ratios['serve_rss']:.3f}x, anonymous "
        f"{ratios['serve_anonymous']:.3f}x"
    )
    limited = result["streamed_under_limit"]
    if "skipped" in limited:
        lines.append(f"  streamed under a memory limit: skipped, {limited['skipped']}")
    else:
        outcome = "completed" if limited["completed"] else "FAILED"
        lines.append(
            f"  streamed in a cgroup limited to {limited['limit_mib']:.0f} MiB: {outcome} "
            f"in {limited['seconds']:.1f} s "
            f"(the kernel reclaimed at the limit {limited['times_the_limit_was_hit']:,} times)"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
