"""``cone geometry``: the instruments on synthetic data, on a saved matrix, on a checkpoint."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from cone.cli.options import add_checkpoints_option, add_data_dir_option
from cone.errors import InputError
from cone.geometry import INSTRUMENTS, measure
from cone.geometry.synthetic import synthetic_report
from cone.models.analysis import checkpoint_report
from cone.models.checkpoint import resolve_checkpoint
from cone.output import dump_json, table

SYNTHETIC_COLUMNS = [
    "distribution",
    *INSTRUMENTS,
    "sigreg_x_floor",
    "sigreg_centered",
    "mean_vector_ratio",
    "top_pc_share",
    "uniformity",
]
VECTOR_COLUMNS = ["instrument", "value"]
LOGIT_COLUMNS = ["prompt", "unseen_percentile", "random_percentile", "unseen_logit_mean", "random_logit_mean"]


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
    checkpoint.add_argument(
        "path", type=Path, help="checkpoint folder written by `cone train`, or baseline / regularized (the references)"
    )
    add_checkpoints_option(checkpoint)
    add_data_dir_option(checkpoint, "datasets folder whose training corpus' validation split feeds the heading test")
    checkpoint.add_argument("--json", action="store_true", help="print JSON instead of a table")
    checkpoint.set_defaults(handler=run_checkpoint)


def render_synthetic(report: dict) -> str:
    rows = [{"distribution": name, **values} for name, values in report["distributions"].items()]
    some = next(iter(report["distributions"].values()))
    floor = f"SigReg noise floor (N(0, I) sample, N={some['n']:.0f}, d={some['d']:.0f}): {report['noise_floor']:.3e}"
    return f"{table(rows, SYNTHETIC_COLUMNS)}\n\n{floor}"


def run_synthetic(args: argparse.Namespace) -> int:
    report = synthetic_report(args.n, args.d, args.seed)
    print(dump_json(report) if args.json else render_synthetic(report))
    return 0


def _check_npy_size(path: Path) -> None:
    """Refuse a .npy whose header claims more data than the file holds, before any memory is asked for it."""
    with path.open("rb") as handle:
        version = np.lib.format.read_magic(handle)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read(handle, max_header_size=100_000)
        start = handle.tell()
    needed = math.prod(shape) * dtype.itemsize
    if needed > path.stat().st_size - start:
        raise InputError(
            f"{path}: its header claims shape {shape} ({needed:,} bytes) but the file holds "
            f"{path.stat().st_size - start:,} bytes of data"
        )


def load_matrix(path: Path) -> np.ndarray:
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    try:
        _check_npy_size(path)
        return np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise InputError(f"{path}: not a readable .npy array ({exc or 'empty file'})") from None


def instrument_table(values: dict) -> str:
    return table([{"instrument": k, "value": v} for k, v in values.items()], VECTOR_COLUMNS)


def run_vectors(args: argparse.Namespace) -> int:
    values = measure(load_matrix(args.file)).model_dump(exclude_none=True)
    print(dump_json(values) if args.json else instrument_table(values))
    return 0


def render_checkpoint(report: dict) -> str:
    lines = [
        f"checkpoint {report['checkpoint']}: step {report['step']}, {report['tokens_seen']} tokens, "
        f"reg_cos λ={report['reg_cos']}",
        instrument_table(report["table"]),
        f"\ntokens seen in training: {report['n_seen']}, never seen: {report['n_unseen']}",
    ]
    if report["n_unseen"]:
        lines.append(
            f"mean norm seen {report['seen_norm_mean']:.4f}, unseen {report['unseen_norm_mean']:.4f}, "
            f"ratio {report['unseen_seen_norm_ratio']:.2f}×"
        )
    logit = report["logit_test"]
    if logit:
        lines += [
            "\nlogit test (percentile of the logit in the vocabulary; random tokens ~0.5):",
            table(logit["prompts"], LOGIT_COLUMNS),
            f"unseen below random on {logit['unseen_below_random_prompts']}/{len(logit['prompts'])} prompts; "
            f"cos(mean unseen row, mean hidden state) = {logit['cos_unseen_mean_vs_hidden']:.4f}",
        ]
    heading = report["heading"]
    if heading.get("positions"):
        vocabulary = report["n_seen"] + report["n_unseen"]
        lines += [
            f"\nheading test: cos(E[v], g) over the vocabulary at {heading['positions']} positions of "
            f"{heading['text']}",
            f"std over the vocabulary {heading['cos_std_over_vocab']:.4f}; target minus median token "
            f"{heading['target_minus_median_cos']:+.4f}; target's rank by cosine: median "
            f"{heading['target_rank_median']:.0f} of {vocabulary} (mean percentile "
            f"{heading['target_rank_percentile_mean']:.3f})",
        ]
    return "\n".join(lines)


def run_checkpoint(args: argparse.Namespace) -> int:
    report = checkpoint_report(resolve_checkpoint(args.path, args.checkpoints), args.data_dir)
    print(dump_json(report) if args.json else render_checkpoint(report))
    return 0
