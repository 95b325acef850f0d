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
) -> DenseIndex | BM25Index:
    """Validate and load; raises ConeError (bad files) or ModelUnavailable (no weights)."""
    manifest = store.read_manifest(folder)
    if manifest["kind"] == "bm25":
        return BM25Index(folder, model, corpus_fingerprint)
    encoder = load_encoder(manifest["model"], checkpoints, manifest.get("layer", "last"))
    return DenseIndex(folder, encoder, model, corpus_fingerprint)
