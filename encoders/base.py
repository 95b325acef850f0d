"""The one interface every model sits behind: name, dimension, encode(texts) -> (N, d) float32."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Protocol

import numpy as np


class Encoder(Protocol):
    name: str
    dim: int
    fingerprint: str  # hash of the weights: an index built by other weights is refused

    def encode(self, texts: list[str], batch_size: int = 64, progress: bool = False) -> np.ndarray: ...


def files_fingerprint(paths: list[Path]) -> str:
    """sha256 over the named files' bytes (the weights), in a fixed order."""
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(path.name.encode())
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:16]
