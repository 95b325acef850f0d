"""``cone eval``: every model, every correction, side by side, with figures."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from cone.output import dump_json, table
from data.loaders import add_data_dir_option, data_dir
from encoders.registry import MODEL_NAMES, add_checkpoints_option
from eval import report
from eval.harness import load_eval_data, public, run_eval
from indexing.cli import layer_arg

DEFAULT_MODELS = ",".join(MODEL_NAMES)
SUMMARY = ("ndcg_at_10", "stsb_spearman", "random_cos_mean", "random_cos_std", "threshold_f1", "hubness_skew")


def _list(text: str) -> list[str]:
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list")
    return items


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "eval",
        help="measure what the cone breaks: retrieval, STS, similarity spread, hubness, geometry",
        description="For every (model, post-processing) pair: nDCG@10 / MRR@10 / Recall@100 on the test qrels "
        "(ranx), STS-B test Spearman, the cosine spread of random and relevant pairs, the best global "
        "threshold's F1, hubness and the geometry instruments. Writes OUT/report.json, OUT/report.md and "
        "OUT/figures/*.png. Indexes are built under OUT/indexes (or --indexes) when missing and reused after.",
    )
    add_arguments(p)
    p.set_defaults(handler=run_eval_command)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `cone eval`; `cone demo` parses its own eval step with them too."""
    p.add_argument("--dataset", default="scifact", help="BEIR dataset folder name (default scifact)")
    p.add_argument("--models", type=_list, default=_list(DEFAULT_MODELS), help=f"default {DEFAULT_MODELS}")
    p.add_argument("--postprocess", type=_list, default=["none"], help="comma list of none,center,whiten,abtt:K")
    add_data_dir_option(p)
    p.add_argument("--out", type=Path, required=True, help="report folder")
    p.add_argument("--indexes", type=Path, default=None, help="index folder to reuse/fill (default OUT/indexes)")
    add_checkpoints_option(p)
    p.add_argument(
        "--quick", action="store_true", help="50 test queries, 1,000 documents, 200 STS pairs (see docs/eval.md)"
    )
    p.add_argument("--layer", type=layer_arg, default="last", help="LM models only: last | emb | INDEX (default last)")
    p.add_argument("--no-sts", action="store_true", help="skip STS-B (when the stsb folder is not available)")
    p.add_argument("--json", action="store_true", help="print report.json to stdout")
    p.add_argument("--no-progress", action="store_true")


def run_eval_command(args: argparse.Namespace) -> int:
    root = data_dir(args.data_dir)
    data = load_eval_data(root, args.dataset, quick=args.quick, with_sts=not args.no_sts)
    indexes = args.indexes or args.out / "indexes"
    args.out.mkdir(parents=True, exist_ok=True)

    skipped: set[str] = set()

    def announce(result: dict) -> None:
        if not result["available"] and result["model"] not in skipped:
            skipped.add(result["model"])
            print(f"cone: skipped {result['model']}: {result['reason']}", file=sys.stderr)

    results = run_eval(
        args.models,
        args.postprocess,
        data,
        indexes,
        args.checkpoints,
        not args.no_progress,
        on_result=announce,
        lm_layer=args.layer,
    )
    command = "cone " + shlex.join(sys.argv[1:])
    payload = report.payload(data.dataset.name, data.quick, public(results), command)
    report.write_json(args.out, payload)
    figures = report.write_figures(args.out, results)
    report.write_markdown(args.out, payload, figures)
    if args.json:
        print(dump_json(payload))
        return 0
    rows = [{"model": report.label(r), **r["metrics"]} for r in results if r["available"]]
    print(table(rows, ("model", *SUMMARY)))
    print(f"\nreport: {args.out / 'report.md'}, {args.out / 'report.json'}, figures in {args.out / report.FIGURES}")
    return 0
