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


@pytest.fixture(autouse=True)
def _scripts_folder_on_path(monkeypatch):
    """As `python benchmarks/NAME.py` puts its own folder first: the scripts import record.py, the tables a
    benchmark's own helpers."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))


def script(name: str) -> dict:
    return runpy.run_path(str(ROOT / "benchmarks" / f"{name}.py"), run_name="benchmark_under_test")


def test_a_record_keeps_the_json_a_benchmark_prints_and_the_machine_it_ran_on():
    found = script("record")["record"]([sys.executable, "-c", "print('{\"docs_per_s\": 14.5}')"], note="a test")
    assert FIELDS | {"note", "changed_files"} == set(found)
    assert found["result"] == {"docs_per_s": 14.5}
    assert found["returncode"] == 0 and found["wall_s"] >= 0 and found["peak_rss_mib"] > 0
    assert found["cores"] >= 1 and isinstance(found["flags"], list) and found["commit"]


def test_a_record_names_the_tracked_files_that_differ_from_its_commit():
    status = " M tests/a.py\nM  docs/b.md\nR  old.md -> docs/new.md"
    assert script("record")["paths_of_status"](status) == ["tests/a.py", "docs/b.md", "docs/new.md"]


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
    absent = subprocess.run([*command[:4], "no-such-program"], capture_output=True, text=True, check=False)
    assert absent.returncode == 2 and "cannot run no-such-program" in absent.stderr and "Traceback" not in absent.stderr


def test_a_script_on_the_runner_writes_the_same_record_itself(tmp_path, monkeypatch, capsys):
    """run_benchmark (record.py), through index_sizes.py: --record OUT writes record.py's record in the script's own
    process, --json prints the result alone, and bad input is one line."""
    main, out = script("index_sizes")["main"], tmp_path / "r.json"
    fixtures = ROOT / "tests" / "fixtures" / "index-0.1.0"

    def run(*argv: object) -> str:
        monkeypatch.setattr(sys, "argv", ["index_sizes.py", *map(str, argv)])
        main()
        return capsys.readouterr().out

    assert run(fixtures, "--record", out) == ""
    found = json.loads(out.read_text())
    assert set(found) == FIELDS | {"changed_files"} and found["returncode"] == 0 and found["peak_rss_mib"] > 0
    assert found["command"] == f"python benchmarks/index_sizes.py {fixtures} --record {out}"
    assert json.loads(run(fixtures, "--json")) == found["result"] and set(found["result"]) == {"baseline", "bm25"}
    assert run(fixtures).startswith("baseline: 30 documents, d = 256, Flat\n")
    with pytest.raises(SystemExit) as refused:
        run(tmp_path)
    err = capsys.readouterr().err
    assert refused.value.code == 2 and err == f"index_sizes.py: no index in {tmp_path}\n"


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
    # Pages, tests and other records (a sequence of runs writes one record after another) are not code that ran.
    code = [
        name for name in changed if not name.endswith(".md") and not name.startswith(("tests/", "docs/benchmarks/"))
    ]
    assert not code, f"the commit is the code that ran, but these had changed: {code}"
    assert all((ROOT / name).exists() for name in changed), "the names are whole"
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


ROUND_RECORDS = {  # inputs chosen so that the estimate's figures can be worked out by hand
    "ray-minilm": {"result": {"docs_per_s": {"local": 40.0}, "cores": 2, "ray_vs_local": 0.8}},
    "ray-baseline": {"result": {"ray_vs_local": 0.9}},
    "ray-stream": {"result": {"ray_vs_local": 0.6}},
    "backends": {
        "result": {
            "rows": [
                {"variant": "cone torch", "docs_per_s": 10.0},
                {"variant": "cone openvino-int8", "docs_per_s": 40.0},
            ]
        }
    },
    # 2 x 1,000 points x 4,096 lists x 256 x (25 + 1) flop in 54.525952 s: 1e9 flop/s on 4 cores
    "ann-1m": {
        "cores": 4,
        "result": {"ann": {"n": 1000, "rows": [{"factory": "IVF4096,Flat (nprobe=8)", "build_s": 54.525952}]}},
    },
    "index-sizes": {
        "result": {
            "streamed": {
                "stream": True,
                "dim": 256,
                "n_docs": 10,
                "index_factory": "IVF64,Flat",
                "bytes_per_doc": {"index.ivfdata": 1032.0, "docs.jsonl": 440.0, "docs.offsets": 8.0},
                "parts_per_doc": {},
            }
        }
    },
    "stream-1m": {"result": {"ratios": {"build_peak_anonymous": 0.1}, "streamed": {"serve": {"rss_mib": 700.0}}}},
}


def test_the_estimate_works_out_by_hand_on_round_inputs(tmp_path):
    for name, found in ROUND_RECORDS.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(found))
    cost = script("scaling_estimate")["estimate"](tmp_path)
    assert cost["torch_core_h"] == pytest.approx(1388.89, rel=1e-5)  # 1e8 docs at 20 docs/s per core
    assert cost["int8_ray_core_h"] == pytest.approx(434.03, rel=1e-5)  # ÷ 4 (int8), ÷ 0.8 (Ray)
    assert cost["streamed_ray_minilm"] == pytest.approx(0.5333, rel=1e-4)  # 0.8 x 0.6 / 0.9
    assert cost["kmeans_flops"] == pytest.approx(1e9)
    assert cost["train_core_h"] == pytest.approx(2796.2, rel=1e-5)  # 2 x 2e6 x 65,536 x 384 x 25 / 1e9 s x 4 cores
    assert cost["assign_core_h"] == pytest.approx(5592.4, rel=1e-5)  # 2 x 1e8 x 65,536 x 384 / 1e9 s x 4 cores
    assert cost["bytes_per_doc"]["document table"] == 448.0
    assert cost["gb_at_100m"]["IVF65536,SQ8"] == pytest.approx(39.2)  # 1e8 x (384 + 8) B


def test_the_measured_inverted_lists_have_the_faiss_layout_the_estimate_assumes():
    """4 bytes a dimension and an 8-byte id per vector: what factory_bytes() scales to 100 M."""
    index = next(
        index for index in json.loads((RECORDS / "index-sizes.json").read_text())["result"].values() if index["stream"]
    )
    assert index["bytes_per_doc"]["index.ivfdata"] == pytest.approx(4 * index["dim"] + 8, abs=0.5)


# Each section of docs/benchmarks.md that names records (`docs/benchmarks/NAME.json`, in its commands or its
# references) says where they ran in one **Where:** line: the CPU of each, as the records name it (in backticks), then
# its cores and speed flags as record.py's cpu_words puts them (in parentheses: one name can be two CPUs), and a
# reference to the highest 1-minute load average among them, before or after.
NAMED = re.compile(r"docs/benchmarks/([\w.-]+)\.json")
LOAD_REFERENCE = re.compile(r"<!-- from docs/benchmarks/([\w.-]+)\.json#(load_1min_before|load_1min_after) -->")
LOADS = ("load_1min_before", "load_1min_after")


def sections(text: str) -> list[tuple[str, list[str]]]:
    """Each heading with its lines up to the next heading, of any level."""
    found: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if re.match(r"^#+\s", line):
            found.append((line, []))
        elif found:
            found[-1][1].append(line)
    return found


def where_problems(text: str, records: Path = RECORDS) -> list[str]:
    """What each section's **Where:** line says that its records do not (or the line it lacks)."""
    cpu_words = script("record")["cpu_words"]
    cpus = {json.loads(path.read_text())["cpu"] for path in records.glob("*.json")}
    problems = []
    for heading, body in sections(text):
        names = {name for line in body for name in NAMED.findall(line) if (records / f"{name}.json").is_file()}
        if not names:
            continue
        found = {name: json.loads((records / f"{name}.json").read_text()) for name in names}
        lines = [line for line in body if line.startswith("**Where:**")]
        if len(lines) != 1:
            problems.append(f"{heading}: {len(lines)} **Where:** lines, not 1")
            continue
        named, ran = set(re.findall(r"`([^`]+)`", lines[0])) & cpus, {record["cpu"] for record in found.values()}
        said = {f"`{record['cpu']}` ({cpu_words(record)}" for record in found.values()}
        if named != ran or any(words not in lines[0] for words in said):
            ran_on = ", ".join(words + ")" for words in sorted(said))
            problems.append(f"{heading}: names {sorted(named)}; its records ran on {ran_on}")
        top = max(record[key] for record in found.values() for key in LOADS)
        cited = [found[name][key] for name, key in LOAD_REFERENCE.findall(lines[0]) if name in found]
        if top not in cited:
            problems.append(f"{heading}: the highest load of its records, {top:.1f}, is not the one referenced")
    return problems


