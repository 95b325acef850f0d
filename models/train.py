"""``cone train``: a nanoGPT-style loop, full softmax over the vocabulary, plus ``reg_cos`` (or any mix of the
anti-collapse terms in ``cone.geometry.regularizer``).

Batches depend only on (seed, step), so two runs with the same seed see the same data in
the same order whatever their regularizers, and a resumed run continues exactly.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from tqdm import tqdm

from cone.cpu import bf16_is_fast
from cone.errors import InputError
from cone.geometry import anisotropy, decorrelation, effective_rank, moments, sigreg, top_pc_share, uniformity
from cone.geometry.regularizer import TERMS, regularizer_terms
from cone.models import checkpoint as ckpt
from cone.models.corpus import read_documents, split
from cone.models.gpt import GPT, GPTConfig
from cone.models.tokenizer import EOS, load_tokenizer, train_tokenizer

# Chosen by the λ sweep (benchmarks/reg_cos_sweep.sh): the smallest λ that cuts the table's anisotropy
# several-fold for a validation-loss cost under 1%. The measured figures are in docs/training.md.
DEFAULT_REG_COS = 3.0
# λ of each other term, chosen by its own sweep (409,600 tokens) under the rule docs/regularizers.md wrote down
# before it: the largest λ of the grid whose validation-loss cost stays under 1%.
DEFAULT_LAMBDAS: dict[str, float] = {
    "reg_cos": DEFAULT_REG_COS,
    "vicreg_var": 10.0,
    "vicreg_cov": 10.0,
    "barlow": 10.0,
    "sigreg": 3.0,
    "uniformity": 0.3,
    "center": 3.0,
}
VAL_SEED_OFFSET = 1_000_000_007


@dataclass(frozen=True)
class TrainConfig:
    tokens: int = 4_000_000
    batch_size: int = 32
    lr: float = 1e-3
    min_lr: float = 1e-4
    warmup_steps: int = 50
    weight_decay: float = 0.1
    reg_cos: float = DEFAULT_REG_COS
    reg: dict[str, float] = field(default_factory=dict)  # λ of the terms other than reg_cos
    reg_rows: int = 512  # table rows sampled per step, one sample shared by every term
    eval_interval: int = 50
    eval_batches: int = 8
    seed: int = 0
    bf16: bool = field(default_factory=lambda: bf16_is_fast())
    block_size: int = 128
    corpus: list[str] = field(default_factory=list)

    @property
    def regularizers(self) -> dict[str, float]:
        """Every term with a positive λ, reg_cos first."""
        return {name: lam for name, lam in {"reg_cos": self.reg_cos, **self.reg}.items() if lam > 0}

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.block_size

    @property
    def steps(self) -> int:
        # Round up: the budget is a floor, "at least this many tokens".
        return max(1, -(-self.tokens // self.tokens_per_step))


@dataclass
class TokenStreams:
    train: np.ndarray
    val: np.ndarray
    counts: torch.Tensor  # occurrences of each id in the training stream


def encode_stream(tokenizer: Tokenizer, docs: list[str]) -> np.ndarray:
    eos = tokenizer.token_to_id(EOS)
    ids: list[int] = []
    for enc in tokenizer.encode_batch(docs):
        ids.extend(enc.ids)
        ids.append(eos)
    return np.asarray(ids, dtype=np.int64)


def prepare_data(
    files: list[Path], vocab_size: int, tokenizer: Tokenizer | None, block_size: int
) -> tuple[Tokenizer, TokenStreams]:
    """Train (or reuse) the tokenizer on the whole corpus, then tokenize train and validation."""
    train_docs, val_docs = split(read_documents(files))
    tokenizer = tokenizer or train_tokenizer(train_docs + val_docs, vocab_size)
    train_ids, val_ids = encode_stream(tokenizer, train_docs), encode_stream(tokenizer, val_docs)
    for name, ids in (("training", train_ids), ("validation", val_ids)):
        if len(ids) <= block_size + 1:
            raise InputError(f"{name} text too short: {len(ids)} tokens for a context of {block_size}")
    counts = torch.bincount(torch.from_numpy(train_ids), minlength=vocab_size)
    return tokenizer, TokenStreams(train_ids, val_ids, counts)


def batch(stream: np.ndarray, batch_size: int, block_size: int, seed: int, step: int) -> torch.Tensor:
    """(B, T + 1) windows at positions drawn from (seed, step) alone."""
    rng = np.random.default_rng([seed, step])
    starts = rng.integers(0, len(stream) - block_size - 1, size=batch_size)
    return torch.from_numpy(np.stack([stream[s : s + block_size + 1] for s in starts]))


def lm_loss(model: GPT, x: torch.Tensor, bf16: bool) -> torch.Tensor:
    """Mean next-token cross-entropy over the full vocabulary (no sampled softmax)."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = model.logits(model(x[:, :-1]))
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))


