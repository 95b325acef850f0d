"""The docs' measured figures against the committed reports they cite (tests/docs_refs.py has the syntax)."""

from __future__ import annotations

from pathlib import Path

import pytest

from docs_refs import CHECKED, check_page

ROOT = Path(__file__).resolve().parents[1]
# The written pages: the README, docs/*.md and a folder's own README (docs/doctor/); not the eval's generated
# report.md files, which the eval writes from its report.json.
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs").glob("*/README.md"))]
# The sections that must stay checked: the README and every page under docs/ whole (and their checked subsections).
MUST_CHECK = [
    ("README.md", "# cone"),
    ("docs/benchmarks.md", "# Benchmarks"),
    ("docs/scaling.md", "# What 100 M documents would cost"),
    ("README.md", "## What the measurements say"),
    ("docs/results.md", "# Results"),
    ("docs/eval.md", "# The eval harness"),
    ("docs/regularizers.md", "# The regularizer lineage"),
    ("docs/training.md", "# Training the two language models"),
    ("docs/training.md", "## Choosing λ: the sweep"),
    ("docs/training.md", "## Pre-training's own noise"),
    ("docs/doctor/README.md", "# cone doctor on MiniLM"),
]


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_figure_matches_its_report(page):
    assert check_page(page, ROOT) == []


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_page_is_checked_whole(page):
    assert page.read_text().splitlines()[1] == CHECKED


@pytest.mark.parametrize(("name", "heading"), MUST_CHECK)
def test_the_summaries_are_checked(name, heading):
    lines = (ROOT / name).read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(heading))
    assert lines[at + 1] == CHECKED


def test_the_readme_with_a_changed_figure_fails(tmp_path):
    """README's p_adj for regularized vs baseline bag of embeddings once read 0.027, which was the centered
    comparison's; here the last layer's p_adj (0.39) is changed in a copy, as such a slip would change it."""
    text = (ROOT / "README.md").read_text()
    assert text.count("p_adj 0.39<!--") == 1
    copy = tmp_path / "README.md"
    copy.write_text(text.replace("p_adj 0.39<!--", "p_adj 0.027<!--"))
    assert [p for p in check_page(copy, ROOT) if "0.027 printed, 0.39" in p]


REPORT = '{"comparisons": [{"a": "x[emb]", "b": "y[emb]", "p": 0.0461}], "rows": [{"id": "x", "m": {"v": 0.5734}}]}'


def write(tmp_path: Path, body: str) -> Path:
    (tmp_path / "docs").mkdir(exist_ok=True)
    (tmp_path / "docs" / "report.json").write_text(REPORT)
    page = tmp_path / "page.md"
    page.write_text(f"# Page\n{CHECKED}\n\n{body}\n")
    return page


GOOD = (
    "<!-- settings: 0.5 beside at (a strength) -->\n"
    "p_adj 0.046<!-- from docs/report.json: comparisons{a=x[emb],b=y[emb]}.p --> at 0.5, "
    "57%<!-- from: rows[0].m.v *100 --> of it, "
    "**0.573**<!-- from: rows{id=x}.m.v --> and 1.5× <!-- unchecked: a timing, no report holds it -->.\n\n"
    "<!-- table docs/report.json: m.v | - | . -->\n"
    "| row | v | other | both |\n|---|---|---|---|\n"
    "| x | 0.57 | 0.9<!-- unchecked: why --> | 0.5, 0.046 | <!-- rows{id=x} | - | =setting, comparisons[0].p -->\n"
    "| y | 1.25 | 2.5 | 0.1 | <!-- unchecked: a row no report holds -->"
)


def test_a_page_whose_figures_match_passes(tmp_path):
    assert check_page(write(tmp_path, GOOD), tmp_path) == []


@pytest.mark.parametrize(
    ("edit", "complaint"),
    [
        (("0.046<", "0.027<"), "0.027 printed, 0.0461"),  # a changed figure
        (("57%", "58%"), "58 printed"),
        (("| 0.57 |", "| 0.58 |"), "0.58 printed"),  # a table cell
        (("b=y[emb]", "b=z[emb]"), "0 elements match"),  # a reference to nothing
        (("from: rows[0].m.v", "from: rows[3].m.v"), "no element [3]"),
        (("docs/report.json: comp", "docs/missing.json: comp"), "missing.json"),
        (("<!-- unchecked: a timing, no report holds it -->", ""), "1.5 is referenced by nothing"),
        (("unchecked: why", "unchecked:"), "an exemption says why"),
        (("| 0.5, 0.046 |", "| 0.6, 0.046 |"), "0.6 is not among the section's settings"),
        (("| 0.5, 0.046 |", "| 0.5 |"), "1 numbers for 2 paths"),
        (("<!-- unchecked: a row no report holds -->", ""), "1.25 is referenced by nothing"),
        (("--> at 0.5, ", "--> of 0.5, "), "0.5 is referenced by nothing"),  # a setting's number, not beside its word
        (("settings: 0.5 beside at (a strength)", "settings: 0.5 (a strength)"), "name the words that go with them"),
    ],
)
def test_a_wrong_figure_or_reference_fails(tmp_path, edit, complaint):
    problems = check_page(write(tmp_path, GOOD.replace(*edit)), tmp_path)
    assert any(complaint in p for p in problems), problems


