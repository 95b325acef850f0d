"""What the training did to the embedding table: instruments, unseen-token norms, the logit test."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from cone.geometry import measure
from cone.models.checkpoint import load_checkpoint, load_token_counts

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


def checkpoint_report(path: Path) -> dict:
    """Every instrument on the table, seen vs unseen norms, and the logit test."""
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
        "table": measure(table),
        "n_unseen": int(len(unseen)),
        "n_seen": int(len(seen)),
        "seen_norm_mean": float(norms[seen].mean()),
        "unseen_norm_mean": float(norms[unseen].mean()) if len(unseen) else None,
        "unseen_seen_norm_ratio": float(norms[unseen].mean() / norms[seen].mean()) if len(unseen) else None,
    }
    report["logit_test"] = logit_test(model, tokenizer, unseen) if len(unseen) else None
    return report
