"""An index folder reused while it still matches what is asked of it, and rebuilt (atomically) when it does not:
stale weights or corpus, another post-processing or factory under the same name, a damaged folder. The life
cycle the eval and the demo share."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from cone.data.loaders import RetrievalDataset
from cone.encoders.base import Encoder
from cone.encoders.registry import LEXICAL
from cone.errors import DamagedIndex
from cone.indexing import postprocess as pp
from cone.indexing import store
from cone.indexing.dense import CorrectedCorpus, build_dense
from cone.indexing.factory import DEFAULT_FACTORY, parse_factory
from cone.indexing.index import Index, VectorIndex
from cone.indexing.lexical import build_bm25
from cone.indexing.manifest import MANIFEST
from cone.indexing.open import open_index


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
    model: str,
    dataset: RetrievalDataset,
    spec: str,
    corpus: Callable[[], CorrectedCorpus],
    factory: str,
    indexes: Path,
    search_params: str = "",
    progress: bool = True,
) -> VectorIndex:
    """``model``'s index of ``dataset`` under ``indexes`` for one post-processing and factory. ``corpus`` gives
    ``spec``'s correction, computed on the first build that needs it (callers share it between factories);
    ``search_params`` apply to every factory but the exact one."""
    layer, runtime = encoder.layer, encoder.runtime
    factory = parse_factory(factory).spec  # with its metric: PQ32 and PQ32@l2 are two indexes
    folder = indexes / store.index_name(model, spec, layer, factory, runtime)
    params = "" if factory == DEFAULT_FACTORY else search_params

    def open_matching() -> VectorIndex:
        index = open_index(
            folder,
            model=model,
            corpus_fingerprint=dataset.fingerprint(),
            encoders={(model, layer, runtime): encoder},
            runtime=runtime,
        )
        built = (index.manifest.postprocess, index.spec, index.manifest.search_params)
        if built != (pp.parse(spec), factory, params):  # a folder of that name built otherwise: not this one
            raise DamagedIndex(f"{folder}: built as {built}, not {(spec, factory, params)}")
        return index

    return open_or_build(
        folder, open_matching, lambda: build_dense(encoder, dataset, folder, corpus(), factory, progress, params)
    )


def open_or_build_bm25(dataset: RetrievalDataset, indexes: Path, progress: bool = True) -> Index:
    """The BM25 index of ``dataset`` under ``indexes``."""
    folder = indexes / LEXICAL
    return open_or_build(
        folder,
        lambda: open_index(folder, model=LEXICAL, corpus_fingerprint=dataset.fingerprint()),
        lambda: build_bm25(dataset, folder, progress),
    )
