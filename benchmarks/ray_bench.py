"""The Ray path against the local path, in one run on the same machine: a dense index of the SciFact corpus built
by `build_dense` with the encoder in this process, and with the same encoder on a local Ray cluster (one actor
per core). Reports docs/s of each whole build (encoding, index, files; for Ray the actors' start and model
loading too, each build starts its own pool), the cluster's start apart, and whether the two indexes hold the
same vectors (allclose 1e-5) and give the same top 10 for every test query.

On one machine Ray cannot be faster (same cores); the ratio is its overhead. Builds alternate, local first;
the median of --rounds is reported.

Usage: python benchmarks/ray_bench.py [--model baseline] [--docs N] [--actors 2] [--rounds 2] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from cone.data.loaders import RetrievalDataset, data_dir, load_beir
from cone.encoders.cluster import EncoderRecipe, RayEncoder, RayOptions, connected
from cone.encoders.registry import load_encoder
from cone.indexing.dense import build_dense
from cone.indexing.open import open_index


def subset(dataset: RetrievalDataset, n: int | None) -> RetrievalDataset:
    if n is None:
        return dataset
    kept = dict(sorted(dataset.corpus.items())[:n])
    return RetrievalDataset(dataset.name, kept, dataset.queries, dataset.qrels)


def timed_build(encoder, dataset: RetrievalDataset, out: Path) -> float:
    os.environ["CONE_CACHE_DIR"] = tempfile.mkdtemp(prefix="cone-bench-cache-")  # always encode
    start = time.perf_counter()
    build_dense(encoder, dataset, out, progress=False)
    return time.perf_counter() - start


def compare(local: Path, on_ray: Path, dataset: RetrievalDataset) -> dict:
    a, b = open_index(local), open_index(on_ray)
    query_ids = sorted(dataset.qrels)
    queries = a.embed([dataset.queries[q] for q in query_ids])
    top_a, top_b = a.search(queries, 10), b.search(queries, 10)
    same = sum([h.doc_id for h in top_a.hits(i)] == [h.doc_id for h in top_b.hits(i)] for i in range(len(query_ids)))
    return {
        "max_abs_vector_difference": float(np.abs(a.doc_vectors() - b.doc_vectors()).max()),
        "queries_with_the_same_top10": same,
        "queries": len(query_ids),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="baseline")
    parser.add_argument("--docs", type=int, default=None, help="the first N documents (default all)")
    parser.add_argument("--actors", type=int, default=os.cpu_count())
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    root = data_dir(args.data_dir)
    dataset = subset(load_beir(root, "scifact"), args.docs)
    n = len(dataset.corpus)
    local = load_encoder(args.model, data_root=root)
    options = RayOptions(None, args.actors, args.batch_size)
    out = Path(tempfile.mkdtemp(prefix="cone-ray-bench-"))
    start = time.perf_counter()
    with connected(options):
        cluster_start = time.perf_counter() - start
        on_ray = RayEncoder(local, EncoderRecipe(args.model, data_root=root), options)
        seconds = {"local": [], "ray": []}
        for _ in range(args.rounds):
            seconds["local"].append(timed_build(local, dataset, out / "local"))
            seconds["ray"].append(timed_build(on_ray, dataset, out / "ray"))
    rate = {path: n / statistics.median(times) for path, times in seconds.items()}
    result = {
        "model": args.model,
        "docs": n,
        "cores": os.cpu_count(),
        "actors": args.actors,
        "batch_size": args.batch_size,
        "rounds": args.rounds,
        "cluster_start_s": round(cluster_start, 2),
        "seconds": seconds,
        "docs_per_s": {k: round(v, 1) for k, v in rate.items()},
        "ray_vs_local": round(rate["ray"] / rate["local"], 3),
        **compare(out / "local", out / "ray", dataset),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{args.model}, {n:,} SciFact documents, {args.actors} actors on {os.cpu_count()} cores")
    print(f"  local: {rate['local']:.1f} docs/s   ray: {rate['ray']:.1f} docs/s   = {result['ray_vs_local']:.2f}x")
    print(f"  cluster start {cluster_start:.1f} s (once per command, not in the rates)")
    print(
        f"  max |vector difference| {result['max_abs_vector_difference']:.2e}; same top 10 for "
        f"{result['queries_with_the_same_top10']} of {result['queries']} test queries"
    )


if __name__ == "__main__":
    main()
