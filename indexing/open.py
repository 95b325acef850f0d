"""Open any index folder by its manifest, with the encoder it was built by, which the caller provides."""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path

from cone.encoders.base import Runtime
from cone.encoders.registry import Encoders
from cone.errors import InputError
from cone.indexing.dense import DenseIndex
from cone.indexing.factory import index_state as store_state
from cone.indexing.index import Index
from cone.indexing.lexical import BM25Index
from cone.indexing.location import files_state
from cone.indexing.manifest import BM25Manifest, DenseManifest, read_manifest
from cone.indexing.spec import LEXICAL, recorded_type


def open_index(
    folder: Path,
    encoders: Encoders | None = None,
    model: str | None = None,
    corpus_fingerprint: str | None = None,
    manifest: DenseManifest | BM25Manifest | None = None,
    runtime: Runtime | None = None,
) -> Index:
    """Validate and load; raises DamagedIndex (bad or stale files) or ModelUnavailable (no weights).

    ``encoders`` provides the encoder of the manifest's (model, layer, runtime), so that indexes of one model share
    it (a BM25 index needs none; without, a fresh ``Encoders`` of the shipped checkpoints); ``manifest`` is the
    folder's, when the caller has read it already. Queries are encoded by the runtime the manifest names (torch,
    OpenVINO, ...), as the corpus was; ``runtime``, if given, is the one the caller expects, and an index built by
    another is refused.
    """
    manifest = manifest or read_manifest(folder)
    manifest.check_expected(Path(folder), model, corpus_fingerprint, runtime)  # before loading weights for nothing
    if manifest.kind == LEXICAL:
        return BM25Index(folder, manifest)
    encoders = Encoders() if encoders is None else encoders
    return DenseIndex(folder, encoders.get(manifest.model, manifest.layer, manifest.runtime), manifest)


def index_state(folder: Path, manifest: DenseManifest | BM25Manifest) -> Hashable | None:
    """The token that stays equal while the index at ``folder`` is made of the very data it was opened from (its
    files; and, for a store that keeps its data in a server, what it keeps there); None where it cannot be told.
    StoreUnavailable where that server cannot be reached."""
    if manifest.kind == LEXICAL:
        return files_state(folder)
    try:
        kind = recorded_type(manifest.index_factory, manifest.index_metric)
    except InputError:  # a type cone does not know: the index is unavailable, and opened again at every reload
        return None
    return store_state(folder, kind, manifest.index_params)
