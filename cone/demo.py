"""``cone demo``: the main job, running every part of the pipeline that exists so far."""

from __future__ import annotations

import argparse
from pathlib import Path

from geometry.cli import run_checkpoint, run_synthetic

REFERENCE_CHECKPOINTS = Path(__file__).resolve().parents[1] / "checkpoints"
NOT_YET = "indexing, eval and the search service (issues 4-6)"


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "demo",
        help="run the whole pipeline that exists so far",
        description="The blind-spot proof on synthetic data, then the reference "
        "checkpoints measured. Indexing, eval and the service are not built yet.",
    )
    p.add_argument(
        "--checkpoints",
        type=Path,
        default=REFERENCE_CHECKPOINTS,
        help="folder holding baseline/ and regularized/ checkpoints",
    )
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
    print(f"\nNot built yet: {NOT_YET}.")
    return 0
