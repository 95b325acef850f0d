"""Open any index folder by its manifest, with the encoder it was built by."""

from __future__ import annotations

from pathlib import Path

from cone.encoders.base import Encoder
from cone.encoders.registry import load_encoder
from cone.indexing import store
from cone.indexing.dense import DenseIndex
from cone.indexing.index import Index
from cone.indexing.lexical import BM25Index


def open_index(
    folder: Path,
    checkpoints: Path | None = None,
    model: str | None = None,
    corpus_fingerprint: str | None = None,
    encoders: dict[tuple[str, str | int], Encoder] | None = None,
    manifest: store.Manifest | None = None,
) -> Index:
    """Validate and load; raises DamagedIndex (bad or stale files) or ModelUnavailable (no weights).

    ``encoders`` (model, layer) -> encoder lets indexes of one model share one loaded encoder; ``manifest``
    is the folder's, when the caller has read it already.
    """
    manifest = manifest or store.read_manifest(folder)
    manifest.check_expected(Path(folder), model, corpus_fingerprint)  # before loading weights for nothing
    if manifest.kind == "bm25":
        return BM25Index(folder, manifest)
    key = (manifest.model, manifest.layer)
    encoders = {} if encoders is None else encoders
    if key not in encoders:
        encoders[key] = load_encoder(key[0], checkpoints, key[1])
    return DenseIndex(folder, encoders[key], manifest)
