"""``cone geometry``: the instruments on synthetic data, on a saved matrix, on a checkpoint."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from cone.errors import ConeError
from cone.output import dump_json, table
from geometry.instruments import measure, sigreg_noise_floor
from geometry.synthetic import DISTRIBUTIONS, sample

COLUMNS = [
    "distribution",
    "anisotropy",
    "decorrelation",
    "effective_rank",
    "sigreg",
    "sigreg_x_floor",
    "sigreg_centered",
    "mean_vector_ratio",
    "top_pc_share",
    "uniformity",
]
VECTOR_COLUMNS = ["instrument", "value"]


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "geometry",
        help="measure an embedding space with every instrument",
        description="Measure an embedding space with every instrument.",
    )
    sub = parser.add_subparsers(dest="geometry_command", metavar="SOURCE", required=True)

    synth = sub.add_parser(
        "synthetic",
        help="the blind-spot proof on five synthetic distributions",
        description="Every instrument on gaussian, cone, rank_collapse, redundant "
        "and point, plus sigreg_centered (the bug: it cannot see the cone).",
    )
    synth.add_argument("--n", type=int, default=4096, help="rows per distribution (default 4096)")
    synth.add_argument("--d", type=int, default=256, help="dimension (default 256)")
    synth.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    synth.add_argument("--json", action="store_true", help="print JSON instead of a table")
    synth.set_defaults(handler=run_synthetic)

    vectors = sub.add_parser(
        "vectors",
        help="every instrument on a saved (N, d) .npy matrix",
        description="Every instrument on a saved (N, d) float matrix (.npy).",
    )
    vectors.add_argument("file", type=Path, help="path to a .npy file holding an (N, d) array")
    vectors.add_argument("--json", action="store_true", help="print JSON instead of a table")
    vectors.set_defaults(handler=run_vectors)

    checkpoint = sub.add_parser(
        "checkpoint",
        help="a language-model checkpoint's embedding table",
        description="Every instrument on the checkpoint's embedding table, the "
        "norms of tokens never seen in training vs seen ones, and the logit test.",
    )
    checkpoint.add_argument("path", type=Path, help="checkpoint folder written by `cone train`")
    checkpoint.add_argument("--json", action="store_true", help="print JSON instead of a table")
    checkpoint.set_defaults(handler=run_checkpoint)


def synthetic_report(n: int, d: int, seed: int) -> dict:
    if n < 2 or d < 2:
        raise ConeError("--n and --d must both be at least 2")
    return {
        "noise_floor": sigreg_noise_floor(n, d),
        "distributions": {name: measure(sample(name, n, d, seed), with_centered=True) for name in DISTRIBUTIONS},
    }


def run_synthetic(args: argparse.Namespace) -> int:
    report = synthetic_report(args.n, args.d, args.seed)
    if args.json:
        print(dump_json(report))
        return 0
    rows = [{"distribution": name, **values} for name, values in report["distributions"].items()]
    print(table(rows, COLUMNS))
    print(f"\nSigReg noise floor (N(0, I) sample, N={args.n}, d={args.d}): {report['noise_floor']:.3e}")
    return 0


def load_matrix(path: Path) -> np.ndarray:
    if not path.is_file():
        raise ConeError(f"{path}: no such file")
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise ConeError(f"{path}: not a readable .npy array ({exc})") from None


def run_vectors(args: argparse.Namespace) -> int:
    values = measure(load_matrix(args.file))
    if args.json:
        print(dump_json(values))
    else:
        print(table([{"instrument": k, "value": v} for k, v in values.items()], VECTOR_COLUMNS))
    return 0


def run_checkpoint(args: argparse.Namespace) -> int:
    from models.analysis import checkpoint_report  # torch import only when needed

    report = checkpoint_report(args.path)
    if args.json:
        print(dump_json(report))
        return 0
    print(
        f"checkpoint {report['checkpoint']}: step {report['step']}, {report['tokens_seen']} tokens, "
        f"reg_cos λ={report['reg_cos']}"
    )
    print(table([{"instrument": k, "value": v} for k, v in report["table"].items()], VECTOR_COLUMNS))
    print(f"\ntokens seen in training: {report['n_seen']}, never seen: {report['n_unseen']}")
    print(
        f"mean norm seen {report['seen_norm_mean']:.4f}, unseen {report['unseen_norm_mean']:.4f}, "
        f"ratio {report['unseen_seen_norm_ratio']:.2f}×"
    )
    logit = report["logit_test"]
    if logit:
        rows = [{k: v for k, v in p.items()} for p in logit["prompts"]]
        print("\nlogit test (percentile of the logit in the vocabulary; random tokens ~0.5):")
        print(
            table(rows, ["prompt", "unseen_percentile", "random_percentile", "unseen_logit_mean", "random_logit_mean"])
        )
        print(
            f"unseen below random on {logit['unseen_below_random_prompts']}/{len(rows)} prompts; "
            f"cos(mean unseen row, mean hidden state) = {logit['cos_unseen_mean_vs_hidden']:.4f}"
        )
    return 0
