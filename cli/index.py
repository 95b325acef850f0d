"""``cone index``: build one model's index over a dataset's corpus."""

from __future__ import annotations

import argparse
from pathlib import Path

from cone.cli.options import (
    LAYER_HELP,
    add_checkpoints_option,
    add_data_dir_option,
    add_dataset_option,
    add_progress_option,
    add_ray_options,
    add_runtime_options,
    add_store_config_option,
    checked_search_params,
    index_factory,
    layer,
    positive_int,
    ray_options,
    ray_session,
    runtime_for,
)
from cone.data.loaders import data_dir
from cone.encoders.auto import AUTO
from cone.encoders.base import Runtime
from cone.errors import InputError
from cone.indexing import postprocess as pp
from cone.indexing.codes import METRICS, split_metric
from cone.indexing.factory import DEFAULT_FACTORY, STORES
from cone.indexing.spec import MODEL_NAMES, IndexSpec, for_store, model_spec
from cone.indexing.streaming import StreamOptions
from cone.pipeline.build import BuildSource, build_index


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "index",
        help="encode a corpus and build its index (FAISS, LanceDB, USearch; or BM25)",
        description="Encode the dataset's corpus (title + text), apply a geometry correction fitted on the "
        "corpus, L2-normalise and build an index of a store (FAISS, LanceDB or USearch) by its metric (scores are "
        "cosines whatever it is). The index is written atomically to "
        "INDEX_DIR/<model>[-<runtime>][-layer<L>][-<postprocess>][-<type>[_<metric>]] with a manifest.",
    )
    p.add_argument("--model", required=True, help=f"{', '.join(MODEL_NAMES)} or st:PATH")
    add_dataset_option(p)
    add_data_dir_option(p)
    p.add_argument("--out", type=Path, required=True, help="folder of indexes (INDEX_DIR)")
    p.add_argument("--postprocess", default="none", help="none | center | whiten | abtt:K (default none)")
    p.add_argument(
        "--index-factory",
        type=index_factory,
        default=DEFAULT_FACTORY,
        help="index type: a FAISS factory string (default Flat = exact; SQ8, PQ32, HNSW32, RaBitQ, IVF64,RaBitQ; "
        "for big corpora IVF4096,Flat with --search-params nprobe=32, see docs/benchmarks.md), or 1-bit codes: "
        "BIN (sign bits, Hamming distance) or BIN+rescore:R (Hamming's top R re-ranked by the float32 vectors); "
        "or a LanceDB type: lance:FLAT (exhaustive), lance:IVF_PQ, lance:IVF_HNSW_SQ, lance:IVF_RQ (RaBitQ); "
        "or a USearch codec: usearch:f32, f16, bf16, i8, e4m3, e5m2, b1 (HNSW), usearch:exact:CODEC (exhaustive "
        "over the same codes); or a pgvector type: pg:exact, pg:hnsw, pg:hnsw_halfvec, pg:ivfflat, "
        "pg:hnsw_bit+rescore:R (sign bits under HNSW, the top R re-ranked by the float vectors in SQL); or a Qdrant "
        "Edge type: qdrant:exact, hnsw, int8, pq4-pq64, bq1, bq1.5, bq2, tq1-tq8 (TurboQuant); or a sqlite-vec vec0 "
        "column: sqlite:float, int8, bit, bit+rescore:R (exact KNN; l2 or cosine, no dot). TYPE@METRIC names the "
        "metric too (lance:IVF_PQ@cosine)",
    )
    p.add_argument(
        "--store",
        choices=tuple(STORES),
        default=None,
        help="where the vectors live: faiss (an index file), lancedb (a Lance table in the index folder; "
        "pip install 'cone[lancedb]'), usearch (a .usearch file; pip install 'cone[usearch]'), pgvector (a "
        "Postgres table; pip install 'cone[pgvector]'; see --pg-dsn), qdrant (a Qdrant Edge shard folder; pip "
        "install 'cone[qdrant]') or sqlite-vec (a SQLite file; pip install 'cone[sqlitevec]'). Default: the store "
        "--index-factory names; --store lancedb alone means lance:FLAT, --store usearch usearch:exact:f32, --store "
        "pgvector pg:exact. "
        "Parameters a store chooses from the corpus are recorded in the manifest (index_params)",
    )
    p.add_argument(
        "--metric",
        choices=METRICS,
        default=None,
        help="what the store searches by: dot, l2 or cosine (FAISS: dot, the default, or l2; LanceDB: all three, "
        "default l2 as LanceDB's own; USearch: all three, default cosine as its own; 1-bit codes: Hamming). Part "
        "of the index's identity: in its manifest and its folder's name",
    )
    p.add_argument(
        "--search-params",
        type=checked_search_params,
        default="",
        help="search-time parameters kept in the manifest, e.g. nprobe=32 (IVF), efSearch=128 (HNSW) or "
        "qb=4 (RaBitQ's query bits, 1-8); for LanceDB types nprobes=N (default 20), refine_factor=R, ef=N (HNSW); "
        "for USearch ef=N (its HNSW's expansion_search); for Qdrant hnsw_ef=N, exact=true|false, rescore=true|false, "
        "oversampling=X, quantile=Q (int8), query_encoding=default|binary|scalar4bits|scalar8bits (bq)",
    )
    p.add_argument("--layer", type=layer, default="last", help=f"which space of the model: {LAYER_HELP}")
    add_runtime_options(p, default=AUTO)
    stream = p.add_argument_group(
        "streaming build",
        "For corpora too big to hold: documents are read and written a shard at a time, the correction and FAISS "
        "are fitted on a random sample, and the inverted lists and the document table stay on disk (served from "
        "there too). Needs a plain IVF factory (--index-factory IVF1024,Flat, IVF1024,SQ8 or IVF1024,PQ32), a "
        "LanceDB type (lance:IVF_PQ, ...: the Lance table is appended a shard at a time, then indexed) or a "
        "USearch codec (each shard added to the index, which holds every code, then saved). "
        "Rows follow the corpus file's order; a repeated id is kept twice (the in-memory build keeps the last).",
    )
    stream.add_argument("--stream", action="store_true", help="build as a stream (see above)")
    stream.add_argument(
        "--shard-size",
        type=positive_int,
        default=StreamOptions.shard_size,
        help="documents per shard (default %(default)s)",
    )
    stream.add_argument(
        "--sample-size",
        type=positive_int,
        default=StreamOptions.sample_size,
        help="vectors that fit the correction, measure the geometry and train FAISS (default %(default)s)",
    )
    add_ray_options(p)
    add_checkpoints_option(p)
    add_store_config_option(p)
    add_progress_option(p)
    p.set_defaults(handler=run_index)


