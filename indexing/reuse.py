"""An index folder reused while it still matches what is asked of it, and rebuilt (atomically) when it does not:
stale weights or corpus, another post-processing or factory under the same name, a damaged folder. The life
cycle the eval and the demo share."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

from cone.data.loaders import RetrievalDataset
from cone.encoders.base import Encoder
from cone.errors import DamagedIndex
from cone.indexing import store
from cone.indexing.dense import CorrectedCorpus, DenseIndex, build_dense
from cone.indexing.index import Index, VectorIndex
from cone.indexing.lexical import BM25Index, build_bm25
from cone.indexing.manifest import MANIFEST, BM25Manifest, DenseManifest, read_manifest
from cone.indexing.spec import IndexSpec


def _matching(folder: Path, spec: IndexSpec, dataset: RetrievalDataset) -> DenseManifest | BM25Manifest:
    """The folder's manifest, if it records ``spec``'s index over ``dataset``'s corpus; else DamagedIndex (before
    anything is loaded for nothing)."""
    manifest = read_manifest(folder)
    manifest.check_expected(folder, spec.model, dataset.fingerprint())
    if (why := spec.mismatch(manifest)) is not None:  # a folder of that name built otherwise
        raise DamagedIndex(f"{folder}: {why}, not {spec.label}")
    return manifest


def open_or_build(
    spec: IndexSpec,
    dataset: RetrievalDataset,
    indexes: Path,
    load: Callable[[Path, DenseManifest | BM25Manifest], Index],
    build: Callable[[Path], Path],
) -> Index:
    """``spec``'s index of ``dataset`` in its folder under ``indexes`` (``load``: from the folder and its manifest)
    if it still matches; else (stale weights or corpus, damaged, built otherwise) rebuilt, atomically."""
    folder = indexes / spec.folder_name()
    store.recover(folder)
    if (folder / MANIFEST).is_file():
        try:
            return load(folder, _matching(folder, spec, dataset))
        except DamagedIndex:
            pass
    build(folder)
    return load(folder, _matching(folder, spec, dataset))


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

    def build(folder: Path) -> Path:
        return build_dense(encoder, dataset, folder, corpus(), spec.index_type, progress, spec.search_params)

    return open_or_build(spec, dataset, indexes, lambda folder, m: DenseIndex(folder, encoder, m), build)


def open_or_build_bm25(dataset: RetrievalDataset, indexes: Path, progress: bool = True) -> Index:
    """The BM25 index of ``dataset`` under ``indexes``."""
    return open_or_build(IndexSpec.bm25(), dataset, indexes, BM25Index, partial(build_bm25, dataset, progress=progress))
