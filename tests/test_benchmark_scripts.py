"""The benchmark scripts behind docs/benchmarks.md run by hand, not in CI: each one's `--help` still works, every
command the pages document and every record holds still parses with the script as it is now (an option renamed or
dropped fails here, not on the next person's machine), and some of them run end to end on a tiny dataset."""

from __future__ import annotations

import argparse
import json
import os
import re
import runpy
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cone.eval.metrics import overlap_at_k

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "benchmarks").glob("*.py"))
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs").glob("*/*.md"))]
RECORDS = sorted((ROOT / "docs" / "benchmarks").glob("*.json"))


def documented_commands() -> list[list[str]]:
    """Each command line of the pages' shell blocks that names a benchmark script, and each record's command."""
    lines = [
        line
        for page in PAGES
        for block in re.findall(r"```(?:sh|bash)\n(.*?)```", page.read_text(), re.S)
        for line in block.replace("\\\n", " ").splitlines()
    ]
    lines += [json.loads(record.read_text())["command"] for record in RECORDS]
    return [shlex.split(line, comments=True) for line in lines if "benchmarks/" in line]


def script_calls(argv: list[str]) -> list[tuple[str, list[str]]]:
    """The benchmark scripts a command line runs, each with its arguments: record.py's, then the command after its
    `--` in turn."""
    for i, word in enumerate(argv):
        if word.startswith("benchmarks/"):
            args = argv[i + 1 :]
            inner = script_calls(args[args.index("--") + 1 :]) if word.endswith("record.py") else []
            return [(word, args), *inner]
    return []


CALLS = sorted({(script, tuple(args)) for argv in documented_commands() for script, args in script_calls(argv)})


@pytest.fixture(autouse=True)
def _scripts_folder_on_path(monkeypatch):
    """As `python benchmarks/NAME.py` puts its own folder first: the scripts import record.py, their runner."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))


class Parsed(Exception):
    """Raised where a benchmark would start its work, once its command line has parsed."""


def run_main(script: Path, argv: list[str], monkeypatch) -> None:
    """The script's main() on ``argv``, as `python benchmarks/NAME.py ARGV` would call it."""
    monkeypatch.setattr(sys, "argv", [str(script), *argv])
    runpy.run_path(str(script), run_name="benchmark_under_test")["main"]()


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
def test_benchmark_script_explains_itself(script, monkeypatch, capsys):
    with pytest.raises(SystemExit) as done:
        run_main(script, ["--help"], monkeypatch)
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: {script.name}")


CALL_IDS = [f"{Path(script).name}-{i}" for i, (script, _) in enumerate(CALLS)]


@pytest.mark.parametrize(("script", "args"), CALLS, ids=CALL_IDS)
def test_every_documented_and_recorded_command_parses(script, args, monkeypatch):
    path = ROOT / script
    assert path.is_file(), f"{script} is documented or recorded but not in benchmarks/"
    if path.suffix == ".sh":
        assert os.access(path, os.X_OK) and subprocess.run(["bash", "-n", str(path)], check=False).returncode == 0
        return
    real = argparse.ArgumentParser.parse_args

    def parse(self, argv=None, namespace=None):
        raise Parsed(real(self, argv, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse)
    with pytest.raises(Parsed):  # an unknown or malformed option exits 2 (SystemExit) instead
        run_main(path, list(args), monkeypatch)


def test_the_commands_are_found():
    scripts = {script for script, _ in CALLS}
    assert {"benchmarks/record.py", "benchmarks/load_bench.py", "benchmarks/demo_time.sh"} <= scripts
    assert len(CALLS) >= len(RECORDS)


def test_sweep_cost_runs_both_evals_and_counts_their_rows(shared_tiny_beir, tmp_path, capsys):
    sweep_cost = runpy.run_path(str(ROOT / "benchmarks" / "sweep_cost.py"), run_name="benchmark_under_test")
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
    pq_top10 = runpy.run_path(str(ROOT / "benchmarks" / "pq_noise.py"), run_name="benchmark_under_test")["pq_top10"]
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
    bench = runpy.run_path(str(ROOT / "benchmarks" / "load_bench.py"), run_name="benchmark_under_test")
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


def test_make_install_installs_every_program_a_benchmark_or_test_looks_for():
    """A program found with shutil.which (wrk, chromium) is one `make install` installs, so each documented command
    runs on a fresh clone."""
    sources = [*SCRIPTS, *sorted((ROOT / "tests").glob("*.py"))]
    wanted = {name for path in sources for name in re.findall(r"""which\(["'](\w+)["']\)""", path.read_text())}
    debian = re.search(r"^DEBIAN := (.*)$", (ROOT / "Makefile").read_text(), re.M)
    assert wanted and debian and wanted <= set(debian.group(1).split())
    assert "$(DEBIAN)" in (ROOT / "Makefile").read_text()


def test_every_recorded_script_is_on_the_runner_and_its_text_shows_its_records():
    """Each Python script a committed record ran is on the runner (record.py's run_benchmark: a measure and a show),
    and prints as text what its records hold."""
    shown = 0
    for record in RECORDS:
        found = json.loads(record.read_text())
        script = next((w for w in shlex.split(found["command"]) if w.startswith("benchmarks/")), "")
        if not script.endswith(".py"):
            continue
        namespace = runpy.run_path(str(ROOT / script), run_name="benchmark_under_test")
        assert "show" in namespace and "measure" in namespace, f"{record.name}: {script} is not on the runner"
        text = namespace["show"](found["result"])
        assert isinstance(text, str) and len(text.splitlines()) >= 2, record.name
        shown += 1
    assert shown >= 29  # every record but the suite's and the demo's (shell)


@pytest.fixture(scope="module")
def bm25_indexes(shared_tiny_beir, tmp_path_factory) -> Path:
    """A folder of one index, BM25 over the tiny dataset: what the service benchmarks serve (no model to load)."""
    from tiny import build_tiny_indexes

    return build_tiny_indexes(tmp_path_factory.mktemp("served"), shared_tiny_beir, None, [])


# Each script's options for a short run, and what its result must hold. reload_storm.py serves through the same
# helper: left out, as each run costs a server's start.
SERVICE_RUNS = {
    "idle_sockets": (
        ["--sockets", "8", "--nofile", "64", "--seconds", "1"],
        lambda r: (
            r["connections_opened"] >= 8
            and r["healthz"]["probes"] >= 1
            and r["healthz"]["failed"] == r["search"]["failed"] == 0
        ),
    ),
    "reload_soak": (
        ["--reloads", "3", "--clients", "1"],
        lambda r: r["reloads"] == 3 and r["errors"] == 0 and list(r["at"]) == ["0"] and r["at"]["0"]["fds"] > 0,
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", SERVICE_RUNS)
def test_a_service_benchmark_serves_a_folder_and_records_what_it_measured(name, bm25_indexes, tmp_path, monkeypatch):
    """Each script that starts `cone serve` (tests/local_service.served), for a second or a few reloads: its record
    (the runner's schema) holds the machine and a result in which every probe, search and reload was answered."""
    from cone.cpu import cpu_name

    options, answered = SERVICE_RUNS[name]
    out = tmp_path / "record.json"
    argv = ["--indexes", str(bm25_indexes), *options, "--record", str(out)]
    run_main(ROOT / "benchmarks" / f"{name}.py", argv, monkeypatch)
    found = json.loads(out.read_text())
    assert found["cpu"] == cpu_name() and found["returncode"] == 0 and found["peak_rss_mib"] > 0
    assert "cpu" not in found["result"] and answered(found["result"]), found["result"]
