"""The project's language models as sentence encoders: mean-pooled hidden states."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from cone.encoders.base import files_fingerprint
from cone.errors import InputError
from cone.models.checkpoint import WEIGHTS, load_checkpoint


class LMEncoder:
    """Padding-masked mean of one layer's states (default the last; ``emb``: input embeddings)."""

    def __init__(self, name: str, path: Path, layer: str | int = "last") -> None:
        self.model, self.tokenizer, _ = load_checkpoint(path)
        self.name = name
        states = self.model.cfg.n_layer + 1  # input embeddings, then one per block
        if layer not in ("last", "emb") and not (isinstance(layer, int) and 0 <= layer < states):
            raise InputError(f"layer {layer!r} of {name}: choose last, emb or 0..{states - 1}")
        self.layer = layer
        self.dim = self.model.cfg.n_embd
        self.fingerprint = files_fingerprint([Path(path) / WEIGHTS]) + (f"-layer{layer}" if layer != "last" else "")
        self.max_len = self.model.cfg.block_size
        self.pad_id = self.model.cfg.pad_id

    def _batch(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        encoded = [enc.ids[: self.max_len] or [self.pad_id] for enc in self.tokenizer.encode_batch(texts)]
        width = max(len(ids) for ids in encoded)
        ids = torch.full((len(encoded), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(encoded), width), dtype=torch.long)
        for row, seq in enumerate(encoded):
            ids[row, : len(seq)] = torch.tensor(seq)
            mask[row, : len(seq)] = 1
        return ids, mask

    def encode(self, texts: list[str], batch_size: int = 64, progress: bool = False) -> np.ndarray:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        # Sorting by length keeps padding (wasted compute) low; results go back in input order.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        with tqdm(total=len(texts), desc=f"encode {self.name}", unit="doc", disable=not progress) as bar:
            for start in range(0, len(texts), batch_size):
                rows = order[start : start + batch_size]
                ids, mask = self._batch([texts[i] for i in rows])
                out[rows] = self.model.encode(ids, mask, layer=self.layer).numpy()
                bar.update(len(rows))
        return out
