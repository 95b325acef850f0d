"""An index folder reused while it still matches what is asked of it, and rebuilt (atomically) when it does not:
stale weights or corpus, another post-processing or factory under the same name, a damaged folder. The life
cycle the eval and the demo share."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from cone.data.loaders import RetrievalDataset
from cone.encoders.base import Encoder
from cone.encoders.registry import Encoders
from cone.errors import DamagedIndex
from cone.indexing import store
from cone.indexing.dense import CorrectedCorpus, build_dense
from cone.indexing.index import Index, VectorIndex
from cone.indexing.lexical import build_bm25
from cone.indexing.manifest import MANIFEST
from cone.indexing.open import open_index
from cone.indexing.spec import IndexSpec


def open_or_build(folder: Path, open_it: Callable[[], Index], build: Callable[[], Path]) -> Index:
    """The index in ``folder`` if it still matches; else (stale weights or corpus, damaged) rebuilt, atomically."""
    store.recover(folder)
    if (folder / MANIFEST).is_file():
        try:
            return open_it()
        except DamagedIndex:
            pass
    build()
    return open_it()


def open_or_build_dense(
    encoder: Encoder,
    dataset: RetrievalDataset,
    spec: IndexSpec,
    corpus: Callable[[], CorrectedCorpus],
    indexes: Path,
    progress: bool = True,
) -> VectorIndex:
    """The index of ``spec`` (``encoder``'s: its model, layer and runtime) over ``dataset``, in its folder under
    ``indexes``. ``corpus`` gives the spec's correction, computed on the first build that needs it (callers share
    it between index types)."""
    folder = indexes / spec.folder_name()

    def open_matching() -> VectorIndex:
        index = open_index(
            folder,
            model=spec.model,
            corpus_fingerprint=dataset.fingerprint(),
            encoders=Encoders(None, encoder),
            runtime=spec.runtime,
        )
        if (why := spec.mismatch(index.manifest)) is not None:  # a folder of that name built otherwise
            raise DamagedIndex(f"{folder}: {why}, not {spec.label}")
        return index

    def build() -> Path:
        return build_dense(encoder, dataset, folder, corpus(), spec.index_type, progress, spec.search_params)

    return open_or_build(folder, open_matching, build)


def open_or_build_bm25(dataset: RetrievalDataset, indexes: Path, progress: bool = True) -> Index:
    """The BM25 index of ``dataset`` under ``indexes``."""
    spec = IndexSpec.bm25()
    folder = indexes / spec.folder_name()
    return open_or_build(
        folder,
        lambda: open_index(folder, model=spec.model, corpus_fingerprint=dataset.fingerprint()),
        lambda: build_bm25(dataset, folder, progress),
    )
