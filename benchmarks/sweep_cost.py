"""What a post-processing × factory sweep costs against one plain run of the same model, in one run.

Both runs start cold (an empty embedding cache and no indexes, each in its own temporary folder) and do all
of `cone eval`'s work: encoding, index building, retrieval, STS, significance tests and the report. The sweep
encodes the corpus, queries and STS pairs once and re-uses those vectors for every (spec, factory) row, so it
should cost far less than (specs × factories) plain runs; the issue's bar is under 2× one plain run.

Usage: python benchmarks/sweep_cost.py [--model minilm] [--postprocess none,cone:0.5,...] [--index-factory
Flat,SQ8,PQ32] [--out DIR: keep the sweep's report there] [--quick] [--json | --record OUT]
"""

from __future__ import annotations

import argparse
import os
import shlex
import tempfile
import time
from pathlib import Path

from record import run_benchmark  # this script's folder is on the path: the one runner and record

from cone.data.loaders import data_dir
from cone.eval.harness import load_eval_data
from cone.eval.plan import EvalPlan
from cone.eval.sweep import evaluate_and_report
from cone.indexing.dense import CACHE_ENV
from cone.indexing.spec import parse_factory_list, parse_index_type

SWEEP = "none,cone:0.5,cone:0.9,cone:0.99,cone:0.999,cone:0.99+center,cone:0.99+whiten,rogue:2:30"


def timed_run(data, model: str, specs: list[str], factories: list[str], out: Path, command: str) -> tuple[float, int]:
    """Seconds of one cold `cone eval` (its own empty cache and index folder) and the rows it produced."""
    with tempfile.TemporaryDirectory(prefix="cone-sweep-cost-") as scratch:
        saved = os.environ.get(CACHE_ENV)
        os.environ[CACHE_ENV] = str(Path(scratch) / "cache")
        try:
            start = time.perf_counter()
            plan = EvalPlan(
                models=(model,),
                indexes=Path(scratch) / "indexes",
                postprocesses=specs,
                factories=tuple(parse_index_type(factory) for factory in factories),
                progress=False,
            )
            results = evaluate_and_report(data, plan, out, command).results
            seconds = time.perf_counter() - start
        finally:
            if saved is None:
                os.environ.pop(CACHE_ENV, None)
            else:
                os.environ[CACHE_ENV] = saved
    return seconds, sum(r.available for r in results)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--dataset", default="scifact")
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--postprocess", type=lambda text: text.split(","), default=SWEEP.split(","))
    parser.add_argument("--index-factory", type=parse_factory_list, default=parse_factory_list("Flat,SQ8,PQ32"))
    parser.add_argument("--out", type=Path, default=None, help="keep the sweep's report here (default: discarded)")
    parser.add_argument("--quick", action="store_true", help="the eval's quick subset (not the benchmark's figure)")
    run_benchmark(parser, measure, show, argv)


def measure(args: argparse.Namespace) -> dict:
    data = load_eval_data(data_dir(args.data_dir), args.dataset, quick=args.quick)
    cli = ["eval", "--models", args.model, "--dataset", args.dataset] + (["--quick"] if args.quick else [])
    with tempfile.TemporaryDirectory(prefix="cone-sweep-report-") as scratch:
        one_out, sweep_out = Path(scratch) / "one", args.out or Path(scratch) / "sweep"
        one = timed_run(data, args.model, ["none"], ["Flat"], one_out, "cone " + shlex.join(cli))
        sweep_cli = cli + ["--postprocess", ",".join(args.postprocess), "--index-factory", ";".join(args.index_factory)]
        sweep_cli += ["--out", str(sweep_out)] if args.out else []
        sweep = timed_run(
            data, args.model, args.postprocess, args.index_factory, sweep_out, "cone " + shlex.join(sweep_cli)
        )
    return {
        "model": args.model,
        "dataset": data.dataset.name,
        "specs": len(args.postprocess),
        "factories": len(args.index_factory),
        "one_spec_seconds": round(one[0], 1),
        "one_spec_rows": one[1],
        "sweep_seconds": round(sweep[0], 1),
        "sweep_rows": sweep[1],
        "ratio": round(sweep[0] / one[0], 3),
    }


def show(found: dict) -> str:
    return (
        f"one spec (none, Flat): {found['one_spec_seconds']} s, {found['one_spec_rows']} row\n"
        f"sweep ({found['specs']} specs x {found['factories']} factories): {found['sweep_seconds']} s, "
        f"{found['sweep_rows']} rows\nsweep / one spec = {found['ratio']}x (the bar: under 2x)"
    )


if __name__ == "__main__":
    main()
