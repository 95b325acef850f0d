"""A user's own pgvector table, as ``cone doctor --index postgresql://USER@HOST/DB?table=T&column=C`` reads it, and
the repairs pgvector offers for it (cone.indexing.user_index; the pgvector store's ``open_user`` and ``repairs``).

Read-only: every statement on the user's server runs in a read-only session (``default_transaction_read_only``):
the catalog (the column's type and dimension, the ANN index on it: access method, operator class, expression, build
options), the vectors (COPY ... TO STDOUT), and each query as the user's queries ask the index (the planner told
to use it, ``EXPLAIN`` checked to name it), beside exact search in the database (the same ORDER BY by the float
operator, with index scans off). The repairs are built and measured on cone's embedded server, in a temporary table
holding a copy of the vectors, never on the user's: halfvec (an expression index on ``embedding::halfvec(d)``) and
the binary recipe on centered vectors (an expression index on ``binary_quantize(l2_normalize(embedding - mean))``,
the query centered the same way, the top R re-ranked by the float vectors). ``--fix`` alone writes to the user's
server: the chosen repair's index, made beside the user's with ``CREATE INDEX CONCURRENTLY`` (nothing dropped or
altered), then measured as built there.

Query parameters of the location, besides the server's own: ``table`` (``schema.table`` allowed), ``column`` (by
default the table's only vector or halfvec column), ``index`` (by default the column's only ANN index), and for
the binary recipe ``rescore`` (R, default 40) and ``metric`` (the float re-rank's: cosine, l2 or dot; default
cosine, as pgvector's README). The DSN is never printed: only host, port, database and table.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import numpy as np

from cone.errors import DamagedIndex, InputError, StoreUnavailable
from cone.indexing.codes import COSINE
from cone.indexing.pgvector_store import (
    COPY_HEADER,
    COPY_TRAILER,
    DATA_ENV,
    EMBEDDED,
    HNSW_BUILD,
    OPERATOR,
    OPS,
    Server,
    _embedded_uri,
    _redacted,
    copy_rows,
    parse_copied,
    psycopg_module,
    vector_text,
)
from cone.indexing.user_index import RepairRecipe, UserIndex

OPTIONS = ("table", "column", "index", "rescore", "metric")
DEFAULT_RESCORE = 40
METRIC_OF_OPS = {suffix: metric for metric, suffix in OPS.items()}  # cosine_ops -> cosine, ...
SETTINGS = ("hnsw.ef_search", "hnsw.iterative_scan", "ivfflat.probes", "ivfflat.iterative_scan")
SCRATCH = "cone_doctor_vectors"  # the temporary table of the repairs, on cone's embedded server


def ident(name: str) -> str:
    """A table's name (``schema.table`` allowed) or a column's, quoted as SQL (psycopg's sql.Identifier)."""
    return psycopg_module().sql.Identifier(*name.split(".", 1)).as_string()


def run(conn: Any, text: str, params: Sequence[object] | None = None) -> Any:
    """One statement of SQL built here (every name quoted by ``ident``, every value a parameter or a literal made of
    floats), its errors as one line of cone's."""
    psycopg = psycopg_module()
    try:
        return conn.execute(psycopg.sql.SQL(text), params)  # type: ignore[arg-type]
    except psycopg.Error as exc:
        line = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        if isinstance(exc, psycopg.OperationalError):  # the server gone, a statement timed out: transient
            raise StoreUnavailable(f"postgres unreachable: {line}") from None
        raise InputError(f"postgres: {line}") from None


@dataclass(frozen=True)
class Location:
    """What ``--index postgresql://...`` names: the server (its DSN, never printed) and the table's column."""

    dsn: str
    table: str
    column: str | None
    index: str | None
    rescore: int
    metric: str

    @property
    def where(self) -> str:
        return f"postgres at {_redacted(self.dsn)}, table {self.table}"


def parse_location(text: str, table: str | None) -> Location:
    parts = urlsplit(text)
    query = parse_qsl(parts.query, keep_blank_values=True)
    ours = {key: value for key, value in query if key in OPTIONS}
    dsn = urlunsplit(parts._replace(query=urlencode([(k, v) for k, v in query if k not in OPTIONS], safe="/")))
    table = ours.get("table") or table
    if not table:
        raise InputError("--index postgresql://...: name the table (?table=T, and &column=C where it has several)")
    rescore = ours.get("rescore", str(DEFAULT_RESCORE))
    if not rescore.isdigit() or int(rescore) < 1:
        raise InputError(f"--index postgresql://...: rescore={rescore!r} is not a count of candidates (R > 0)")
    metric = ours.get("metric", COSINE)
    if metric not in OPERATOR:
        raise InputError(f"--index postgresql://...: metric={metric!r}: the re-rank's metric is cosine, l2 or dot")
    return Location(dsn, table, ours.get("column") or None, ours.get("index") or None, int(rescore), metric)


@dataclass(frozen=True)
class Ordering:
    """How queries ask an index for their top k, as SQL text: the indexed expression ``left`` ordered by ``op`` to
    the query as the index sees it (``right``, its ``%s`` the query vector); for the binary recipe the top
    ``rescore`` re-ranked by the float ``column`` under ``float_op``."""

    left: str
    op: str
    right: str
    column: str  # the float column (a halfvec one cast to vector)
    cast: str  # vector(d)
    float_op: str
    rescore: int | None = None

    def query(self, table: str, key: str) -> str:
        if self.rescore is None:
            return f"SELECT {key} FROM {table} ORDER BY {self.left} {self.op} {self.right} LIMIT %s"
        return (
            f"SELECT key FROM (SELECT {key} AS key, {self.column} AS v FROM {table} ORDER BY {self.left} {self.op} "
            f"{self.right} LIMIT {self.rescore:d}) AS candidates ORDER BY v {self.float_op} %s::{self.cast} LIMIT %s"
        )

    def params(self, vector: str, k: int) -> tuple[object, ...]:
        return (vector, k) if self.rescore is None else (vector, vector, k)

    def exact(self, table: str, key: str) -> str:
        return f"SELECT {key} FROM {table} ORDER BY {self.column} {self.float_op} %s::{self.cast} LIMIT %s"

    def shown(self, table: str) -> str:
        """The query as the user writes it ($1 the query vector)."""
        return self.query(table, "*").replace("%s", "$1", 2 if self.rescore is not None else 1).replace("%s", "10")


class Searcher:
    """Queries run as ``ordering`` says against ``table`` over ``conn``, the planner told to use the index (checked
    with EXPLAIN once); each hit's ``key`` mapped to its row number."""

    def __init__(self, conn: Any, table: str, key: str, rows: dict[str, int], ordering: Ordering, settings: dict):
        self.conn, self.table, self.key, self.rows, self.ordering = conn, table, key, rows, ordering
        self.settings = settings

    def _set(self, scan: bool) -> None:
        for name, value in self.settings.items():
            run(self.conn, f"SET LOCAL {name} = {psycopg_module().sql.Literal(value).as_string()}")
        toggles = ("enable_seqscan",) if not scan else ("enable_indexscan", "enable_bitmapscan")
        for toggle in toggles:
            run(self.conn, f"SET LOCAL {toggle} = off")

    def check_uses(self, index: str, probe: np.ndarray) -> None:
        with self.conn.transaction():
            self._set(scan=False)
            text = self.ordering.query(self.table, self.key)
            plan = "\n".join(
                r[0] for r in run(self.conn, f"EXPLAIN {text}", self.ordering.params(vector_text(probe), 10))
            )
        if index not in plan:
            raise InputError(
                f"the planner does not use index {index} for ORDER BY {self.ordering.left} {self.ordering.op}"
            )

    def _top(self, text: str, queries: np.ndarray, k: int, scan: bool, exact: bool) -> np.ndarray:
        found = np.full((len(queries), k), -1, dtype=np.int64)
        with self.conn.transaction():
            self._set(scan)
            for i, query in enumerate(queries):
                vector = vector_text(query)
                params = (vector, k) if exact else self.ordering.params(vector, k)
                keys = [row[0] for row in run(self.conn, text, params)]
                # a row written since the vectors were read is none of the rows measured: -1, as a miss
                found[i, : len(keys)] = [self.rows.get(key, -1) for key in keys]
        return found

    def search(self, queries: np.ndarray, k: int) -> np.ndarray:
        return self._top(self.ordering.query(self.table, self.key), queries, k, scan=False, exact=False)

    def exact(self, queries: np.ndarray, k: int = 10) -> np.ndarray:
        return self._top(self.ordering.exact(self.table, self.key), queries, k, scan=True, exact=True)


@dataclass
class UserTable:
    """What the doctor read of the user's table, kept for the repairs (UserIndex.handle)."""

    location: Location
    server: Server
    conn: Any  # read-only
    column: str  # quoted
    column_type: str  # vector or halfvec
    dim: int
    rows: dict[str, int]  # ctid -> row number (the order of the vectors read)
    index: str | None  # the user's index's name
    access: str | None  # hnsw, ivfflat
    opclass: str
    expression: str | None  # the index's, where it indexes an expression of the column
    options: dict[str, str]  # its build options (m, ef_construction; lists)
    settings: dict[str, str]  # the server's search settings, applied alike to every repair measured
    metric: str  # the float metric the index approximates
    scratch: Any = None  # the embedded server's session holding the copy the repairs are built on (made once)


def _column(conn: Any, oid: int, location: Location) -> tuple[str, str, int, int]:
    """(name, type name, attnum, typmod) of the column the doctor reads; one line where it is not a float vector."""
    columns = run(
        conn,
        "SELECT a.attname, t.typname, a.attnum, a.atttypmod, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
        "JOIN pg_type t ON t.oid = a.atttypid WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped "
        "ORDER BY a.attnum",
        (oid,),
    ).fetchall()
    floats = [c for c in columns if c[1] in ("vector", "halfvec")]
    if location.column is None:
        if len(floats) != 1:
            named = ", ".join(c[0] for c in floats) or "none"
            raise InputError(f"{location.where}: name the column (&column=C); its vector columns: {named}")
        return floats[0][:4]
    found = next((c for c in columns if c[0] == location.column), None)
    if found is None:
        raise InputError(
            f"{location.where} has no column {location.column} (its columns: {', '.join(c[0] for c in columns)})"
        )
    if found[1] not in ("vector", "halfvec"):
        raise InputError(
            f"{location.where}: column {location.column} is {found[4]}, not pgvector's vector or halfvec: the doctor "
            "reads float vectors"
        )
    return found[:4]


INDEXES = """
SELECT i.relname, am.amname, opc.opcname, pg_get_expr(x.indexprs, x.indrelid), x.indkey[0], i.reloptions
  FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_am am ON am.oid = i.relam
  JOIN pg_opclass opc ON opc.oid = x.indclass[0]
 WHERE x.indrelid = %s AND am.amname IN ('hnsw', 'ivfflat') AND x.indisvalid
 ORDER BY i.relname
"""


def _ordering(table: UserTable, expression: str | None, opclass: str) -> Ordering:
    """The ORDER BY that uses an index of ``opclass`` on ``expression`` (None: on the column itself)."""
    d, column = table.dim, table.column
    floats = column if table.column_type == "vector" else f"{column}::vector({d})"
    if opclass == "bit_hamming_ops" and expression and "binary_quantize" in expression:
        right = f"binary_quantize(%s::{table.column_type}({d}))"
        rescore = table.location.rescore
        return Ordering(expression, "<~>", right, floats, f"vector({d})", OPERATOR[table.metric], rescore)
    family, _, ops = opclass.partition("_")
    if family not in ("vector", "halfvec") or ops not in METRIC_OF_OPS:
        raise InputError(
            f"{table.location.where}: an index with {opclass} on {expression or column} is not one the doctor "
            "measures (vector or halfvec with cosine, l2 or ip ops; or the binary recipe with bit_hamming_ops)"
        )
    op = OPERATOR[METRIC_OF_OPS[ops]]
    return Ordering(expression or column, op, f"%s::{family}({d})", floats, f"vector({d})", op)


def _one_dimension(conn: Any, location: Location, name: str) -> int:
    """The dimension of a column declared without one (``vector``, not ``vector(d)``): its rows' one dimension, or
    one line where they have several (no index can be built on it then)."""
    dims = run(conn, f"SELECT DISTINCT vector_dims({ident(name)}) FROM {ident(location.table)} LIMIT 3").fetchall()
    found = sorted(r[0] for r in dims if r[0] is not None)
    if len(found) != 1:
        said = ", ".join(str(d) for d in found) or "none"
        raise InputError(
            f"{location.where}: column {name} has no one dimension (its rows': {said}); an index needs one"
        )
    return found[0]


def _mentions(expression: str | None, column: str) -> bool:
    """Whether an index's expression (as pg_get_expr prints it) reads the column: its name as a whole word."""
    return (
        bool(expression)
        and re.search(rf'(?<![\w"]){re.escape(column)}(?![\w"])|"{re.escape(column)}"', expression) is not None
    )


def _metric(opclass: str, location: Location) -> str:
    return location.metric if opclass.startswith("bit_") else METRIC_OF_OPS.get(opclass.partition("_")[2], COSINE)


def open_user_table(text: str, table_option: str | None) -> UserIndex:
    """The user's table and the index its queries use, read in a read-only session."""
    location = parse_location(text, table_option)
    server = Server(_redacted(location.dsn), dsn=location.dsn)
    host = str(psycopg_module().conninfo.conninfo_to_dict(location.dsn).get("host") or "")
    if host and (Path(host) / "PG_VERSION").is_file():  # the embedded server's data folder: started as cone does
        _embedded_uri(Path(host))
    conn = server.connect(read_only=True)
    if run(conn, "SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone() is None:
        raise InputError(
            f"{location.where}: the server has no pgvector extension (vector) in this database; the doctor only "
            "reads (CREATE EXTENSION vector is yours to run)"
        )
    oid = run(conn, "SELECT to_regclass(%s)::oid", (ident(location.table),)).fetchone()[0]
    if oid is None:
        raise InputError(f"{location.where}: no such table")
    name, type_name, attnum, typmod = _column(conn, oid, location)
    column = ident(name)
    dim = typmod if typmod > 0 else _one_dimension(conn, location, name)
    found = [r for r in run(conn, INDEXES, (oid,)) if r[4] == attnum or (r[4] == 0 and _mentions(r[3], name))]
    if location.index is not None:
        found = [r for r in found if r[0] == location.index]
        if not found:
            raise InputError(f"{location.where}: no hnsw or ivfflat index {location.index} on column {name}")
    if len(found) > 1:
        named = ", ".join(r[0] for r in found)
        raise InputError(f"{location.where}: column {name} has several indexes ({named}); name one: &index=NAME")
    index, access, opclass, expression, _, options = found[0] if found else (None, None, "", None, 0, None)
    table = UserTable(
        location,
        server,
        conn,
        column,
        type_name,
        dim,
        {},
        index,
        access,
        opclass,
        expression,
        dict(o.split("=", 1) for o in options or []),
        {},
        _metric(opclass, location),
    )
    vectors = _read_vectors(table)
    # pgvector's settings exist once its library is loaded (reading the vectors did): as the user's session has them
    settings = {s: v for s in SETTINGS if (v := run(conn, "SELECT current_setting(%s, true)", (s,)).fetchone()[0])}
    table.settings.update(settings)
    ordering = _ordering(table, expression, opclass) if index else None
    searcher = Searcher(conn, ident(location.table), "ctid::text", table.rows, ordering or _exact_only(table), settings)
    if index is not None:
        searcher.check_uses(index, vectors[0])
    code = _index_bytes(conn, _beside(location.table, index), len(vectors)) if index else 4.0 * dim
    kind = f"{access} ({opclass}) on {expression or name}" if index else f"no index on {name} (a sequential scan)"
    params: dict[str, object] = {"index": index, "column": f"{name} {type_name}({dim})", **table.options, **settings}
    if ordering is not None and ordering.rescore is not None:
        params["rescore"] = f"top {ordering.rescore} re-ranked by {ordering.float_op}"
    return UserIndex(
        "pgvector",
        location.where,
        kind,
        table.metric,
        params,
        code,
        len(vectors),
        dim,
        searcher.search,
        vectors,
        table,
        searcher.exact,
    )


def _exact_only(table: UserTable) -> Ordering:
    op = OPERATOR[table.metric]
    return Ordering(table.column, op, f"%s::vector({table.dim})", table.column, f"vector({table.dim})", op)


def _read_vectors(table: UserTable) -> np.ndarray:
    """The rows in ctid order (their row numbers kept in ``table.rows``), read in one snapshot."""
    name, conn = ident(table.location.table), table.conn
    with conn.transaction():
        run(conn, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        keys = [
            r[0]
            for r in run(conn, f"SELECT ctid::text AS key FROM {name} WHERE {table.column} IS NOT NULL ORDER BY ctid")
        ]
        statement = (
            f"COPY (SELECT {table.column}::vector FROM {name} WHERE {table.column} IS NOT NULL ORDER BY ctid) "
            "TO STDOUT (FORMAT BINARY)"
        )
        with conn.cursor().copy(psycopg_module().sql.SQL(statement)) as copy:  # type: ignore[arg-type]
            data = b"".join(bytes(block) for block in copy)
    if not keys:
        raise InputError(f"{table.location.where}: no rows with a vector in column {table.column}")
    try:
        vectors = parse_copied(data, table.dim)
    except DamagedIndex:
        raise InputError(
            f"{table.location.where}: column {table.column} holds vectors of another dimension than {table.dim}"
        ) from None
    table.rows.update({key: i for i, key in enumerate(keys)})
    return vectors


def _index_bytes(conn: Any, index: str, n: int) -> float:
    """The index's size on disk per row (the table's float vectors besides)."""
    return run(conn, "SELECT pg_relation_size(%s::regclass)", (ident(index),)).fetchone()[0] / max(n, 1)


# The repairs: built on cone's embedded server over a copy of the vectors, never on the user's; --fix alone makes
# the chosen one beside the user's index.


def scratch_server() -> Server:
    """cone's embedded server: $CONE_PG_DATA's, else one in the temporary folder, started on first use."""
    data = os.environ.get(DATA_ENV) or str(Path(tempfile.gettempdir()) / "cone-doctor-pgdata")
    return Server(EMBEDDED, data=Path(data).resolve())


def _scratch(vectors: np.ndarray) -> Any:
    """A connection to the embedded server holding the vectors in a temporary table (gone with the connection),
    row i with rid i."""
    conn = scratch_server().connect()
    run(conn, "CREATE EXTENSION IF NOT EXISTS vector")
    run(conn, f"CREATE TEMP TABLE {SCRATCH} (rid bigint, embedding vector({vectors.shape[1]}))")
    copy = f"COPY {SCRATCH} (rid, embedding) FROM STDIN WITH (FORMAT BINARY)"
    with conn.cursor().copy(psycopg_module().sql.SQL(copy)) as writer:  # type: ignore[arg-type]
        writer.write(COPY_HEADER + copy_rows(0, np.asarray(vectors, dtype=np.float32), "vector") + COPY_TRAILER)
    return conn


@dataclass(frozen=True)
class PgRepair:
    """One index pgvector offers: its indexed expression and operator class over a float column, the ORDER BY that
    uses it, and what the user's queries change."""

    slug: str
    name: str
    expression: Callable[[str], str]  # of the float column
    opclass: str
    ordering: Callable[[str], Ordering]
    code_change: str
    metric: str  # what it approximates: the user's metric, or its opclass's where that changes
    access: str = "hnsw"
    options: tuple[tuple[str, str], ...] = ()  # its build options (m, ef_construction; lists)

    def create(self, table: str, column: str, index: str, concurrently: bool) -> str:
        with_ = ", ".join(f"{k} = {int(v):d}" for k, v in self.options)
        how = "CREATE INDEX CONCURRENTLY" if concurrently else "CREATE INDEX"
        target = f"({self.expression(column)}) {self.opclass}"
        return f"{how} {index} ON {table} USING {self.access} ({target})" + (f" WITH ({with_})" if with_ else "")


def other_opclasses(table: UserTable) -> list[PgRepair]:
    """The user's index (same access method and build options) under each other metric's operator class of a
    vector column: the queries' operator changes, and with it the exact ranking where the rows are not unit length
    (its share of today's exact top 10 is the repair's ceiling)."""
    family, _, ops = table.opclass.partition("_")
    if table.expression is not None or table.column_type != "vector" or family != "vector" or ops not in METRIC_OF_OPS:
        return []
    d, options = table.dim, tuple(table.options.items())
    made = []
    for metric, suffix in OPS.items():
        op = OPERATOR[metric]
        if suffix != ops:
            made.append(
                PgRepair(
                    f"{suffix}",
                    f"opclass vector_{suffix} ({table.access})",
                    lambda c: c,
                    f"vector_{suffix}",
                    lambda c, op=op: Ordering(c, op, f"%s::vector({d})", c, f"vector({d})", op),
                    f"queries ORDER BY embedding {op} $1",
                    metric,
                    str(table.access),
                    options,
                )
            )
    return made


def pg_repairs(table: UserTable, vectors: np.ndarray) -> list[PgRepair]:
    """Another operator class, halfvec (where the index is not already half precision), then the binary recipe on
    centered vectors."""
    d, op, metric = table.dim, OPERATOR[table.metric], table.metric
    cast = f"vector({d})"
    mean = "'[" + ",".join(f"{x:.7g}" for x in vectors.mean(axis=0)) + f"]'::vector({d})"
    options = _build_options(table)
    repairs = other_opclasses(table)
    if table.column_type == "vector" and not table.opclass.startswith("halfvec"):
        repairs.append(
            PgRepair(
                "halfvec",
                f"halfvec (hnsw, halfvec_{OPS[metric]})",
                lambda c: f"({c})::halfvec({d})",
                f"halfvec_{OPS[metric]}",
                lambda c: Ordering(f"({c})::halfvec({d})", op, f"%s::halfvec({d})", c, cast, op),
                f"queries ORDER BY embedding::halfvec({d}) {op} $1::halfvec({d})",
                metric,
                options=options,
            )
        )
    rescore = table.location.rescore

    def centered_bits(c: str) -> str:
        return f"(binary_quantize(l2_normalize({c} - {mean})))::bit({d})"

    repairs.append(
        PgRepair(
            "center_bits",
            f"binary recipe on centered vectors (hnsw, bit_hamming_ops, top {rescore} re-ranked by {op})",
            centered_bits,
            "bit_hamming_ops",
            lambda c: Ordering(
                centered_bits(c), "<~>", f"binary_quantize(l2_normalize(%s::{cast} - {mean}))", c, cast, op, rescore
            ),
            f"each query centered the same way: binary_quantize(l2_normalize($1 - mean)) (mean: the {d} numbers in "
            "the index's expression)",
            metric,
            options=options,
        )
    )
    return repairs


def _build_options(table: UserTable) -> tuple[tuple[str, str], ...]:
    """An HNSW repair's build options: the user's HNSW's, else pgvector's defaults."""
    mine = {k: v for k, v in table.options.items() if k in HNSW_BUILD} if table.access == "hnsw" else {}
    return tuple(({k: str(v) for k, v in HNSW_BUILD.items()} | mine).items())


def user_repairs(index: UserIndex, vectors: np.ndarray) -> list[RepairRecipe]:
    """Each of ``pg_repairs`` as a recipe: written to the embedded server's copy (``write``, measured there with the
    user's search settings), or with --fix made beside the user's index (``apply``)."""
    table: UserTable = index.handle  # type: ignore[assignment]
    if table.index is None:
        return []  # a sequential scan is exact: nothing to repair
    user_table = ident(table.location.table)

    def recipe(repair: PgRepair) -> RepairRecipe:
        name = f"cone_doctor_{repair.slug}"

        def write(path: Path) -> None:
            if table.scratch is None:
                table.scratch = _scratch(vectors)
            run(table.scratch, repair.create(SCRATCH, "embedding", name, concurrently=False))

        def opened(path: Path) -> UserIndex:
            rows = {i: i for i in range(len(vectors))}
            searcher = Searcher(table.scratch, SCRATCH, "rid", rows, repair.ordering("embedding"), table.settings)
            searcher.check_uses(name, vectors[0])
            return _repaired(index, repair, name, searcher, _index_bytes(table.scratch, name, len(vectors)))

        def apply(fix: object) -> tuple[str, UserIndex]:
            made = str(fix) or f"{table.location.table.rsplit('.', 1)[-1]}_{repair.slug}_cone"[:63]
            qualified = _beside(table.location.table, made)
            if run(table.conn, "SELECT to_regclass(%s)", (ident(qualified),)).fetchone()[0] is not None:
                raise InputError(f"--fix {made}: {table.location.where} already has a relation of that name")
            with table.server.connect() as writer:  # the one session that writes, and only the new index
                _create_beside(writer, repair, user_table, table.column, made, qualified)
            searcher = Searcher(
                table.conn, user_table, "ctid::text", table.rows, repair.ordering(_floats(table)), table.settings
            )
            searcher.check_uses(made, vectors[0])
            built = _repaired(index, repair, made, searcher, _index_bytes(table.conn, qualified, len(vectors)))
            return f"{table.location.where}: index {made}", built

        ordering = repair.ordering(_floats(table))
        how = (
            f"{repair.create(user_table, table.column, 'NAME', concurrently=True)}; queries: "
            f"{ordering.shown(user_table)}"
        )
        return RepairRecipe(
            repair.name, how, repair.code_change, write, opened, None, metric=repair.metric, apply=apply
        )

    return [recipe(r) for r in pg_repairs(table, vectors)]


def _create_beside(conn: Any, repair: PgRepair, table: str, column: str, made: str, qualified: str) -> None:
    """CREATE INDEX CONCURRENTLY: the user's writes go on while it builds. One that fails (cancelled, timed out)
    leaves an invalid index of the new name, the doctor's own, which is dropped; the user's are never touched."""
    try:
        run(conn, repair.create(table, column, ident(made), concurrently=True))
    except InputError:
        left = "SELECT 1 FROM pg_index WHERE indexrelid = to_regclass(%s) AND NOT indisvalid"
        if run(conn, left, (ident(qualified),)).fetchone() is not None:
            run(conn, f"DROP INDEX CONCURRENTLY {ident(qualified)}")
        raise


def _floats(table: UserTable) -> str:
    return table.column if table.column_type == "vector" else f"{table.column}::vector({table.dim})"


def _beside(table: str, index: str) -> str:
    """An index's name in its table's schema (``schema.index`` where the table is named with its schema)."""
    schema, dot, _ = table.rpartition(".")
    return f"{schema}{dot}{index}"


def _repaired(index: UserIndex, repair: PgRepair, name: str, searcher: Searcher, code: float) -> UserIndex:
    params = {"index": name, "access": repair.access, "opclass": repair.opclass, **dict(repair.options)}
    return UserIndex(
        "pgvector",
        index.path,
        repair.name,
        repair.metric,
        params,
        code,
        index.ntotal,
        index.dim,
        searcher.search,
        index.vectors,
        index.handle,
    )
