"""Why a regenerated report's PQ rows move in the third decimal while its exact rows agree far more closely.

FAISS trains PQ codebooks by k-means with a fixed seed: the same vectors give the same index, bit for bit. But the
vectors themselves move by float noise between machines and thread counts (~1e-7), and k-means amplifies that into
different codebooks. This builds PQ32 over an index folder's vectors twice, and once more with N(0, 1e-7) added, and
prints the share of the top 10 (300 documents as queries) each rebuild keeps.

Usage: python benchmarks/pq_noise.py INDEX_FOLDER [--specs none,cone:0.5,cone:0.999] [--json | --record OUT]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import faiss
import numpy as np
from record import run_benchmark  # this script's folder is on the path: the one runner and record

from cone.eval.metrics import overlap_at_k
from cone.geometry import unit_rows
from cone.indexing import postprocess
from cone.indexing.factory import make_faiss, train_faiss


def pq_top10(vectors: np.ndarray, spec: str, queries: int = 300) -> np.ndarray:
    if spec != "none":
        vectors = postprocess.apply(vectors, postprocess.fit(vectors, spec))
    vectors = np.ascontiguousarray(unit_rows(vectors), dtype=np.float32)
    index = make_faiss(vectors.shape[1], "PQ32")
    train_faiss(index, vectors, "PQ32")
    index.add(vectors)
    return index.search(vectors[:queries], 10)[1]


def measure(args: argparse.Namespace) -> list[dict]:
    flat = faiss.read_index(str(args.index / "index.faiss"))
    vectors = flat.reconstruct_n(0, flat.ntotal)
    noise = np.random.default_rng(0).normal(0, 1e-7, vectors.shape).astype(np.float32)
    rows = []
    for spec in args.specs.split(","):
        first = pq_top10(vectors, spec)
        rebuilt, noisy = pq_top10(vectors, spec), pq_top10(vectors + noise, spec)
        kept = {"rebuilt_kept": overlap_at_k(rebuilt, first), "noise_kept": overlap_at_k(noisy, first)}
        rows.append({"spec": spec, **kept})
    return rows


def show(rows: list[dict]) -> str:
    table = [f"| {row['spec']} | {row['rebuilt_kept']:.4f} | {row['noise_kept']:.4f} |" for row in rows]
    return "\n".join(["| spec | rebuilt: top 10 kept | 1e-7 noise: top 10 kept |", "|---|---|---|", *table])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("index", type=Path, help="an index folder with a flat index.faiss (e.g. a cone eval's minilm)")
    parser.add_argument("--specs", default="none,cone:0.5,cone:0.999")
    run_benchmark(parser, measure, show)


if __name__ == "__main__":
    main()
