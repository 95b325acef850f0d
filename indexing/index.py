"""The interface every index implements (dense FAISS and BM25); the eval and the service use only this."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from cone.indexing.manifest import BM25Manifest, DenseManifest
from cone.indexing.spec import IndexSpec
from cone.indexing.store import DocTable

Queries = Sequence[str] | np.ndarray  # texts, or the index's encoder's raw vectors of them (N, d)


@dataclass(frozen=True)
class Hit:
    doc_id: str
    score: float  # cosine for dense indexes, BM25 score for bm25
    row: int  # the document's row in the index's document table
    title: str = ""
    snippet: str = ""  # the first characters of the text, as the table keeps them


@dataclass(frozen=True)
class SearchResult:
    """The top k of each query, best first: the one place where index rows become document ids."""

    scores: np.ndarray  # (n_queries, k)
    rows: np.ndarray  # (n_queries, k) rows of ``docs``; -1 where the index found fewer than k
    docs: DocTable

    def hits(self, query: int, k: int | None = None) -> list[Hit]:
        """The query's top ``k`` (all it has by default) that exist: a store pads its tail with row -1 where it
        found fewer (an empty IVF probe), so the top k are read and nothing below them."""
        top = zip(self.scores[query][:k], self.rows[query][:k], strict=True)
        return [self._hit(float(score), int(row)) for score, row in top if row >= 0]

    def _hit(self, score: float, row: int) -> Hit:
        record = self.docs[row]  # one read of the table's line: id, title and snippet together
        return Hit(record["id"], score, row, record["title"], record["snippet"])

    def run(self, query_ids: Sequence[str]) -> dict[str, dict[str, float]]:
        """BEIR's run format, {query id: {doc id: score}}, for queries given in the order searched."""
        return {q: {h.doc_id: h.score for h in self.hits(i)} for i, q in enumerate(query_ids)}


class Index(Protocol):
    folder: Path
    manifest: DenseManifest | BM25Manifest
    docs: DocTable

    def search(self, queries: Queries, k: int, progress: bool = False) -> SearchResult:
        """The top ``k`` (at most the number of documents) for each query."""
        ...


class VectorIndex(Index, Protocol):
    """An index over vectors: it can say where queries and documents lie in its (corrected) space."""

    spec: IndexSpec  # what the index is: model, runtime, layer, post-processing, type with its metric

    def embed(self, queries: Queries, progress: bool = False) -> np.ndarray:
        """Queries in the index's space: encoded (if texts), corrected as the corpus was, unit norm."""
        ...

    def doc_vectors(self) -> np.ndarray:
        """The indexed document vectors in row order."""
        ...

    def bytes_per_vector(self) -> float:
        """What its store keeps per vector (cone.indexing.codes.Codes.bytes_per_vector)."""
        ...