def run_index(args: argparse.Namespace) -> int:
    postprocess = pp.parse(args.postprocess)
    plain = model_spec(args.model)
    root = data_dir(args.data_dir)
    runtime = runtime_for(args.backend, args.quantize, args.model, root)
    ray = ray_options(args)
    if plain.lexical:
        if any((postprocess != "none", runtime.tag != "torch", args.stream, ray, args.store, args.metric)):
            raise InputError(
                "--postprocess, --backend, --quantize, --stream, --ray, --store and --metric apply to dense models, "
                f"not {args.model}"
            )
        spec = plain
    else:
        spec = _dense_spec(args, postprocess, runtime)
    stream = StreamOptions(args.shard_size, args.sample_size) if args.stream else None
    source = BuildSource(root, args.dataset, args.checkpoints, ray)
    with ray_session(ray):
        out = build_index(spec, source, args.out, stream, progress=not args.no_progress)
    print(f"index written to {out}")
    return 0


def _dense_spec(args: argparse.Namespace, postprocess: str, runtime: Runtime) -> IndexSpec:
    """The index of an encoder that the options ask for: its type under --store and --metric, its settings."""
    named = split_metric(args.index_factory)[1]
    if args.metric and named and named != args.metric:
        raise InputError(f"--metric {args.metric} contradicts --index-factory {args.index_factory}: name one metric")
    kind = for_store(args.index_factory, args.store, args.metric)
    return IndexSpec(args.model, kind, postprocess, args.layer, runtime, args.search_params)
