"""After fine-tuning: does a regularized starting point give a better retriever? One command, one table.

Every fine-tuned run under RUNS (`cone finetune --from START --out RUNS/START-seedS --seed S`) is evaluated by the
eval harness on SciFact test and STS-B test, plain and whitened, beside the floors (the raw LMs) and the ceiling
(MiniLM). Per starting point: mean ± std over its seeds. Between the two starting points: the eval's paired tests
(nDCG@10: Fisher randomization over the test queries; STS: paired bootstrap of Δρ) on each start's per-query
nDCG@10 and pair cosines averaged over its seeds, p adjusted over the table (Benjamini-Hochberg).

Usage: python benchmarks/finetune_table.py RUNS [--data-dir DIR] [--indexes DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np

from cone.data.loaders import data_dir
from cone.eval.harness import load_eval_data, run_eval
from cone.eval.plan import EvalPlan
from cone.eval.results import EvalResult, Samples
from cone.eval.significance import compare_pairs

RUN = re.compile(r"^(?P<start>[a-z]+)-seed(?P<seed>\d+)$")
POSTPROCESS = ("none", "whiten")
REFERENCES = ("baseline", "regularized", "minilm")  # the floors and the ceiling


def seed_runs(runs: Path) -> dict[str, list[Path]]:
    """start -> its finished runs (a folder with modules.json), by seed."""
    found: dict[str, list[Path]] = {}
    for folder in sorted(runs.iterdir()):
        if (match := RUN.match(folder.name)) and (folder / "modules.json").is_file():
            found.setdefault(match["start"], []).append(folder)
    return found


def averaged(rows: list[EvalResult], label: str) -> EvalResult:
    """One result standing for several seeds: per-query nDCG@10 and per-pair STS cosines averaged."""
    sts = {name: np.mean([r.samples.sts[name] for r in rows], axis=0) for name in rows[0].samples.sts or {}}
    samples = Samples(np.mean([r.samples.ndcg for r in rows], axis=0), sts=sts or None)
    return EvalResult(label, rows[0].postprocess, None, metrics={}, samples=samples)


def summarize(rows: list[EvalResult]) -> dict:
    out = {}
    for key in ("ndcg_at_10", "stsb_spearman", "anisotropy", "effective_rank", "random_cos_std"):
        values = np.array([r.metrics[key] for r in rows])
        out[key] = {"mean": float(values.mean()), "std": float(values.std(ddof=1)) if len(values) > 1 else 0.0}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=Path)
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--indexes", type=Path, default=Path("runs/finetune-indexes"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    starts = seed_runs(args.runs)
    if len(starts) != 2 or min(len(v) for v in starts.values()) < 2:
        raise SystemExit(f"need two starting points with at least 2 seeds each under {args.runs}")
    data = load_eval_data(data_dir(args.data_dir), "scifact")
    models = [*REFERENCES, *(f"st:{run}" for runs in starts.values() for run in runs)]
    results = run_eval(data, EvalPlan(tuple(models), args.indexes, tuple(POSTPROCESS), progress=False))
    table, groups = [], {}
    for spec in POSTPROCESS:
        for name in REFERENCES:
            row = next(r for r in results if r.model == name and r.postprocess == spec)
            table.append({"model": name, "postprocess": spec, "seeds": 1, **summarize([row])})
        for start, runs in starts.items():
            rows = [r for r in results if r.postprocess == spec and r.model in {f"st:{run}" for run in runs}]
            groups[(start, spec)] = rows
            table.append({"model": f"{start}-ft", "postprocess": spec, "seeds": len(rows), **summarize(rows)})
            table[-1]["per_seed_ndcg"] = [r.metrics["ndcg_at_10"] for r in rows]
    first, second = sorted(starts)  # baseline, regularized
    chosen = [
        # the model's name only: a result's label adds its post-processing itself (not "+whiten+whiten")
        (averaged(groups[(first, spec)], f"{first}-ft"), averaged(groups[(second, spec)], f"{second}-ft"))
        for spec in POSTPROCESS
    ]
    comparisons = compare_pairs(chosen, {name: pairs.scores for name, pairs in data.sts.items()})
    if args.json:
        print(json.dumps({"rows": table, "comparisons": [c.to_json() for c in comparisons]}, indent=2))
        return
    print("| model | post-processing | seeds | nDCG@10 | STS-B ρ | anisotropy | effective rank | random-pair cos std |")
    print("|---|---|---|---|---|---|---|---|")
    for row in table:
        keys = ("ndcg_at_10", "stsb_spearman", "anisotropy", "effective_rank", "random_cos_std")
        cells = [
            f"{row[k]['mean']:.4f} ± {row[k]['std']:.4f}" if row["seeds"] > 1 else f"{row[k]['mean']:.4f}" for k in keys
        ]
        print(f"| {row['model']} | {row['postprocess']} | {row['seeds']} | " + " | ".join(cells) + " |")
    print("\n| b vs a (seed-averaged) | Δ nDCG@10 | p (BH-adjusted) | Δ STS-B ρ [95% interval] |")
    print("|---|---|---|---|")
    for c in comparisons:
        sts = "; ".join(f"{d.delta:+.4f} [{d.ci95[0]:+.4f}, {d.ci95[1]:+.4f}]" for d in c.sts)
        print(f"| {c.b} vs {c.a} | {c.ndcg_delta:+.4f} | {c.ndcg_p:.3g} ({c.ndcg_p_adjusted:.3g}) | {sts} |")


if __name__ == "__main__":
    main()
