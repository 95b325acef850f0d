"""Run a benchmark and keep what it measured, with what a reader needs to weigh it.

Usage: python benchmarks/record.py OUT.json [--note TEXT] -- COMMAND [ARG ...]

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
from datetime import UTC, datetime
from pathlib import Path

from cone.cpu import cpu_name, speed_flags
from cone.output import git_commit

ROOT = Path(__file__).resolve().parents[1]
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


def parse_output(stdout: str):
    try:
        return json.loads(stdout)
    except json.JSONDecodeError:
        return {"stdout_tail": stdout.splitlines()[-TAIL_LINES:]}


def record(command: list[str], note: str | None = None) -> dict:
    """Runs ``command`` and returns its record: a failing exit is recorded, not raised (OSError: no such program)."""
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
    start = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)  # OSError: no such program
    found["wall_s"] = round(time.perf_counter() - start, 2)
    found["load_1min_after"] = os.getloadavg()[0]
    # ru_maxrss is in KiB on Linux: the largest resident set of any one child that ended.
    found["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)
    found["returncode"] = done.returncode
    found["result"] = parse_output(done.stdout)
    return found


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
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(found, indent=1) + "\n")
    print(f"{args.out}: exit {found['returncode']}, {found['wall_s']} s", file=sys.stderr)
    sys.exit(found["returncode"])


if __name__ == "__main__":
    main()
