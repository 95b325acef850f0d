"""The one interface every model sits behind: name, dimension, encode(texts) -> (N, d) float32."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Protocol

import numpy as np

from cone.errors import InputError

# Which space of a model: "last" (the model's own output), "emb" (its input embeddings), or the number of a
# hidden state (1 = after the first block, ...).
Layer = str | int


class Encoder(Protocol):
    name: str
    dim: int
    layer: Layer
    fingerprint: str  # hash of the weights (and the layer): an index built by other weights is refused

    def encode(self, texts: list[str], batch_size: int = 64, progress: bool = False) -> np.ndarray: ...


class LayeredEncoder(Encoder, Protocol):
    """An encoder that can pool any of its layers, several in one forward pass."""

    def all_layers(self) -> list[Layer]:
        """What ``--layers all`` means for this model: emb, then every block."""
        ...

    def at_layer(self, layer: Layer) -> LayeredEncoder:
        """The same weights pooled from ``layer`` (validated; InputError if the model has no such layer)."""
        ...

    def encode_layers(
        self, texts: list[str], layers: list[Layer], batch_size: int = 64, progress: bool = False
    ) -> dict[Layer, np.ndarray]: ...


def check_layer(name: str, layer: Layer, n_blocks: int) -> Layer:
    """``layer`` if ``name`` (a model of ``n_blocks`` blocks) has it; else a one-line InputError."""
    if layer in ("last", "emb") or (isinstance(layer, int) and 0 <= layer <= n_blocks):
        return layer
    raise InputError(f"layer {layer!r} of {name}: choose last, emb or 0..{n_blocks}")


def layer_fingerprint(weights: str, layer: Layer) -> str:
    return weights if layer == "last" else f"{weights}-layer{layer}"


def layer_order(layer: Layer) -> float:
    """Depth, for sorting and plotting: emb first, then the blocks, the model's own output last."""
    return -1.0 if layer == "emb" else float("inf") if layer == "last" else float(layer)


def files_fingerprint(paths: list[Path]) -> str:
    """sha256 over the named files' bytes (the weights), in a fixed order."""
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(path.name.encode())
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:16]
