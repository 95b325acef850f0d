"""docs/benchmarks.md's tables, printed from the committed benchmark records (benchmarks/record.py writes them).

Usage: python benchmarks/bench_tables.py TABLE [--records docs/benchmarks]
TABLE: one of the names --help lists. A table's numbers are the records' own, rounded for reading; the page
holds each printed table under a ``<!-- generated: … -->`` marker, and tests/test_benchmark_records.py holds them
equal, so a rerun benchmark changes the page only through this script.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from functools import partial
from pathlib import Path

from geometry_bench import largest_change  # this script's folder is on the path: the rows' own comparison
from record import cpu_words, print_from_records, read_record

from cone.output import markdown_table as table
from cone.output import thousands


def load_range(record: dict) -> str:
    return f"{record['load_1min_before']:.1f} → {record['load_1min_after']:.1f}"


def machine(record: dict) -> str:
    """The CPU a record ran on, as its section's **Where:** line names it."""
    return f"{record['cpu']} ({cpu_words(record)})"


def geometry(folder: Path) -> str:
    rows = []
    for name in ("geometry-1m", "geometry-1m-blas-default", "geometry-3x5000", "geometry-3x20000"):
        record = read_record(folder, name)
        found = record["result"]
        by_impl = {row["impl"].split(" ")[0]: row for row in found["rows"]}
        old, new = by_impl.get("old"), by_impl["new"]
        runs = ", ".join(f"{run['seconds']:.2f}" for run in new["runs"])
        rows.append(
            [
                f"{new['n']:,} × {new['d']:,}",
                str(found["blas_threads"] or "OpenBLAS's own"),
                f"{old['median_s']:.2f} s" if old else "not run",
                f"**{new['median_s']:.2f} s**" + (f" ({runs})" if len(new["runs"]) > 1 else ""),
                f"{old['median_s'] / new['median_s']:.1f}×" if old else "—",
                f"{largest_change(old, new):.0e}" if old else "—",
                f"{thousands(old['peak_rss_mb'])} MiB" if old else "—",
                f"{thousands(new['peak_rss_mb'])} MiB",
                load_range(record),
                f"`{name}.json`",
            ]
        )
    header = ["N × d", "BLAS threads", "old `measure()`", "new `measure()`", "old / new", "largest value change"]
    return table([*header, "old peak RSS", "new peak RSS", "load", "record"], rows)


def train_speed(folder: Path, record: str = "train-speed") -> str:
    found = read_record(folder, record)["result"]
    rows = [[row["variant"], thousands(row["tokens_per_s"]), f"{row['ratio']:.2f}×"] for row in found["rows"]]
    return table(["variant", "tokens/s", "vs plain fp32 loop"], rows)


def train_profile(folder: Path) -> str:
    """Each group's own time per step in the three variants (medians), the rate of the bf16 step's matrix
    products, this CPU's matrix-product peak in each precision, and the bound on the bf16 step."""
    found = read_record(folder, "train-profile")["result"]
    steps, peak = found["steps"], found["peak_gflops"]
    rows = []
    for group, bf16 in steps["bf16"]["groups"].items():
        times = [f"{1e3 * steps[name]['groups'][group]['seconds']:,.0f} ms" for name in steps]
        rows.append([group, *times, f"{bf16['gflops_per_s']:,.0f}" if (bf16["gflops_per_s"] or 0) >= 1 else "—"])
    rows.append(
        ["**whole step (wall, median)**", *(f"**{1e3 * step['step_s']:,.0f} ms**" for step in steps.values()), ""]
    )
    rows.append(["4,096³ matrix product, GFLOP/s (the peak)", "", f"{peak['fp32']:,.0f}", f"{peak['bf16']:,.0f}", ""])
    bound = found["fp32_step_s_with_matmuls_at_bf16_peak"]
    rows.append(["fp32 step with its matmuls at the bf16 peak (the bound)", "", f"{1e3 * bound:,.0f} ms", "", ""])
    rows.append(
        ["fp32 step ÷ this column's", "", f"{found['bound_vs_fp32']:.2f}× (bound)", f"{found['bf16_vs_fp32']:.2f}×", ""]
    )
    return table(["group of operators (own time per step)", *steps, "bf16 GFLOP/s"], rows)


def regularizer_cost(folder: Path) -> str:
    found = read_record(folder, "regularizer-cost")["result"]
    rows = [
        [name, f"{row['term_ms']:.1f} ms", f"{100 * row['term_share_of_step']:.2f}%", f"{row['step_ratio']:.3f}×"]
        for name, row in found["terms"].items()
    ]
    return table(["term", "term alone (fwd + bwd)", "share of a step", "step with term ÷ without"], rows)


