"""What the training did to the embedding table: instruments, unseen-token norms, the logit and heading tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from cone.data.loaders import data_dir
from cone.errors import InputError
from cone.geometry import measure
from cone.models.checkpoint import load_checkpoint, load_token_counts
from cone.models.corpus import default_corpus_files, read_documents, split

# Prompts for the logit test, written for this project (not taken from any dataset).
LOGIT_PROMPTS = [
    "The results of this study suggest that",
    "In this paper we show that the",
    "Patients were treated with a new",
    "The stock market fell sharply after the",
    "Scientists have discovered that the protein",
    "A man is playing a guitar on the",
    "The government announced on Monday that",
    "These findings indicate a role for",
]


@torch.no_grad()
def logit_test(model, tokenizer, unseen: np.ndarray, seed: int = 0) -> dict:
    """Where unseen tokens' logits rank, against random tokens, at the next position of each prompt.

    Percentile 0 = the lowest logit in the vocabulary, 1 = the highest; a random token
    averages 0.5. Large norms would give unseen tokens large logits only if their
    direction agreed with real hidden states; ``cos_unseen_mean_vs_hidden`` says whether it does.
    """
    table = model.wte.weight.float()
    rng = np.random.default_rng(seed)
    random_ids = rng.choice(table.shape[0], size=len(unseen), replace=False)
    per_prompt, hidden = [], []
    for prompt in LOGIT_PROMPTS:
        ids = torch.tensor([tokenizer.encode(prompt).ids[-model.cfg.block_size :]])
        h = model(ids)[0, -1]
        hidden.append(h)
        logits = table @ h
        pct = torch.argsort(torch.argsort(logits)).float() / (len(logits) - 1)
        per_prompt.append(
            {
                "prompt": prompt,
                "unseen_percentile": float(pct[unseen].mean()),
                "random_percentile": float(pct[random_ids].mean()),
                "unseen_logit_mean": float(logits[unseen].mean()),
                "random_logit_mean": float(logits[random_ids].mean()),
            }
        )
    mean_hidden = torch.stack(hidden).mean(0)
    unseen_mean = table[unseen].mean(0)
    cos = float(torch.nn.functional.cosine_similarity(unseen_mean, mean_hidden, dim=0))
    return {
        "prompts": per_prompt,
        "unseen_percentile": float(np.mean([p["unseen_percentile"] for p in per_prompt])),
        "random_percentile": float(np.mean([p["random_percentile"] for p in per_prompt])),
        "unseen_below_random_prompts": sum(p["unseen_percentile"] < p["random_percentile"] for p in per_prompt),
        "cos_unseen_mean_vs_hidden": cos,
    }


HEADING_POSITIONS = 4096  # (hidden state, next token) pairs of held-out text, enough for stable medians


def heading_spread(table: np.ndarray, hidden: np.ndarray, targets: np.ndarray) -> dict[str, np.ndarray]:
    """Whether the heading term cos(E[v], g) points anywhere, per hidden state g (rows of ``hidden``): the std
    of every table row's cosine with g, the target's cosine minus the median token's, and the target's rank by
    cosine (1 = highest). In a cone every row has nearly the same cosine with every g, so the term cannot tell
    the target from the rest: a small std, a small gap, a rank near the middle."""
    rows = table / np.maximum(np.linalg.norm(table, axis=1, keepdims=True), 1e-12)
    heads = hidden / np.maximum(np.linalg.norm(hidden, axis=1, keepdims=True), 1e-12)
    cos = heads.astype(np.float32) @ rows.T.astype(np.float32)  # (positions, vocabulary)
    target_cos = cos[np.arange(len(targets)), targets]
    return {
        "cos_std_over_vocab": cos.std(axis=1),
        "target_minus_median_cos": target_cos - np.median(cos, axis=1),
        "target_rank": 1 + (cos > target_cos[:, None]).sum(axis=1),
    }


def heading_summary(samples: dict[str, np.ndarray], vocabulary: int) -> dict:
    ranks = samples["target_rank"]
    return {
        "positions": int(len(ranks)),
        "cos_std_over_vocab": float(samples["cos_std_over_vocab"].mean()),
        "target_minus_median_cos": float(samples["target_minus_median_cos"].mean()),
        "target_rank_median": float(np.median(ranks)),
        "target_rank_percentile_mean": float((1 - (ranks - 1) / (vocabulary - 1)).mean()),
    }


@torch.no_grad()
def heading_samples(model, tokenizer, texts: list[str], limit: int = HEADING_POSITIONS) -> dict[str, np.ndarray]:
    """``heading_spread`` at the model's real final hidden states over ``texts`` (held-out), each position's
    target being the next token; the first ``limit`` positions, so two models with one tokenizer are paired."""
    hidden, targets = [], []
    for text in texts:
        ids = tokenizer.encode(text).ids[: model.cfg.block_size]
        if len(ids) < 2:
            continue
        hidden.append(model(torch.tensor([ids]))[0, :-1].float().numpy())
        targets.extend(ids[1:])
        if len(targets) >= limit:
            break
    if not targets:
        return {}
    table = model.wte.weight.detach().float().numpy()
    return heading_spread(table, np.concatenate(hidden)[:limit], np.asarray(targets[:limit]))


def held_out_texts(root: Path | None) -> tuple[list[str], str]:
    """The training corpus's validation documents (never trained on) if the data is here; else the logit
    test's prompts, written for this project. And which it was."""
    try:
        files = default_corpus_files(data_dir(root))
        return split(read_documents(files))[1], f"validation split of {', '.join(f.name for f in files)}"
    except InputError:
        return LOGIT_PROMPTS, "the logit-test prompts (no training corpus found)"


def checkpoint_report(path: Path, data_root: Path | None = None) -> dict:
    """Every instrument on the table, seen vs unseen norms, the logit test and the heading test (on held-out
    text under ``data_root``)."""
    return checkpoint_analysis(path, data_root)[0]


def checkpoint_analysis(path: Path, data_root: Path | None = None) -> tuple[dict, dict[str, np.ndarray]]:
    """``checkpoint_report`` and the heading test's per-position samples it summarizes (for paired tests)."""
    model, tokenizer, payload = load_checkpoint(path)
    counts = load_token_counts(path).numpy()
    table = model.wte.weight.detach().float().numpy()
    norms = np.linalg.norm(table, axis=1)
    unseen = np.flatnonzero(counts == 0)
    seen = np.flatnonzero(counts > 0)
    report = {
        "checkpoint": str(path),
        "step": payload.get("step"),
        "tokens_seen": payload.get("tokens_seen"),
        "reg_cos": payload.get("train", {}).get("reg_cos"),
        "table": measure(table).model_dump(exclude_none=True),
        "n_unseen": int(len(unseen)),
        "n_seen": int(len(seen)),
        "seen_norm_mean": float(norms[seen].mean()),
        "unseen_norm_mean": float(norms[unseen].mean()) if len(unseen) else None,
        "unseen_seen_norm_ratio": float(norms[unseen].mean() / norms[seen].mean()) if len(unseen) else None,
    }
    report["logit_test"] = logit_test(model, tokenizer, unseen) if len(unseen) else None
    texts, source = held_out_texts(data_root)
    samples = heading_samples(model, tokenizer, texts)
    summary = heading_summary(samples, model.cfg.vocab_size) if samples else {"positions": 0}
    report["heading"] = {"text": source, **summary}
    return report, samples
