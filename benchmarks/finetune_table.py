"""After fine-tuning: which starting point gives the better retriever? One command, one table.

Every fine-tuned run under RUNS (`cone finetune --from START --out RUNS/START-seedS --seed S`, e.g. by
benchmarks/finetune_runs.sh) is evaluated by the eval harness on the dataset's test queries and STS-B test, plain
and whitened, beside the references (the raw LMs are the floor, MiniLM the ceiling). Per starting point: mean ± std
over its seeds. Each starting point against --against (default: the first by name), on the seeds both have (a
fine-tune's seed moves nDCG@10 more than most starts do): the eval's paired tests (nDCG@10: Fisher randomization
over the test queries; STS: paired bootstrap of Δρ) on each start's per-query nDCG@10 and pair cosines averaged
over those seeds, p adjusted over the table (Benjamini-Hochberg); and, with two seeds or more, the paired t-test
over seeds of nDCG@10, which asks about the starts rather than about these encoders.

--write-json FILE keeps every run's row (metrics, per-query nDCG@10, STS pair cosines: the models' outputs, no
data) with the command and commit that made them; --from-json FILE prints the same table from it in seconds (the
STS gold scores are read from the data dir, never committed). The table is always computed from those rows, so
both paths print the same figures.

Usage: python benchmarks/finetune_table.py RUNS [--against START] [--data-dir DIR] [--indexes DIR] [--write-json F]
       python benchmarks/finetune_table.py --from-json F [--against START] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np
from scipy.stats import false_discovery_control, ttest_rel

from cone.data.loaders import data_dir
from cone.encoders.finetune import LOG
from cone.eval.harness import load_eval_data, run_eval
from cone.eval.plan import EvalPlan
from cone.eval.results import EvalResult, Samples
from cone.eval.significance import compare_pairs
from cone.indexing.spec import IndexSpec
from cone.output import git_commit

RUN = re.compile(r"^(?P<start>[a-z][a-z_]*)-seed(?P<seed>\d+)$")
POSTPROCESS = ("none", "whiten")
REFERENCES = ("baseline", "regularized", "minilm")  # the floors and the ceiling
KEYS = ("ndcg_at_10", "stsb_spearman", "anisotropy", "effective_rank", "random_cos_std")
DIGITS = 7  # the per-query and per-pair values kept in the JSON (and used by the table in both paths)


def seed_runs(runs: Path) -> dict[str, dict[int, Path]]:
    """start -> seed -> its finished run (a folder with modules.json)."""
    found: dict[str, dict[int, Path]] = {}
    for folder in sorted(runs.iterdir()):
        if (match := RUN.match(folder.name)) and (folder / "modules.json").is_file():
            found.setdefault(match["start"], {})[int(match["seed"])] = folder
    return found


def _last_dev_spearman(folder: Path) -> float:
    """The fine-tune's STS-B dev ρ at its last step (finetune_log.jsonl): what picks runs, never the test sets."""
    return json.loads((folder / LOG).read_text().splitlines()[-1])["sts_dev_spearman"]


def _record(result: EvalResult, start: str | None, seed: int | None, folder: Path | None) -> dict:
    sts = result.samples.sts or {}
    return {
        "model": result.model,
        "start": start,
        "seed": seed,
        "sts_dev_spearman": None if folder is None else _last_dev_spearman(folder),
        "postprocess": result.postprocess,
        "metrics": {key: result.metrics[key] for key in KEYS},
        "ndcg": np.round(result.samples.ndcg, DIGITS).tolist(),
        "sts": {name: np.round(values, DIGITS).tolist() for name, values in sts.items()},
    }


def collect(runs: Path, root: Path, dataset: str, indexes: Path, references: tuple[str, ...]) -> list[dict]:
    """Every reference and every run evaluated, one record per (model, post-processing)."""
    starts = seed_runs(runs)
    where = {f"st:{f}": (start, seed, f) for start, seeds in starts.items() for seed, f in seeds.items()}
    data = load_eval_data(root, dataset)
    results = run_eval(data, EvalPlan((*references, *where), indexes, POSTPROCESS, progress=False))
    return [_record(r, *where.get(r.model, (None, None, None))) for r in results]


def _result(label: str, rows: list[dict]) -> EvalResult:
    """One result standing for several seeds: per-query nDCG@10 and per-pair STS cosines averaged."""
    sts = {name: np.mean([r["sts"][name] for r in rows], axis=0) for name in rows[0]["sts"]}
    samples = Samples(np.mean([r["ndcg"] for r in rows], axis=0), sts=sts or None)
    return EvalResult(IndexSpec(label, postprocess=rows[0]["postprocess"]), None, metrics={}, samples=samples)


def _summary(rows: list[dict]) -> dict:
    out = {}
    for key in KEYS:
        values = np.array([r["metrics"][key] for r in rows])
        out[key] = {"mean": float(values.mean()), "std": float(values.std(ddof=1)) if len(values) > 1 else 0.0}
    return out


