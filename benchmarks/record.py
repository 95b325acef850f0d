"""Run a benchmark and keep what it measured, with what a reader needs to weigh it.

Usage: python benchmarks/record.py OUT.json [--note TEXT] -- COMMAND [ARG ...]
A benchmark script that runs through ``run_benchmark`` (below) writes the same record itself: ``--record OUT``.

COMMAND's standard output is its result: parsed as JSON where it is JSON (the benchmarks' ``--json``), else kept as
its last 40 lines; its standard error passes through (progress). The record adds the command, the commit and the
tracked files that differed from it, the CPU's name and the flags that decide its speed, the cores, the 1-minute
load average before and after, the start, the wall seconds, the children's peak resident set and the exit status. A
page cites a record's figures as it cites a report's (``<!-- from docs/benchmarks/NAME.json: result.… -->``,
tests/docs_refs.py), so every timing on docs/benchmarks.md names the run that measured it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from datetime import UTC, datetime
from pathlib import Path

from cone.cpu import cpu_name, speed_flags
from cone.errors import InputError
from cone.output import git_commit, stdout_to_stderr

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "docs" / "benchmarks"  # the committed records
TAIL_LINES = 40


def changed_files() -> list[str]:
    """The tracked files that differ from the commit checked out."""
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    return paths_of_status(status.stdout)


def paths_of_status(porcelain: str) -> list[str]:
    """The paths of ``git status --porcelain`` lines: "XY path", or "R  old -> new" for a rename."""
    return [line[3:].split(" -> ")[-1] for line in porcelain.splitlines()]


def machine() -> dict:
    return {
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "flags": speed_flags(),
        "load_1min_before": os.getloadavg()[0],
    }


def cpu_words(record: dict) -> str:
    """How a page names a record's machine after the CPU's name: its cores and the speed flags that choose its
    kernels ("2 cores, AVX-512 with bf16 and VNNI, no AMX"); two CPUs of one name but other flags read apart."""
    flags = set(record["flags"])
    if "avx512f" not in flags:
        return f"{record['cores']} cores, {'AVX2' if 'avx2' in flags else 'no AVX2'}, no AVX-512"
    named = {"bf16": "avx512_bf16" in flags, "AMX": "amx_tile" in flags}
    if not named["AMX"]:  # without AMX, VNNI is what int8 runs on
        named = {"bf16": named["bf16"], "VNNI": "avx512_vnni" in flags, "AMX": False}
    has, lacks = [n for n, on in named.items() if on], [n for n, on in named.items() if not on]
    return (
        f"{record['cores']} cores, AVX-512"
        + (f" with {' and '.join(has)}" if has else "")
        + (f", no {' or '.join(lacks)}" if lacks else "")
    )


def parse_output(stdout: str):
    try:
        return json.loads(stdout)
    except json.JSONDecodeError:
        return {"stdout_tail": stdout.splitlines()[-TAIL_LINES:]}


def started(command: list[str], note: str | None = None) -> dict:
    """A record's fields taken before the benchmark runs: the command, the commit and the machine."""
    changed = changed_files()
    found = {
        "command": shlex.join(command),
        "commit": git_commit()[:7],
        "tree_changed": bool(changed),
        "changed_files": changed,  # tracked files that differ from the commit: docs being written are harmless
        **machine(),
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    if note:
        found["note"] = note
    return found


def finished(found: dict, wall_s: float, peak_rss_kib: int, returncode: int, result) -> dict:
    """``found`` with what the run gave: its time, the load after it, its peak resident set, its exit and result."""
    found["wall_s"] = round(wall_s, 2)
    found["load_1min_after"] = os.getloadavg()[0]
    found["peak_rss_mib"] = round(peak_rss_kib / 1024, 1)  # ru_maxrss is in KiB on Linux
    found["returncode"] = returncode
    found["result"] = result
    return found


def record(command: list[str], note: str | None = None) -> dict:
    """Runs ``command`` and returns its record: a failing exit is recorded, not raised (OSError: no such program)."""
    found = started(command, note)
    start = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)  # OSError: no such program
    # The largest resident set of any one child that ended.
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return finished(found, time.perf_counter() - start, peak, done.returncode, parse_output(done.stdout))


def write(found: dict, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(found, indent=1) + "\n")
    print(f"{out}: exit {found['returncode']}, {found['wall_s']} s", file=sys.stderr)


def run_benchmark(
    parser: argparse.ArgumentParser,
    measure: Callable[[argparse.Namespace], object],
    show: Callable[[object], str] | None = None,
    argv: list[str] | None = None,
) -> None:
    """The one way a benchmark script runs: its own options, then --json and --record OUT; ``measure(args)`` returns
    the result (JSON types). Printed as ``show(result)`` (JSON with --json, or where there is no ``show``); with
    --record, written as the record that `record.py OUT -- python benchmarks/SCRIPT ... --json` writes (the same
    schema), in this process: its peak resident set is the largest of this process's and of its children's that
    ended (a server or a fresh process per run that a script starts)."""
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--record", type=Path, metavar="OUT", help="write the result's record (the machine, the "
                        "commit, the load before and after: benchmarks/record.py) to OUT")  # fmt: skip
    args = parser.parse_args(argv)
    command = ["python", f"benchmarks/{parser.prog}", *(sys.argv[1:] if argv is None else argv)]
    found, start = started(command) if args.record else {}, time.perf_counter()
    try:
        with stdout_to_stderr() if args.json or args.record else nullcontext():  # stdout: the JSON alone
            result = measure(args)
    except InputError as error:  # bad input: one line, as cone's commands say it
        parser.exit(2, f"{parser.prog}: {error}\n")
    if args.record is None:
        print(json.dumps(result, indent=1) if args.json or show is None else show(result))
        return
    peak = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    write(finished(found, time.perf_counter() - start, peak, 0, result), args.record)


def read_record(folder: Path, name: str) -> dict:
    """The record ``folder``/NAME.json (docs/benchmarks/NAME.json, as `--record` or this script wrote it)."""
    return json.loads((folder / f"{name}.json").read_text())


def print_from_records(
    parser: argparse.ArgumentParser, text: Callable[[argparse.Namespace], str], argv: list[str] | None = None
) -> None:
    """The one way a page's table or estimate is printed from the records: the script's own options and --records
    FOLDER, then ``text(args)`` printed. A record that is missing, or lacks what is read from it (a record of
    another version of its benchmark, or one cut short), is one line, exit 2."""
    parser.add_argument("--records", type=Path, default=RECORDS, help="the records' folder (default docs/benchmarks)")
    args = parser.parse_args(argv)
    try:
        printed = text(args)
    except FileNotFoundError as error:
        parser.exit(2, f"{parser.prog}: no record {error.filename}: run its benchmark with --record OUT\n")
    except (KeyError, IndexError, TypeError) as error:
        parser.exit(2, f"{parser.prog}: a record lacks what is read from it ({error!r})\n")
    print(printed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the record to write (JSON)")
    parser.add_argument("--note", help="what the run was for, or what else ran on the machine")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the benchmark's command line")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command: give it after --")
    try:
        found = record(command, args.note)
    except OSError as error:
        parser.error(f"cannot run {command[0]}: {error.strerror}")
    write(found, args.out)
    sys.exit(found["returncode"])


if __name__ == "__main__":
    main()
