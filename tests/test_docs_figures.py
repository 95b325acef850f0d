"""The docs' measured figures against the committed reports they cite (tests/docs_refs.py has the syntax)."""

from __future__ import annotations

from pathlib import Path

import pytest

from docs_refs import CHECKED, check_page

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
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
    "<!-- settings: 0.5 -->\n"
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
