"""The figures of a markdown page traced to committed JSON: the references the page carries, resolved and compared.

A page opts a section in with ``<!-- figures: checked -->`` on the line after its heading: up to the next heading of
the same or a higher level, every figure (a number with a decimal point, an exponent, or a % or × attached, outside
code and links) must be referenced or exempted. References are HTML comments, invisible once rendered.

A figure's own reference, right after it (nothing but ``*``, ``×``, ``%``, ``)`` or spaces between):
``0.046<!-- from docs/eval-layers/report.json: comparisons{a=baseline[emb],b=regularized[emb]}.ndcg_p_adjusted -->``;
``from: EXPR`` reads the file named last on the page, ``FILE#PATH`` any other. A PATH is keys joined by dots,
``[i]`` indexing a list and ``{k=v,...}`` picking the one element of a list whose fields equal those values. EXPR is
a PATH, then, left to right: ``/ PATH`` or ``- PATH``, ``+F`` or ``-F``, ``*F``, ``abs``, ``len`` (so
``a / b -1 *100`` is a relative change in %).

A table: ``<!-- table FILE: G1 | G2 | ... -->`` on the line before it, one group per column after the first (or one
for all): the path suffixes of a cell's numbers, in order. ``-``: the cell's figures carry their own references;
``unchecked: why``: the column is exempt; ``.``: the row gives each cell's whole paths. Each row ends, after its last
``|``, with ``<!-- PREFIX -->`` or ``<!-- P1 | P2 | ... -->`` (one per column): a cell's paths are ``PREFIX.SUFFIX``,
or, for ``.`` or an entry written ``=PATH, PATH``, that comma-separated list; the path ``setting`` takes a number
the section declares a setting; ``<!-- unchecked: why -->`` exempts the row. A figure followed by its own comment is
taken by that comment first.

Exemptions: ``NUMBER<!-- unchecked: why -->`` exempts one figure; that comment alone on a line, the block under it
(up to a blank line). ``<!-- generated: COMMAND; tests/test_x.py holds it equal -->`` alone on a line: the block under
it is a script's printed output, which the named test (a file that must exist) compares with the script's output.
``<!-- settings: 0.5 0.99 beside at, C =; 0.40 beside LanceDB (its version) -->`` declares those literals
parameters, not results, up to the next ``##`` heading: each group (``;`` between groups, labels in parentheses)
names the words that go with its values, and a figure is that setting only where one of them stands right before it
or right after it (nothing but spaces, brackets, ``=``, ``≥``, ``<``, ``%`` ... between: "at 0.99", "C = 0.5",
"95% interval"), or where it continues a list of that setting's values that such a word opens ("at 0.5, 0.9 and
0.99", "0.5 … 0.999"); the same number anywhere else is a figure like any other. A generated block is the table or
the fenced code right under its marker, no further; an exempted block ends at a blank line; a heading's figures are
checked as prose.

A figure matches when it is the value rounded to the printed precision (at most half a unit of its last printed
digit apart). Integers are checked where referenced but not required to be.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

CHECKED = "<!-- figures: checked -->"
COMMENT = re.compile(r"<!--(.*?)-->")
NUMBER = re.compile(
    r"(?<![\w:@./\\-])([+\-−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:e[+\-−]?\d+)?)(?:st|nd|rd|th)?(?![\w.,]\d|\w)([%×])?"
)
GAP = re.compile(r"[\s*×%)]*")  # what may stand between a figure and its reference
HEADING = re.compile(r"^(#+)\s")
LEAD = "([{=≥≤<>~∈*≈ \t"  # what may stand between a setting's cue (or list glue) and its value
GLUE = re.compile(r"(?:,|;|\band|\bor|…|\.\.\.|–|→|\bto|/)$", re.IGNORECASE)  # between the values of one list
LISTED = re.compile(r"[+\-−]?(\d[\d,]*(?:\.\d+)?(?:e[+\-−]?\d+)?)[%×]?$")


@dataclass(frozen=True)
class Setting:
    """One group of a ``settings`` declaration: the values, and the words that introduce them in the prose."""

    values: frozenset[str]
    cues: tuple[str, ...]

    def introduces(self, before: str, after: str = "", depth: int = 0) -> bool:
        """Whether the text around a value makes it this setting: one of the cues right ``before`` or right
        ``after`` it, or a list of this setting's values that such a cue opens."""
        text, rest = before.rstrip(LEAD), after.lstrip(LEAD + "%×)]}").lower()
        for cue in self.cues:
            if text.lower().endswith(cue.lower()) and not text[: len(text) - len(cue)][-1:].isalnum():
                return True
            if rest.startswith(cue.lower()) and not rest[len(cue) : len(cue) + 1].isalnum():
                return True
        glue = GLUE.search(text)
        listed = glue and LISTED.search(text[: glue.start()].rstrip(LEAD + ")]}"))
        if not listed or listed.group(1) not in self.values or depth > 20:
            return False
        return self.introduces(text[: glue.start()].rstrip(LEAD + ")]}")[: listed.start()], "", depth + 1)


