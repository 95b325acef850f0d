"""A store added through the protocol alone (cone.indexing.codes.Store): one class here and one registry entry,
then built by ``cone index`` (in memory and streamed), served and evaluated, and a user's own file of it checked by
``cone doctor --index`` and repaired, with no other change. A second one keeps its data outside its index folder
(a SQLite file), through the location members of the protocol."""

from __future__ import annotations

import json
import sqlite3
import uuid
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from cone.cli import main
from cone.encoders.registry import Encoders
from cone.errors import DamagedIndex
from cone.indexing.codes import DOT, IndexType
from cone.indexing.factory import STORES, configure_stores
from cone.indexing.location import files_state
from cone.indexing.open import open_index
from cone.indexing.user_index import RepairRecipe, UserIndex, centered, searching_centered
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

    def claims(self, path: Path) -> bool:
        return path.suffix == ".toy"

    def open_user(self, path: Path, table: str | None) -> UserIndex:
        """A user's .toy file: float32 rows kept as sign bits only, searched by the inner product of the bits."""
        rows = np.load(path)
        bits = np.where(rows > 0, 1.0, -1.0).astype(np.float32)

        def search(queries: np.ndarray, k: int) -> np.ndarray:
            return ToyCodes(bits).search(np.where(queries > 0, 1.0, -1.0).astype(np.float32), k)[1]

        return UserIndex(
            "toy", str(path), "toy sign bits", DOT, {}, rows.shape[1] / 8, len(rows), rows.shape[1], search, rows
        )

    def repairs(self, index: UserIndex, vectors: np.ndarray) -> list[RepairRecipe]:
        mean = vectors.mean(axis=0)

        def write(path: Path) -> None:
            with path.open("wb") as handle:
                np.save(handle, centered(vectors, mean))

        def opened(path: Path) -> UserIndex:
            return searching_centered(self.open_user(path, None), mean)

        return [RepairRecipe("center", "center every row and query", "queries centered", write, opened, ".toy", True)]


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


