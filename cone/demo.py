"""``cone demo``: the main job, end to end: instruments, checkpoints, indexes, eval, then the service."""

from __future__ import annotations

import argparse
from pathlib import Path

from data.loaders import add_data_dir_option, data_dir
from encoders.registry import MODEL_NAMES, add_checkpoints_option
from eval import cli as eval_cli
from geometry.cli import run_checkpoint, run_synthetic
from service.cli import DEFAULT_HOST, DEFAULT_PORT, serve

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
    p.add_argument("--dataset", default="scifact")
    p.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"where indexes and the report go (default {DEFAULT_OUT})"
    )
    p.add_argument("--models", default=",".join(MODEL_NAMES), help="comma list (default every model)")
    p.add_argument("--postprocess", default=DEFAULT_POSTPROCESS, help=f"default {DEFAULT_POSTPROCESS}")
    add_checkpoints_option(p)
    p.add_argument("--quick", action="store_true", help="evaluate the quick subset (minutes; see docs/eval.md)")
    p.add_argument("--host", default=DEFAULT_HOST)
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--no-serve", action="store_true", help="stop after the report instead of starting the service")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(handler=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    print("== 1. The instruments on five synthetic distributions (cone geometry synthetic) ==")
    run_synthetic(argparse.Namespace(n=4096, d=256, seed=0, json=False))
    for name in ("baseline", "regularized"):
        path = args.checkpoints / name
        print(f"\n== 2. The {name} language model's embedding table (cone geometry checkpoint {path}) ==")
        if (path / "config.json").is_file():
            run_checkpoint(argparse.Namespace(path=path, json=False))
        else:
            print(f"not available: no checkpoint at {path} (train one with `cone train --out {path}`)")
    out = args.out / args.dataset
    print(f"\n== 3. Indexes for every model and the eval report ({out}) ==", flush=True)
    argv = ["--dataset", args.dataset, "--models", args.models, "--postprocess", args.postprocess]
    argv += ["--data-dir", str(data_dir(args.data_dir)), "--out", str(out / "eval"), "--indexes", str(out / "indexes")]
    argv += ["--checkpoints", str(args.checkpoints)] + ["--quick"] * args.quick + ["--no-progress"] * args.no_progress
    eval_parser = argparse.ArgumentParser(prog="cone demo (eval step)")
    eval_cli.add_arguments(eval_parser)
    eval_args = eval_parser.parse_args(argv)
    eval_cli.run_eval_command(eval_args)
    if args.no_serve:
        return 0
    print("\n== 4. The search service (Ctrl-C stops it) ==")
    serve(out / "indexes", args.host, args.port, args.checkpoints)
    return 0
