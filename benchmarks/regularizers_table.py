"""The regularizer lineage head to head: every regularizer's runs, mean ± std over seeds, and each against λ = 0 and
against reg_cos, paired by seed.

RUNS holds one `cone train` folder per run, named NAME-seedS (benchmarks/regularizer_runs.sh makes them; NAME is
`none` for λ = 0, else the regularizer). For each finished run: the last line of its train_log.jsonl (validation loss
and the table's instruments at the end) and `cone geometry checkpoint`'s report (seen/unseen norms, the logit test,
the heading test on held-out text). Runs with the same seed saw the same batches in the same order, so a
difference is tested with the paired t-test over seeds (scipy's ttest_rel; with 3 seeds it has 2 degrees of freedom,
so only large, consistent differences reach p < 0.05), p adjusted over the whole table (Benjamini-Hochberg).

--write-json FILE keeps the per-run rows (and each run's logged curves) with the command and commit that made them;
--from-json FILE regenerates the table and the figures from that file in seconds, without the checkpoints.

Usage: python benchmarks/regularizers_table.py RUNS [--data-dir DIR] [--write-json F] [--figures DIR] [--json]
       python benchmarks/regularizers_table.py --from-json F [--figures DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np
from scipy.stats import false_discovery_control, ttest_rel

from cone.models.analysis import checkpoint_report
from cone.models.checkpoint import read_config, read_log
from cone.models.train import format_regularizers
from cone.output import git_commit

RUN = re.compile(r"^(?P<name>[a-z_]+)-seed(?P<seed>\d+)$")
# (key, label, lower is better?) of the table's columns: the log's final line, then the checkpoint report's.
METRICS = (
    ("val_loss", "val loss", True),
    ("anisotropy", "anisotropy", True),
    ("effective_rank", "effective rank", False),
    ("decorrelation", "decorrelation", True),
    ("top_pc_share", "top-PC share", True),
    ("uniformity", "uniformity", True),
    ("sigreg", "SigReg", True),
    ("unseen_seen_norm_ratio", "unseen/seen norm", True),
    ("logit_unseen_percentile", "logit test: unseen pct", None),
    ("heading_target_minus_median_cos", "heading: target − median cos", False),
)
CURVES = ("tokens", "val_loss", "anisotropy", "effective_rank", "decorrelation", "sigreg", "top_pc_share", "uniformity")
BASELINES = ("none", "reg_cos")


def run_row(folder: Path, data_dir: Path | None) -> dict | None:
    """One finished run's row, or None for a run still training (or never started)."""
    match = RUN.match(folder.name)
    if not (match and folder.is_dir() and (log := read_log(folder))):
        return None
    config = read_config(folder)
    if log[-1]["tokens"] < config["train"]["tokens"]:
        return None
    report = checkpoint_report(folder, data_dir)
    final = log[-1]
    return {
        "name": match["name"],
        "seed": int(match["seed"]),
        "reg": format_regularizers(config["train"]),
        "tokens": final["tokens"],
        **{key: final[key] for key in CURVES[1:] if key in final},
        "unseen_seen_norm_ratio": report["unseen_seen_norm_ratio"],
        "logit_unseen_percentile": (report["logit_test"] or {}).get("unseen_percentile"),
        "heading_target_minus_median_cos": report["heading"].get("target_minus_median_cos"),
        "curve": {key: [line.get(key) for line in log] for key in CURVES},
    }


def collect(runs: Path, data_dir: Path | None) -> list[dict]:
    return [row for folder in sorted(runs.iterdir()) if (row := run_row(folder, data_dir))]


def grouped(rows: list[dict]) -> dict[str, dict[int, dict]]:
    out: dict[str, dict[int, dict]] = {}
    for row in rows:
        out.setdefault(row["name"], {})[row["seed"]] = row
    return out


def summary(rows: list[dict]) -> dict:
    """Per name: its --reg spelling, seeds, and mean ± std of every metric."""
    table = {}
    for name, seeds in grouped(rows).items():
        cells = {}
        for key, _, _ in METRICS:
            values = np.array([r[key] for r in seeds.values() if r.get(key) is not None], dtype=float)
            if values.size:
                cells[key] = {
                    "mean": float(values.mean()),
                    "std": float(values.std(ddof=1)) if values.size > 1 else None,
                }
        table[name] = {"reg": next(iter(seeds.values()))["reg"], "seeds": sorted(seeds), **cells}
    return table


def comparisons(rows: list[dict]) -> list[dict]:
    """Each name against each baseline, metric by metric, paired by seed; p adjusted over the list."""
    groups = grouped(rows)
    found = []
    for base in BASELINES:
        for name in groups:
            if name in (base, "none") or base not in groups:  # λ = 0 vs reg_cos is reg_cos vs λ = 0, once
                continue
            seeds = sorted(set(groups[name]) & set(groups[base]))
            if len(seeds) < 2:
                continue
            for key, _, _ in METRICS:
                a = [groups[base][s].get(key) for s in seeds]
                b = [groups[name][s].get(key) for s in seeds]
                if None in a or None in b:
                    continue
                test = ttest_rel(b, a)
                delta = float(np.mean(b) - np.mean(a))
                found.append(
                    {"name": name, "vs": base, "metric": key, "seeds": seeds, "delta": delta, "p": test.pvalue}
                )
    raw = [c["p"] if np.isfinite(c["p"]) else 1.0 for c in found]
    for c, adjusted in zip(found, false_discovery_control(raw) if raw else [], strict=True):
        c["p"] = float(c["p"]) if np.isfinite(c["p"]) else None  # identical values over seeds: no test
        c["p_adjusted"] = float(adjusted)
        c["significant"] = bool(adjusted < 0.05)
    return found


