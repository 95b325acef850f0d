"""The Ray path against the local path, in one run on the same machine: a dense index of the SciFact corpus built
by `build_dense` with the encoder in this process, and with the same encoder on a local Ray cluster (one actor
per core). Reports docs/s of each whole build (encoding, index, files; for Ray the actors' start and model
loading too, each build starts its own pool), the cluster's start apart, and whether the two indexes hold the
same vectors (allclose 1e-5) and give the same top 10 for every test query.

With --stream both builds are `build_dense_streaming` of the corpus file (`cone index --stream`: on Ray the
file is read a byte range per task and encoded line by line) into an IVF index with every list probed, so the
two are compared on the same answers an exhaustive search gives.

On one machine Ray cannot be faster (same cores); the ratio is its overhead. Builds alternate, local first;
the median of --rounds is reported.

Usage: python benchmarks/ray_bench.py [--model baseline] [--docs N | --stream] [--actors 2] [--rounds 2]
                                      [--data-dir DIR] [--json | --record OUT]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from record import run_benchmark  # this script's folder is on the path: the one runner and record

from cone.data.loaders import RetrievalDataset, data_dir, dataset_folder, load_beir
from cone.encoders.cluster import EncoderRecipe, RayEncoder, RayOptions, connected
from cone.encoders.registry import load_encoder
from cone.errors import InputError
from cone.indexing.dense import build_dense
from cone.indexing.open import open_index
from cone.indexing.spec import parse_index_type
from cone.indexing.streaming import build_dense_streaming

STREAM_FACTORY, STREAM_SEARCH = "IVF64,Flat", "nprobe=64"  # every list probed: the exact answers


def subset(dataset: RetrievalDataset, n: int | None) -> RetrievalDataset:
    if n is None:
        return dataset
    kept = dict(sorted(dataset.corpus.items())[:n])
    return RetrievalDataset(dataset.name, kept, dataset.queries, dataset.qrels)


def timed_build(encoder, dataset: RetrievalDataset, out: Path, stream_from: Path | None) -> float:
    os.environ["CONE_CACHE_DIR"] = tempfile.mkdtemp(prefix="cone-bench-cache-")  # always encode
    start = time.perf_counter()
    if stream_from is None:
        build_dense(encoder, dataset, out, progress=False)
    else:
        build_dense_streaming(encoder, stream_from, out, parse_index_type(STREAM_FACTORY), search_params=STREAM_SEARCH,
                              progress=False)  # fmt: skip
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
    parser.add_argument("--stream", action="store_true", help=f"streamed builds ({STREAM_FACTORY}, {STREAM_SEARCH})")
    run_benchmark(parser, measure, show)


def measure(args: argparse.Namespace) -> dict:
    if args.stream and args.docs is not None:
        raise InputError("--stream reads the whole corpus file: --docs does not apply")
    root = data_dir(args.data_dir)
    stream_from = dataset_folder(root, "scifact") if args.stream else None
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
            seconds["local"].append(timed_build(local, dataset, out / "local", stream_from))
            seconds["ray"].append(timed_build(on_ray, dataset, out / "ray", stream_from))
    rate = {path: n / statistics.median(times) for path, times in seconds.items()}
    return {
        "model": args.model,
        "build": f"streamed {STREAM_FACTORY}" if args.stream else "in memory",
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


def show(result: dict) -> str:
    rate = result["docs_per_s"]
    return (
        f"{result['model']}, {result['docs']:,} SciFact documents ({result['build']}), {result['actors']} actors on "
        f"{result['cores']} cores\n  local: {rate['local']:.1f} docs/s   ray: {rate['ray']:.1f} docs/s   = "
        f"{result['ray_vs_local']:.2f}x\n  cluster start {result['cluster_start_s']:.1f} s (once per command, not in "
        f"the rates)\n  max |vector difference| {result['max_abs_vector_difference']:.2e}; same top 10 for "
        f"{result['queries_with_the_same_top10']} of {result['queries']} test queries"
    )


if __name__ == "__main__":
    main()
