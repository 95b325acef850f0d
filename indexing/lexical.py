"""BM25 through bm25s: the lexical bar a semantic model has to clear."""

from __future__ import annotations

from pathlib import Path

import bm25s
import numpy as np

from cone.errors import ConeError
from data.loaders import RetrievalDataset
from indexing import store
from indexing.dense import doc_text

BM25_FOLDER = "bm25"


def build_bm25(dataset: RetrievalDataset, out: Path, progress: bool = True) -> Path:
    doc_ids = sorted(dataset.corpus)
    tokens = bm25s.tokenize([doc_text(dataset.corpus[d]) for d in doc_ids], stopwords="en", show_progress=progress)
    retriever = bm25s.BM25()
    retriever.index(tokens, show_progress=progress)
    with store.atomic_folder(out) as tmp:
        retriever.save(str(tmp / BM25_FOLDER))
        store.write_docs(tmp, doc_ids, dataset.corpus)
        store.write_manifest(
            tmp,
            store.base_manifest(
                kind="bm25",
                model="bm25",
                encoder_fingerprint="bm25s",
                dim=None,
                metric="bm25",
                normalized=False,
                postprocess="none",
                index_factory=None,
                dataset=dataset.name,
                corpus_fingerprint=dataset.fingerprint(),
                n_docs=len(doc_ids),
            ),
        )
    return out


class BM25Index:
    kind = "bm25"

    def __init__(self, folder: Path, model: str | None = None, corpus_fingerprint: str | None = None) -> None:
        folder = Path(folder)
        self.folder = folder
        self.manifest = store.read_manifest(folder)
        store.check_expected(self.manifest, folder, model, corpus_fingerprint)
        try:
            self.retriever = bm25s.BM25.load(str(folder / BM25_FOLDER))
        except (OSError, ValueError, KeyError) as exc:
            raise ConeError(f"{folder}: corrupt BM25 index ({exc})") from None
        self.docs = store.read_docs(folder, self.manifest["n_docs"])

    def search(self, queries: list[str], k: int, progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(scores, row indices); a query with no known term scores 0 everywhere."""
        k = min(k, len(self.docs))
        tokens = bm25s.tokenize(queries, stopwords="en", return_ids=False, show_progress=False)
        scores = np.zeros((len(queries), k), dtype=np.float32)
        rows = np.zeros((len(queries), k), dtype=np.int64)
        for i, query_tokens in enumerate(tokens):
            # bm25s fails on a query that tokenizes to nothing (all stopwords, digits): every score is 0.
            all_scores = self.retriever.get_scores(query_tokens) if query_tokens else np.zeros(len(self.docs))
            top = np.argsort(-all_scores, kind="stable")[:k]
            rows[i], scores[i] = top, all_scores[top]
        return scores, rows
