"""The benchmark scripts behind docs/benchmarks.md still import what they use (they run by hand, not in CI), and
one of them, the sweep's cost, runs end to end on a tiny dataset."""

from __future__ import annotations

import argparse
import json
import os
import runpy
from pathlib import Path

import numpy as np
import pytest

from cone.eval.metrics import overlap_at_k

SCRIPTS = sorted((Path(__file__).resolve().parents[1] / "benchmarks").glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
def test_benchmark_script_imports(script, monkeypatch):
    monkeypatch.syspath_prepend(str(script.parent))  # as `python benchmarks/NAME.py` puts its own folder first
    namespace = runpy.run_path(str(script), run_name="benchmark_import_check")  # defines, does not run main()
    assert callable(namespace.get("main"))


def test_sweep_cost_runs_both_evals_and_counts_their_rows(shared_tiny_beir, tmp_path, capsys):
    sweep_cost = runpy.run_path(str(SCRIPTS[0].parent / "sweep_cost.py"), run_name="benchmark_under_test")
    argv = ["--model", "baseline", "--dataset", "tiny", "--data-dir", str(shared_tiny_beir)]
    argv += ["--postprocess", "none,center", "--index-factory", "Flat,SQ8", "--out", str(tmp_path / "sweep")]
    sweep_cost["main"]([*argv, "--json"])
    found = json.loads(capsys.readouterr().out)
    assert (found["one_spec_rows"], found["sweep_rows"]) == (1, 4)  # 1 x Flat; 2 specs x 2 factories
    assert found["sweep_seconds"] > 0 and found["ratio"] > 0
    report = json.loads((tmp_path / "sweep" / "report.json").read_text())
    rows = [(r["postprocess"], r["factory"]) for r in report["results"]]
    assert rows == [("none", "Flat"), ("none", "SQ8"), ("center", "Flat"), ("center", "SQ8")]
    assert report["command"].startswith("cone eval --models baseline --dataset tiny")


def test_pq_noise_finds_the_same_index_on_a_rebuild_and_counts_what_noise_moves():
    pq_top10 = runpy.run_path(str(SCRIPTS[0].parent / "pq_noise.py"), run_name="benchmark_under_test")["pq_top10"]
    vectors = np.random.default_rng(0).normal(size=(600, 64)).astype(np.float32)
    first = pq_top10(vectors, "none", queries=50)
    assert overlap_at_k(pq_top10(vectors, "none", queries=50), first) == 1.0
    moved = pq_top10(vectors + np.float32(0.05) * vectors[::-1], "none", queries=50)
    assert overlap_at_k(moved, first) < 1.0


def test_the_load_limit_is_the_better_of_its_two_ways_and_cpu_seconds_are_counted(
    shared_tiny_beir, tiny_checkpoints, tmp_path
):
    from tiny import build_tiny_indexes

    build_tiny_indexes(tmp_path, shared_tiny_beir, tiny_checkpoints, [("baseline", "none")])
    bench = runpy.run_path(str(SCRIPTS[0].parent / "load_bench.py"), run_name="benchmark_under_test")
    queries = [f"protein {word} cell" for word in ("level", "risk", "gene", "study", "tumor", "dose")]
    limit = bench["limit_rate"](tmp_path, tiny_checkpoints, "baseline", queries, 1)
    ways = (limit["one_call"], limit["per_core"])
    assert limit["qps"] == max(way["qps"] for way in ways) and min(way["qps"] for way in ways) > 0
    assert limit["queries_per_cpu_s"] == max(way["queries_per_cpu_s"] for way in ways)
    assert (limit["batch_size"], limit["runtime"]) == (64, "torch")
    before = bench["process_cpu_s"](os.getpid())
    sum(i * i for i in range(2_000_000))  # CPU work of this process
    assert bench["process_cpu_s"](os.getpid()) > before
    assert bench["connection_counts"]("16,64") == [16, 64]
    with pytest.raises(argparse.ArgumentTypeError):
        bench["connection_counts"]("16,0")
