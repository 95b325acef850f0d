"""``cone eval``: every model, every correction, side by side, with figures."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

from cone.cli.options import (
    LAYER_HELP,
    add_checkpoints_option,
    add_data_dir_option,
    add_dataset_option,
    add_progress_option,
    add_ray_options,
    add_runtime_list_options,
    add_store_config_option,
    checked_search_params,
    choice_list,
    comma_list,
    factory_list,
    layer_list,
    ray_options,
    ray_session,
    runtimes,
    unique_list,
)
from cone.data.loaders import data_dir
from cone.errors import InputError
from cone.eval import report
from cone.eval.figures import FIGURES
from cone.eval.harness import load_eval_data
from cone.eval.plan import EvalPlan
from cone.eval.results import EvalResult, sts_keys
from cone.eval.sweep import evaluate_and_report
from cone.indexing.codes import METRICS
from cone.indexing.factory import STORES
from cone.indexing.spec import MODEL_NAMES, metric_choices, store_types
from cone.output import dump_json, table

DEFAULT_MODELS = ",".join(MODEL_NAMES)
SUMMARY = (
    "ndcg_at_10",
    "recall_at_10_vs_flat",
    "doc_pair_cos_mean",
    "random_cos_std",
    "threshold_f1",
    "hubness_skew",
)


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "eval",
        help="measure what the cone breaks: retrieval, STS, similarity spread, hubness, geometry",
        description="For every (model, layer, post-processing, factory): nDCG@10 / MRR@10 / Recall@100 on the "
        "test qrels (ranx), STS Spearman (STS-B test, or --sts files), the cosine spread of random and relevant "
        "pairs, the best global threshold's F1, hubness and the geometry instruments, and paired significance "
        "tests. Writes OUT/report.json, OUT/report.md and OUT/figures/*.png. Indexes are built under OUT/indexes "
        "(or --indexes) when missing and reused after.",
    )
    add_dataset_option(p)
    p.add_argument("--models", type=unique_list, default=list(MODEL_NAMES), help=f"default {DEFAULT_MODELS}")
    p.add_argument(
        "--postprocess",
        type=comma_list,
        default=["none"],
        help="comma list of specs: repairs none,center,whiten,abtt:K; synthetic degradations cone:C, rogue:K:S; "
        "stages joined by + apply left to right (cone:0.99+whiten); see docs/eval.md",
    )
    add_data_dir_option(p)
    p.add_argument("--out", type=Path, required=True, help="report folder")
    p.add_argument("--indexes", type=Path, default=None, help="index folder to reuse/fill (default OUT/indexes)")
    add_checkpoints_option(p)
    add_store_config_option(p)
    p.add_argument(
        "--quick", action="store_true", help="50 test queries, 1,000 documents, 200 STS pairs (see docs/eval.md)"
    )
    p.add_argument(
        "--layers",
        type=layer_list,
        default=["last"],
        help=f"comma list of the spaces of every dense model to evaluate, each a row: {LAYER_HELP}; or all "
        "(emb and every block; mean-pooled hidden states, before any pooling or normalization module). "
        "Every layer is encoded in one pass. Default last",
    )
    p.add_argument(
        "--index-factory",
        type=factory_list,
        default=["Flat"],
        help="index types to compare, e.g. Flat,SQ8,SQfp16,PQ32,IVF256,Flat,HNSW32 (';' also separates), lance:TYPE, "
        "usearch:CODEC, each optionally @METRIC (PQ32@l2); each besides Flat is a row with recall@10 against the "
        "exact Flat index of the same vectors",
    )
    p.add_argument(
        "--store",
        type=choice_list(tuple(STORES)),
        default=[],
        help="comma list of stores whose index types are rows too: lancedb adds lance:FLAT, lance:IVF_PQ, "
        "lance:IVF_HNSW_SQ and lance:IVF_RQ (pip install 'cone[lancedb]'); usearch adds every codec (f32, f16, "
        "bf16, i8, e4m3, e5m2, b1) by HNSW and exhaustively (pip install 'cone[usearch]'); pgvector adds pg:hnsw, "
        "pg:hnsw_halfvec, pg:ivfflat and pg:hnsw_bit+rescore:40 (pip install 'cone[pgvector]'); qdrant adds "
        "qdrant:exact, hnsw, int8, pq16, pq32, bq1, bq1.5, bq2, tq1, tq2, tq4 (pip install 'cone[qdrant]'); "
        "sqlite-vec adds sqlite:float, int8, bit, bit+rescore:100 (pip install 'cone[sqlitevec]'); faiss adds "
        "nothing (its types are --index-factory's, which also takes the others' one by one). Every row is compared "
        "with FAISS Flat",
    )
    p.add_argument(
        "--metric",
        type=choice_list(METRICS),
        default=[],
        help="comma list of metrics (dot, l2, cosine) each index type is measured under, as rows of their own, where "
        "its store takes it (FAISS: dot, l2; LanceDB and USearch: all three); a type written TYPE@METRIC, Flat and "
        "1-bit codes keep theirs. Default: each store's own default (FAISS dot, LanceDB l2, USearch cosine)",
    )
    p.add_argument(
        "--search-params",
        type=checked_search_params,
        default="",
        help="search parameters for every index type but Flat, each setting given to the types that take it "
        "(nprobe=64 reaches IVF64,PQ32, not PQ32 nor a LanceDB type, which takes nprobes)",
    )
    p.add_argument(
        "--sts",
        type=lambda text: [Path(item) for item in comma_list(text)],
        default=None,
        help="comma list of STS CSV files (header sentence1,sentence2,score; any score scale), each reported "
        "apart and as their mean (default STS-B test under the data dir)",
    )
    p.add_argument("--no-sts", action="store_true", help="skip STS (when no STS file is available)")
    add_runtime_list_options(p)
    p.add_argument("--json", action="store_true", help="print report.json to stdout")
    add_ray_options(p)
    add_progress_option(p)
    p.set_defaults(handler=run_eval_command)


def announce_skips() -> Callable[[EvalResult], None]:
    """An ``on_result`` callback that says once per reason, on stderr, what was skipped and why."""
    said: set[str] = set()

    def announce(result: EvalResult) -> None:
        if not result.available and result.reason not in said:
            said.add(result.reason)
            print(f"cone: skipped {result.label}: {result.reason}", file=sys.stderr)

    return announce


def this_command() -> str:
    """This process's command line, as a report says what produced it."""
    return "cone " + shlex.join(sys.argv[1:])


