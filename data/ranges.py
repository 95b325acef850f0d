"""A JSONL file read in byte ranges, each ending at a line's end, so that many readers can share one file with
none of them holding it all (``cone index --stream --ray`` reads a corpus.jsonl so).

Lines are split on b"\\n" only, as Python's iteration over a binary file splits them in the local build: a
"\\r" stays on its line (JSON takes it as white space), and a line of white space is blank."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ByteRange = tuple[int, int]  # [start, end) of a file


@dataclass(frozen=True)
class RangePlan:
    """The ranges a file is read in, and where they were cut by lines, the non-blank lines each holds at least."""

    ranges: list[ByteRange]
    lines_each: int | None = None  # None: cut by bytes, or a file of fewer than two lines in one range


def plan_ranges(path: Path, readers: int, block_bytes: int) -> RangePlan:
    """``block_bytes`` a range; a file smaller than a block per reader is cut by its non-blank lines into one
    range per reader (as many as it has lines, if fewer), so every reader has a share."""
    size = path.stat().st_size
    if size >= readers * block_bytes:
        return RangePlan(byte_ranges(path, block_bytes))
    starts = [offset for offset, _ in range_lines(path, 0, size)]
    if len(starts) < 2:
        return RangePlan([(0, size)])
    shares = min(readers, len(starts))
    cuts = [0, *(starts[len(starts) * i // shares] for i in range(1, shares)), size]
    return RangePlan(list(zip(cuts, cuts[1:], strict=False)), len(starts) // shares)


def byte_ranges(path: Path, size: int) -> list[ByteRange]:
    """The file cut into pieces of about ``size`` bytes, each ending at a line's end."""
    total, starts = path.stat().st_size, [0]
    with path.open("rb") as handle:
        while starts[-1] + size < total:
            handle.seek(starts[-1] + size)
            handle.readline()
            if handle.tell() >= total:
                break
            starts.append(handle.tell())
    return list(zip(starts, [*starts[1:], total], strict=True))


def range_lines(path: Path, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    """The non-blank lines of ``path``'s bytes [start, end) (without their b"\\n"), each with the offset it starts
    at (for errors); read line by line, so a range is never held whole."""
    with path.open("rb") as handle:
        handle.seek(start)
        offset = start
        while offset < end and (line := handle.readline(end - offset)):
            if line.strip():
                yield offset, line.removesuffix(b"\n")
            offset += len(line)
