"""Open any index folder by its manifest, with the encoder it was built by."""

from __future__ import annotations

from pathlib import Path

from encoders.registry import REFERENCE_CHECKPOINTS, load_encoder
from indexing import store
from indexing.dense import DenseIndex
from indexing.lexical import BM25Index


def open_index(
    folder: Path,
    checkpoints: Path = REFERENCE_CHECKPOINTS,
    model: str | None = None,
    corpus_fingerprint: str | None = None,
    encoders: dict | None = None,
) -> DenseIndex | BM25Index:
    """Validate and load; raises ConeError (bad files) or ModelUnavailable (no weights).

    ``encoders`` (model, layer) -> encoder lets indexes of one model share one loaded encoder.
    """
    manifest = store.read_manifest(folder)
    if manifest["kind"] == "bm25":
        return BM25Index(folder, model, corpus_fingerprint)
    key = (manifest["model"], manifest.get("layer", "last"))
    encoders = {} if encoders is None else encoders
    if key not in encoders:
        encoders[key] = load_encoder(key[0], checkpoints, key[1])
    return DenseIndex(folder, encoders[key], model, corpus_fingerprint)
