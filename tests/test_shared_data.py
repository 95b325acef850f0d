"""Loaders on the real datasets in ../shared/datasets (skipped where they are absent)."""

from __future__ import annotations

from cone.data.loaders import load_beir, load_sts
from cone.models.corpus import default_corpus_files, read_documents, split


def test_scifact_test_split_as_published(data_dir):
    ds = load_beir(data_dir, "scifact", "test")
    assert len(ds.corpus) == 5183
    assert len(ds.qrels) == 300
    assert sum(len(docs) for docs in ds.qrels.values()) == 339


def test_stsb_test_pairs(data_dir):
    pairs = load_sts(data_dir / "stsb" / "test.csv")
    assert len(pairs.scores) == 1379 and min(pairs.scores) >= 0 and max(pairs.scores) <= 5


def test_lm_corpus_excludes_queries_and_sts(data_dir):
    files = default_corpus_files(data_dir)
    assert all("queries" not in f.name and "stsb" not in str(f) for f in files)
    train, val = split(read_documents(files))
    assert len(val) > 100 and len(train) > 20 * len(val)
    assert not set(train) & set(val)
