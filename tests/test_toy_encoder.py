"""An encoder added through the registry alone (cone.encoders.registry.ENCODERS): one class here and one entry, then
indexed by ``cone index``, served, and evaluated by ``cone eval``, with no other change. Its queries carry a prefix
of their own, as E5's do, so the test also sees that each role reaches the encoder where it should."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from fastapi.testclient import TestClient

from cone.cli import main
from cone.encoders.base import DOCUMENT, IN_PROCESS, QUERY, TORCH, EncoderEntry, Layer, check_layer
from cone.encoders.registry import ENCODERS, Encoders, load_encoder, missing
from cone.indexing.dense import QUERY_BATCH
from cone.indexing.open import open_index
from cone.service.app import create_app

DIM = 64
QUERY_MARK = "toyquery"  # what the toy prepends to a query: one more word in its bag


class ToyEncoder:
    """A bag of hashed words: each word a fixed random direction, a text the normalized sum of its words'."""

    name, dim, runtime, encoded_on = "toy", DIM, TORCH, IN_PROCESS
    fingerprint = "toy-bag-of-words-1"

    def __init__(self, layer: Layer = "last", seen: list[str] | None = None, sizes: list[int] | None = None) -> None:
        self.layer = check_layer(self.name, layer, 0)
        self.seen = [] if seen is None else seen  # each call's role, shared by every layer of the one encoder
        self.sizes = [] if sizes is None else sizes  # each call's batch size, likewise

    def all_layers(self) -> list[Layer]:
        return ["last"]

    def at_layer(self, layer: Layer) -> ToyEncoder:
        return ToyEncoder(layer, self.seen, self.sizes)

    @staticmethod
    def _word(word: str) -> np.ndarray:
        seed = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "little")
        return np.random.default_rng(seed).standard_normal(DIM)

    def encode_layers(self, texts, layers, batch_size=64, progress=False, role=DOCUMENT):
        self.seen.append(role)
        self.sizes.append(batch_size)
        words = [([QUERY_MARK] if role == QUERY else []) + text.lower().split() for text in texts]
        vectors = np.stack([sum((self._word(w) for w in ws), np.zeros(DIM)) for ws in words]).astype(np.float32)
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-9)
        return {layer: vectors for layer in layers}

    def encode(self, texts, batch_size=64, progress=False, role=DOCUMENT):
        return self.encode_layers(texts, [self.layer], batch_size, progress, role)[self.layer]


@pytest.fixture
def toy(monkeypatch):
    loaded = ToyEncoder()
    monkeypatch.setitem(ENCODERS, "toy", EncoderEntry(lambda *_: loaded, lambda checkpoints: None, work=1.0))
    return loaded


def test_a_toy_encoder_is_indexed_served_and_evaluated_through_the_registry(toy, tiny_beir, tmp_path):
    assert missing("toy") is None and load_encoder("toy").fingerprint == toy.fingerprint
    argv = ["index", "--model", "toy", "--dataset", "tiny", "--data-dir", str(tiny_beir), "--no-progress"]
    assert main([*argv, "--out", str(tmp_path / "idx")]) == 0
    assert toy.seen == [DOCUMENT]  # the corpus, encoded as documents
    folder = tmp_path / "idx" / "toy"
    index = open_index(folder, Encoders())
    found = index.search(["cell protein gene"], 5)
    assert toy.seen[-1] == QUERY and len(found.hits(0)) == 5
    assert toy.sizes[-1] == QUERY_BATCH  # queries in small sorted batches (little padding), documents in large ones
    # The query's role changed its vector (the toy's mark): searching the raw document vector differs.
    assert not np.allclose(index.embed(["cell protein gene"]), toy.encode(["cell protein gene"]))
    with TestClient(create_app(folder.parent, None, load_in_background=False)) as client:
        body = client.get("/search", params={"model": folder.name, "q": "cell protein gene", "k": 5}).json()
    assert [h["doc_id"] for h in body["hits"]] == [h.doc_id for h in found.hits(0)]
    argv = ["eval", "--models", "toy", "--dataset", "tiny", "--data-dir", str(tiny_beir), "--no-progress"]
    assert main([*argv, "--out", str(tmp_path / "eval")]) == 0
    (row,) = json.loads((tmp_path / "eval" / "report.json").read_text())["results"]
    assert row["model"] == "toy" and 0.0 <= row["metrics"]["ndcg_at_10"] <= 1.0
    assert "stsb_spearman" in row["metrics"]  # STS pairs were encoded too (as queries: a symmetric task)
