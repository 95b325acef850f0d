"""A store added through the protocol alone (cone.indexing.codes.Store): one class here and one registry entry,
then built by ``cone index`` (in memory and streamed), served and evaluated with no other change."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from cone.cli import main
from cone.encoders.registry import Encoders
from cone.errors import DamagedIndex
from cone.indexing.codes import DOT, IndexType
from cone.indexing.factory import STORES
from cone.indexing.open import open_index
from cone.service.app import create_app

FILE = "toy.npy"


class ToyCodes:
    """Float32 rows in one .npy file, searched by brute force."""

    def __init__(self, vectors: np.ndarray) -> None:
        self.rows = np.ascontiguousarray(vectors, dtype=np.float32)

    ntotal = property(lambda self: len(self.rows))
    params = property(lambda self: {"kind": "toy"})

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        scores = queries @ self.rows.T
        rows = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(scores, rows, 1), rows

    def vectors(self) -> np.ndarray:
        return self.rows

    def bytes_per_vector(self) -> float:
        return float(self.rows.shape[1] * 4)

    def write(self, folder: Path) -> None:
        np.save(folder / FILE, self.rows)

    def close(self) -> None:
        """Nothing held."""


class ToyWriter:
    def __init__(self, folder: Path) -> None:
        self.folder, self.parts = folder, []

    def train(self, sample: np.ndarray) -> None:
        """Nothing to fit."""

    def add(self, vectors: np.ndarray, ids: list[str]) -> None:
        self.parts.append(vectors)

    def finish(self) -> dict:
        codes = ToyCodes(np.concatenate(self.parts))
        codes.write(self.folder)
        return codes.params


class ToyStore:
    name, prefix, metrics, default_metric, exact, legacy_metric = "toy", "toy:", (DOT,), DOT, "toy:exact", None
    doctor_types = ()

    def parse(self, factory: str, metric: str | None) -> IndexType:
        return IndexType(self.exact, self.name, metric or DOT)

    def types(self) -> tuple[str, ...]:
        return (self.exact,)

    def check(self, kind: IndexType, dim: int, search_params: str) -> None:
        """Takes anything."""

    def build(self, vectors, kind, search_params, ids) -> ToyCodes:
        return ToyCodes(vectors)

    def streamed(self, folder, final, kind, dim, search_params) -> ToyWriter:
        return ToyWriter(folder)

    def read(self, folder, kind, dim, search_params, on_disk, params) -> ToyCodes:
        try:
            return ToyCodes(np.load(folder / FILE))
        except (OSError, ValueError) as exc:
            raise DamagedIndex(f"{folder}: {exc}") from None


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(STORES, "toy", ToyStore())


def test_a_toy_store_is_built_streamed_served_and_evaluated_through_the_registry(
    toy, tiny_beir, tiny_checkpoints, tmp_path
):
    argv = ["index", "--model", "baseline", "--dataset", "tiny", "--data-dir", str(tiny_beir), "--no-progress"]
    argv += ["--checkpoints", str(tiny_checkpoints), "--store", "toy"]
    assert main([*argv, "--out", str(tmp_path / "memory")]) == 0
    assert main([*argv, "--out", str(tmp_path / "stream"), "--stream", "--shard-size", "16"]) == 0
    folder = tmp_path / "memory" / "baseline-toy_exact_dot"
    index = open_index(folder, Encoders(tiny_checkpoints))
    streamed = open_index(tmp_path / "stream" / folder.name, Encoders(tiny_checkpoints))
    assert index.spec.factory == streamed.spec.factory == "toy:exact@dot" and (folder / FILE).is_file()
    queries = ["cell protein gene"]
    (memory_run,), (streamed_run,) = (i.search(queries, 5).run(queries).values() for i in (index, streamed))
    assert memory_run == pytest.approx(streamed_run)
    with TestClient(create_app(folder.parent, tiny_checkpoints, load_in_background=False)) as client:
        body = client.get("/search", params={"model": folder.name, "q": "cell protein gene", "k": 5}).json()
    assert [h["doc_id"] for h in body["hits"]] == [h.doc_id for h in index.search(queries, 5).hits(0)]
    argv = ["eval", "--models", "baseline", "--dataset", "tiny", "--data-dir", str(tiny_beir), "--no-sts"]
    argv += ["--checkpoints", str(tiny_checkpoints), "--out", str(tmp_path / "eval"), "--no-progress"]
    assert main([*argv, "--store", "toy"]) == 0
    rows = {r["factory"]: r for r in json.loads((tmp_path / "eval" / "report.json").read_text())["results"]}
    assert rows["toy:exact@dot"]["metrics"]["recall_at_10_vs_flat"] == pytest.approx(1.0)
