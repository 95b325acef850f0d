"""What a real cone is beside the synthetic one: e5's queries and documents each sit in a cone of their own.

The synthetic cone (``cone:C``) adds one offset to documents and queries alike, so centering by the corpus mean
removes it exactly. E5 encodes a query with ``query: `` and a document with ``passage: ``: two prefixes, two means.
This measures both means (their norms, their cosine, the gap between them), and the nDCG@10 of SciFact's 300 test
queries under four ways of centering, each against the raw vectors by the paired randomization test the eval uses:
- ``raw``: the model's unit vectors (what ``cone eval`` measures as e5's Flat row);
- ``center``: both sides minus the corpus mean (cone's ``--postprocess center``);
- ``center by role``: documents minus the corpus mean, queries minus the mean of *other* queries (SciFact's 809 train
  queries: nothing of the test queries is fitted);
- ``documents only``: documents centred, queries raw.

It also measures why sign codes (BIN, 1-bit) suffer: a document's sign bit on a coordinate carries nothing where the
coordinate's mean outweighs its spread, so it reports the median coordinate's |mean| / std and the share of
coordinates whose sign is the same in at least 95% of the documents. ``--inject cone:0.9`` measures the same on a
synthetic cone (fitted on the documents, applied to both sides, as an index does) for comparison.

Usage: python benchmarks/real_cone.py [--model e5] [--layer 12] [--inject none] [--json | --record OUT]
"""

from __future__ import annotations

import argparse

import numpy as np
from record import run_benchmark  # this script's folder is on the path: the one runner and record

from cone.data.loaders import data_dir, load_beir
from cone.encoders.base import QUERY
from cone.encoders.registry import load_encoder
from cone.eval.metrics import per_query_ndcg
from cone.eval.significance import paired_p
from cone.geometry import unit_rows
from cone.indexing import postprocess
from cone.indexing.dense import corpus_vectors

K = 10


def _run(queries: np.ndarray, docs: np.ndarray, query_ids: list[str], doc_ids: list[str]) -> dict:
    scores = unit_rows(queries) @ unit_rows(docs).T
    top = np.argsort(-scores, axis=1)[:, :K]
    return {q: {doc_ids[j]: float(scores[i, j]) for j in top[i]} for i, q in enumerate(query_ids)}


def measure(args: argparse.Namespace) -> dict:
    root = data_dir()
    test, train = load_beir(root, "scifact"), load_beir(root, "scifact", split="train")
    encoder = load_encoder(args.model, layer=int(args.layer) if args.layer.isdigit() else args.layer)
    docs = unit_rows(corpus_vectors(encoder, test, progress=False))
    test_ids, train_ids = sorted(test.qrels), sorted(train.qrels)
    queries = unit_rows(encoder.encode([test.queries[q] for q in test_ids], role=QUERY))
    other = unit_rows(encoder.encode([train.queries[q] for q in train_ids], role=QUERY))
    fitted = postprocess.fit(docs, postprocess.parse(args.inject))  # "none" changes nothing
    docs, queries, other = (unit_rows(postprocess.apply(x, fitted)) for x in (docs, queries, other))
    doc_mean, query_mean = docs.mean(axis=0), other.mean(axis=0)
    doc_ids = sorted(test.corpus)
    ways = {
        "raw": (queries, docs),
        "center": (queries - doc_mean, docs - doc_mean),
        "center by role": (queries - query_mean, docs - doc_mean),
        "documents only": (queries, docs - doc_mean),
    }
    per_query = {name: per_query_ndcg(test.qrels, _run(q, d, test_ids, doc_ids)) for name, (q, d) in ways.items()}
    rows = [
        {
            "way": name,
            "ndcg_at_10": float(values.mean()),
            "delta_vs_raw": float(values.mean() - per_query["raw"].mean()),
            "p_vs_raw": None if name == "raw" else paired_p(per_query["raw"], values),
        }
        for name, values in per_query.items()
    ]
    same_sign = np.maximum((docs > 0).mean(axis=0), (docs < 0).mean(axis=0))
    return {
        "model": args.model,
        "layer": args.layer,
        "inject": args.inject,
        "median_coord_mean_over_std": float(np.median(np.abs(docs.mean(axis=0)) / docs.std(axis=0))),
        "coords_same_sign_95": float((same_sign >= 0.95).mean()),
        "n_docs": len(docs),
        "n_test_queries": len(test_ids),
        "n_train_queries": len(train_ids),
        "doc_mean_norm": float(np.linalg.norm(doc_mean)),
        "query_mean_norm": float(np.linalg.norm(query_mean)),
        "means_cosine": float(doc_mean @ query_mean / np.linalg.norm(doc_mean) / np.linalg.norm(query_mean)),
        "means_gap_norm": float(np.linalg.norm(query_mean - doc_mean)),
        "test_query_mean_gap_norm": float(np.linalg.norm(queries.mean(axis=0) - query_mean)),
        "rows": rows,
    }


def show(result: dict) -> str:
    lines = [
        f"{result['model']} [{result['layer']}] {result.get('inject', 'none')}: "
        f"document mean |m_d| {result['doc_mean_norm']:.3f}, query mean "
        f"|m_q| {result['query_mean_norm']:.3f} (train queries), cos(m_d, m_q) {result['means_cosine']:.3f}, "
        f"|m_q - m_d| {result['means_gap_norm']:.3f} (test queries' own mean {result['test_query_mean_gap_norm']:.3f} "
        "from the train queries')",
        f"  coordinates: median |mean|/std {result['median_coord_mean_over_std']:.2f}; the same sign in >= 95% of the "
        f"documents: {result['coords_same_sign_95']:.1%}",
    ]
    for row in result["rows"]:
        p = "" if row["p_vs_raw"] is None else f", {row['delta_vs_raw']:+.4f} vs raw, p {row['p_vs_raw']:.4f}"
        lines.append(f"  {row['way']:<16} nDCG@10 {row['ndcg_at_10']:.4f}{p}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="e5", help="an encoder whose queries carry a prefix of their own (e5)")
    parser.add_argument("--layer", default="12", help="the space (default 12: e5's output, before its normalize)")
    parser.add_argument("--inject", default="none", help="a synthetic degradation to compare with (cone:0.9)")
    run_benchmark(parser, measure, show)


if __name__ == "__main__":
    main()