def test_a_checked_section_inside_a_checked_page_keeps_the_page_checked(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(f"# Page\n{CHECKED}\n\n## A\n{CHECKED}\n\n1.5 x\n\n## B\n\n2.5 x\n")
    assert [p.split(": ", 1)[1][:3] for p in check_page(page, tmp_path)] == ["1.5", "2.5"]


def test_figures_outside_a_checked_section_need_no_reference(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Page\n\n0.123 and 4.5×, `cone:0.99`\n\n## Checked\n" + CHECKED + "\n\nat `C = 0.9`, 0.5 x\n")
    assert check_page(page, tmp_path) == [
        "page.md:8: 0.5 is referenced by nothing (<!-- from FILE: PATH --> or <!-- unchecked: why -->)"
    ]


def test_a_generated_block_names_an_existing_test_and_ends_at_a_blank_line(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text('PAGE = "page.md"')
    (tmp_path / "tests" / "test_z.py").write_text('PAGE = "other.md"')
    block = "| a | 0.5 |\n|---|---|\n| b | 0.25 |\n\nthen 0.75 x\n"
    page = tmp_path / "page.md"
    page.write_text(f"# Page\n{CHECKED}\n\n<!-- generated: cmd; tests/test_x.py holds it equal -->\n{block}")
    assert check_page(page, tmp_path) == [
        "page.md:9: 0.75 is referenced by nothing (<!-- from FILE: PATH --> or <!-- unchecked: why -->)"
    ]
    for missing_or_other in ("test_y", "test_z"):
        page.write_text(f"# Page\n{CHECKED}\n\n<!-- generated: cmd; tests/{missing_or_other}.py holds it -->\n{block}")
        assert any("names the test" in p for p in check_page(page, tmp_path))


def test_a_generated_block_reaches_no_further_than_its_table_or_its_fenced_code(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text('PAGE = "page.md"')
    marker = "<!-- generated: cmd; tests/test_x.py holds it equal -->"
    page = tmp_path / "page.md"
    for block in ("| a | 0.5 |\n|---|---|\n| b | 0.25 |", "```\nrate 0.5\n```"):
        page.write_text(f"# Page\n{CHECKED}\n\n{marker}\n{block}\nthen 0.75 x\n")
        assert [p.split(": ", 1)[1] for p in check_page(page, tmp_path)] == [
            "0.75 is referenced by nothing (<!-- from FILE: PATH --> or <!-- unchecked: why -->)"
        ]


def test_a_setting_is_its_number_only_beside_its_words_or_in_their_list(tmp_path):
    page = tmp_path / "page.md"
    settings = "<!-- settings: 0.5 0.9 0.99 beside at, C = (strengths); 0.40 beside LanceDB (its version) -->"
    prose = "LanceDB 0.40 at C = 0.5, 0.9 and\n0.99 (at 0.5 … 0.99)."
    page.write_text(f"# Page\n{CHECKED}\n{settings}\n\n{prose}\n")
    assert check_page(page, tmp_path) == []
    page.write_text(f"# Page\n{CHECKED}\n{settings}\n\n{prose} Between (0.9), recall 0.40, 0.99 of it.\n")
    assert [p.split(": ", 1)[1][:5] for p in check_page(page, tmp_path)] == ["0.9 i", "0.40 ", "0.99 "]


def with_line(tmp_path: Path, name: str, after, line: str) -> list[str]:
    """The problems of a copy of page ``name`` with ``line`` inserted after the first line ``after`` accepts (the
    exact edits the docs check once let through)."""
    lines = (ROOT / name).read_text().splitlines()
    at = next(i for i, text in enumerate(lines) if after(lines, i))
    copy = tmp_path / Path(name).name
    copy.write_text("\n".join([*lines[: at + 1], line, *lines[at + 1 :]]) + "\n")
    return check_page(copy, ROOT)


def under_a_generated_table(lines: list[str], i: int) -> bool:
    """The last row of the first table under a generated marker."""
    above = next((j for j in range(i, -1, -1) if not lines[j].startswith("|")), i)
    return lines[above].startswith("<!-- generated:") and lines[i].startswith("|") and not lines[i + 1].startswith("|")


@pytest.mark.parametrize("name", ["docs/benchmarks.md", "docs/results.md"])
def test_a_sentence_right_under_a_generated_table_is_checked(tmp_path, name):
    problems = with_line(tmp_path, name, under_a_generated_table, "That is 2.5× the first row.")
    assert [p for p in problems if "2.5 is referenced by nothing" in p], problems


def test_a_figure_in_a_heading_is_checked(tmp_path):
    problems = with_line(tmp_path, "README.md", lambda lines, i: lines[i].startswith("## Indexes"), "\n### 0.87 kept\n")
    assert [p for p in problems if "0.87 is referenced by nothing" in p], problems


def test_lancedbs_version_is_a_setting_only_as_its_version(tmp_path):
    """results.md section 6 declares 0.40 as LanceDB's version; a recall of 0.40 is a figure like any other."""
    problems = with_line(
        tmp_path, "docs/results.md", lambda lines, i: "LanceDB 0.40" in lines[i], "IVF_PQ kept a recall@10 of 0.40."
    )
    assert len(problems) == 1 and "0.40 is referenced by nothing" in problems[0], problems