def summary(results: list[EvalResult], files: report.ReportFiles) -> str:
    rows = [{"model": r.label, **r.metrics} for r in results if r.available]
    if not rows:
        raise InputError(
            f"no model could be evaluated (each skip is said above); {files.markdown} holds only the reasons"
        )
    sts = tuple(dict.fromkeys(k for row in rows for k in sts_keys(row)))
    where = f"report: {files.markdown}, {files.json}; {len(files.figures)} figures in {files.json.parent / FIGURES}"
    return f"{table(rows, ('model', *SUMMARY[:2], *sts, *SUMMARY[2:]))}\n\n{where}"


def run_eval_command(args: argparse.Namespace) -> int:
    root = data_dir(args.data_dir)
    chosen_runtimes = runtimes(args.backend, args.quantize)
    data = load_eval_data(root, args.dataset, quick=args.quick, with_sts=not args.no_sts, sts_files=args.sts)
    ray = ray_options(args)
    plan = EvalPlan(
        models=args.models,
        indexes=args.indexes or args.out / "indexes",
        postprocesses=args.postprocess,
        layers=args.layers,
        factories=tuple(
            kind
            for factory in (*args.index_factory, *(t for s in args.store for t in store_types(s)))
            for kind in metric_choices(factory, args.metric)
        ),
        search_params=args.search_params,
        runtimes=chosen_runtimes,
        checkpoints=args.checkpoints,
        data_root=root,
        ray=ray,
        progress=not args.no_progress,
    )
    with ray_session(ray):
        done = evaluate_and_report(data, plan, args.out, this_command(), announce_skips())
    print(dump_json(done.payload.to_json()) if args.json else summary(done.results, done.files))
    return 0
