"""sqlite-vec as a store: the vectors in a ``vec0`` table of one SQLite database file in the index folder
(``vectors.db``), searched by vec0's exact KNN (``WHERE embedding MATCH ? AND k = ?``: vec0 has no approximate
index; every type is exhaustive over its codes).

Types (the vec0 column's element type): ``sqlite:float`` (``float[d]``), ``sqlite:int8`` (``int8[d]``, each vector
quantized by ``vec_quantize_int8(v, 'unit')``: a coordinate in [-1, 1] times 127, rounded; queries alike),
``sqlite:bit`` (``bit[d]``, ``vec_quantize_binary``: the sign of each coordinate, compared by Hamming distance) and
``sqlite:bit+rescore:R`` (Hamming's top max(R, k) re-ranked by the exact cosine against a ``float[d]`` column of the
same table, sqlite-vec's own re-scoring recipe). Metrics: vec0's ``distance_metric``, ``l2`` (its default: the
Euclidean distance, not squared) and ``cosine``, for ``float`` and ``int8``; ``bit`` is Hamming only. vec0 has no
inner product (its metrics are l2, cosine and l1), so ``@dot`` is refused. Distances are reported as the cosine of
the unit rows: 1 - d (cosine), 1 - d²/2 (l2; an int8 distance in units of 127), 1 - 2h/d (Hamming).

Integrity is SQLite's own: the file is opened read-only and ``PRAGMA quick_check`` must say ``ok``, and the table
must be the vec0 table the manifest describes (its element type, dimension and metric), before any search.

Python's sqlite3 loads extensions only where it was built to; where it cannot, pysqlite3 (the ``pysqlite3-binary``
wheel: SQLite 3.51 built with extension loading) is used (``pip install 'cone[sqlitevec]'``; sqlite-vec 0.1.9 is
the version measured). Both are imported only here.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np

from cone.errors import DamagedIndex, InputError
from cone.indexing.codes import COSINE, DOT, HAMMING, L2, IndexType, parse_search_params, similarity
from cone.indexing.user_index import RepairRecipe, UserIndex, centered

NAME = "sqlite-vec"  # --store's name
PREFIX = "sqlite:"
ELEMENTS = ("float", "int8", "bit")
TYPE = re.compile(r"^(?P<element>float|int8|bit)(?:\+rescore:(?P<depth>\d+))?$")
DB_FILE = "vectors.db"
TABLE = "vectors"
INSTALL = "pip install 'cone[sqlitevec]'"
INT8_UNIT = 127.0  # vec_quantize_int8(v, 'unit') scales [-1, 1] to [-127, 127]
QUANTIZE = {"float": "?", "int8": "vec_quantize_int8(?, 'unit')", "bit": "vec_quantize_binary(?)"}
SQLITE_ERRORS: tuple[type[BaseException], ...] = ()  # the sqlite module's Error, once loaded


def sqlite_module() -> ModuleType:
    """A sqlite3 module that can load extensions (Python's own, else pysqlite3), or the one line that says how to
    get one; sqlite-vec must be installed too."""
    global SQLITE_ERRORS
    try:
        import sqlite_vec  # noqa: F401 -- checked here, loaded per connection
    except ImportError as exc:
        raise InputError(f"sqlite-vec store unavailable: sqlite-vec is not installed ({exc}); fix: {INSTALL}") from None
    import sqlite3

    module: ModuleType | None = sqlite3 if hasattr(sqlite3.Connection, "enable_load_extension") else None
    if module is None:
        try:
            import pysqlite3 as module
        except ImportError:
            why = "this Python's sqlite3 cannot load extensions and pysqlite3 is not installed"
            raise InputError(f"sqlite-vec store unavailable: {why}; fix: {INSTALL}") from None
    SQLITE_ERRORS = (module.Error,)
    return module


def connect(path: str, read_only: bool = False) -> object:
    """A connection with sqlite-vec loaded (autocommit: writes are in explicit transactions)."""
    module = sqlite_module()
    import sqlite_vec

    target = f"file:{path}?mode=ro" if read_only else path
    conn = module.connect(target, uri=read_only, check_same_thread=False, isolation_level=None)
    conn.enable_load_extension(True)
    sqlite_vec.load(conn)
    conn.enable_load_extension(False)
    return conn


def _parts(factory: str) -> tuple[str, int | None]:
    """``sqlite:bit+rescore:50`` -> ("bit", 50); an unknown type is refused naming the known ones."""
    found = TYPE.match(factory[len(PREFIX) :].strip().lower())
    if not found or found.group("depth") == "0" or (found.group("depth") and found.group("element") != "bit"):
        known = ", ".join(PREFIX + e for e in ELEMENTS)
        raise InputError(f"invalid --index-factory {factory!r}: sqlite-vec types are {known}, {PREFIX}bit+rescore:R")
    depth = found.group("depth")
    return found.group("element"), int(depth) if depth else None


def column(element: str, dim: int, metric: str) -> str:
    """The vec0 column declaration of the codes."""
    return f"embedding {element}[{dim}]" + ("" if metric == HAMMING else f" distance_metric={metric}")


class SqliteVecCodes:
    """A vec0 table (row, embedding[, floats]) in one connection; the Codes of cone.indexing.codes. Searches are
    serialized on the connection (the service's threads share it)."""

    def __init__(self, conn: object, kind: IndexType, dim: int, params: dict[str, int | str | None]) -> None:
        self.conn, self.kind, self.dim, self._params = conn, kind, dim, params
        self.element, self.rescore = _parts(kind.factory)
        self.lock = threading.Lock()

    @classmethod
    def create(cls, path: str, kind: IndexType, dim: int, params: dict) -> SqliteVecCodes:
        conn = connect(path)
        element, rescore = _parts(kind.factory)
        floats = f", floats float[{dim}]" if rescore else ""
        columns = f"row INTEGER PRIMARY KEY, {column(element, dim, kind.metric)}{floats}"
        conn.execute(f"CREATE VIRTUAL TABLE {TABLE} USING vec0({columns})")
        return cls(conn, kind, dim, params)

    @property
    def params(self) -> dict[str, int | str | None]:
        return self._params

    @property
    def ntotal(self) -> int:
        with self.lock:
            return int(self.conn.execute(f"SELECT count(*) FROM {TABLE}").fetchone()[0])

    def add(self, vectors: np.ndarray, start: int) -> None:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        names, values = "row, embedding", f"?, {QUANTIZE[self.element]}"
        if self.rescore:
            names, values = names + ", floats", values + ", ?"
        rows = [(start + i, v.tobytes(), v.tobytes())[: 3 if self.rescore else 2] for i, v in enumerate(vectors)]
        with self.lock:
            self.conn.execute("BEGIN")
            self.conn.executemany(f"INSERT INTO {TABLE}({names}) VALUES ({values})", rows)
            self.conn.execute("COMMIT")

    def _query(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        blob = query.tobytes()
        if self.rescore:
            sql = (
                f"SELECT c.row, vec_distance_cosine(t.floats, :q) AS d FROM (SELECT row FROM {TABLE} WHERE embedding"
                f" MATCH vec_quantize_binary(:q) AND k = :depth) c JOIN {TABLE} t ON t.row = c.row ORDER BY d LIMIT :k"
            )
            return self.conn.execute(sql, {"q": blob, "depth": max(k, self.rescore), "k": k}).fetchall()
        sql = f"SELECT row, distance FROM {TABLE} WHERE embedding MATCH {QUANTIZE[self.element]} AND k = ?"
        return self.conn.execute(sql, (blob, k)).fetchall()

    def similarities(self, distances: np.ndarray) -> np.ndarray:
        if self.rescore:
            return similarity(distances, COSINE)
        if self.element == "bit":
            return 1.0 - 2.0 * distances / self.dim
        if self.kind.metric == L2:  # Euclidean, not squared; int8's in units of 127
            scale = INT8_UNIT if self.element == "int8" else 1.0
            return similarity((distances / scale) ** 2, L2)
        return similarity(distances, COSINE)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        scores = np.full((len(queries), k), -np.inf, dtype=np.float32)
        rows = np.full((len(queries), k), -1, dtype=np.int64)
        with self.lock:
            try:
                found = [self._query(q, k) for q in queries]
            except SQLITE_ERRORS as exc:
                raise DamagedIndex(f"sqlite-vec table unreadable ({exc})") from None
        for q, hits in enumerate(found):
            if hits:
                ids, distances = np.array(hits, dtype=np.float64).T
                scores[q, : len(hits)] = self.similarities(distances.astype(np.float32))
                rows[q, : len(hits)] = ids.astype(np.int64)
        return scores, rows

    def vectors(self) -> np.ndarray:
        """The stored rows in row order: the floats, or int8 codes decoded to unit rows (bit keeps only signs)."""
        if self.element == "bit" and not self.rescore:
            raise InputError(f"a {PREFIX}bit table keeps only sign bits; {PREFIX}bit+rescore:R or float keep them")
        name = "floats" if self.rescore else "embedding"
        dtype = np.int8 if self.element == "int8" else np.float32
        with self.lock:
            blobs = self.conn.execute(f"SELECT {name} FROM {TABLE} ORDER BY row").fetchall()
        rows = np.stack([np.frombuffer(b, dtype=dtype) for (b,) in blobs]).astype(np.float32)
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        return rows / np.where(norms > 0, norms, 1.0)

    def bytes_per_vector(self) -> float:
        """The database's pages over n (codes, row ids, vec0's chunk tables; the floats of a rescoring type)."""
        with self.lock:
            pages = self.conn.execute("PRAGMA page_count").fetchone()[0]
            size = self.conn.execute("PRAGMA page_size").fetchone()[0]
        return pages * size / max(1, self.ntotal)

    def write(self, folder: Path) -> None:
        with self.lock:
            self.conn.execute("VACUUM INTO ?", (str(folder / DB_FILE),))

    def close(self) -> None:
        self.conn.close()


class SqliteVecWriter:
    """A streamed build: the shards inserted into the database file in the build's folder as they come."""

    def __init__(self, codes: SqliteVecCodes) -> None:
        self.codes, self.count = codes, 0

    def train(self, sample: np.ndarray) -> None:
        """vec0 trains nothing ('unit' int8 has a fixed scale)."""

    def add(self, vectors: np.ndarray, ids: list[str]) -> None:
        self.codes.add(vectors, self.count)
        self.count += len(vectors)

    def finish(self) -> dict[str, int | str | None]:
        self.codes.close()
        return self.codes.params


def _declared(conn: object) -> str:
    """The CREATE statement of the table, as SQLite keeps it."""
    found = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (TABLE,)).fetchone()
    return found[0] if found and found[0] else ""


# A user's own SQLite file with a vec0 table (cone doctor --index FILE.db [--table NAME]), and its repairs.

USER_SUFFIXES = (".db", ".sqlite", ".sqlite3")
VEC0 = re.compile(r"\busing\s+vec0\s*\((?P<body>.*)\)", re.IGNORECASE | re.DOTALL)
VECTOR_COLUMN = re.compile(r"(\w+)\s+(float|int8|bit)\s*\[\s*(\d+)\s*\](?:\s+distance_metric\s*=\s*(\w+))?", re.I)
KEY_COLUMN = re.compile(r"(\w+)\s+integer\s+primary\s+key", re.IGNORECASE)
CODE_BYTES = {"float": 4.0, "int8": 1.0, "bit": 1 / 8}


def _user_table(conn: object, path: Path, table: str | None) -> tuple[str, str]:
    """The vec0 table named (or the file's only one) and its column list; one line where there is none."""
    try:
        tables = dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall())
    except SQLITE_ERRORS as exc:
        raise InputError(f"--index {path}: not a SQLite database ({exc})") from None
    vec0 = {name: VEC0.search(sql or "") for name, sql in tables.items()}
    vec0 = {name: found.group("body") for name, found in vec0.items() if found}
    if table is None:
        if len(vec0) != 1:
            names = ", ".join(vec0)
            raise InputError(f"--index {path}: {len(vec0)} vec0 tables ({names or 'none'}): name one with --table")
        table = next(iter(vec0))
    if table not in tables:
        raise InputError(f"--index {path}: no table {table!r} (it has {', '.join(tables) or 'none'})")
    if table not in vec0:
        raise InputError(
            f"--index {path}: table {table!r} is not a vec0 table of sqlite-vec (CREATE VIRTUAL TABLE ... USING vec0)"
        )
    return table, vec0[table]


def _user_search(conn: object, table: str, key: str, column: str, element: str, quantize: str) -> Callable:
    sql = f"SELECT {key} FROM {table} WHERE {column} MATCH {quantize} AND k = ?"

    def search(queries: np.ndarray, k: int) -> np.ndarray:
        rows = np.full((len(queries), k), -1, dtype=np.int64)
        queries = queries if queries.dtype == np.int8 else np.asarray(queries, dtype=np.float32)  # vec_int8's own
        for q, query in enumerate(np.ascontiguousarray(queries)):
            found = [row_of[int(r)] for (r,) in conn.execute(sql, (query.tobytes(), k)).fetchall()]
            rows[q, : len(found)] = found
        return rows

    keys = [int(r) for (r,) in conn.execute(f"SELECT {key} FROM {table} ORDER BY {key}").fetchall()]
    row_of = {r: i for i, r in enumerate(keys)}
    return search


def open_user(path: Path, table: str | None) -> UserIndex:
    """A vec0 table as sqlite-vec reads it: its first vector column (element type, dimension, distance_metric);
    row i of ``--vectors`` is the row of the i-th smallest key. An int8 column's queries are quantized with
    ``vec_quantize_int8(q, 'unit')``, sqlite-vec's own quantizer."""
    try:
        conn = connect(str(path), read_only=True)
    except SQLITE_ERRORS as exc:
        raise InputError(f"--index {path}: not a readable SQLite file ({exc})") from None
    table, body = _user_table(conn, path, table)
    found = VECTOR_COLUMN.search(body)
    if found is None:
        raise InputError(f"--index {path}: vec0 table {table!r} has no float[d], int8[d] or bit[d] column")
    column, element, dim, metric = found.group(1), found.group(2).lower(), int(found.group(3)), found.group(4)
    metric = HAMMING if element == "bit" else (metric or L2).lower()
    key_found = KEY_COLUMN.search(body)
    key = key_found.group(1) if key_found else "rowid"
    n = int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    vectors = None
    if element == "float":
        blobs = conn.execute(f"SELECT {column} FROM {table} ORDER BY {key}").fetchall()
        vectors = np.stack([np.frombuffer(b, dtype=np.float32) for (b,) in blobs]) if blobs else None
    search = _user_search(conn, table, key, column, element, QUANTIZE[element])
    params = {"table": table, "column": found.group(0), "key": key}
    kind = f"vec0 {element}[{dim}], exact KNN"
    where = f"{path} (table {table})"
    return UserIndex(NAME, where, kind, metric, params, CODE_BYTES[element] * dim, n, dim, search, vectors, conn)


def user_repairs(index: UserIndex, vectors: np.ndarray) -> list[RepairRecipe]:
    """A float column (what int8 and bit round away), and the same element type over vectors with a stored mean
    subtracted (int8 scaled to its range, bit the signs of x - mean); each as a new table in a new file. A float
    column is exact: nothing to repair."""
    element = str(index.params["column"]).split()[1].split("[")[0].lower()
    if element == "float":
        return []
    table, mean = str(index.params["table"]), vectors.mean(axis=0)
    metric = COSINE if index.metric == HAMMING else index.metric
    rows = centered(vectors, mean)
    scale = INT8_UNIT / float(np.abs(rows).max())  # centred rows use the int8 range, not 'unit's [-1, 1]

    path_suffix = Path(index.path.split(" (table")[0]).suffix or ".db"

    def to_int8(x: np.ndarray) -> np.ndarray:
        return np.clip(np.rint(x * scale), -127, 127).astype(np.int8)

    def recipe(name: str, kind: str, center: bool, how: str, change: str) -> RepairRecipe:
        declared = f"embedding {kind}[{index.dim}]" + ("" if kind == "bit" else f" distance_metric={metric}")
        insert = {"float": "?", "int8": "vec_int8(?)", "bit": "vec_quantize_binary(?)"}[kind]

        def write(path: Path) -> None:
            conn = connect(str(path))
            conn.execute(f"CREATE VIRTUAL TABLE {table} USING vec0(row INTEGER PRIMARY KEY, {declared})")
            data = rows if center else np.ascontiguousarray(vectors, dtype=np.float32)
            blobs = to_int8(data) if kind == "int8" else data
            conn.execute("BEGIN")
            conn.executemany(
                f"INSERT INTO {table}(row, embedding) VALUES (?, {insert})",
                [(i, b.tobytes()) for i, b in enumerate(blobs)],
            )
            conn.execute("COMMIT")
            conn.close()

        def opened(path: Path) -> UserIndex:
            made = open_user(path, table)
            if center:
                conn = made.handle
                search = _user_search(conn, table, "row", "embedding", kind, insert)
                prepare = (lambda q: to_int8(centered(q, mean))) if kind == "int8" else (lambda q: centered(q, mean))
                made.search = lambda queries, k: search(prepare(queries), k)
            return made

        return RepairRecipe(name, how, change, write, opened, path_suffix, center, metric)

    made = [
        recipe(
            "float column",
            "float",
            False,
            f"vec0({table}: embedding float[{index.dim}] distance_metric={metric})",
            "queries as float32 blobs, not quantized",
        )
    ]
    if element == "int8":
        how = f"int8[{index.dim}] of round({scale:.1f} * (x - mean)/|x - mean|) inserted with vec_int8(?)"
        how += " (the mean and scale kept beside it)"
        change = "each query centred and normalized with the same mean, scaled and rounded alike, passed as vec_int8(?)"
    else:
        how = f"bit[{index.dim}] of vec_quantize_binary((x - mean)/|x - mean|) (the mean kept beside it)"
        change = "each query centred with the same mean before vec_quantize_binary"
    made.append(recipe(f"center ({element})", element, True, how, change))
    return made


class SqliteVecStore:
    """sqlite-vec (cone.indexing.codes.Store): ``sqlite:float``, ``sqlite:int8``, ``sqlite:bit[+rescore:R]``."""

    name = NAME
    prefix = PREFIX
    metrics = (L2, COSINE)  # vec0 has no inner product
    default_metric = L2  # vec0's own
    exact = PREFIX + "float"
    legacy_metric = None  # every sqlite-vec index records its metric
    doctor_types = ()

    open_user = staticmethod(open_user)
    repairs = staticmethod(user_repairs)

    def claims(self, path: Path) -> bool:
        return path.is_file() and path.suffix.lower() in USER_SUFFIXES

    def parse(self, factory: str, metric: str | None) -> IndexType:
        element, _ = _parts(factory)
        name = PREFIX + factory[len(PREFIX) :].strip().lower()
        if element == "bit":
            if metric not in (None, HAMMING):
                raise InputError(f"invalid index type {factory!r}: sqlite-vec compares bit vectors by Hamming only")
            return IndexType(name, self.name, HAMMING, implied=True)
        metric = metric or self.default_metric
        if metric == DOT:
            raise InputError(f"invalid index type {factory!r}: vec0 has no inner product (l2, cosine, l1 only)")
        if metric not in self.metrics:
            raise InputError(f"invalid index type {factory!r}: sqlite-vec searches by {', '.join(self.metrics)}")
        return IndexType(name, self.name, metric)

    def types(self) -> tuple[str, ...]:
        return (*(PREFIX + e for e in ELEMENTS), f"{PREFIX}bit+rescore:100")

    def _params(self, kind: IndexType, dim: int, search_params: str) -> dict[str, int | str | None]:
        if parse_search_params(search_params):
            raise InputError(f"invalid --search-params: {kind.factory} is an exact KNN, it takes no settings")
        element, rescore = _parts(kind.factory)
        if element == "bit" and dim % 8:
            raise InputError(f"{kind.factory}: vec0's bit[d] needs d a multiple of 8, not {dim}")
        metric = HAMMING if element == "bit" else kind.metric
        return {"table": TABLE, "column": column(element, dim, metric), "rescore": rescore}

    def check(self, kind: IndexType, dim: int, search_params: str) -> None:
        sqlite_module()
        self._params(kind, dim, search_params)

    def build(self, vectors: np.ndarray, kind: IndexType, search_params: str, ids: list[str] | None) -> SqliteVecCodes:
        dim = vectors.shape[1]
        codes = SqliteVecCodes.create(":memory:", kind, dim, self._params(kind, dim, search_params))
        codes.add(vectors, 0)
        return codes

    def streamed(self, folder: Path, final: Path, kind: IndexType, dim: int, search_params: str) -> SqliteVecWriter:
        params = self._params(kind, dim, search_params)
        return SqliteVecWriter(SqliteVecCodes.create(str(folder / DB_FILE), kind, dim, params))

    def read(
        self, folder: Path, kind: IndexType, dim: int, search_params: str, on_disk: bool, params: dict
    ) -> SqliteVecCodes:
        path = folder / DB_FILE
        if not path.is_file():
            raise DamagedIndex(f"{folder}: {DB_FILE} is missing")
        expected = self._params(kind, dim, search_params)["column"]
        try:
            conn = connect(str(path), read_only=True)
        except SQLITE_ERRORS as exc:
            raise DamagedIndex(f"{folder}: {DB_FILE} cannot be opened ({exc})") from None
        try:
            checked = conn.execute("PRAGMA quick_check").fetchone()[0]
            declared = _declared(conn)
        except SQLITE_ERRORS as exc:
            conn.close()
            raise DamagedIndex(f"{folder}: {DB_FILE} is not a readable SQLite database ({exc})") from None
        if checked != "ok" or str(expected) not in declared:
            conn.close()
            why = f"quick_check says {checked!r}" if checked != "ok" else f"its table is not vec0({expected})"
            raise DamagedIndex(f"{folder}: {DB_FILE} is not the table written ({why})")
        return SqliteVecCodes(conn, kind, dim, dict(params))