def table(records: list[dict], against: str | None, sts_gold: dict[str, list[float]]) -> tuple[list[dict], list[dict]]:
    """The rows (references, then each start with its seeds) per post-processing, and each start against one on
    the seeds both have: the seed moves nDCG@10 far more than most starts do (a fine-tune's seed 0 against another
    start's seeds 0-2 would compare seeds, not starts)."""
    starts = sorted({r["start"] for r in records if r["start"]})
    against = against or (starts[0] if starts else None)
    if against not in starts or len(starts) < 2:
        raise SystemExit(f"need two starting points, one of them {against!r}; found {starts}")
    rows, chosen, shared = [], [], []
    for spec in POSTPROCESS:
        here = [r for r in records if r["postprocess"] == spec]
        references = [r for r in here if not r["start"]]
        rows += [{"model": r["model"], "postprocess": spec, "seeds": [], **_summary([r])} for r in references]
        groups = {s: {r["seed"]: r for r in here if r["start"] == s} for s in starts}
        for start, group in groups.items():
            runs = [group[seed] for seed in sorted(group)]
            row = {"model": f"{start}-ft", "postprocess": spec, "seeds": sorted(group), **_summary(runs)}
            rows.append(row | {"per_seed_ndcg": [r["metrics"]["ndcg_at_10"] for r in runs]})
        for start, group in groups.items():
            seeds = sorted(set(group) & set(groups[against]))
            if start == against or not seeds:
                continue
            pair = [_result(f"{name}-ft", [groups[name][seed] for seed in seeds]) for name in (against, start)]
            chosen.append(tuple(pair))
            shared.append(
                (seeds, [[groups[name][seed]["metrics"]["ndcg_at_10"] for seed in seeds] for name in (against, start)])
            )
    tests = [
        c.to_json() | {"seeds": seeds} for c, (seeds, _) in zip(compare_pairs(chosen, sts_gold), shared, strict=True)
    ]
    return rows, _with_seed_tests(tests, [values for _, values in shared])


def _with_seed_tests(tests: list[dict], per_seed: list[list[list[float]]]) -> list[dict]:
    """Beside the test over queries (these encoders), the paired t-test over seeds of nDCG@10 (the starts,
    whatever the seed), p adjusted over the comparisons that have one (Benjamini-Hochberg); None with one seed."""
    raw = {i: float(ttest_rel(b, a).pvalue) for i, (a, b) in enumerate(per_seed) if len(a) > 1}
    adjusted = dict(zip(raw, false_discovery_control(list(raw.values())), strict=True)) if raw else {}
    return [t | {"seed_p": raw.get(i), "seed_p_adjusted": adjusted.get(i)} for i, t in enumerate(tests)]


def print_markdown(rows: list[dict], comparisons: list[dict]) -> None:
    print("| model | post-processing | seeds | nDCG@10 | STS-B ρ | anisotropy | effective rank | random-pair cos std |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        several = len(row["seeds"]) > 1
        cells = [f"{row[k]['mean']:.4f} ± {row[k]['std']:.4f}" if several else f"{row[k]['mean']:.4f}" for k in KEYS]
        seeds = ",".join(map(str, row["seeds"])) or "-"
        print(f"| {row['model']} | {row['postprocess']} | {seeds} | " + " | ".join(cells) + " |")
    print(
        "\n| b vs a (seed-averaged over the seeds both have) | seeds | Δ nDCG@10 | p over queries (BH-adjusted) "
        "| p over seeds (BH-adjusted) | Δ STS-B ρ [95% interval] |"
    )
    print("|---|---|---|---|---|---|")
    for c in comparisons:
        sts = "; ".join(f"{d['delta']:+.4f} [{d['ci95'][0]:+.4f}, {d['ci95'][1]:+.4f}]" for d in c["sts"])
        over_seeds = "-" if c["seed_p"] is None else f"{c['seed_p']:.3g} ({c['seed_p_adjusted']:.3g})"
        print(
            f"| {c['b']} vs {c['a']} | {','.join(map(str, c['seeds']))} | {c['ndcg_delta']:+.4f} "
            f"| {c['ndcg_p']:.3g} ({c['ndcg_p_adjusted']:.3g}) | {over_seeds} | {sts} |"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=Path, nargs="?", help="folder of START-seedS fine-tuned runs")
    parser.add_argument("--from-json", type=Path, help="the rows a --write-json wrote, instead of RUNS")
    parser.add_argument("--against", help="the starting point every other is compared with (default: first by name)")
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--dataset", default="scifact", help="BEIR dataset under the data dir (default scifact)")
    parser.add_argument("--indexes", type=Path, default=Path("runs/finetune-indexes"))
    parser.add_argument(
        "--references", default=",".join(REFERENCES), help="comma list of models shown beside the runs (or '')"
    )
    parser.add_argument("--write-json", type=Path, help="keep every run's row here")
    parser.add_argument("--json", action="store_true", help="print the table and the tests as JSON")
    args = parser.parse_args(argv)
    if (args.runs is None) == (args.from_json is None):
        parser.error("give RUNS or --from-json FILE")
    root = data_dir(args.data_dir)
    if args.from_json:
        records = json.loads(args.from_json.read_text())["rows"]
    else:
        references = tuple(m for m in args.references.split(",") if m)
        records = collect(args.runs, root, args.dataset, args.indexes, references)
    if args.write_json:
        command = ["python", "benchmarks/finetune_table.py", *(sys.argv[1:] if argv is None else argv)]
        record = {"command": " ".join(map(str, command)), "commit": git_commit(), "rows": records}
        args.write_json.write_text(json.dumps(record) + "\n")
    gold = {name: pairs.scores for name, pairs in load_eval_data(root, args.dataset).sts.items()}
    rows, comparisons = table(records, args.against, gold)
    if args.json:
        print(json.dumps({"rows": rows, "comparisons": comparisons}, indent=2))
    else:
        print_markdown(rows, comparisons)


if __name__ == "__main__":
    main()