def learning_rate(cfg: TrainConfig, step: int) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * min(progress, 1.0)))


def make_optimizer(model: GPT, cfg: TrainConfig) -> torch.optim.AdamW:
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95))


def parse_regularizers(text: str) -> dict[str, float]:
    """``NAME[:λ][,NAME:λ...]`` (or ``none``) -> {name: λ}; a name without λ takes its swept default."""
    if text.strip() == "none":
        return {}
    chosen: dict[str, float] = {}
    for item in text.split(","):
        name, _, value = item.strip().partition(":")
        if name not in TERMS:
            raise InputError(f"unknown regularizer {name!r}; choose from {', '.join(TERMS)} (or none)")
        if name in chosen:
            raise InputError(f"regularizer {name!r} is named twice")
        try:
            lam = float(value) if value else DEFAULT_LAMBDAS[name]
        except ValueError:
            raise InputError(f"λ of {name} must be a number, got {value!r}") from None
        if not (math.isfinite(lam) and lam >= 0):
            raise InputError(f"λ of {name} must be a finite number >= 0, got {value}")
        chosen[name] = lam
    return chosen


def format_regularizers(train: dict) -> str:
    """A saved ``train`` config's regularizers as ``--reg`` spells them (``none`` for λ = 0)."""
    weights = {"reg_cos": train.get("reg_cos", 0.0), **train.get("reg", {})}
    return ",".join(f"{name}:{lam:g}" for name, lam in weights.items() if lam > 0) or "none"


def train_step(
    model: GPT, opt: torch.optim.Optimizer, cfg: TrainConfig, x: torch.Tensor, step: int
) -> tuple[float, dict[str, float]]:
    """One optimizer step; returns (cross-entropy, each regularizer term's value)."""
    for group in opt.param_groups:
        group["lr"] = learning_rate(cfg, step)
    ce = lm_loss(model, x, cfg.bf16)
    loss = ce
    values: dict[str, float] = {}
    if weights := cfg.regularizers:
        # The rows (and any directions) come from (seed, step) alone, like the batches: a resume draws the same.
        gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)
        terms = regularizer_terms(model.wte.weight, list(weights), cfg.reg_rows, generator=gen)
        loss = ce + sum(weights[name] * term for name, term in terms.items())
        values = {name: float(term.detach()) for name, term in terms.items()}
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return float(ce.detach()), values


@torch.no_grad()
def evaluate(model: GPT, cfg: TrainConfig, streams: TokenStreams) -> dict[str, float]:
    """Validation loss on fixed batches, and the instruments on the embedding table."""
    model.eval()
    losses = [
        float(
            lm_loss(model, batch(streams.val, cfg.batch_size, cfg.block_size, cfg.seed + VAL_SEED_OFFSET, i), cfg.bf16)
        )
        for i in range(cfg.eval_batches)
    ]
    model.train()
    table = model.wte.weight.detach().float().numpy()
    stats = moments(table)
    return {
        "val_loss": float(np.mean(losses)),
        "anisotropy": anisotropy(table).value,
        "effective_rank": effective_rank(table, stats),
        "decorrelation": decorrelation(table, stats),
        "sigreg": sigreg(table),
        "top_pc_share": top_pc_share(table, stats),
        "uniformity": uniformity(table).value,
    }


def _resume_state(model: GPT, opt: torch.optim.Optimizer, step: int) -> dict:
    return {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step}