def _cell(cell: dict | None) -> str:
    if cell is None:
        return "—"
    mean, std = cell["mean"], cell["std"]
    digits = 4 if abs(mean) < 10 else 1
    return f"{mean:.{digits}f}" + (f" ± {std:.{digits}f}" if std is not None else "")


def print_markdown(table: dict, tests: list[dict]) -> None:
    print("| regularizer | seeds | " + " | ".join(text for _, text, _ in METRICS) + " |")
    print("|---|---|" + "---|" * len(METRICS))
    for _name, row in table.items():
        cells = " | ".join(_cell(row.get(key)) for key, _, _ in METRICS)
        print(f"| {row['reg']} | {len(row['seeds'])} | {cells} |")
    if not tests:
        print("\n(no paired test: each regularizer needs at least 2 seeds shared with its baseline)")
        return
    print("\n| regularizer | vs | metric | Δ mean | p (paired t over seeds) | p adjusted (BH) | significant |")
    print("|---|---|---|---|---|---|---|")
    for c in tests:
        p = "—" if c["p"] is None else f"{c['p']:.2g}"
        mark = "**yes**" if c["significant"] else "no"
        vs = table[c["vs"]]["reg"]
        name = table[c["name"]]["reg"]
        print(f"| {name} | {vs} | {c['metric']} | {c['delta']:+.4f} | {p} | {c['p_adjusted']:.2g} | {mark} |")


def draw_figures(rows: list[dict], out: Path) -> list[Path]:
    """Each instrument against training tokens (mean over seeds per regularizer), and the tables' cone map:
    anisotropy against validation loss, one point per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    groups = grouped(rows)
    colors = {name: plt.cm.tab10(i % 10) for i, name in enumerate(groups)}
    keys = CURVES[1:]
    fig, axes = plt.subplots(2, 4, figsize=(17, 7.5))
    for ax, key in zip(axes.flat, keys, strict=False):
        for name, seeds in groups.items():
            curves = [r["curve"] for r in seeds.values()]
            length = min(len(c["tokens"]) for c in curves)
            mean = np.mean([c[key][:length] for c in curves], axis=0)
            ax.plot(np.array(curves[0]["tokens"][:length]) / 1e6, mean, color=colors[name], label=name)
        ax.set_title(key)
        ax.set_xlabel("training tokens (M)")
        if key == "anisotropy":
            ax.set_yscale("log")
    axes.flat[-1].axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    axes.flat[-1].legend(handles, [groups[n][next(iter(groups[n]))]["reg"] for n in labels], loc="center")
    fig.suptitle("The embedding table during training, per regularizer (mean over seeds)")
    fig.tight_layout()
    curves_png = out / "instruments-vs-tokens.png"
    fig.savefig(curves_png, dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 5.5))
    markers = "osD^v<>ph*"
    for i, (name, seeds) in enumerate(groups.items()):
        x = [r["anisotropy"] for r in seeds.values()]
        y = [r["val_loss"] for r in seeds.values()]
        ax.scatter(
            x, y, color=colors[name], marker=markers[i % len(markers)], s=60, label=seeds[next(iter(seeds))]["reg"]
        )
    ax.set_xscale("log")
    ax.set_xlabel("table anisotropy (mean pairwise cosine, log)")
    ax.set_ylabel("validation loss")
    ax.set_title("Cone map of the tables: less cone is left, less loss is down (one point per seed)")
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    map_png = out / "cone-map.png"
    fig.savefig(map_png, dpi=110)
    plt.close(fig)
    return [curves_png, map_png]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=Path, nargs="?")
    parser.add_argument("--from-json", type=Path, help="the per-run rows a --write-json wrote, instead of RUNS")
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="datasets folder (held-out text of the heading test)"
    )
    parser.add_argument("--write-json", type=Path, help="keep the per-run rows here")
    parser.add_argument("--figures", type=Path, help="draw the figures into this folder")
    parser.add_argument("--json", action="store_true", help="print the table and the tests as JSON")
    args = parser.parse_args()
    if (args.runs is None) == (args.from_json is None):
        parser.error("give RUNS or --from-json FILE")
    rows = json.loads(args.from_json.read_text())["runs"] if args.from_json else collect(args.runs, args.data_dir)
    if not rows:
        parser.error(f"no finished run named NAME-seedS under {args.runs or args.from_json}")
    if args.write_json:
        record = {"command": " ".join(["python", *sys.argv]), "commit": git_commit(), "runs": rows}
        args.write_json.write_text(json.dumps(record, indent=1) + "\n")
    table, tests = summary(rows), comparisons(rows)
    if args.figures:
        for path in draw_figures(rows, args.figures):
            print(f"wrote {path}", file=sys.stderr)
    if args.json:
        print(json.dumps({"table": table, "tests": tests}, indent=1))
    else:
        print_markdown(table, tests)


if __name__ == "__main__":
    main()
