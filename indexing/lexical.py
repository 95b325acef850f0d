"""BM25 through bm25s: the lexical bar a semantic model has to clear."""

from __future__ import annotations

from pathlib import Path

import bm25s
import numpy as np

from cone.data.loaders import RetrievalDataset, doc_text
from cone.errors import DamagedIndex, InputError
from cone.indexing import store
from cone.indexing.index import Queries, SearchResult
from cone.indexing.manifest import BM25Manifest, read_manifest
from cone.indexing.spec import IndexSpec

BM25_FOLDER = "bm25"


def build_bm25(dataset: RetrievalDataset, out: Path, progress: bool = True) -> Path:
    doc_ids = sorted(dataset.corpus)
    tokens = bm25s.tokenize([doc_text(dataset.corpus[d]) for d in doc_ids], stopwords="en", show_progress=progress)
    if not any(len(doc) for doc in tokens.ids):  # bm25s fails on a vocabulary of nothing
        raise InputError(f"{dataset.name}: no document has a word bm25 can index (every text empty or stopwords)")
    retriever = bm25s.BM25()
    retriever.index(tokens, show_progress=progress)
    with store.writing_index(out) as folder:
        retriever.save(str(folder.path / BM25_FOLDER))
        folder.add_docs(doc_ids, dataset.corpus)
        folder.manifest = BM25Manifest(
            model=IndexSpec.bm25().model,
            dataset=dataset.name,
            corpus_fingerprint=dataset.fingerprint(),
            n_docs=len(doc_ids),
            encoder_fingerprint="bm25s",
            metric="bm25",
        )
    return out


def check_arrays(folder: Path, retriever: bm25s.BM25) -> None:
    """bm25s's sparse matrix (a column of (document, score) pairs per term) read as bm25s searches it: every document
    number inside the corpus, every column's bounds inside the arrays, every score finite. A damaged array file
    whose header survived loads; a search would then read past the corpus (IndexError) or score garbage."""
    scores = retriever.scores
    data, indices, indptr = (np.asarray(scores.get(name)) for name in ("data", "indices", "indptr"))
    n_docs, terms = int(scores.get("num_docs") or 0), max(retriever.vocab_dict.values(), default=0)
    if not (data.ndim == indices.ndim == indptr.ndim == 1) or len(data) != len(indices) or len(indptr) <= terms:
        raise DamagedIndex(
            f"{folder}: BM25 arrays of {len(data)} scores, {len(indices)} documents and {len(indptr)} "
            f"column bounds for {terms + 1} terms do not fit together (damaged)"
        )
    if len(indptr) and (indptr[0] != 0 or indptr[-1] != len(indices) or np.any(np.diff(indptr) < 0)):
        raise DamagedIndex(f"{folder}: BM25 column bounds (indptr) are not 0 to {len(indices)} in order (damaged)")
    if len(indices) and (indices.min() < 0 or indices.max() >= n_docs):
        bad = int(indices.min()) if indices.min() < 0 else int(indices.max())
        raise DamagedIndex(f"{folder}: BM25 indices name document {bad:,} of a {n_docs:,}-document index (damaged)")
    if not np.all(np.isfinite(data)):
        raise DamagedIndex(f"{folder}: BM25 scores hold values that are not finite (damaged)")


class BM25Index:
    def __init__(self, folder: Path, manifest: BM25Manifest | None = None) -> None:
        self.folder = Path(folder)
        self.manifest = manifest or read_manifest(self.folder)
        if not isinstance(self.manifest, BM25Manifest):
            raise DamagedIndex(f"{self.folder}: a {self.manifest.kind} index, not a BM25 one")
        try:
            self.retriever = bm25s.BM25.load(str(self.folder / BM25_FOLDER))
        except (OSError, ValueError, KeyError, EOFError) as exc:
            raise DamagedIndex(f"{self.folder}: corrupt BM25 index ({exc or type(exc).__name__})") from None
        if self.retriever.scores.get("num_docs") != self.manifest.n_docs:
            raise DamagedIndex(
                f"{self.folder}: BM25 index holds {self.retriever.scores.get('num_docs')} documents, "
                f"manifest says {self.manifest.n_docs}"
            )
        check_arrays(self.folder / BM25_FOLDER, self.retriever)
        self.docs = store.read_docs(self.folder, self.manifest.n_docs)

    def search(self, queries: Queries, k: int, progress: bool = False) -> SearchResult:
        """The top ``k`` documents of each query by BM25; a query with no known term scores 0 everywhere."""
        if isinstance(queries, np.ndarray):
            raise InputError("bm25 searches texts, not vectors")
        k = max(1, min(k, len(self.docs)))
        tokens = bm25s.tokenize(list(queries), stopwords="en", return_ids=False, show_progress=False)
        scores = np.zeros((len(tokens), k), dtype=np.float32)
        rows = np.zeros((len(tokens), k), dtype=np.int64)
        for i, query_tokens in enumerate(tokens):
            # bm25s fails on a query that tokenizes to nothing (all stopwords, digits): every score is 0.
            all_scores = self.retriever.get_scores(query_tokens) if query_tokens else np.zeros(len(self.docs))
            top = np.argsort(-all_scores, kind="stable")[:k]
            rows[i], scores[i] = top, all_scores[top]
        return SearchResult(scores, rows, self.docs)