def parse_settings(body: str) -> tuple[list[Setting], list[str]]:
    """The groups of ``settings: ...`` and, for any group without ``beside CUE, ...``, what is wrong with it."""
    groups, problems = [], []
    for group in filter(str.strip, re.sub(r"\([^)]*\)", " ", body).split(";")):
        values, beside, cues = group.partition(" beside ")
        found = tuple(c.strip().strip(LEAD) for c in cues.split(",") if c.strip().strip(LEAD))
        if not beside or not found:
            problems.append(f"settings {values.strip()!r} name the words that go with them (VALUES beside WORD, ...)")
        groups.append(Setting(frozenset(values.split()), found))
    return groups, problems


def setting_use(settings: list[Setting], printed: str, before: str, after: str) -> bool:
    value = printed.lstrip("+-−")
    return any(value in group.values and group.introduces(before, after) for group in settings)


@dataclass
class Figure:
    line: int
    text: str  # as printed, without its sign's Unicode minus
    required: bool  # a decimal, an exponent, a % or a ×: a measured figure in a checked section


@dataclass
class Page:
    path: Path
    root: Path
    problems: list[str] = field(default_factory=list)
    last_file: str | None = None

    def fail(self, line: int, message: str) -> None:
        name = self.path.relative_to(self.root) if self.path.is_relative_to(self.root) else self.path.name
        self.problems.append(f"{name}:{line}: {message}")


def parse_number(text: str) -> float:
    return float(text.replace("−", "-").replace(",", ""))


def tolerance(text: str) -> float:
    """Half a unit of the last printed digit."""
    mantissa, _, exponent = text.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    return 0.5 * 10.0 ** (int(exponent.replace("−", "-") or 0) - decimals)


@cache
def load(path: Path):
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return json.loads(path.read_text())


def split_top(text: str, separators: str) -> list[str]:
    """``text`` split at ``separators`` outside {} and []."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += char in "{[" and 1 or 0
        depth -= char in "}]" and 1 or 0
        if depth == 0 and char in separators:
            parts.append(current)
            current = ""
        else:
            current += char
    return [p.strip() for p in [*parts, current] if p.strip()]


def resolve_path(data, path: str):
    """The value at ``path`` (keys, ``[i]``, ``{k=v,...}``); KeyError says where it stops."""
    for step in re.finditer(r"([^.\[{]+)|\[(-?\d+)\]|\{([^}]*)\}|\.", path):
        key, index, selector = step.groups()
        if key is not None:
            if not isinstance(data, dict) or key not in data:
                raise KeyError(f"no key {key!r}")
            data = data[key]
        elif index is not None:
            if not isinstance(data, list) or not -len(data) <= int(index) < len(data):
                raise KeyError(f"no element [{index}]")
            data = data[int(index)]
        elif selector is not None:
            wanted = dict(pair.split("=", 1) for pair in split_top(selector, ","))
            found = (
                [e for e in data if all(str(e.get(k)) == v for k, v in wanted.items())]
                if isinstance(data, list)
                else []
            )
            if len(found) != 1:
                raise KeyError(f"{len(found)} elements match {{{selector}}}")
            data = found[0]
    return data


def lookup(page: Page, path: str):
    """``path`` in the page's current file, or in another one named as ``FILE#PATH``."""
    where, hash_, inner = path.partition("#")
    if page.last_file is None and not hash_:
        raise KeyError("no file named on the page yet")
    return resolve_path(load(page.root / (where if hash_ else page.last_file)), inner if hash_ else path)