def _load_resume(out: Path, cfg: TrainConfig, model_cfg: GPTConfig) -> tuple[dict, Tokenizer]:
    payload = ckpt.read_config(out)
    saved = {k: v for k, v in payload.get("train", {}).items() if k != "corpus"}
    wanted = {k: v for k, v in asdict(cfg).items() if k != "corpus"}
    if saved != wanted or payload["model"] != model_cfg.to_dict():
        diff = sorted(k for k in wanted if saved.get(k) != wanted[k])
        diff += sorted(k for k in payload["model"] if payload["model"][k] != model_cfg.to_dict().get(k))
        raise InputError(f"{out}: cannot resume, the checkpoint was trained with other settings ({', '.join(diff)})")
    if not (out / ckpt.RESUME).is_file():
        raise InputError(f"{out}: no {ckpt.RESUME} to resume from")
    try:
        state = torch.load(out / ckpt.RESUME, weights_only=True)
    except Exception as exc:  # torch raises many types for a truncated or foreign file
        raise InputError(f"{out / ckpt.RESUME}: corrupt resume state ({exc})") from None
    # The files a finished run would leave as they are must be sound before the run is called done.
    ckpt.load_checkpoint(out)
    counts = ckpt.load_token_counts(out)
    if tuple(counts.shape) != (model_cfg.vocab_size,):
        raise InputError(f"{out / ckpt.TOKEN_COUNTS}: {tuple(counts.shape)} counts for {model_cfg.vocab_size} ids")
    if not isinstance(state, dict) or not isinstance(state.get("step"), int):
        raise InputError(f"{out / ckpt.RESUME}: not a resume state (no step)")
    return state, load_tokenizer(out / ckpt.TOKENIZER)


def train(
    out: Path, files: list[Path], cfg: TrainConfig, model_cfg: GPTConfig, resume: bool = False, progress: bool = True
) -> Path:
    """Train to ``cfg.tokens`` tokens, logging and checkpointing every ``eval_interval`` steps.

    Ctrl-C saves a checkpoint before leaving; ``resume=True`` continues one bit-for-bit.
    """
    if cfg.block_size != model_cfg.block_size:
        cfg = replace(cfg, block_size=model_cfg.block_size)
    if not resume and (out / ckpt.CONFIG).exists():
        raise InputError(f"{out} already holds a checkpoint; pass --resume to continue it or choose another --out")
    state, tokenizer = _load_resume(out, cfg, model_cfg) if resume else (None, None)
    # What a killed run left: temporaries of a save, and log records past the step the checkpoint holds.
    ckpt.remove_temporaries(out)
    ckpt.truncate_log(out, int(state["step"]) if state is not None else 0)
    tokenizer, streams = prepare_data(files, model_cfg.vocab_size, tokenizer, model_cfg.block_size)
    torch.manual_seed(cfg.seed)
    model = GPT(model_cfg)
    opt = make_optimizer(model, cfg)
    step = 0
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step = int(state["step"])
    meta = {
        "train": asdict(cfg),
        "train_tokens_in_corpus": int(len(streams.train)),
        "val_tokens_in_corpus": int(len(streams.val)),
        "unseen_token_ids": int((streams.counts == 0).sum()),
    }

    def save(at_step: int) -> None:
        ckpt.save_checkpoint(
            out,
            model,
            tokenizer,
            streams.counts,
            {**meta, "step": at_step, "tokens_seen": at_step * cfg.tokens_per_step},
            _resume_state(model, opt, at_step),
        )

    out.mkdir(parents=True, exist_ok=True)
    bar = tqdm(
        total=cfg.steps * cfg.tokens_per_step,
        initial=step * cfg.tokens_per_step,
        unit="tok",
        unit_scale=True,
        disable=not progress,
        desc="train " + (",".join(f"{name}:{lam:g}" for name, lam in cfg.regularizers.items()) or "λ=0"),
    )
    window: list[float] = []
    started, started_step = time.perf_counter(), step
    model.train()
    with (out / ckpt.LOG).open("a", encoding="utf-8") as log, bar:
        try:
            while step < cfg.steps:
                x = batch(streams.train, cfg.batch_size, cfg.block_size, cfg.seed, step)
                ce, reg_values = train_step(model, opt, cfg, x, step)
                window.append(ce)
                step += 1
                bar.update(cfg.tokens_per_step)
                bar.set_postfix(loss=f"{ce:.3f}")
                if step % cfg.eval_interval == 0 or step == cfg.steps:
                    elapsed = time.perf_counter() - started
                    record = {
                        "step": step,
                        "tokens": step * cfg.tokens_per_step,
                        "train_loss": float(np.mean(window)),
                        "reg": reg_values,
                        "lr": learning_rate(cfg, step - 1),
                        **evaluate(model, cfg, streams),
                        "tokens_per_s": (step - started_step) * cfg.tokens_per_step / max(elapsed, 1e-9),
                    }
                    log.write(json.dumps(record) + "\n")
                    log.flush()
                    window = []
                    save(step)
        except KeyboardInterrupt:
            save(step)  # Ctrl-C keeps the work done; the log and the bar close on the way out either way
            raise
    return out
