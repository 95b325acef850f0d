"""A corpus file read in byte ranges (what the Ray readers of ``cone index --stream --ray`` are given): no Ray."""

import json
from pathlib import Path

import pytest

from cone.data.ranges import byte_ranges, plan_ranges, range_lines

# Blank lines (empty, spaces, a lone CR), CRLF endings, and a last line without its newline.
LINES = [b'{"_id": "a", "text": "one"}', b"", b'{"_id": "b", "text": "two"}\r', b"   ", b"\r", b'{"_id": "c"}\r']
LINES += [b"", b'{"_id": "d", "text": "four four four four"}', b'{"_id": "e", "text": "five"}']


@pytest.fixture
def messy(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(b"\n".join(LINES))  # no newline after the last line
    return path


def _covers_at_line_ends(path: Path, ranges: list[tuple[int, int]]) -> None:
    data = path.read_bytes()
    assert ranges[0][0] == 0 and ranges[-1][1] == len(data)
    assert all(a < b for a, b in ranges) and [b for _, b in ranges[:-1]] == [a for a, _ in ranges[1:]]
    assert all(data[b - 1 : b] == b"\n" for _, b in ranges[:-1])


def _read_all(path: Path, ranges: list[tuple[int, int]]) -> list[tuple[int, bytes]]:
    return [found for a, b in ranges for found in range_lines(path, a, b)]


NON_BLANK = [line for line in LINES if line.strip()]


@pytest.mark.parametrize("size", [1, 5, 30, 60, 1000])
def test_byte_ranges_cover_the_file_once_and_read_back_its_lines_in_order(messy, size):
    ranges = byte_ranges(messy, size)
    _covers_at_line_ends(messy, ranges)
    found = _read_all(messy, ranges)
    assert [line for _, line in found] == NON_BLANK
    data = messy.read_bytes()
    assert all(data[offset : offset + len(line)] == line for offset, line in found)  # where each line starts


def test_a_range_ends_at_its_end_and_keeps_a_carriage_return(messy):
    first_two = len(LINES[0]) + 1 + len(LINES[1]) + 1
    assert list(range_lines(messy, 0, first_two)) == [(0, LINES[0])]
    assert [line for _, line in range_lines(messy, first_two, first_two + len(LINES[2]) + 1)] == [LINES[2]]


@pytest.mark.parametrize("readers", [1, 2, 3, 5, 50])
def test_a_small_file_is_cut_by_lines_one_share_per_reader(messy, readers):
    plan = plan_ranges(messy, readers, block_bytes=1 << 20)
    _covers_at_line_ends(messy, plan.ranges)
    shares = min(readers, len(NON_BLANK))
    assert len(plan.ranges) == shares and plan.lines_each == len(NON_BLANK) // shares
    counts = [len(list(range_lines(messy, a, b))) for a, b in plan.ranges]
    assert min(counts) == plan.lines_each and max(counts) - min(counts) <= 1
    assert [line for _, line in _read_all(messy, plan.ranges)] == NON_BLANK


def test_a_file_of_blocks_is_cut_by_bytes(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n" + "".join(json.dumps({"_id": str(i), "text": "w " * (i % 7)}) + "\n\n" for i in range(301)))
    plan = plan_ranges(path, 2, block_bytes=1000)
    assert plan.lines_each is None and plan.ranges == byte_ranges(path, 1000) and len(plan.ranges) > 2
    small = plan_ranges(path, 2, block_bytes=1 << 20)  # the same file, smaller than two blocks: two shares
    assert small.lines_each == 150 and [len(list(range_lines(path, a, b))) for a, b in small.ranges] == [150, 151]
    _covers_at_line_ends(path, small.ranges)


@pytest.mark.parametrize("text", [b"", b"\n\n  \n", b'{"_id": "a", "text": "x"}'])
def test_a_file_of_fewer_than_two_lines_is_one_range(tmp_path, text):
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(text)
    plan = plan_ranges(path, 4, block_bytes=1 << 20)
    assert plan.ranges == [(0, len(text))] and plan.lines_each is None
    assert [line for _, line in range_lines(path, 0, len(text))] == [line for line in text.split(b"\n") if line.strip()]
