from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
WORDS = [
    "the",
    "a",
    "cell",
    "protein",
    "gene",
    "study",
    "patients",
    "results",
    "show",
    "that",
    "we",
    "find",
    "increased",
    "reduced",
    "expression",
    "level",
    "risk",
    "of",
    "in",
    "and",
    "with",
    "for",
    "market",
    "stock",
    "rose",
    "fell",
    "man",
    "woman",
    "plays",
    "guitar",
    "on",
    "street",
    "dog",
    "runs",
    "park",
    "new",
    "model",
    "data",
    "analysis",
    "effect",
    "treatment",
    "group",
    "control",
]


@pytest.fixture(scope="session")
def data_dir() -> Path:
    root = Path(os.environ.get("CONE_DATA_DIR", SHARED))
    if not (root / "scifact" / "corpus.jsonl").is_file():
        pytest.skip(f"shared datasets not found at {root}")
    return root


@pytest.fixture()
def tiny_corpus(tmp_path: Path) -> Path:
    """A few hundred made-up sentences: enough for a 300-entry BPE and a few training steps."""
    rng = np.random.default_rng(0)
    lines = [" ".join(rng.choice(WORDS, size=rng.integers(5, 14))) + "." for _ in range(600)]
    path = tmp_path / "tiny.txt"
    path.write_text("\n".join(lines) + "\n")
    return path
