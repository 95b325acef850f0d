"""Dense indexes built as a stream, for corpora too big to hold: the corpus is read a shard at a time, its
vectors are written to disk shard by shard, the correction and the store's index are fitted on a random sample
of them, and the shards are then given to the store one by one (cone.indexing.codes.StreamWriter): FAISS adds
them into inverted lists that stay on disk (``merge_ondisk``), LanceDB appends them to its table and indexes it
whole, USearch adds them to its graph.

A build of N documents holds the sample and one shard of float vectors, not N; serving a FAISS or LanceDB index
holds neither (the lists, the table and the document table are read from disk). Rows are in the corpus file's
order (the in-memory build sorts ids).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

import numpy as np
from tqdm import tqdm

from cone.data.loaders import CorpusFingerprint, corpus_line, doc_text, iter_corpus
from cone.encoders.base import Encoder
from cone.errors import ClusterError, InputError
from cone.geometry import unit_rows
from cone.indexing import postprocess as pp
from cone.indexing import store
from cone.indexing.codes import IndexType, StreamWriter
from cone.indexing.dense import PARAMS_FILE, CorpusIdentity, correct_vectors, dense_manifest
from cone.indexing.factory import check_buildable, streamed_writer

SHARDS = "shards"  # scratch folder of the build: raw vectors and per-shard inverted lists, removed at the end
Document = tuple[str, dict[str, str]]


@dataclass(frozen=True)
class StreamOptions:
    shard_size: int = 50_000  # documents encoded and added at a time
    sample_size: int = 65_536  # vectors that fit the correction, measure the geometry and train FAISS
    seed: int = 0  # of the sample

    def __post_init__(self) -> None:
        if self.shard_size < 1 or self.sample_size < 2:
            raise InputError(f"--shard-size must be ≥ 1 and --sample-size ≥ 2 ({self.shard_size}, {self.sample_size})")


def check_streamable(kind: IndexType, dim: int, search_params: str = "") -> None:
    """Refuse, before any encoding, a type its store cannot build a shard at a time (FAISS: only a plain IVF
    factory's inverted lists can stay on disk) and settings the type does not take."""
    check_buildable(kind, dim, search_params)
    with tempfile.TemporaryDirectory(prefix="cone-stream-check-") as scratch:
        streamed_writer(Path(scratch), Path(scratch), kind, dim, search_params)


def _local_batches(encoder: Encoder, folder: Path, shard_size: int) -> Iterator[tuple[list[Document], np.ndarray]]:
    documents = iter_corpus(folder)
    while docs := list(islice(documents, shard_size)):
        yield docs, encoder.encode([doc_text(doc) for _, doc in docs])


def _cluster_batches(encoder: Encoder, folder: Path, bar: tqdm) -> Iterator[tuple[list[Document], np.ndarray]]:
    """The corpus read and encoded by Ray (cone.encoders.cluster); each line is checked again here, where the
    table is written, and a count short of the file's is an error, never a short index."""
    from cone.encoders.cluster import encode_corpus_lines

    corpus_file = folder / "corpus.jsonl"
    got = 0
    for lines, where, vectors in encode_corpus_lines(
        encoder.recipe, corpus_file, encoder.layer, encoder.options, bar.update
    ):
        got += len(lines)
        yield [corpus_line(line, at) for line, at in zip(lines, where, strict=True)], vectors
    expected = _count_documents(corpus_file)
    if got != expected:
        raise ClusterError(f"the cluster returned {got:,} of {expected:,} documents; no index was written")


def _count_documents(corpus_file: Path) -> int:
    with corpus_file.open("rb") as handle:
        return sum(1 for line in handle if line.strip())


class _ShardWriter:
    """Raw vectors to shard files of ``size`` rows, the document table and the corpus fingerprint, as they come."""

    def __init__(self, folder: Path, size: int, docs: store.DocWriter) -> None:
        self.folder, self.size = folder, size
        self.shards: list[Path] = []
        self.docs = docs
        self.fingerprint = CorpusFingerprint()
        self._pending: list[np.ndarray] = []
        self._pending_ids: list[str] = []

    def add(self, docs: list[Document], vectors: np.ndarray) -> None:
        for doc_id, doc in docs:
            self.docs.add(doc_id, doc["title"], doc["text"])
            self.fingerprint.add(doc_id, doc)
            self._pending_ids.append(doc_id)
        self._pending.append(np.asarray(vectors, dtype=np.float32))
        while sum(len(v) for v in self._pending) >= self.size:
            self._flush(self.size)

    def close(self) -> None:
        if self._pending:
            self._flush(sum(len(v) for v in self._pending))

    def _flush(self, rows: int) -> None:
        pending = np.concatenate(self._pending)
        path = self.folder / f"raw-{len(self.shards):05d}.npy"
        np.save(path, pending[:rows])
        ids_path(path).write_text(json.dumps(self._pending_ids[:rows]))  # a LanceDB table keeps them beside vectors
        self.shards.append(path)
        self._pending = [pending[rows:]] if rows < len(pending) else []
        self._pending_ids = self._pending_ids[rows:]


def ids_path(shard: Path) -> Path:
    """The document ids of a shard of raw vectors, in row order."""
    return shard.with_suffix(".ids.json")


def _sample(shards: list[Path], n_docs: int, options: StreamOptions) -> np.ndarray:
    """A uniform sample of rows without replacement, gathered shard by shard from the memory-mapped files."""
    rows = _sample_rows(n_docs, min(options.sample_size, n_docs), np.random.default_rng(options.seed))
    parts, start = [], 0
    for path in shards:
        vectors = np.load(path, mmap_mode="r")
        inside = rows[(rows >= start) & (rows < start + len(vectors))] - start
        parts.append(np.asarray(vectors[inside]))
        start += len(vectors)
    return np.concatenate(parts)


def _sample_rows(n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """``k`` distinct rows of ``n``, sorted, in memory for ``k`` (numpy's choice would build all ``n`` rows)."""
    if 2 * k >= n:
        return np.sort(rng.permutation(n)[:k])
    rows = np.unique(rng.integers(0, n, k))
    while len(rows) < k:
        rows = np.unique(np.concatenate([rows, rng.integers(0, n, k - len(rows))]))
    return np.sort(rng.choice(rows, k, replace=False))


def _fill(writer: StreamWriter, shards: list[Path], params: dict, bar: tqdm) -> dict[str, int | str | None]:
    """Each shard corrected and given to the store (one shard in memory at a time, its file removed once given:
    scratch disk holds one copy, not two); the index's parameters, for the manifest."""
    for path in shards:
        vectors = unit_rows(pp.apply(np.load(path), params))
        writer.add(vectors, json.loads(ids_path(path).read_text()))
        path.unlink()
        bar.update(len(vectors))
    return writer.finish()


def build_dense_streaming(
    encoder: Encoder,
    dataset: Path,
    out: Path,
    kind: IndexType,
    postprocess: str = "none",
    search_params: str = "",
    options: StreamOptions | None = None,
    progress: bool = True,
) -> Path:
    """Build (or replace, atomically) the index folder ``out`` from the BEIR folder ``dataset``'s corpus.jsonl,
    encoded here or, for a ``cone.encoders.cluster.RayEncoder``, on its Ray cluster."""
    postprocess = pp.parse(postprocess)
    options = options or StreamOptions()
    check_streamable(kind, encoder.dim, search_params)  # before any encoding
    on_cluster = encoder.encoded_on.on_cluster  # a cone.encoders.cluster.RayEncoder
    with store.writing_index(out) as folder:
        scratch = folder.path / SHARDS
        scratch.mkdir()
        writer = _ShardWriter(scratch, options.shard_size, folder.docs)
        with tqdm(desc=f"encode {encoder.name}", unit="doc", disable=not progress) as bar:
            batches = (
                _cluster_batches(encoder, dataset, bar)
                if on_cluster
                else _local_batches(encoder, dataset, options.shard_size)
            )
            for docs, vectors in batches:
                writer.add(docs, vectors)
                bar.update(0 if on_cluster else len(docs))
        writer.close()
        n_docs = folder.docs.count
        if n_docs == 0:
            raise InputError(f"{dataset / 'corpus.jsonl'}: no documents")
        sample = _sample(writer.shards, n_docs, options)
        corrected = correct_vectors(sample, postprocess)
        index = streamed_writer(folder.path, out, kind, encoder.dim, search_params)
        index.train(corrected.vectors)
        with tqdm(total=n_docs, desc="fill index", unit="doc", disable=not progress) as bar:
            index_params = _fill(index, writer.shards, corrected.params, bar)
        shutil.rmtree(scratch)
        np.savez(folder.path / PARAMS_FILE, **corrected.params)
        identity = CorpusIdentity(dataset.name, writer.fingerprint.hexdigest(), n_docs)
        folder.manifest = dense_manifest(encoder, identity, corrected, kind, search_params, len(sample), index_params)
    return out
