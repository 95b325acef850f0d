"""The seed's claims on two checkpoints, as the markdown table of docs/results.md §1.

Usage: python benchmarks/claims_table.py BASELINE_DIR REGULARIZED_DIR
Every figure comes from `cone geometry checkpoint` (models.analysis.checkpoint_report) and the last
line of each checkpoint's train_log.jsonl; the reference column is the study being reproduced.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from scipy.stats import wilcoxon

from cone.models.analysis import checkpoint_analysis
from cone.models.checkpoint import TOKENIZER, read_log
from cone.models.tokenizer import load_tokenizer

HEADING = {
    "cos_std_over_vocab": "heading: std over the vocabulary of cos(E[v], g)",
    "target_minus_median_cos": "heading: cos(target) − cos(median token)",
    "target_rank": "heading: the target's rank by cosine (median, of {vocabulary:,})",
}


def rows(base: dict, reg: dict) -> list[tuple[str, str, str, str]]:
    bt, rt, bl, rl = base["table"], reg["table"], base["logit_test"], reg["logit_test"]
    cost = 100 * (reg["val_loss"] / base["val_loss"] - 1)

    def both(show) -> tuple[str, str]:
        return show(base), show(reg)

    return [
        ("training tokens (steps)", *both(lambda r: f"{r['tokens_seen']:,} ({r['step']})"), ""),
        ("validation loss", *both(lambda r: f"{r['val_loss']:.4f}"), ""),
        ("relative cost of the regularizer", "—", f"**{cost:+.2f}%**", "+0.17%"),
        ("table anisotropy (mean cosine, exact)", f"{bt['anisotropy']:.4f}", f"{rt['anisotropy']:.4f}", ""),
        ("anisotropy ratio baseline / regularized", "—", f"**{bt['anisotropy'] / rt['anisotropy']:.1f}×**", "7.6×"),
        ("effective rank (of 256)", f"{bt['effective_rank']:.1f}", f"**{rt['effective_rank']:.1f}**", "232 → 245"),
        ("decorrelation", f"{bt['decorrelation']:.4f}", f"{rt['decorrelation']:.4f}", ""),
        (
            "SigReg (uncentered)",
            f"{bt['sigreg']:.4f} ({bt['sigreg_x_floor']:,.0f}× floor)",
            f"{rt['sigreg']:.4f} ({rt['sigreg_x_floor']:,.0f}× floor)",
            "",
        ),
        ("top principal direction's share of variance", f"{bt['top_pc_share']:.3f}", f"{rt['top_pc_share']:.3f}", ""),
        (
            "mean-vector ratio ‖mean‖ / mean ‖row‖",
            f"{bt['mean_vector_ratio']:.3f}",
            f"{rt['mean_vector_ratio']:.3f}",
            "",
        ),
        ("uniformity (t = 2)", f"{bt['uniformity']:.3f}", f"{rt['uniformity']:.3f}", ""),
        (
            "mean row norm (std)",
            f"{bt['row_norm_mean']:.3f} ({bt['row_norm_std']:.3f})",
            f"{rt['row_norm_mean']:.3f} ({rt['row_norm_std']:.3f})",
            "",
        ),
        ("tokens never seen in training", *both(lambda r: str(r["n_unseen"])), ""),
        (
            "mean norm: seen / unseen",
            *both(lambda r: f"{r['seen_norm_mean']:.3f} / {r['unseen_norm_mean']:.3f}"),
            "0.48 / 1.52",
        ),
        (
            "unseen / seen norm ratio",
            f"**{base['unseen_seen_norm_ratio']:.2f}×**",
            f"{reg['unseen_seen_norm_ratio']:.2f}×",
            "3.15×",
        ),
        (
            "logit test: unseen tokens' mean logit percentile (random tokens)",
            f"**{bl['unseen_percentile']:.3f}** ({bl['random_percentile']:.3f})",
            f"{rl['unseen_percentile']:.3f} ({rl['random_percentile']:.3f})",
            "below random",
        ),
        (
            "prompts where unseen logits rank below random",
            f"{bl['unseen_below_random_prompts']} / {len(bl['prompts'])}",
            f"{rl['unseen_below_random_prompts']} / {len(rl['prompts'])}",
            "",
        ),
        (
            "cos(mean unseen row, mean hidden state)",
            f"{bl['cos_unseen_mean_vs_hidden']:.3f}",
            f"{rl['cos_unseen_mean_vs_hidden']:.3f}",
            "opposed",
        ),
    ]


def heading_rows(base: dict, reg: dict) -> list[tuple[str, str, str, str]]:
    """The heading test of both checkpoints at the same held-out positions (``checkpoint_analysis`` reads the
    same text for both, and the tokenizers are checked to agree), each figure's difference tested by a paired
    Wilcoxon signed-rank test over the positions."""
    vocabulary = base["n_seen"] + base["n_unseen"]
    rows = []
    for key, label in HEADING.items():
        b, r = base["samples"][key], reg["samples"][key]
        p = wilcoxon(b, r).pvalue
        show = (lambda a: f"{float(np.median(a)):.0f}") if key == "target_rank" else (lambda a: f"{a.mean():.4f}")
        rows.append(
            (
                f"{label.format(vocabulary=vocabulary)} (Wilcoxon p, {len(b)} positions)",
                show(b),
                f"{show(r)} (p={p:.2g})" if p > 0 else f"{show(r)} (p < 1e-300)",
                "",
            )
        )
    return rows


def report(path: Path) -> dict:
    found, samples = checkpoint_analysis(path)
    return {**found, "samples": samples, "val_loss": read_log(path)[-1]["val_loss"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("baseline", type=Path, help="the baseline checkpoint (λ = 0)")
    parser.add_argument("regularized", type=Path, help="the regularized checkpoint")
    args = parser.parse_args()
    base_path, reg_path = args.baseline, args.regularized
    if load_tokenizer(base_path / TOKENIZER).get_vocab() != load_tokenizer(reg_path / TOKENIZER).get_vocab():
        raise SystemExit("the two checkpoints' tokenizers differ: their heading positions cannot be paired")
    base, reg = report(base_path), report(reg_path)
    print("| | baseline (λ = 0) | regularized (λ = {:g}) | reference study |".format(reg["reg_cos"]))
    print("|---|---|---|---|")
    for row in rows(base, reg) + heading_rows(base, reg):
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
