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
    add_runtime_options,
    layer,
)
from cone.data.loaders import data_dir, load_beir
from cone.encoders.base import Runtime
from cone.encoders.registry import MODEL_NAMES, check_model_name, load_encoder
from cone.errors import InputError
from cone.indexing import postprocess as pp
from cone.indexing import store
from cone.indexing.dense import DEFAULT_FACTORY, build_dense
from cone.indexing.lexical import build_bm25


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "index",
        help="encode a corpus and build its FAISS (or BM25) index",
        description="Encode the dataset's corpus (title + text), apply a geometry correction fitted on the "
        "corpus, L2-normalise and build a FAISS inner-product index (scores are cosines). The index is "
        "written atomically to INDEX_DIR/<model>[-<postprocess>] with a manifest.",
    )
    p.add_argument("--model", required=True, help=f"{', '.join(MODEL_NAMES)} or st:PATH")
    add_dataset_option(p)
    add_data_dir_option(p)
    p.add_argument("--out", type=Path, required=True, help="folder of indexes (INDEX_DIR)")
    p.add_argument("--postprocess", default="none", help="none | center | whiten | abtt:K (default none)")
    p.add_argument(
        "--index-factory",
        default=DEFAULT_FACTORY,
        help="FAISS index factory string (default Flat = exact; for big corpora IVF4096,Flat with "
        "--search-params nprobe=32, see docs/benchmarks.md)",
    )
    p.add_argument(
        "--search-params",
        default="",
        help="FAISS search-time parameters kept in the manifest, e.g. nprobe=32 (IVF) or efSearch=128 (HNSW)",
    )
    p.add_argument("--layer", type=layer, default="last", help=f"which space of the model: {LAYER_HELP}")
    add_runtime_options(p)
    add_checkpoints_option(p)
    add_progress_option(p)
    p.set_defaults(handler=run_index)


def run_index(args: argparse.Namespace) -> int:
    postprocess = pp.parse(args.postprocess)
    runtime = Runtime(args.backend, args.quantize)
    check_model_name(args.model)
    if args.model == "bm25" and (postprocess != "none" or runtime.tag != "torch"):
        raise InputError("--postprocess, --backend and --quantize apply to dense models, not bm25")
    root = data_dir(args.data_dir)
    dataset = load_beir(root, args.dataset)
    progress = not args.no_progress
    if args.model == "bm25":
        out = build_bm25(dataset, args.out / "bm25", progress)
    else:
        out = build_dense(
            load_encoder(args.model, args.checkpoints, args.layer, runtime, root),
            dataset,
            args.out / store.index_name(args.model, postprocess, args.layer, runtime=runtime),
            postprocess,
            args.index_factory,
            progress,
            args.search_params,
        )
    print(f"index written to {out}")
    return 0
