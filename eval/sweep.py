"""One eval end to end: a plan's rows over the data, their significance tests, and the report files. What
``cone eval``, ``cone demo`` and the benchmarks share; they only parse options and print."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cone.eval import report
from cone.eval.harness import EvalData, run_eval
from cone.eval.plan import EvalPlan
from cone.eval.results import EvalResult
from cone.eval.schema import Report
from cone.eval.significance import compare


@dataclass(frozen=True)
class EvalReport:
    payload: Report  # report.json's content
    files: report.ReportFiles
    results: list[EvalResult]


def evaluate_and_report(
    data: EvalData,
    plan: EvalPlan,
    out: Path,
    command: str,
    on_result: Callable[[EvalResult], None] | None = None,
) -> EvalReport:
    """Every row of ``plan``, compared pairwise (``cone.eval.significance``), written under ``out`` as report.json,
    report.md and figures. ``command``: what the report says produced it."""
    results = run_eval(data, plan, on_result)
    comparisons = compare(results, {name: pairs.scores for name, pairs in data.sts.items()})
    payload = report.payload(data.dataset.name, data.quick, results, command, comparisons)
    return EvalReport(payload, report.write_report(out, payload, results), results)
