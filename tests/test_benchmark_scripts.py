"""The benchmark scripts behind docs/benchmarks.md still import what they use (they run by hand, not in CI)."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).resolve().parents[1] / "benchmarks").glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
def test_benchmark_script_imports(script):
    namespace = runpy.run_path(str(script), run_name="benchmark_import_check")  # defines, does not run main()
    assert callable(namespace.get("main"))
