from __future__ import annotations

import os
from collections import Counter

# Under pytest-xdist (-n 2: pyproject.toml says how) each worker gets its share of the cores for torch, FAISS and BLAS,
# set before numpy or torch is loaded: two workers each running two threads on two cores spin against each other.
# Subprocesses (cone serve, the install test) inherit it. An explicit setting wins.
if workers := os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_name, str(max(1, (os.cpu_count() or 1) // int(workers))))
    # Ray starts its workers at a niceness 15 higher than the raylet's (lower priority): beside a busy pytest worker
    # they got almost no CPU (a 10 s test took 427 s: docs/benchmarks.md). Same priority as the test that waits on them.
    os.environ.setdefault("RAY_worker_niceness", "0")

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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """For pytest-xdist's --dist loadscope (pyproject.toml): a module's functions are one scope, run on one worker, so
    its module fixtures are built once and its tests keep their order (test_cluster's first tests need Ray not yet
    started); a class is a scope of its own. The classes go first (the two halves of the MiniLM reproduction, the
    slowest work: one starts at once on each worker), then the modules that hold slow tests, the most first, so the
    short ones fill in behind the long ones. Each worker is handed its second scope with its first: the third scope
    (test_cluster, the most slow tests and the longest module: its Ray cluster's actors each load torch) goes with
    Half0, which only encodes, and the fourth with Half1, which also runs the eval (under the old alphabetical order
    the two longest pieces of work, Half1 and test_cluster, were one worker's). (--dist loadgroup with an
    xdist_group per module did this until pytest 9, whose nodes no longer take the group xdist 3.8 appends to their
    ids: every test was then a scope of its own, each worker built every module's fixtures, and two Ray clusters
    ran at once.)"""
    slow_tests = Counter(item.module.__name__ for item in items if item.cls is None and item.get_closest_marker("slow"))
    items.sort(key=lambda item: (item.cls is None, -slow_tests[item.module.__name__]))


@pytest.fixture(scope="session", autouse=True)
def _session_caches(tmp_path_factory):
    """No test writes the user's embedding cache or --backend auto's measurements; tests that need their own cache
    still set one. No test times the runtimes for --backend auto (speed is never measured in a test): on a CPU
    without a recorded row, auto is torch, as CONE_AUTO_MEASURE=0 gives a user (tests/test_backend_auto.py stubs the
    timing to test the measured rule)."""
    cache = tmp_path_factory.mktemp("embedding-cache")
    settings = {"CONE_CACHE_DIR": str(cache), "CONE_AUTO_MEASURED": str(cache / "auto.json"), "CONE_AUTO_MEASURE": "0"}
    saved = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(scope="session")
def data_dir() -> Path:
    root = Path(os.environ.get("CONE_DATA_DIR", SHARED))
    if not (root / "scifact" / "corpus.jsonl").is_file():
        pytest.skip(f"shared datasets not found at {root}")
    return root


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> Path:
    """A few hundred made-up sentences: enough for a 300-entry BPE and a few training steps."""
    rng = np.random.default_rng(0)
    lines = [" ".join(rng.choice(WORDS, size=rng.integers(5, 14))) + "." for _ in range(600)]
    path = tmp_path_factory.mktemp("corpus") / "tiny.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="session")
def tiny_checkpoints(tiny_corpus, tmp_path_factory) -> Path:
    """CHECKPOINTS/baseline and CHECKPOINTS/regularized: tiny LMs trained for a few steps by `train`."""
    from cone.models.train import train

    from tiny import TINY, tiny_cfg

    root = tmp_path_factory.mktemp("checkpoints")
    for name, reg in (("baseline", 0.0), ("regularized", 1.0)):
        train(root / name, [tiny_corpus], tiny_cfg(reg, tokens=8 * 16 * 12, eval_interval=12), TINY, progress=False)
    return root


@pytest.fixture(scope="session")
def tiny_roberta_dir(tmp_path_factory) -> Path:
    """A randomly initialised 2-layer RoBERTa with a BPE tokenizer trained here, saved to disk."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import RobertaConfig, RobertaModel, RobertaTokenizerFast

    folder = tmp_path_factory.mktemp("tiny-roberta")
    rng = np.random.default_rng(0)
    lines = [" ".join(rng.choice(WORDS, size=10)) for _ in range(300)]
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(lines, vocab_size=400, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    tokenizer = RobertaTokenizerFast(
        tokenizer_object=bpe._tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        mask_token="<mask>",
        model_max_length=128,
    )
    tokenizer.save_pretrained(str(folder))
    config = RobertaConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=130,
    )
    RobertaModel(config).save_pretrained(str(folder))
    return folder


@pytest.fixture()
def tiny_beir(tmp_path: Path) -> Path:
    """A BEIR-format dataset of made-up documents and queries under DATA/tiny (and STS pairs), per test."""
    return make_tiny_beir(tmp_path / "data")


@pytest.fixture(scope="session")
def shared_tiny_beir(tmp_path_factory) -> Path:
    """The same dataset once per session, for tests that only read it."""
    return make_tiny_beir(tmp_path_factory.mktemp("beir") / "data")


def make_tiny_beir(root: Path) -> Path:
    import json

    rng = np.random.default_rng(1)
    folder = root / "tiny"
    (folder / "qrels").mkdir(parents=True)
    docs = [{"_id": f"d{i}", "title": f"doc {i}", "text": " ".join(rng.choice(WORDS, size=20))} for i in range(40)]
    queries = [{"_id": f"q{i}", "text": docs[i]["text"][:40]} for i in range(10)]
    (folder / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in docs) + "\n")
    (folder / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries) + "\n")
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(10))
    )
    (root / "stsb").mkdir()
    pairs = [(docs[i]["text"][:50], docs[i]["text"][:45], 5.0 - i % 6) for i in range(30)]
    (root / "stsb" / "test.csv").write_text(
        "sentence1,sentence2,score\n" + "".join(f"{a},{b},{s}\n" for a, b, s in pairs)
    )
    return root


@pytest.fixture(scope="module")
def tiny(shared_tiny_beir, tiny_checkpoints):
    """The tiny baseline LM's encoder and the tiny BEIR dataset: what the stores' tests index."""
    from cone.data.loaders import load_beir
    from cone.encoders.registry import load_encoder

    return load_encoder("baseline", tiny_checkpoints), load_beir(shared_tiny_beir, "tiny")
