"""The install path a user (and the image) takes: a wheel, installed into a fresh venv, run from elsewhere."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    # From a clean copy: an in-tree build/ left by an earlier build could smuggle stale modules into the wheel.
    source = tmp_path_factory.mktemp("source") / "cone"
    skip = shutil.ignore_patterns(".git", ".venv", "build", "runs", "*.egg-info", "__pycache__", ".*_cache")
    shutil.copytree(ROOT, source, ignore=skip)
    dist = tmp_path_factory.mktemp("dist")
    # The same build as the Dockerfile's (pip wheel --no-deps), from this venv's setuptools (no download).
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist)]
    subprocess.run([*command, str(source)], check=True, capture_output=True, text=True)
    (found,) = dist.glob("cone-*.whl")
    return found


def test_wheel_holds_only_the_cone_namespace_and_the_checkpoints(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert "cone" in tops and all(t == "cone" or (t.startswith("cone-") and t.endswith(".dist-info")) for t in tops)
    for model in ("baseline", "regularized"):
        for file in ("config.json", "model.safetensors", "tokenizer.json", "token_counts.safetensors"):
            assert f"cone/checkpoints/{model}/{file}" in names
    assert "cone/service/static/index.html" in names and "cone/cli/main.py" in names
    assert not [n for n in names if n.endswith("resume.pt") or "/tests/" in n]


@pytest.fixture(scope="module")
def fresh_venv(wheel, tmp_path_factory) -> Path:
    """A new venv with the wheel installed (--no-deps); its dependencies come from this venv's site-packages."""
    root = tmp_path_factory.mktemp("fresh-venv")
    venv.create(root, with_pip=False)
    python = root / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # A plain path line: the .pth files over there (this repository's editable install among them) are not run.
    (Path(site) / "test-venv-packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index"]
    subprocess.run([*install, str(wheel)], check=True, capture_output=True, text=True)
    return root


def _run(command: list, cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("CONE_CHECKPOINTS", "PYTHONPATH")}
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_installed_wheel_measures_and_encodes_with_its_shipped_checkpoints(fresh_venv, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    report = json.loads(_run([fresh_venv / "bin" / "cone", "geometry", "checkpoint", "regularized", "--json"], outside))
    assert report["checkpoint"].startswith(str(fresh_venv)) and "site-packages/cone/checkpoints" in report["checkpoint"]
    assert report["tokens_seen"] >= 4_000_000 and report["table"]["n"] == 16392 and report["table"]["d"] == 256
    probe = (
        "import json, cone, numpy as np\n"
        "from cone.encoders import load_encoder\n"
        "vectors = load_encoder('baseline').encode(['Aspirin lowers the risk of a second heart attack.'])\n"
        "print(json.dumps({'cone': cone.__file__, 'shape': vectors.shape, 'finite': bool(np.isfinite(vectors).all()),"
        " 'norm': float(np.linalg.norm(vectors))}))\n"
    )
    found = json.loads(_run([fresh_venv / "bin" / "python", "-c", probe], outside))
    assert found["cone"].startswith(str(fresh_venv)) and not found["cone"].startswith(str(ROOT))
    assert found["shape"] == [1, 256] and found["finite"] and found["norm"] > 0
