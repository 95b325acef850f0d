"""Printing results: aligned text tables for people, JSON for machines."""

from __future__ import annotations

import ctypes
import json
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, redirect_stdout


def format_value(value: object) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e5):
            return f"{value:.3e}"
        return f"{value:.4f}"
    return str(value)


def thousands(value: float, decimals: int = 0) -> str:
    """A figure as the docs print it: thousands separated by commas, a Unicode minus."""
    return f"{value:,.{decimals}f}".replace("-", "−")


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A markdown table of ready-made cells, as the docs' generated blocks print them."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join([*lines, *("| " + " | ".join(row) + " |" for row in rows)])


def table(rows: Sequence[Mapping[str, object]], columns: Sequence[str]) -> str:
    """A plain aligned table; the first column is left-aligned, the rest right-aligned."""
    cells = [[format_value(row.get(c, "")) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]

    def line(values: Sequence[str]) -> str:
        first = values[0].ljust(widths[0])
        return "  ".join([first, *(v.rjust(w) for v, w in zip(values[1:], widths[1:], strict=True))])

    return "\n".join([line(columns), line(["-" * w for w in widths]), *(line(r) for r in cells)])


def finite(payload: object) -> object:
    """``payload`` with every NaN or infinity replaced by None (JSON null: the value is undefined)."""
    if isinstance(payload, float):
        return payload if math.isfinite(payload) else None
    if isinstance(payload, dict):
        return {k: finite(v) for k, v in payload.items()}
    if isinstance(payload, list | tuple):
        return [finite(v) for v in payload]
    return payload


def dump_json(payload: object) -> str:
    """Always valid JSON: non-finite numbers become null instead of the NaN / Infinity JSON does not have."""
    return json.dumps(finite(payload), indent=2, allow_nan=False)


@contextmanager
def _stdout_fd_to(target: int) -> Iterator[None]:
    """File descriptor 1 pointed at ``target`` for the block, the C buffer flushed on either side so nothing
    written before or during lands on the other side."""
    libc = ctypes.CDLL(None)
    sys.stdout.flush()
    libc.fflush(None)
    saved = os.dup(1)
    os.dup2(target, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        libc.fflush(None)
        os.dup2(saved, 1)
        os.close(saved)


@contextmanager
def native_stdout_silenced() -> Iterator[None]:
    """Libraries print nothing, and native code (FAISS's on-disk lists report with C printf) is no exception:
    file descriptor 1 goes to /dev/null while native code runs."""
    with open(os.devnull, "wb") as null, _stdout_fd_to(null.fileno()):
        yield


@contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Everything written to stdout in the block (Python's ``print``, rich and tqdm bars, native code's printf)
    lands on stderr: a person still sees a long export's progress, and stdout keeps only what a command prints as
    its result (``--json`` output stays parseable)."""
    sys.stderr.flush()
    with _stdout_fd_to(2), redirect_stdout(sys.stderr):
        yield


@contextmanager
def native_stderr_collected() -> Iterator[list[str]]:
    """What native code writes to stderr (FAISS's clustering warnings, one per training, come by the thousand)
    collected into the list it yields, once the block ends, instead of streamed; Python's own ``sys.stderr``
    (progress bars, the cli's lines) still reaches the terminal where it was the process's stderr."""
    libc = ctypes.CDLL(None)
    sys.stderr.flush()
    libc.fflush(None)
    lines: list[str] = []
    saved = os.dup(2)
    python_stderr = sys.stderr
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        if _is_fd(python_stderr, 2):
            sys.stderr = open(os.dup(saved), "w", buffering=1, encoding=python_stderr.encoding, errors="replace")  # noqa: SIM115
        try:
            yield lines
        finally:
            libc.fflush(None)
            if sys.stderr is not python_stderr:
                sys.stderr.close()
                sys.stderr = python_stderr
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            lines.extend(line for line in sink.read().decode(errors="replace").splitlines() if line.strip())


def _is_fd(stream: object, fd: int) -> bool:
    try:
        return stream.fileno() == fd
    except (AttributeError, OSError, ValueError):  # pytest's capture, a StringIO: not a file descriptor
        return False


def git_commit() -> str:
    """The commit checked out where this runs, for the provenance of a committed result ("unknown" outside git)."""
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