def encoders(folder: Path) -> str:
    found = read_record(folder, "encoders")["result"]["encoders"]
    rows = [[name, f"{rate:.1f}"] for name, rate in found["docs_per_s"].items()]
    rows.append(["ratio cone minilm / sentence-transformers", f"**{found['ratio']:.3f}**"])
    return table(["path", "docs/s"], rows)


def precisions(counts: dict[str, int]) -> str:
    return " + ".join(f"{count} {kind}" for kind, count in sorted(counts.items(), key=lambda kv: -kv[1])) or "—"


def backends(folder: Path, record: str = "backends") -> str:
    found = read_record(folder, record)["result"]
    rows = []
    for row in found["rows"]:
        cosine = f"{row['min_cos_vs_fp32']:.5f}" if "min_cos_vs_fp32" in row else "—"
        matmuls = precisions(row["matmul_precisions"]) if row.get("matmul_precisions") else "—"
        rows.append([row["variant"], f"{row['docs_per_s']:.1f}", f"{row['ratio']:.2f}×", cosine, matmuls])
    rows += [[f"cone {tag}", "—", "—", "—", f"unavailable: {reason}"] for tag, reason in found["unavailable"].items()]
    return table(["variant", "docs/s", "÷ sentence-transformers torch", "min cosine to fp32", "matmuls run in"], rows)


def ann(folder: Path) -> str:
    rows_in = read_record(folder, "ann-1m")["result"]["ann"]["rows"]
    flat = rows_in[0]["qps"]
    rows = [
        [
            row["factory"],
            f"{row['build_s']:.1f} s",
            thousands(row["qps"]),
            f"{row['qps'] / flat:.1f}×",
            f"{row['recall_at_10']:.3f}",
        ]
        for row in rows_in
    ]
    return table(["factory (search parameter)", "build", "queries/s", "vs Flat", "recall@10"], rows)


def load_runs(folder: Path) -> str:
    rows = []
    for name in ("load-minilm", "load-baseline", "load-baseline-reloads"):
        found = read_record(folder, name)["result"]
        for run in found["runs"]:
            single, loaded, reloads = run["one_client"], run["loaded"], run["reloads"]
            batching = "none (`--max-batch 1`)" if run["batching"] == "none" else f"window {run['batching']} ms"
            if reloads["ok"] or reloads["failed"]:
                batching += f"; {reloads['ok']} reloads, {reloads['failed']} failed"
            rows.append(
                [
                    found["model"],
                    batching,
                    f"{found['in_process_ms']:.2f} ms",
                    f"{single['p50_ms']:.2f} / {single['p99_ms']:.2f} ms ({run['overhead_p50_ratio']:.2f})",
                    f"{thousands(loaded['requests'])}, **{loaded['errors']}**",
                    f"{loaded['p50_ms']:.1f} / {loaded['p99_ms']:.1f} ms",
                    f"{loaded['rps']:.1f} req/s",
                    f"**{run['load_rps_vs_in_process']:.2f}×**",
                ]
            )
    header = ["model", "batching", "in-process (median)", "1 client p50 / p99 (÷ in-process)"]
    return table([*header, "16 clients × 30 s: requests, errors", "p50 / p99", "throughput", "÷ in-process loop"], rows)


def load_limit(folder: Path) -> str:
    """Each model's limit (the better of its two in-process ways) and the service under each client count, with
    its batches one at a time (the default) and two at once (--parallel-batches 2)."""
    rows = []
    for name in (
        "load-limit-minilm",
        "load-limit-minilm-parallel2",
        "load-limit-baseline",
        "load-limit-baseline-parallel2",
    ):
        record = read_record(folder, name)
        found = record["result"]
        limit = found["limit"]
        for run in found["runs"]:
            loaded = run["loaded"]
            rows.append(
                [
                    f"{found['model']} (`{name}.json`)",
                    f"{limit['qps']:.1f} q/s ({limit['one_call']['qps']:.1f} / {limit['per_core']['qps']:.1f})",
                    str(found["parallel_batches"]),
                    str(run["connections"]),
                    f"{thousands(loaded['requests'])}, **{loaded['errors']}**",
                    f"{loaded['p50_ms']:.1f} / {loaded['p99_ms']:.1f} ms",
                    f"{loaded['rps']:.1f} q/s",
                    f"**{run['ratio_to_limit']:.2f}×**",
                    f"{limit['queries_per_cpu_s']:.1f} / {run['queries_per_cpu_s']:.1f}",
                    f"**{run['cpu_ratio_to_limit']:.2f}×**",
                    load_range(record),
                ]
            )
    header = ["model", "limit (one call / one thread per core)", "batches at once", "clients", "requests, errors"]
    header += ["p50 / p99", "service", "÷ limit", "queries per CPU-second: limit / service", "÷ limit's", "load"]
    return table(header, rows)