def test_a_users_own_file_of_a_toy_store_is_checked_and_repaired_by_the_doctor(toy, tmp_path, capsys):
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((600, 32)).astype(np.float32) + 3.0  # a cone: every sign bit is the same
    path = tmp_path / "mine.toy"
    with path.open("wb") as handle:
        np.save(handle, vectors)
    fix = tmp_path / "fixed.toy"
    assert main(["doctor", "--index", str(path), "--fix", str(fix), "--json", "--no-progress"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["index"]["store"] == "toy" and report["recall_at_10"] < 0.5
    (repair,) = report["repairs"]  # the toy's one repair, measured against the file as it is
    assert repair["recall_at_10"] > report["recall_at_10"] and repair["p"] < 0.05
    assert report["prescription"] == repair and fix.is_file()
    assert report["fixed"]["recall_at_10"] == repair["recall_at_10"]  # read back from --fix as its user will


# A store whose data lives outside its index folder: each build's rows in a table of one SQLite file beside the
# folders (or the file its configuration names), the table named in the folder. It implements the location members
# (cone.indexing.location) that a folder store leaves out: configured, verify, state and release.

BUILDS = "CREATE TABLE IF NOT EXISTS builds (name TEXT PRIMARY KEY, rows INTEGER)"


class SqliteToyStore(ToyStore):
    name, prefix, exact = "toysql", "toysql:", "toysql:exact"

    def __init__(self, database: Path | None = None) -> None:
        self.database = database

    def configured(self, config) -> SqliteToyStore:
        return SqliteToyStore(Path(config["toysql_db"]) if "toysql_db" in config else self.database)

    def _db(self, folder: Path) -> sqlite3.Connection:
        db = sqlite3.connect(self.database or folder.parent / ".toysql.db")
        db.execute(BUILDS)
        return db

    def streamed(self, folder, final, kind, dim, search_params) -> SqliteToyWriter:
        return SqliteToyWriter(self, folder)

    def build(self, vectors, kind, search_params, ids) -> SqliteToyCodes:
        return SqliteToyCodes(vectors, self)

    def read(self, folder, kind, dim, search_params, on_disk, params) -> ToyCodes:
        with closing(self._db(folder)) as db:
            try:
                blobs = db.execute(f'SELECT v FROM "{params["table"]}" ORDER BY id').fetchall()
            except sqlite3.OperationalError as exc:
                raise DamagedIndex(f"{folder}: {exc}") from None
        return ToyCodes(np.array([np.frombuffer(b, dtype=np.float32) for (b,) in blobs]).reshape(-1, dim))

    def verify(self, folder, kind, dim, params) -> None:
        with closing(self._db(folder)) as db:
            found = db.execute("SELECT rows FROM builds WHERE name = ?", (params["table"],)).fetchone()
        if found is None or found[0] != params["rows"]:
            raise DamagedIndex(f"{folder}: table {params['table']} is not the one built ({found})")

    def state(self, folder, kind, params):
        with closing(self._db(folder)) as db:
            found = db.execute("SELECT rows FROM builds WHERE name = ?", (params["table"],)).fetchone()
        return files_state(folder), found

    def release(self, folder: Path) -> None:
        if (folder / "toysql.json").is_file():
            table = json.loads((folder / "toysql.json").read_text())["table"]
            with closing(self._db(folder)) as db, db:
                db.execute(f'DROP TABLE IF EXISTS "{table}"')
                db.execute("DELETE FROM builds WHERE name = ?", (table,))


class SqliteToyWriter(ToyWriter):
    def __init__(self, store: SqliteToyStore, folder: Path) -> None:
        super().__init__(folder)
        self.store, self.table = store, f"t_{uuid.uuid4().hex[:12]}"

    def finish(self) -> dict:
        rows = np.concatenate(self.parts).astype(np.float32)
        (self.folder / "toysql.json").write_text(json.dumps({"table": self.table}))  # before the table: released
        with closing(self.store._db(self.folder)) as db, db:
            db.execute(f'CREATE TABLE "{self.table}" (id INTEGER PRIMARY KEY, v BLOB)')
            db.executemany(f'INSERT INTO "{self.table}" VALUES (?, ?)', ((i, r.tobytes()) for i, r in enumerate(rows)))
            db.execute("INSERT INTO builds VALUES (?, ?)", (self.table, len(rows)))
        return {"table": self.table, "rows": len(rows)}


class SqliteToyCodes(ToyCodes):
    def __init__(self, vectors: np.ndarray, store: SqliteToyStore) -> None:
        super().__init__(vectors)
        self.store, self._params = store, {}

    params = property(lambda self: self._params)

    def write(self, folder: Path) -> None:
        writer = SqliteToyWriter(self.store, folder)
        writer.add(self.rows, [])
        self._params = writer.finish()


def test_a_store_whose_data_lives_outside_its_folder_is_built_served_evaluated_and_released(
    monkeypatch, tiny_beir, tiny_checkpoints, tmp_path
):
    database = tmp_path / "vectors.db"
    monkeypatch.setitem(STORES, "toysql", SqliteToyStore())
    configure_stores({"toysql_db": str(database)})
    argv = ["index", "--model", "baseline", "--dataset", "tiny", "--data-dir", str(tiny_beir), "--no-progress"]
    argv += ["--checkpoints", str(tiny_checkpoints), "--store", "toysql", "--out", str(tmp_path / "out")]
    assert main(argv) == 0 and main([*argv[:-1], str(tmp_path / "stream"), "--stream", "--shard-size", "16"]) == 0
    folder = tmp_path / "out" / "baseline-toysql_exact_dot"
    first = json.loads((folder / "toysql.json").read_text())["table"]
    assert main(argv) == 0  # rebuilt: its own table, the one it replaced dropped by the swap (release)
    with closing(sqlite3.connect(database)) as db:
        tables = {name for (name,) in db.execute("SELECT name FROM builds")}
    assert first not in tables and json.loads((folder / "toysql.json").read_text())["table"] in tables
    assert len(tables) == 2  # and the streamed build's
    queries = ["cell protein gene"]
    index, streamed = (
        open_index(f / folder.name, Encoders(tiny_checkpoints)) for f in (folder.parent, tmp_path / "stream")
    )
    (memory_run,), (streamed_run,) = (i.search(queries, 5).run(queries).values() for i in (index, streamed))
    assert memory_run == pytest.approx(streamed_run)
    with TestClient(create_app(folder.parent, tiny_checkpoints, load_in_background=False)) as client:
        body = client.get("/search", params={"model": folder.name, "q": queries[0], "k": 5}).json()
        assert [h["doc_id"] for h in body["hits"]] == [h.doc_id for h in index.search(queries, 5).hits(0)]
        with closing(sqlite3.connect(database)) as db, db:
            db.execute("UPDATE builds SET rows = 1")  # altered underneath: the next reload's state differs
        client.app.state.registry.reload()
        assert client.get("/search", params={"model": folder.name, "q": queries[0], "k": 5}).status_code == 409
    argv = ["eval", "--models", "baseline", "--dataset", "tiny", "--data-dir", str(tiny_beir), "--no-sts"]
    argv += ["--checkpoints", str(tiny_checkpoints), "--out", str(tmp_path / "eval"), "--no-progress"]
    assert main([*argv, "--store", "toysql"]) == 0
    rows = {r["factory"]: r for r in json.loads((tmp_path / "eval" / "report.json").read_text())["results"]}
    assert rows["toysql:exact@dot"]["metrics"]["recall_at_10_vs_flat"] == pytest.approx(1.0)