def test_each_section_says_where_its_records_ran():
    assert where_problems((ROOT / "docs" / "benchmarks.md").read_text()) == []


def test_a_section_that_names_another_cpu_or_load_fails():
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    at = text.index("### The service against the machine's limit")
    section = text[at : text.index("\n#", at + 1)]
    for wrong in (
        section.replace("**Where:** `AMD EPYC`", "**Where:** `Intel(R) Xeon(R) Processor`"),
        section.replace("VNNI, no AMX)", "AMX)"),
        section.replace("parallel2.json#load_1min_after", "parallel2.json#load_1min_before"),
        section.replace("**Where:**", "Where:"),
    ):
        assert wrong != section and len(where_problems(wrong)) == 1


def test_a_cpu_of_the_same_name_with_other_flags_is_another_machine(tmp_path):
    """The AVX-512 VNNI Xeon without bf16 calls itself what the AMX Xeon does: a section naming the AMX Xeon's flags
    over its record fails, one naming its own passes."""
    record = {"cpu": "Intel(R) Xeon(R) Processor", "cores": 2, "flags": ["avx2", "fma", "avx512f", "avx512_vnni"]}
    (tmp_path / "vnni.json").write_text(json.dumps(record | {"load_1min_before": 0.5, "load_1min_after": 0.7}))
    line = "**Where:** `Intel(R) Xeon(R) Processor` ({}); 0.7<!-- from docs/benchmarks/vnni.json#load_1min_after -->."
    page = "## A benchmark\n\n{}\n\n`docs/benchmarks/vnni.json`\n"
    assert where_problems(page.format(line.format("2 cores, AVX-512 with VNNI, no bf16 or AMX")), tmp_path) == []
    assert len(where_problems(page.format(line.format("2 cores, AVX-512 with bf16 and AMX")), tmp_path)) == 1
