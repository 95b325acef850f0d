"""``cone train``: train the baseline (``--reg-cos 0``), the regularized language model, or any mix of the
anti-collapse regularizers (``--reg barlow:0.5,center:1``).

Every option's default is the field default of ``TrainConfig`` or ``GPTConfig``: written once, there.
"""

from __future__ import annotations

import argparse
from dataclasses import MISSING, fields
from pathlib import Path

from cone.cli.options import (
    add_data_dir_option,
    add_progress_option,
    non_negative_float,
    non_negative_int,
    positive_int,
)
from cone.cpu import bf16_is_fast
from cone.data.loaders import data_dir
from cone.errors import InputError, Interrupted
from cone.geometry.regularizer import SIGREG_LOSS_DIRECTIONS, TERMS, UNIFORMITY_T
from cone.models.corpus import default_corpus_files
from cone.models.gpt import GPTConfig
from cone.models.train import DEFAULT_LAMBDAS, DEFAULT_REG_COS, TrainConfig, parse_regularizers, train

# (type, help) of each config field the command line exposes; the default comes from the dataclass.
TRAIN_OPTIONS = {
    "reg_rows": (positive_int, "table rows sampled per step, one sample shared by every regularizer term"),
    "tokens": (positive_int, "training budget in tokens (a floor: steps round up)"),
    "batch_size": (positive_int, "sequences per step"),
    "lr": (non_negative_float, "peak learning rate (cosine decay to lr / 10)"),
    "eval_interval": (positive_int, "steps between eval / log / checkpoint"),
    "seed": (non_negative_int, "seed of the weights and of the data order"),
}
MODEL_OPTIONS = {
    "vocab_size": (positive_int, "BPE vocabulary size"),
    "n_embd": (positive_int, "width (the embedding table is vocab_size x n_embd, tied to the output)"),
    "n_layer": (positive_int, "transformer blocks"),
    "n_head": (positive_int, "attention heads (must divide n_embd)"),
    "block_size": (positive_int, "context length in tokens"),
}


def _add_config_options(parser: argparse.ArgumentParser, config: type, options: dict) -> None:
    defaults = {f.name: f.default for f in fields(config) if f.default is not MISSING}
    for name, (kind, text) in options.items():
        flag = "--" + name.replace("_", "-")
        parser.add_argument(flag, type=kind, default=defaults[name], help=f"{text} (default {defaults[name]:,})")


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "train",
        help="train the baseline or the regularized language model",
        description="Train the small tied-weight GPT with full-softmax cross-entropy plus λ·reg_cos, or plus the "
        "anti-collapse terms --reg names (docs/regularizers.md compares them). The regularizer is ON by default; "
        "the baseline needs an explicit --reg-cos 0 (or --reg none).",
    )
    p.add_argument("--out", type=Path, required=True, help="checkpoint folder to write (or resume)")
    p.add_argument(
        "--corpus",
        type=Path,
        nargs="+",
        default=None,
        help="training .txt/.jsonl files (default: SciFact corpus + lmtext/*.txt under the data dir)",
    )
    add_data_dir_option(p)
    _add_config_options(p, TrainConfig, TRAIN_OPTIONS)
    defaults = ", ".join(f"{name}:{lam:g}" for name, lam in DEFAULT_LAMBDAS.items())
    regularizers = p.add_mutually_exclusive_group()
    regularizers.add_argument(
        "--reg-cos",
        type=non_negative_float,
        default=None,
        help=f"weight λ of the reg_cos regularizer alone (0 = the baseline; default {DEFAULT_REG_COS:g})",
    )
    regularizers.add_argument(
        "--reg",
        type=regularizer_spec,
        default=None,
        metavar="NAME[:λ][,NAME:λ...]",
        help=f"the regularizers and their weights, in place of reg_cos alone; names: {', '.join(TERMS)} "
        f"(sigreg draws {SIGREG_LOSS_DIRECTIONS} directions per step, uniformity uses t = {UNIFORMITY_T:g}), "
        f"or none. A name without λ takes its swept default ({defaults}).",
    )
    _add_config_options(p, GPTConfig, MODEL_OPTIONS)
    precision = p.add_mutually_exclusive_group()
    precision.add_argument(
        "--fp32", action="store_true", help="force fp32 (default: bf16 autocast only on CPUs with native bf16)"
    )
    precision.add_argument("--bf16", action="store_true", help="force bf16 autocast")
    p.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads")
    p.add_argument("--resume", action="store_true", help="continue the checkpoint in --out")
    add_progress_option(p)
    p.set_defaults(handler=run_train)


def regularizer_spec(text: str) -> dict[str, float]:
    try:
        return parse_regularizers(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _regularizers(args: argparse.Namespace) -> dict:
    """TrainConfig's {"reg_cos": λ, "reg": {other: λ}} from --reg or --reg-cos (else the default reg_cos)."""
    if args.reg is None:
        return {"reg_cos": DEFAULT_REG_COS if args.reg_cos is None else args.reg_cos, "reg": {}}
    chosen = dict(args.reg)
    return {"reg_cos": chosen.pop("reg_cos", 0.0), "reg": chosen}


def run_train(args: argparse.Namespace) -> int:
    model_cfg = GPTConfig(**{name: getattr(args, name) for name in MODEL_OPTIONS})
    files = args.corpus or default_corpus_files(data_dir(args.data_dir))
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    cfg = TrainConfig(
        **{name: getattr(args, name) for name in TRAIN_OPTIONS},
        **_regularizers(args),
        min_lr=args.lr / 10,
        bf16=args.bf16 or (not args.fp32 and bf16_is_fast()),
        block_size=args.block_size,
        corpus=[str(f) for f in files],
    )
    try:
        out = train(args.out, files, cfg, model_cfg, resume=args.resume, progress=not args.no_progress)
    except KeyboardInterrupt:
        raise Interrupted(f"checkpoint saved in {args.out} (continue with --resume)") from None
    print(f"checkpoint written to {out}")
    return 0
