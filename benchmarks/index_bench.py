"""Indexing speed, in one run: our encoder path vs sentence-transformers' own encode, the LM
encoder, and at scale FAISS flat vs approximate factories (queries/s, recall@10 vs flat).

Usage: python benchmarks/index_bench.py [--docs 1000] [--n 1000000] [--factories IVF1024,Flat HNSW32]
       [--ann-only | --encoders-only] [--json | --record OUT]
"""

from __future__ import annotations

import argparse
import sys
import time

import faiss
import numpy as np
from record import run_benchmark  # this script's folder is on the path: the one runner and record

from cone.data.loaders import data_dir, doc_text, load_beir
from cone.encoders.registry import load_encoder
from cone.indexing.factory import build_codes
from cone.indexing.spec import parse_index_type


def docs_per_s(fn, texts: list[str]) -> float:
    start = time.perf_counter()
    fn(texts)
    return len(texts) / (time.perf_counter() - start)


def encoder_overhead(texts: list[str], rounds: int) -> dict[str, float]:
    ours = load_encoder("minilm")
    theirs = ours.model  # the very SentenceTransformer inside our encoder
    ours.encode(texts[:64])
    mine, raw = [], []
    for _ in range(rounds):  # interleaved, so machine noise hits both alike
        raw.append(docs_per_s(lambda t: theirs.encode(t, batch_size=64, convert_to_numpy=True), texts))
        mine.append(docs_per_s(lambda t: ours.encode(t, batch_size=64), texts))
    return {"sentence-transformers encode": float(np.median(raw)), "cone minilm encoder": float(np.median(mine))}


def lm_encoder(texts: list[str]) -> dict[str, float]:
    out = {}
    for name in ("baseline", "regularized"):
        try:
            enc = load_encoder(name)
        except Exception as exc:  # an absent checkpoint is reported, not fatal
            print(f"  {name}: skipped ({exc})", file=sys.stderr)
            continue
        enc.encode(texts[:64])
        out[f"cone {name} LM encoder"] = docs_per_s(lambda t, e=enc: e.encode(t, batch_size=64), texts)
    return out


def clustered(rng: np.random.Generator, centers: np.ndarray, n: int, spread: float = 0.6) -> np.ndarray:
    """Unit vectors around random cluster centres: structure to find, unlike isotropic noise, where every
    distance concentrates and "the true 10 nearest" is arbitrary."""
    d = centers.shape[1]
    x = centers[rng.integers(0, len(centers), size=n)]
    x += (spread / np.sqrt(d)) * rng.standard_normal((n, d), dtype=np.float32)
    faiss.normalize_L2(x)
    return x


def ann_at_scale(n: int, n_queries: int, factories: list[str], seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((n // 50, 256), dtype=np.float32)
    faiss.normalize_L2(centers)
    base = clustered(rng, centers, n)
    queries = clustered(rng, centers, n_queries)  # new points from the same clusters
    rows = []
    truth = None
    for factory in ["Flat", *factories]:
        start = time.perf_counter()
        index = build_codes(base, parse_index_type(factory)).index
        build_s = time.perf_counter() - start
        settings = [None]
        if factory.startswith("IVF"):
            settings = [("nprobe", p) for p in (8, 32, 128)]
        elif factory.startswith("HNSW"):
            settings = [("efSearch", e) for e in (64, 128)]
        for setting in settings:
            if setting:
                faiss.ParameterSpace().set_index_parameter(index, *setting)
            start = time.perf_counter()
            _, ids = index.search(queries, 10)
            qps = n_queries / (time.perf_counter() - start)
            if truth is None:
                truth = ids
            recall = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids, truth, strict=True)]))
            label = factory + (f" ({setting[0]}={setting[1]})" if setting else "")
            rows.append({"factory": label, "build_s": build_s, "qps": qps, "recall_at_10": recall})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docs", type=int, default=1000, help="SciFact documents to encode")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n", type=int, default=1_000_000, help="vectors for the FAISS comparison")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--factories", nargs="*", default=["IVF1024,Flat", "IVF4096,Flat", "HNSW32"])
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--ann-only", action="store_true", help="skip the encoder part")
    only.add_argument("--encoders-only", action="store_true", help="skip the FAISS part")
    parser.add_argument("--data-dir", default=None)
    run_benchmark(parser, measure, show)


def measure(args: argparse.Namespace) -> dict:
    result: dict = {}
    if not args.ann_only:
        result["encoders"] = encoders_part(args)
    if not args.encoders_only:
        result["ann"] = {
            "n": args.n,
            "queries": args.queries,
            "rows": ann_at_scale(args.n, args.queries, args.factories),
        }
    return result


def show(result: dict) -> str:
    lines = []
    if "encoders" in result:
        found = result["encoders"]
        lines.append(f"encoding {found['docs']} SciFact documents (median of {found['rounds']} interleaved rounds):")
        lines += [f"  {name:32s} {value:8.1f} docs/s" for name, value in found["docs_per_s"].items()]
        lines.append(f"  ratio cone / sentence-transformers: {found['ratio']:.3f}")
    if "ann" in result:
        n, queries = result["ann"]["n"], result["ann"]["queries"]
        lines.append(
            f"\nFAISS at scale: {n:,} unit vectors of d=256 in {n // 50:,} clusters, {queries} queries, "
            "recall@10 vs Flat"
        )
        lines += [
            f"  {row['factory']:28s} build {row['build_s']:7.1f} s  {row['qps']:9.0f} q/s  "
            f"recall@10 {row['recall_at_10']:.3f}"
            for row in result["ann"]["rows"]
        ]
    return "\n".join(lines)


def encoders_part(args: argparse.Namespace) -> dict:
    ds = load_beir(data_dir(args.data_dir), "scifact")
    texts = [doc_text(ds.corpus[d]) for d in sorted(ds.corpus)[: args.docs]]
    speeds = {**encoder_overhead(texts, args.rounds), **lm_encoder(texts)}
    ratio = speeds["cone minilm encoder"] / speeds["sentence-transformers encode"]
    return {"docs": len(texts), "rounds": args.rounds, "docs_per_s": speeds, "ratio": ratio}


if __name__ == "__main__":
    main()
