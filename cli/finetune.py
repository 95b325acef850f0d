"""``cone finetune``: a language-model checkpoint -> a sentence encoder, by one contrastive recipe."""

from __future__ import annotations

import argparse
from dataclasses import fields
from pathlib import Path

from cone.cli.options import (
    add_checkpoints_option,
    add_data_dir_option,
    add_progress_option,
    comma_list,
    non_negative_float,
    non_negative_int,
    positive_int,
)
from cone.cpu import bf16_is_fast
from cone.data.loaders import data_dir
from cone.encoders.finetune import SOURCES, FinetuneConfig, finetune
from cone.errors import InputError
from cone.models.checkpoint import resolve_checkpoint

DEFAULTS = {f.name: f.default for f in fields(FinetuneConfig)}


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "finetune",
        help="turn a language-model checkpoint into a sentence encoder (contrastive fine-tuning)",
        description="Wrap the checkpoint's GPT as a sentence-transformers module (token embeddings + mean "
        "pooling) and train it with sentence-transformers' trainer on the data dir's train splits only: SciFact "
        "train qrels (claim -> abstract, MultipleNegativesRankingLoss with in-batch negatives), STS-B train "
        "(CoSENTLoss) and SimCSE pairs from lmtext (a sentence and itself under dropout). Writes a "
        "sentence-transformers folder that is also a cone checkpoint (fp16), and OUT/finetune_log.jsonl with "
        "the STS-B dev Spearman and every instrument on the sentence space at each evaluation. Load it as "
        "st:OUT in cone index / eval / serve.",
    )
    p.add_argument(
        "--from", dest="source", type=Path, required=True, help="checkpoint folder, or baseline / regularized"
    )
    p.add_argument("--out", type=Path, required=True, help="folder to write the encoder to (must not hold one)")
    p.add_argument(
        "--seed", type=non_negative_int, default=DEFAULTS["seed"], help="seed of the data order and dropout (default 0)"
    )
    p.add_argument(
        "--mix",
        type=comma_list,
        default=list(SOURCES),
        help=f"comma list of training sources, each with its loss: {', '.join(SOURCES)} (default all). The "
        "batches take the sources in turn and an epoch ends with the smallest (SciFact's 917 pairs), each epoch "
        "drawing new SimCSE sentences",
    )
    p.add_argument(
        "--max-steps", type=positive_int, default=DEFAULTS["max_steps"], help="optimizer steps (default 600)"
    )
    p.add_argument(
        "--batch-size", type=positive_int, default=DEFAULTS["batch_size"], help="pairs per batch (default 32)"
    )
    p.add_argument(
        "--lr", type=non_negative_float, default=DEFAULTS["lr"], help="peak learning rate (default 1e-4, linear decay)"
    )
    p.add_argument(
        "--dropout", type=non_negative_float, default=DEFAULTS["dropout"], help="dropout while training (default 0.1)"
    )
    p.add_argument("--simcse-sentences", type=positive_int, default=DEFAULTS["simcse_sentences"], help="default 10,000")
    p.add_argument(
        "--reg-cos",
        type=non_negative_float,  # as cone train's: nan and negative values refused, not taken for "off"
        default=DEFAULTS["reg_cos"],
        help="λ of reg_cos on sentence vectors (default 0)",
    )
    p.add_argument(
        "--eval-steps", type=positive_int, default=DEFAULTS["eval_steps"], help="steps between log lines (default 100)"
    )
    p.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads")
    add_data_dir_option(p)
    add_checkpoints_option(p)
    add_progress_option(p)
    p.set_defaults(handler=run_finetune)


def run_finetune(args: argparse.Namespace) -> int:
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if args.out.exists() and not args.out.is_dir():
        raise InputError(f"--out {args.out}: a file, not a folder to write the encoder to")
    source = resolve_checkpoint(args.source, args.checkpoints)
    root = data_dir(args.data_dir)
    cfg = FinetuneConfig(
        sources=tuple(args.mix),
        max_steps=args.max_steps,
        batch_size=args.batch_size,
        lr=args.lr,
        seed=args.seed,
        dropout=args.dropout,
        simcse_sentences=args.simcse_sentences,
        reg_cos=args.reg_cos,
        eval_steps=args.eval_steps,
        bf16=bf16_is_fast(),
        source_checkpoint=str(args.source),  # as given: a name (baseline) or a path
        data_dir=str(root),
    )
    out = finetune(source, args.out, root, cfg, progress=not args.no_progress)
    print(f"sentence encoder written to {out} (use it as st:{out})")
    return 0