def evaluate(page: Page, reference: str) -> float:
    """A reference's value: ``[FILE:] PATH [/ PATH | - PATH] [+F | -F] [*F] [abs] [len]``, applied left to right."""
    where, colon, expression = reference.partition(": ")
    if colon and where.strip():
        page.last_file = where.strip()
    tokens = split_top(expression if colon else reference, " ")
    value = lookup(page, tokens[0])
    for i, token in enumerate(tokens[1:], 1):
        if token == "/":
            value = value / lookup(page, tokens[i + 1])
        elif token == "-":
            value = value - lookup(page, tokens[i + 1])
        elif re.fullmatch(r"[+-][\d.]+", token):
            value = value + float(token)
        elif token.startswith("*"):
            value = value * float(token[1:])
        elif token == "abs":
            value = abs(value)
        elif token == "len":
            value = len(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise KeyError(f"{value!r} is not a number")
    return value


def compare(page: Page, line: int, printed: str, reference: str) -> None:
    try:
        value = evaluate(page, reference)
    except (KeyError, OSError, ValueError, TypeError, ZeroDivisionError, IndexError) as error:
        page.fail(line, f"{printed}: {reference}: {error}")
        return
    if not math.isfinite(value) or abs(value - parse_number(printed)) > tolerance(printed) * (1 + 1e-9):
        where = "" if reference.partition(": ")[0].strip() else page.last_file
        page.fail(line, f"{printed} printed, {value!r} in {where}{reference}")


def visible(line: str) -> str:
    """The line with inline code and link targets blanked, comments kept (their positions matter)."""
    line = re.sub(r"`[^`]*`", lambda m: " " * len(m.group()), line)
    return re.sub(r"\]\([^)]*\)", lambda m: " " * len(m.group()), line)


def figures(text: str, line: int) -> list[tuple[int, int, Figure]]:
    """(start, end, figure) of every number in ``text`` outside comments."""
    bare = COMMENT.sub(lambda m: " " * len(m.group()), text)
    found = []
    for m in NUMBER.finditer(bare):
        printed = m.group(1)
        required = "." in printed or "e" in printed or m.group(2) is not None
        found.append((m.start(), m.end(), Figure(line, printed, required)))
    return found


def check_inline(
    page: Page, text: str, line: int, settings: list[Setting], exempt: bool, checked: bool, context: str = ""
) -> set[int]:
    """The figures of one stretch of prose (or one table cell) against the comments placed after them; returns
    the indexes (in ``figures(text)``) of those a comment claimed. ``context``: the paragraph's text up to this line,
    comments removed (what introduces a setting may stand on the line before)."""
    found = figures(text, line)
    bare = COMMENT.sub(lambda m: " " * len(m.group()), text)
    claimed: set[int] = set()
    for comment in COMMENT.finditer(text):
        body = comment.group(1).strip()
        if not (body.startswith("from") or body.startswith("unchecked:")):
            continue
        before = [(i, f) for i, (_, end, f) in enumerate(found) if end <= comment.start() and i not in claimed]
        if not before or not GAP.fullmatch(text[found[before[-1][0]][1] : comment.start()]):
            page.fail(line, f"<!--{comment.group(1)}--> follows no figure")
            continue
        index, figure = before[-1]
        claimed.add(index)
        if body.startswith("from"):
            compare(page, line, figure.text, body.removeprefix("from").strip())
        elif not body.removeprefix("unchecked:").strip():
            page.fail(line, f"{figure.text}: an exemption says why")
    for i, (start, end, figure) in enumerate(found):
        if (
            checked
            and not exempt
            and figure.required
            and i not in claimed
            and not setting_use(settings, figure.text, prose(context + " " + bare[:start]), prose(bare[end:]))
        ):
            page.fail(
                line, f"{figure.text} is referenced by nothing (<!-- from FILE: PATH --> or <!-- unchecked: why -->)"
            )
    return claimed


def prose(text: str) -> str:
    """Text as a setting's cue is looked for in it: no comments, no emphasis, spaces collapsed."""
    return re.sub(r"\s+", " ", COMMENT.sub("", text).replace("*", ""))


def cells(row: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", row.strip())[1:-1]]


def check_table(page: Page, lines: list[str], start: int, spec: str | None, settings, exempt, checked) -> int:
    """The table starting at ``lines[start]`` (its header); returns the index of the line after it."""
    groups: list[str] = []
    if spec is not None:
        where, _, suffixes = spec.removeprefix("table").partition(": ")
        page.last_file = where.strip()
        groups = [g.strip() for g in suffixes.split("|")]
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    for n in range(start + 2, end):
        row, prefixes = lines[n], []
        trailing = re.match(r"^(.*\|)\s*<!--(.*?)-->\s*$", row)
        if trailing:
            row, prefixes = trailing.group(1), [p.strip() for p in trailing.group(2).split("|")]
        if prefixes and prefixes[0].startswith("unchecked:"):
            if not prefixes[0].removeprefix("unchecked:").strip():
                page.fail(n + 1, "an exemption says why")
            continue
        data = cells(visible(row))[1:]
        for column, cell in enumerate(data):
            group = (groups[column] if len(groups) > 1 else groups[0]) if groups else "-"
            prefix = (prefixes[column] if len(prefixes) > 1 else prefixes[0]) if prefixes else None
            by_row = group not in ("-", "") and not group.startswith("unchecked:") and prefix not in (None, "-")
            claimed = check_inline(
                page, cell, n + 1, settings, exempt or group.startswith("unchecked:"), checked and not by_row
            )
            numbers = [f for i, (_, _, f) in enumerate(figures(cell, n + 1)) if i not in claimed]
            if not by_row or not numbers:
                continue
            whole = group == "." or prefix.startswith("=")
            paths = (
                split_top(prefix.removeprefix("="), ",") if whole else [f"{prefix}.{s}" for s in split_top(group, " ")]
            )
            if len(numbers) != len(paths):
                page.fail(n + 1, f"{cell!r}: {len(numbers)} numbers for {len(paths)} paths ({', '.join(paths)})")
                continue
            for figure, path in zip(numbers, paths, strict=True):
                if path != "setting":
                    compare(page, n + 1, figure.text, f"{page.last_file}: {path}")
                elif not any(figure.text in group.values for group in settings):
                    values = sorted(v for group in settings for v in group.values)
                    page.fail(n + 1, f"{figure.text} is not among the section's settings ({' '.join(values)})")
    return end


def check_page(path: Path, root: Path) -> list[str]:
    """Every reference on the page resolved and compared; every figure of a checked section referenced or exempted."""
    page = Page(path, root)
    lines = path.read_text().splitlines()
    checked_level: int | None = None
    settings: list[Setting] = []
    fenced = exempt = generated = False
    table_spec: str | None = None
    paragraph = ""  # the current paragraph's text so far, for the cues of settings
    n = 0
    while n < len(lines):
        line = lines[n]
        if line.lstrip().startswith("```"):  # a fence, indented too (in a list item)
            fenced = not fenced
            paragraph = ""
            generated = generated and fenced  # a generated fenced block ends at its closing fence
        heading = HEADING.match(line)
        if fenced or line.lstrip().startswith("```"):
            n += 1
            continue
        if heading:
            level = len(heading.group(1))
            if checked_level is not None and level <= checked_level:
                checked_level = None
            if level <= 2:
                settings = []
            if n + 1 < len(lines) and lines[n + 1].strip() == CHECKED and checked_level is None:
                checked_level = level  # a checked section inside a checked one keeps the outer's reach
            exempt = generated = False
            paragraph = ""
        alone = re.fullmatch(r"\s*<!--(.*?)-->\s*", line)
        if alone and alone.group(1).strip().startswith("settings:"):
            groups, problems = parse_settings(alone.group(1).strip().removeprefix("settings:"))
            settings = [*settings, *groups]
            for problem in problems:
                page.fail(n + 1, problem)
        elif alone and alone.group(1).strip().startswith("unchecked:"):
            exempt = True
        elif alone and alone.group(1).strip().startswith("generated:"):
            generated = True  # the table or fenced code right under it, no further
            tests = re.findall(r"tests/[\w/]+\.py", alone.group(1))
            if not tests or not all((root / t).is_file() and path.name in (root / t).read_text() for t in tests):
                page.fail(n + 1, "a generated block names the test that holds it equal (tests/....py, naming the page)")
        elif alone and alone.group(1).strip().startswith("table"):
            table_spec = alone.group(1).strip()
        elif line.startswith("|"):
            n = check_table(page, lines, n, table_spec, settings, exempt or generated, checked_level is not None)
            table_spec, generated, paragraph = None, False, ""
            continue
        elif not line.strip():
            exempt = generated = False
            paragraph = ""
        else:
            generated = False  # a generated marker holds only the block right under it
            check_inline(page, visible(line), n + 1, settings, exempt, checked_level is not None, paragraph)
            paragraph = "" if heading else prose(paragraph + " " + visible(line))[-400:]
        n += 1
    return page.problems