def query_batch(folder: Path) -> str:
    """What a query costs to encode by the encode call's batch size, random gathered batches, each model."""
    rows = []
    for name in ("query-batch-baseline", "query-batch-minilm"):
        found = read_record(folder, name)["result"]
        for row in found["rows"]:
            rows.append(
                [
                    f"{found['model']} (`{name}.json`)",
                    str(row["threads"]),
                    str(row["batch_size"]),
                    f"{row['wall_ms_per_query']:.2f} ms",
                    f"{row['cpu_ms_per_query']:.2f} ms",
                ]
            )
    header = ["model", "torch threads", "batch size", "wall a query", "CPU a query"]
    return table(header, rows)


def pg_service(folder: Path) -> str:
    """Each index of the same corpus under the service, beside FAISS Flat, and its store alone (issue 50)."""
    record = read_record(folder, "pg-service")
    found, rows = record["result"], []
    for factory, index in found["indexes"].items():
        runs, alone = [run["loaded"] for run in index["runs"]], index["store_alone"]
        rows.append(
            [
                f"`{factory}`",
                f"{index['recall_at_10_vs_flat']:.3f}",
                f"{alone['k']['qps']:.0f} / {alone['service']['qps']:.0f} q/s",
                " + ".join(thousands(run["requests"]) for run in runs) + f", **{index['errors']}**",
                ", ".join(f"{run['p50_ms']:.0f} / {run['p99_ms']:.0f} ms" for run in runs),
                f"{index['rps']:.1f} req/s",
                f"**{index['ratio_to_flat']:.2f}×** ({', '.join(f'{r:.2f}' for r in index['round_ratios_to_flat'])})",
                f"{index['queries_per_cpu_s']:.1f}",
                load_range(record),
            ]
        )
    clients = f"{found['connections']} clients × {found['seconds']} s × {found['rounds']}: requests, errors"
    header = ["index", "recall@10 vs Flat", f"store alone: depth {found['k']} / the service's", clients]
    return table(
        [*header, "p50 / p99 each round", "service", "÷ Flat (each round)", "queries per CPU-second", "load"], rows
    )


def reload_soak(folder: Path) -> str:
    found = read_record(folder, "reload-soak")["result"]
    at = found["at"]
    rows = [
        [
            str(found["reloads"]),
            " / ".join(f"{thousands(at[k]['rss_mb'], 1)} MiB" for k in ("0", "10", "200") if k in at),
            " / ".join(str(at[k]["fds"]) for k in ("0", "10", "200") if k in at),
            f"{thousands(found['requests'])}, **{found['errors']}**",
        ]
    ]
    return table(["reloads", "RSS at reload 0 / 10 / 200", "descriptors at 0 / 10 / 200", "requests, errors"], rows)


def reload_storm(folder: Path) -> str:
    """16 clients without reloads, then with 2 reload requests a second, in one server: each record a row pair."""
    rows = []
    for name, what in (("reload-storm", "unchanged folder"), ("reload-storm-touch", "an index reopened each reload")):
        found = read_record(folder, name)["result"]
        for phase in ("quiet", "storm"):
            r = found[phase]
            storm = phase == "storm"
            reloads = f"{r['reloads']}, {r['reload_errors']} failed" if storm else "none"
            latency = f"{r['reload_p50_ms']:.0f} / {r['reload_max_ms']:.0f} ms" if storm else "-"
            rows.append(
                [
                    what if storm else f"{what}: no reloads",
                    f"{thousands(r['requests'])}, **{r['errors']}**",
                    f"{r['p50_ms']:.1f} / {r['p99_ms']:.1f} ms",
                    f"**{found['p99_ratio']:.2f}×**" if storm else "1",
                    reloads,
                    latency,
                    f"{r['healthz_max_ms']:.0f} ms ({r['healthz_checks']} checks)",
                ]
            )
    header = ["run", "searches, errors", "p50 / p99", "p99 / no-reload p99", "reload requests", "reload p50 / max"]
    return table([*header, "slowest /healthz"], rows)


def sweep_cost(folder: Path) -> str:
    found = read_record(folder, "sweep-cost")["result"]
    rows = [
        ["one spec × Flat", f"{found['one_spec_seconds']:.1f}", str(found["one_spec_rows"])],
        [
            f"{found['specs']} specs × {found['factories']} factories",
            f"{found['sweep_seconds']:.1f}",
            str(found["sweep_rows"]),
        ],
        ["**sweep / one spec**", f"**{found['ratio']:.2f}×** (bar: under 2×)", ""],
    ]
    return table(["run", "seconds", "rows"], rows)


