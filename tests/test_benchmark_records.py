"""The benchmark records behind docs/benchmarks.md and docs/scaling.md: benchmarks/record.py writes what a run
measured with the machine and commit that measured it, the committed records carry all of it, and every table or
block the pages print from them is benchmarks/bench_tables.py's or scaling_estimate.py's output on them, line for
line."""

from __future__ import annotations

import json
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "docs" / "benchmarks"
FIELDS = {"command", "commit", "tree_changed", "cpu", "cores", "flags", "load_1min_before", "load_1min_after"}
FIELDS |= {"started", "wall_s", "peak_rss_mib", "returncode", "result"}
GENERATED = re.compile(r"^<!-- generated: python benchmarks/bench_tables\.py ([\w-]+);")


def script(name: str) -> dict:
    return runpy.run_path(str(ROOT / "benchmarks" / f"{name}.py"), run_name="benchmark_under_test")


def test_a_record_keeps_the_json_a_benchmark_prints_and_the_machine_it_ran_on():
    found = script("record")["record"]([sys.executable, "-c", "print('{\"docs_per_s\": 14.5}')"], note="a test")
    assert FIELDS | {"note", "changed_files"} == set(found)
    assert found["result"] == {"docs_per_s": 14.5}
    assert found["returncode"] == 0 and found["wall_s"] >= 0 and found["peak_rss_mib"] > 0
    assert found["cores"] >= 1 and isinstance(found["flags"], list) and found["commit"]


def test_a_record_names_the_tracked_files_that_differ_from_its_commit(monkeypatch):
    recorder = script("record")
    monkeypatch.setitem(recorder["record"].__globals__, "git", lambda *args: " M tests/a.py\nM  docs/b.md")
    found = recorder["record"]([sys.executable, "-c", "pass"])
    assert found["tree_changed"] and found["changed_files"] == ["tests/a.py", "docs/b.md"]


def test_a_record_keeps_the_last_lines_of_a_text_output_and_a_failing_exit():
    command = [sys.executable, "-c", "import sys\nfor i in range(50): print(i)\nsys.exit(3)"]
    found = script("record")["record"](command)
    assert found["result"] == {"stdout_tail": [str(i) for i in range(10, 50)]}
    assert found["returncode"] == 3


def test_the_recorder_writes_the_record_and_exits_with_the_benchmarks_status(tmp_path):
    out = tmp_path / "deep" / "failed.json"
    command = [sys.executable, str(ROOT / "benchmarks" / "record.py"), str(out), "--", sys.executable, "-c"]
    done = subprocess.run([*command, "raise SystemExit(4)"], capture_output=True, text=True, check=False)
    assert done.returncode == 4 and json.loads(out.read_text())["returncode"] == 4
    nothing = subprocess.run(command[:4], capture_output=True, text=True, check=False)
    assert nothing.returncode == 2 and "no command" in nothing.stderr and "Traceback" not in nothing.stderr


def test_index_bench_prints_its_faiss_rows_as_json():
    argv = ["--ann-only", "--n", "2000", "--queries", "20", "--factories", "IVF8,Flat", "--json"]
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "index_bench.py"), *argv], capture_output=True, text=True, check=True
    )
    rows = json.loads(done.stdout)["ann"]["rows"]
    assert [row["factory"] for row in rows][:2] == ["Flat", "IVF8,Flat (nprobe=8)"]
    assert rows[0]["recall_at_10"] == 1.0 and all(0 < row["recall_at_10"] <= 1 for row in rows)


COMMITTED = sorted(RECORDS.glob("*.json"))


@pytest.mark.parametrize("record", COMMITTED, ids=[p.stem for p in COMMITTED])
def test_a_committed_record_names_its_run_and_machine(record):
    found = json.loads(record.read_text())
    assert set(found) >= FIELDS
    assert found["returncode"] == 0, "a failed run is not a measurement"
    changed = found.get("changed_files", ["?"]) if found["tree_changed"] else []
    assert all(name.endswith(".md") or name.startswith("tests/") for name in changed), "the commit is the code that ran"
    program = next((word for word in found["command"].split() if word.startswith(("benchmarks/", ".ci/"))), "")
    assert program and (ROOT / program).is_file()


def page_blocks(page: Path, program: str) -> dict[str, list[str]]:
    """Each block ``program`` prints on ``page``: the lines under its marker, the table's rows or the fenced code."""
    marker = re.compile(rf"^<!-- generated: python benchmarks/{program}\.py ([\w-]+);")
    lines, blocks = page.read_text().splitlines(), {}
    for at, line in enumerate(lines):
        found = marker.match(line)
        if not found:
            continue
        start = at + 2 if lines[at + 1] == "```" else at + 1
        end = start
        while end < len(lines) and (lines[end] != "```" if start == at + 2 else lines[end].startswith("|")):
            end += 1
        blocks[found.group(1)] = lines[start:end]
    return blocks


PRINTED = [("benchmarks.md", "bench_tables", "TABLES"), ("scaling.md", "scaling_estimate", "BLOCKS")]


@pytest.mark.parametrize(("page", "program", "names"), PRINTED)
def test_every_block_the_script_prints_is_on_its_page(page, program, names):
    assert sorted(page_blocks(ROOT / "docs" / page, program)) == sorted(script(program)[names])


@pytest.mark.parametrize(
    ("page", "program", "name"),
    [
        (page, program, name)
        for page, program, _ in PRINTED
        for name in sorted(page_blocks(ROOT / "docs" / page, program))
    ],
)
def test_a_block_on_the_page_is_what_the_committed_records_give(page, program, name, capsys):
    script(program)["main"]([name])
    assert page_blocks(ROOT / "docs" / page, program)[name] == capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("program", ["bench_tables", "scaling_estimate"])
def test_a_missing_record_is_one_line_not_a_traceback(program, tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        script(program)["main"](["sizes" if program == "scaling_estimate" else "ann", "--records", str(tmp_path)])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_the_estimate_is_its_inputs_arithmetic():
    found = script("scaling_estimate")["estimate"](RECORDS)
    m = found["inputs"]
    assert found["torch_core_h"] == pytest.approx(1e8 / m["minilm_docs_per_s_per_core"] / 3600)
    assert found["int8_ray_core_h"] == pytest.approx(found["torch_core_h"] / m["int8_speedup"] / m["ray_minilm"])
    assert found["bytes_per_doc"]["IVF65536,SQ8"] == 384 + 8  # one byte per dimension and the id
