"""``cone demo``: the main job, end to end: instruments, checkpoints, indexes, eval, then the service."""

from __future__ import annotations

import argparse
from pathlib import Path

from cone.cli.eval import announce_skips, summary, this_command
from cone.cli.geometry import render_checkpoint, render_synthetic
from cone.cli.options import (
    add_checkpoints_option,
    add_data_dir_option,
    add_dataset_option,
    add_progress_option,
    comma_list,
    unique_list,
)
from cone.cli.serve import add_listen_options, check_listen, serve
from cone.data.loaders import data_dir
from cone.encoders.registry import LM_MODELS, MODEL_NAMES, missing
from cone.eval.harness import load_eval_data
from cone.eval.plan import EvalPlan
from cone.eval.sweep import evaluate_and_report
from cone.geometry.synthetic import synthetic_report
from cone.models.analysis import checkpoint_report
from cone.models.checkpoint import checkpoints_dir

DEFAULT_OUT = Path("runs/demo")
DEFAULT_POSTPROCESS = "none,center,whiten"


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "demo",
        help="the whole pipeline: instruments, checkpoints, indexes, eval report, then the service",
        description="1) the blind-spot proof on synthetic data; 2) the reference checkpoints' embedding tables; "
        "3) indexes for every available model (built when missing, reused after) and the eval report; "
        "4) the search service on those indexes. A second run reuses what is built.",
    )
    add_data_dir_option(p)
    add_dataset_option(p)
    p.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"where indexes and the report go (default {DEFAULT_OUT})"
    )
    p.add_argument("--models", type=unique_list, default=list(MODEL_NAMES), help="comma list (default every model)")
    p.add_argument(
        "--postprocess", type=comma_list, default=comma_list(DEFAULT_POSTPROCESS), help=f"default {DEFAULT_POSTPROCESS}"
    )
    add_checkpoints_option(p)
    p.add_argument("--quick", action="store_true", help="evaluate the quick subset (minutes; see docs/eval.md)")
    add_listen_options(p)
    p.add_argument("--no-serve", action="store_true", help="stop after the report instead of starting the service")
    add_progress_option(p)
    p.set_defaults(handler=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    if not args.no_serve:
        check_listen(args.host, args.port)  # before the whole pipeline, not after it
    print("== 1. The instruments on five synthetic distributions (cone geometry synthetic) ==")
    print(render_synthetic(synthetic_report()))
    for name in LM_MODELS:
        path = checkpoints_dir(args.checkpoints) / name
        print(f"\n== 2. The {name} language model's embedding table (cone geometry checkpoint {path}) ==")
        absent = missing(name, args.checkpoints)
        print(
            f"not available: {absent.explanation}"
            if absent
            else render_checkpoint(checkpoint_report(path, args.data_dir))
        )
    out = args.out / args.dataset
    print(f"\n== 3. Indexes for every model and the eval report ({out}) ==", flush=True)
    data = load_eval_data(data_dir(args.data_dir), args.dataset, quick=args.quick)
    plan = EvalPlan(
        models=args.models,
        indexes=out / "indexes",
        postprocesses=args.postprocess,
        checkpoints=args.checkpoints,
        progress=not args.no_progress,
    )
    done = evaluate_and_report(data, plan, out / "eval", this_command(), announce_skips())
    print(summary(done.results, done.files))
    if args.no_serve:
        return 0
    print("\n== 4. The search service (Ctrl-C stops it) ==")
    serve(out / "indexes", args.host, args.port, args.checkpoints)
    return 0
