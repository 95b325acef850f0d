"""The indexes a user might already hold on a model's SciFact vectors (MiniLM's, or ``--model e5``'s real cone),
for ``cone doctor --index``.

Writes into OUT: ``vectors.npy`` (the 5,183 corpus vectors, unit rows, in cone's row order: sorted document ids),
``queries.npy`` (the 300 test queries, unit rows, sorted query ids), ``qrels.tsv`` (the test qrels with those row
numbers as ids, for ``cone doctor --vectors --queries --qrels``), and five indexes built as their stores' users
build them: ``pq48.faiss`` (FAISS ``PQ48``, inner product), ``lancedb/`` (table ``docs``, LanceDB ``IVF_PQ`` under
``dot``, cone's partitions and sub-vectors), ``i8.usearch`` (USearch's HNSW with its ``i8`` codec, ``cos``),
``qdrant-bq1/`` (a Qdrant Edge shard, one-bit binary quantization, ``Cosine``) and ``int8.db`` (a sqlite-vec
``vec0`` table ``docs`` of ``int8`` vectors under ``cosine``).
The corpus vectors come through cone's embedding cache (encoded once, as ``cone index`` and ``cone eval`` do).

Usage: python benchmarks/doctor_indexes.py OUT [--inject cone:0.99] [--model e5] [--layer 12]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import faiss
import numpy as np

from cone.cli.options import LAYER_HELP, layer
from cone.data.loaders import data_dir, load_beir
from cone.encoders.base import QUERY, Layer
from cone.encoders.registry import load_encoder
from cone.geometry import unit_rows
from cone.indexing import postprocess as pp
from cone.indexing.dense import corpus_vectors
from cone.indexing.factory import make_faiss, train_faiss
from cone.indexing.lance import build_params, lancedb_module


def write_vectors(out: Path, model: str, inject: str, layer: Layer = "last") -> tuple[np.ndarray, np.ndarray]:
    """``vectors.npy``, ``queries.npy`` and ``qrels.tsv`` of SciFact under ``model`` at ``layer`` (``inject`` fitted
    on the documents, applied to both, as an index would) written into ``out``; the documents and queries returned.
    e5's output is its layer 12 as well as its "last": naming 12 finds the vectors ``cone eval --layers 12`` cached."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    out.mkdir(parents=True, exist_ok=True)
    dataset = load_beir(data_dir(), "scifact")
    encoder = load_encoder(model, layer=layer)
    docs = corpus_vectors(encoder, dataset, progress=False)
    query_ids = sorted(dataset.qrels)
    queries = encoder.encode([dataset.queries[q] for q in query_ids], progress=False, role=QUERY)
    fitted = pp.fit(docs, pp.parse(inject))
    docs = np.ascontiguousarray(unit_rows(pp.apply(docs, fitted)), dtype=np.float32)
    queries = np.ascontiguousarray(unit_rows(pp.apply(queries, fitted)), dtype=np.float32)
    np.save(out / "vectors.npy", docs)
    np.save(out / "queries.npy", queries)
    row = {doc_id: number for number, doc_id in enumerate(sorted(dataset.corpus))}
    lines = ["query-id\tcorpus-id\tscore"]
    for number, q in enumerate(query_ids):
        lines += [f"{number}\t{row[d]}\t{g}" for d, g in sorted(dataset.qrels[q].items()) if d in row]
    (out / "qrels.tsv").write_text("\n".join(lines) + "\n")
    return docs, queries


def vectors_parser(description: str) -> argparse.ArgumentParser:
    """The options of ``write_vectors`` (OUT, --inject, --model, --layer), shared with doctor_pgvector.py."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--inject", default="none", help="a synthetic degradation of the vectors (cone:0.99)")
    parser.add_argument("--model", default="minilm", help="the encoder (default minilm; e5 for a real cone)")
    parser.add_argument("--layer", type=layer, default="last", help=f"which space of the model: {LAYER_HELP}")
    return parser


def main() -> None:
    args = vectors_parser(__doc__).parse_args()
    docs, queries = write_vectors(args.out, args.model, args.inject, args.layer)

    n, dim = docs.shape
    index = make_faiss(dim, "PQ48")
    train_faiss(index, docs, "PQ48")
    index.add(docs)
    faiss.write_index(index, str(args.out / "pq48.faiss"))

    lancedb = lancedb_module()
    import pyarrow as pa  # installed with lancedb

    params = build_params("IVF_PQ", n, dim, {}, "dot")
    table = lancedb.connect(args.out / "lancedb").create_table(
        "docs", pa.table({"vector": pa.FixedSizeListArray.from_arrays(pa.array(docs.ravel()), dim)}), mode="overwrite"
    )
    config = lancedb.index.IvfPq(
        distance_type="dot", num_partitions=params["num_partitions"], num_sub_vectors=params["num_sub_vectors"]
    )
    table.create_index("vector", config=config)

    from usearch.index import Index

    usearch = Index(ndim=dim, metric="cos", dtype="i8")
    usearch.add(np.arange(n), docs)
    usearch.save(str(args.out / "i8.usearch"))
    qdrant_bq1(args.out / "qdrant-bq1", docs)
    sqlite_int8(args.out / "int8.db", docs)
    print(f"{args.out}: {n:,} vectors of d {dim} ({args.inject}), {len(queries)} queries, five indexes")


def qdrant_bq1(path: Path, docs: np.ndarray) -> None:
    """A Qdrant Edge shard with one-bit binary quantization under Cosine, point ids the rows. Qdrant's defaults but
    one: its segments are indexed from the first kilobyte (by default only past 10 MB, which these 8 MB of vectors
    are not: the points would sit unindexed and unquantized)."""
    import qdrant_edge as q

    config = q.EdgeConfig(
        vectors=q.EdgeVectorParams(size=docs.shape[1], distance=q.Distance.Cosine),
        quantization_config=q.BinaryQuantizationConfig(encoding=q.BinaryQuantizationEncoding.OneBit, always_ram=True),
        optimizers=q.EdgeOptimizersConfig(indexing_threshold=1),
    )
    shard = q.EdgeShard.create(str(path), config)
    shard.update(q.UpdateOperation.upsert_points([q.Point(i, v.tolist()) for i, v in enumerate(docs)]))
    shard.optimize()
    shard.close()


def sqlite_int8(path: Path, docs: np.ndarray) -> None:
    """A SQLite file with a sqlite-vec vec0 table ``docs`` of int8 vectors (``vec_quantize_int8(v, 'unit')``)
    under cosine, rowids the rows plus one (SQLite's own numbering)."""
    from cone.indexing.sqlite_vec_store import connect

    conn = connect(str(path))
    conn.execute(f"CREATE VIRTUAL TABLE docs USING vec0(embedding int8[{docs.shape[1]}] distance_metric=cosine)")
    conn.execute("BEGIN")
    rows = [(i + 1, v.tobytes()) for i, v in enumerate(docs)]
    conn.executemany("INSERT INTO docs(rowid, embedding) VALUES (?, vec_quantize_int8(?, 'unit'))", rows)
    conn.execute("COMMIT")
    conn.close()


if __name__ == "__main__":
    main()