def ray(folder: Path) -> str:
    rows = []
    for name in ("ray-baseline", "ray-minilm", "ray-stream", "ray-stream-epyc"):
        record = read_record(folder, name)
        found = record["result"]
        diff = found["max_abs_vector_difference"]
        rows.append(
            [
                f"{found['model']}, {thousands(found['docs'])}, {found['build']} (`{name}.json`)",
                f"{machine(record)}, load {load_range(record)}",
                f"{found['docs_per_s']['local']:.1f} docs/s",
                f"{found['docs_per_s']['ray']:.1f} docs/s",
                f"**{found['ray_vs_local']:.2f}×**",
                f"{found['cluster_start_s']:.1f} s",
                "identical" if diff == 0 else f"max diff {diff:.1e}",
                f"{found['queries_with_the_same_top10']} of {found['queries']} queries",
            ]
        )
    header = ["model, documents, build", "CPU, load", "local", "Ray", "Ray / local", "cluster start", "vectors"]
    return table([*header, "same top 10"], rows)


def stream(folder: Path) -> str:
    found = read_record(folder, "stream-1m")["result"]
    rows = []
    for name, label in (("in_memory", "in memory"), ("streamed", "`--stream`")):
        build, serve = found[name], found[name]["serve"]
        rows.append(
            [
                label,
                f"{build['seconds']:.0f} s",
                f"{thousands(build['peak_rss_mib'])} MiB",
                f"{thousands(build['peak_anonymous_mib'])} MiB",
                f"{thousands(build['peak_file_backed_mib'])} MiB",
                f"{thousands(serve['rss_mib'])} MiB ({thousands(serve['anonymous_mib'])})",
            ]
        )
    ratios = found["ratios"]
    rows.append(
        [
            "streamed / in memory",
            "",
            f"{ratios['build_peak_rss']:.3f}×",
            f"**{ratios['build_peak_anonymous']:.3f}×**",
            "",
            f"{ratios['serve_rss']:.3f}× ({ratios['serve_anonymous']:.3f}×)",
        ]
    )
    limited = found["streamed_under_limit"]
    if "skipped" in limited:
        rows.append(["`--stream` under a memory limit", f"skipped: {limited['skipped']}", "", "", "", ""])
    else:
        outcome = "completed" if limited["completed"] else "**failed**"
        label = f"`--stream` in a memory cgroup of {thousands(limited['limit_mib'])} MiB"
        rows.append([label, f"{limited['seconds']:.0f} s, {outcome}", "", "", "", ""])
    header = ["", "build", "peak RSS", "of it: anonymous", "of it: mapped index files", "`cone serve` RSS (anonymous)"]
    return table(header, rows)


def demo(folder: Path) -> str:
    found = read_record(folder, "demo-time")["result"]
    first, report = (
        f"{found[key]:.1f} s" if found[key] is not None else "not reached" for key in ("first_answer_s", "report_s")
    )
    row = [first, report, str(found["demo_exit"])]
    return table(
        ["first BM25 answer", "every index built, report written", "`cone demo`'s exit after the Ctrl-C"], [row]
    )


def tests(folder: Path) -> str:
    """Each run of the suite (the AMX Xeon's, then the AMD EPYC's: before and after xdist's scheduling was mended,
    then with fewer fresh interpreters): pytest's own summary line (its counts and seconds), the record's wall time
    and its CPU."""
    rows = []
    for name in (
        "tests",
        "tests-epyc",
        "tests-epyc-loadscope",
        "tests-epyc-forks",
        "tests-epyc-issue49",
        "tests-epyc-stop54",
        "tests-epyc-stop55",
    ):
        record = read_record(folder, name)
        summary = next((line for line in reversed(record["result"]["stdout_tail"]) if " passed" in line), None)
        if summary is None:
            raise KeyError("pytest's summary line")
        counts, _, seconds = summary.strip("= ").rpartition(" in ")
        command = f"`{record['command']}` at {record['commit']}"
        rows.append([command, machine(record), counts, seconds.split(" ")[0], f"{record['wall_s']:.0f} s"])
    return table(["command", "CPU", "result", "pytest's own time", "wall, with the install"], rows)


TABLES: dict[str, Callable[[Path], str]] = {
    "geometry": geometry,
    "train-speed": train_speed,
    "train-speed-epyc": partial(train_speed, record="train-speed-epyc"),
    "train-profile": train_profile,
    "regularizer-cost": regularizer_cost,
    "encoders": encoders,
    "backends": backends,
    "backends-avx512bf16": partial(backends, record="backends-avx512bf16"),
    "ann": ann,
    "load": load_runs,
    "load-limit": load_limit,
    "query-batch": query_batch,
    "pg-service": pg_service,
    "reload-soak": reload_soak,
    "reload-storm": reload_storm,
    "sweep-cost": sweep_cost,
    "ray": ray,
    "stream": stream,
    "demo": demo,
    "tests": tests,
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("table", choices=sorted(TABLES), help="which table")
    print_from_records(parser, lambda args: TABLES[args.table](args.records), argv)


if __name__ == "__main__":
    main()
