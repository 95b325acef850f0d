"""``cone train``: train the baseline (``--reg-cos 0``) or the regularized language model.

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
from cone.errors import Interrupted
from cone.models.corpus import default_corpus_files
from cone.models.gpt import GPTConfig
from cone.models.train import TrainConfig, train

# (type, help) of each config field the command line exposes; the default comes from the dataclass.
TRAIN_OPTIONS = {
    "reg_cos": (non_negative_float, "weight λ of the reg_cos regularizer (0 = the baseline)"),
    "reg_cos_rows": (positive_int, "table rows sampled per step for reg_cos"),
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
        description="Train the small tied-weight GPT with full-softmax cross-entropy plus λ·reg_cos. "
        "The regularizer is ON by default; the baseline needs an explicit --reg-cos 0.",
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


def run_train(args: argparse.Namespace) -> int:
    model_cfg = GPTConfig(**{name: getattr(args, name) for name in MODEL_OPTIONS})
    files = args.corpus or default_corpus_files(data_dir(args.data_dir))
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    cfg = TrainConfig(
        **{name: getattr(args, name) for name in TRAIN_OPTIONS},
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
