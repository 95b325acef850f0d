"""The project's language models as sentence encoders: mean-pooled hidden states."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from cone.encoders.base import LOCAL, TORCH, Layer, check_layer, files_fingerprint, layer_fingerprint
from cone.models.checkpoint import WEIGHTS, load_checkpoint
from cone.models.tokenizer import padded_batch


class LMEncoder:
    """Padding-masked mean of one layer's states (default the last; ``emb``: the bag of token embeddings, the
    table reg_cos acts on; ``0``: the input states, tokens + positions)."""

    encoded_on = LOCAL

    def __init__(self, name: str, path: Path, layer: Layer = "last") -> None:
        self.model, self.tokenizer, _ = load_checkpoint(path)
        self.name = name
        self.runtime = TORCH  # the project's own LMs run on torch only
        self.weights = files_fingerprint([Path(path) / WEIGHTS])
        self.dim = self.model.cfg.n_embd
        self.max_len = self.model.cfg.block_size
        self.pad_id = self.model.cfg.pad_id
        self._set_layer(layer)

    def _set_layer(self, layer: Layer) -> None:
        self.layer = check_layer(self.name, layer, self.model.cfg.n_layer)
        self.fingerprint = layer_fingerprint(self.weights, layer)

    def all_layers(self) -> list[Layer]:
        return ["emb", *range(1, self.model.cfg.n_layer + 1)]

    def at_layer(self, layer: Layer) -> LMEncoder:
        view = copy.copy(self)  # shares the loaded model
        view._set_layer(layer)
        return view

    def _batch(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        return padded_batch(self.tokenizer, texts, self.max_len, self.pad_id)

    def encode_layers(
        self, texts: list[str], layers: list[Layer], batch_size: int = 64, progress: bool = False
    ) -> dict[Layer, np.ndarray]:
        layers = [check_layer(self.name, layer, self.model.cfg.n_layer) for layer in dict.fromkeys(layers)]
        out = {layer: np.empty((len(texts), self.dim), dtype=np.float32) for layer in layers}
        # Sorting by length keeps padding (wasted compute) low; results go back in input order.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        with tqdm(total=len(texts), desc=f"encode {self.name}", unit="doc", disable=not progress) as bar:
            for start in range(0, len(texts), batch_size):
                rows = order[start : start + batch_size]
                ids, mask = self._batch([texts[i] for i in rows])
                for layer, pooled in zip(layers, self.model.encode_layers(ids, mask, layers), strict=True):
                    out[layer][rows] = pooled.numpy()
                bar.update(len(rows))
        return out

    def encode(self, texts: list[str], batch_size: int = 64, progress: bool = False) -> np.ndarray:
        return self.encode_layers(texts, [self.layer], batch_size, progress)[self.layer]
