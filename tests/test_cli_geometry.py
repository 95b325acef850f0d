from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from cone.cli import main
from cone.geometry import measure

DISTS = {"gaussian", "cone", "rank_collapse", "redundant", "point"}


def test_synthetic_json_shape(capsys):
    assert main(["geometry", "synthetic", "--n", "512", "--d", "32", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["noise_floor"] > 0
    assert set(report["distributions"]) == DISTS
    for values in report["distributions"].values():
        assert {"anisotropy", "decorrelation", "effective_rank", "sigreg", "sigreg_centered"} <= set(values)


def test_vectors_reports_instruments(tmp_path, capsys):
    path = tmp_path / "x.npy"
    np.save(path, np.random.default_rng(0).standard_normal((100, 8)).astype(np.float32))
    assert main(["geometry", "vectors", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    expected = measure(np.load(path))
    assert report["n"] == 100 and report["d"] == 8
    for name in ("anisotropy", "decorrelation", "effective_rank", "sigreg"):
        assert report[name] == pytest.approx(getattr(expected, name), rel=1e-6), name
    assert report["effective_rank"] > 7  # Gaussian columns: nearly full rank, not a number echoed back


@pytest.mark.parametrize(
    "array", [np.zeros(4), np.zeros((1, 3)), np.array([[np.inf, 1.0], [1.0, 2.0]]), np.array([["x"], ["y"]])]
)
def test_vectors_bad_input_one_line_exit_2(tmp_path, capsys, array):
    path = tmp_path / "bad.npy"
    np.save(path, array)
    assert main(["geometry", "vectors", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cone: error:") and err.count("\n") == 1


def test_missing_and_garbage_files_no_traceback(tmp_path, capsys):
    """The garbage file through the interpreter (`python -m cone`: nothing else reaches its stderr); the missing
    and the empty one in this process (a subprocess each imported the command line again, seconds of CPU)."""
    garbage, empty = tmp_path / "g.npy", tmp_path / "empty.npy"
    garbage.write_bytes(b"not numpy")
    empty.write_bytes(b"")
    run = subprocess.run(
        [sys.executable, "-m", "cone", "geometry", "vectors", str(garbage)], capture_output=True, text=True
    )
    assert run.returncode == 2
    assert "Traceback" not in run.stderr and run.stderr.startswith("cone: error:") and run.stderr.count("\n") == 1
    for target in (tmp_path / "missing.npy", empty):
        assert main(["geometry", "vectors", str(target)]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and err.startswith("cone: error:") and err.count("\n") == 1


def test_help_documents_the_exit_codes(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "exit codes:" in out and "2 bad input" in out and "3 a model's weights" in out


def test_a_reference_checkpoint_is_found_by_name(tiny_checkpoints, capsys):
    assert main(["geometry", "checkpoint", "baseline", "--checkpoints", str(tiny_checkpoints), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["checkpoint"] == str(tiny_checkpoints / "baseline")
