"""LanceDB as a store: the unit vectors in a Lance table inside the index folder, searched by LanceDB's own
index types, named as index factories with a prefix: ``lance:FLAT`` (no index: an exhaustive scan),
``lance:IVF_PQ`` (LanceDB's default), ``lance:IVF_HNSW_SQ`` and ``lance:IVF_RQ`` (RaBitQ codes).

The table (``vectors.lance``) holds each document's row in the index's document table, its id and its vector;
titles and texts stay in that document table (cone.indexing.store), so everything that reads an index folder
reads this one alike. The metric is the user's (``lance:IVF_PQ@cosine``; ``--metric``): ``l2`` by default, as
LanceDB's own, or ``dot`` or ``cosine``; each distance is reported as the cosine of the unit rows (1 - d for
``dot`` and ``cosine``, 1 - d/2 for the squared ``l2``). It matters for the compressed types: under ``dot``
LanceDB's PQ encodes raw coordinates and scores them by the inner product, which a cone breaks; under ``l2`` and
``cosine`` it encodes residuals from the partition centres and the shared offset cancels (docs/results.md,
section 6; tests/test_metric_rule.py). Indexes written before the metric was recorded used ``dot``.

lancedb is imported only here, and only when a Lance index is built or opened: cone works without it, and an
index of this store on a machine without it is refused with the fix (``pip install 'cone[lancedb]'``).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import tempfile
import weakref
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np

from cone.errors import DamagedIndex, InputError
from cone.indexing.codes import COSINE, DOT, L2, IndexType, parse_search_params, similarity
from cone.indexing.user_index import RepairRecipe, UserIndex, centered, searching_centered

NAME = "lancedb"  # --store's name
PREFIX = "lance:"
TYPES = ("FLAT", "IVF_PQ", "IVF_HNSW_SQ", "IVF_RQ")
TABLE = "vectors"  # the Lance dataset is TABLE + ".lance" in the index folder
FILES = "lance_files.json"  # every file of the dataset with its size when written: truncation and deletion show
INSTALL = "pip install 'cone[lancedb]'"
# Search-time settings each type takes (LanceDB's query builder: nprobes, ef, refine_factor).
SEARCH_SETTINGS = {
    "FLAT": (),
    "IVF_PQ": ("nprobes", "refine_factor"),
    "IVF_RQ": ("nprobes", "refine_factor"),
    "IVF_HNSW_SQ": ("nprobes", "ef", "refine_factor"),
}
DEFAULT_NPROBES = 20  # LanceDB's own default, set explicitly so that the manifest says what every search used
PQ_CENTROIDS = 256  # an 8-bit product quantizer trains 2^8 centroids per sub-vector
# LanceDB trains k-means on sample_rate (256) vectors per partition and, with fewer, trains fewer partitions than
# asked (with a warning); asking for no more than it trains keeps the recorded count the true one.
ROWS_PER_PARTITION = 256
HNSW_ROWS_PER_PARTITION = 1_000_000  # LanceDB advises one HNSW graph for most tables; more bound its build memory


def lancedb_module() -> ModuleType:
    """lancedb, or the one line that says it is not installed and how to install it."""
    # Lance's Rust core logs warnings straight to stderr; only the cli prints here, so below errors it is quiet.
    os.environ.setdefault("LANCE_LOG", "error")
    try:
        import lancedb
    except ImportError as exc:
        raise InputError(f"LanceDB store unavailable: lancedb is not installed ({exc}); fix: {INSTALL}") from None
    return lancedb


def type_of(factory: str) -> str:
    """``lance:ivf_pq`` -> ``IVF_PQ``; an unknown type is refused naming the known ones."""
    name = factory[len(PREFIX) :].strip().upper()
    if name not in TYPES:
        known = ", ".join(PREFIX + t for t in TYPES)
        raise InputError(f"invalid --index-factory {factory!r}: LanceDB index types are {known}")
    return name


def _partitions(n: int, per_partition: int) -> int:
    return max(1, min(round(math.sqrt(n)), n // per_partition))


def _sub_vectors(dim: int) -> int:
    """d/8 sub-vectors (1 byte per 8 dimensions, as FAISS's PQ{d/8}), or the largest divisor of d below it."""
    return max(s for s in range(1, max(1, dim // 8) + 1) if dim % s == 0)


def build_params(name: str, n: int, dim: int, settings: dict[str, str], metric: str) -> dict[str, int | str | None]:
    """The parameters of a ``name`` index over ``n`` vectors of ``dim`` (chosen from n and d), and the search
    settings every search applies; a type that cannot be trained on ``n`` vectors is refused."""
    allowed = SEARCH_SETTINGS[name]
    for setting in settings:
        if setting not in allowed:
            takes = ", ".join(allowed) or "no search parameters"
            raise InputError(f"invalid --search-params: lance:{name} takes {takes}, not {setting!r}")
    params: dict[str, int | str | None] = {"metric": metric}
    if name == "IVF_PQ":
        if n < PQ_CENTROIDS:
            raise InputError(
                f"--index-factory 'lance:IVF_PQ' on {n:,} vectors: its 8-bit product quantizer trains "
                f"{PQ_CENTROIDS} centroids per sub-vector and needs at least {PQ_CENTROIDS} vectors"
            )
        params |= {"num_partitions": _partitions(n, ROWS_PER_PARTITION), "num_sub_vectors": _sub_vectors(dim)}
        params |= {"num_bits": 8}
    elif name == "IVF_RQ":
        params |= {"num_partitions": _partitions(n, ROWS_PER_PARTITION), "num_bits": 1}
    elif name == "IVF_HNSW_SQ":
        params |= {"num_partitions": -(-n // HNSW_ROWS_PER_PARTITION), "m": 20, "ef_construction": 300}
    if name != "FLAT":
        params["nprobes"] = min(int(settings.get("nprobes", DEFAULT_NPROBES)), int(params["num_partitions"]))
        params["refine_factor"] = int(settings["refine_factor"]) if "refine_factor" in settings else None
    if "ef" in settings:
        params["ef"] = int(settings["ef"])
    return params


def _index_config(lancedb: ModuleType, name: str, params: dict[str, int | str | None]) -> object:
    index = lancedb.index
    if name == "IVF_PQ":
        return index.IvfPq(
            distance_type=params["metric"],
            num_partitions=params["num_partitions"],
            num_sub_vectors=params["num_sub_vectors"],
            num_bits=params["num_bits"],
        )
    if name == "IVF_RQ":
        partitions, bits = params["num_partitions"], params["num_bits"]
        return index.IvfRq(distance_type=params["metric"], num_partitions=partitions, num_bits=bits)
    return index.IvfHnswSq(
        distance_type=params["metric"],
        num_partitions=params["num_partitions"],
        m=params["m"],
        ef_construction=params["ef_construction"],
    )


def _dataset_files(dataset: Path) -> dict[str, int]:
    return {str(p.relative_to(dataset)): p.stat().st_size for p in sorted(dataset.rglob("*")) if p.is_file()}


def _per_query(found: object, n_queries: int, k: int, key: np.ndarray) -> list[np.ndarray]:
    """The positions of each query's results in a search of several queries (LanceDB returns them as one table,
    ``query_index`` telling them apart; a single query's has none), in ascending ``key`` order, at most ``k``."""
    names = found.column_names
    which = found["query_index"].to_numpy() if "query_index" in names else np.zeros(found.num_rows, dtype=np.int64)
    mine = (np.flatnonzero(which == q) for q in range(n_queries))
    return [positions[np.argsort(key[positions], kind="stable")][:k] for positions in mine]


class LanceCodes:
    """A Lance table of (row, id, vector) with an index of one LanceDB type; the Codes interface of
    cone.indexing.factory: ``search`` gives cosines and rows, ``vectors`` the stored float32 rows, ``write``."""

    def __init__(
        self,
        name: str,
        dim: int,
        params: dict[str, int | str | None],
        table: object | None = None,
        folder: Path | None = None,
    ) -> None:
        self.name, self.dim, self.params = name, dim, params
        self._table, self._folder = table, folder  # the folder holding the table, once there is one
        self._pending: tuple[np.ndarray, list[str] | None] | None = None

    @property
    def factory(self) -> str:
        return PREFIX + self.name

    @classmethod
    def build(
        cls, vectors: np.ndarray, kind: IndexType, settings: dict[str, str], ids: list[str] | None = None
    ) -> LanceCodes:
        """Checked now (type, parameters, trainability); the table is written by ``write`` into the index folder
        (or, if searched first, into a temporary folder)."""
        lancedb_module()
        name = type_of(kind.factory)
        n, dim = vectors.shape
        codes = cls(name, dim, build_params(name, n, dim, settings, kind.metric))
        codes._pending = (np.ascontiguousarray(vectors, dtype=np.float32), ids)
        return codes

    @property
    def index(self) -> object:
        """The LanceDB table (what ``DenseIndex.faiss_index`` hands out for the FAISS stores)."""
        if self._table is None:
            scratch = Path(tempfile.mkdtemp(prefix="cone-lance-"))
            weakref.finalize(self, shutil.rmtree, scratch, True)
            self._create(scratch)
        return self._table

    @property
    def ntotal(self) -> int:
        return self.index.count_rows()

    def _create(self, folder: Path) -> None:
        lancedb = lancedb_module()
        vectors, ids = self._pending
        pa = pyarrow_module()
        columns = {
            "row": pa.array(np.arange(len(vectors), dtype=np.int64)),
            "id": pa.array(ids if ids is not None else [str(r) for r in range(len(vectors))], pa.string()),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), self.dim),
        }
        try:
            table = lancedb.connect(folder).create_table(TABLE, pa.table(columns))
            if self.name != "FLAT":
                table.create_index("vector", config=_index_config(lancedb, self.name, self.params))
        except (RuntimeError, ValueError, OSError) as exc:
            why = _first_line(exc)
            raise InputError(f"--index-factory {self.factory!r} on {len(vectors):,} vectors: {why}") from None
        self._table, self._folder = table, folder

    def stored_bytes(self) -> int:
        """What the store keeps on disk: the Lance table (ids and float32 vectors) and its index files."""
        self.index  # noqa: B018 -- the table exists once built (in the index folder, or a scratch folder)
        return sum(_dataset_files(self._folder / f"{TABLE}.lance").values())

    def bytes_per_vector(self) -> float:
        """LanceDB keeps the vectors themselves beside any index: all it stores, over n."""
        return self.stored_bytes() / max(1, self.ntotal)

    def write(self, folder: Path) -> None:
        if self._pending is None:
            raise RuntimeError("a LanceCodes read from disk is written only by its build")  # a defect of the caller
        self._create(folder)
        files = _dataset_files(folder / f"{TABLE}.lance")
        (folder / FILES).write_text(json.dumps({"type": self.name, "files": files}, indent=1))

    @classmethod
    def read(cls, folder: Path, factory: str, dim: int, params: dict[str, int | str | None]) -> LanceCodes:
        """The table as ``write`` left it; a missing or truncated file of it is a DamagedIndex (found by size,
        without reading the data: the service opens every index at start)."""
        name = type_of(factory)
        lancedb = lancedb_module()
        dataset = folder / f"{TABLE}.lance"
        try:
            written = json.loads((folder / FILES).read_text())
            recorded, written_type = written["files"], written["type"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DamagedIndex(f"{folder}: missing or corrupt {FILES} ({_first_line(exc)})") from None
        if written_type != name:
            raise DamagedIndex(f"{folder}: the manifest says {PREFIX}{name}, the table was written as {written_type}")
        found = _dataset_files(dataset) if dataset.is_dir() else {}
        for path, size in recorded.items():
            if found.get(path) != size:
                now = "missing" if path not in found else f"{found[path]:,} bytes, written as {size:,}"
                raise DamagedIndex(f"{folder}: Lance table file {TABLE}.lance/{path} is {now}")
        try:
            table = lancedb.connect(folder).open_table(TABLE)
            width = table.schema.field("vector").type.list_size
        except (RuntimeError, ValueError, OSError, KeyError) as exc:
            raise DamagedIndex(f"{folder}: corrupt Lance table ({_first_line(exc)})") from None
        if width != dim:
            raise DamagedIndex(f"{folder}: Lance vectors of dimension {width}, manifest says {dim}")
        return cls(name, dim, params, table, folder)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top ``k`` cosines and rows per query, best first; -inf and -1 where fewer were found."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        scores = np.full((len(queries), k), -np.inf, dtype=np.float32)
        rows = np.full((len(queries), k), -1, dtype=np.int64)
        if not len(queries):
            return scores, rows
        metric = str(self.params["metric"])
        query = self.index.search(list(queries), vector_column_name="vector").distance_type(metric)
        query = query.select(["row", "_distance"]).limit(k)
        if self.params.get("nprobes") is not None:
            query = query.nprobes(int(self.params["nprobes"]))
        if self.params.get("refine_factor") is not None:
            query = query.refine_factor(int(self.params["refine_factor"]))
        if self.params.get("ef") is not None:
            query = query.ef(int(self.params["ef"]))
        try:
            found = query.to_arrow()
        except (RuntimeError, OSError, ValueError) as exc:
            raise DamagedIndex(f"Lance table unreadable ({_first_line(exc)})") from None
        found_rows = found["row"].to_numpy()
        cosines = similarity(found["_distance"].to_numpy(), self._distance_kind())
        for q, order in enumerate(_per_query(found, len(queries), k, -cosines)):
            scores[q, : len(order)], rows[q, : len(order)] = cosines[order], found_rows[order]
        return scores, rows

    def _distance_kind(self) -> str:
        """What Lance's ``_distance`` is for this index: under ``cosine`` an index type (not FLAT) reports the
        squared L2 distance of the normalized rows, 2 - 2 cos, unless ``refine_factor`` rescores the candidates
        exactly (then 1 - cos, as FLAT does); measured on lancedb 0.40 for IVF_PQ, IVF_RQ and IVF_HNSW_SQ."""
        metric = str(self.params["metric"])
        approximate = self.name != "FLAT" and self.params.get("refine_factor") is None
        return L2 if metric == COSINE and approximate else metric

    def close(self) -> None:
        """The table's files are opened by LanceDB per read: nothing to close."""

    def vectors(self) -> np.ndarray:
        """The stored float32 unit rows in row order (every type keeps them: LanceDB's index is beside them)."""
        table = self.index.to_arrow().select(["row", "vector"])
        order = np.argsort(table["row"].to_numpy())
        flat = table["vector"].combine_chunks().flatten().to_numpy()
        return flat.reshape(-1, self.dim)[order]


class LanceWriter:
    """A Lance table written a batch at a time, then indexed: a streamed build (``cone index --stream``, under
    ``--ray`` too) holds one shard of vectors, never the corpus. Rows are numbered in the order they come."""

    def __init__(self, folder: Path, kind: IndexType, dim: int, settings: dict[str, str]) -> None:
        self.lancedb, self.pa = lancedb_module(), pyarrow_module()
        self.folder, self.name, self.dim, self.metric = folder, type_of(kind.factory), dim, kind.metric
        self.settings = settings
        self.count = 0
        self._table: object | None = None

    def train(self, sample: np.ndarray) -> None:
        """LanceDB trains its index on the whole table, at the end."""

    def add(self, vectors: np.ndarray, ids: list[str]) -> None:
        pa = self.pa
        rows = np.arange(self.count, self.count + len(vectors), dtype=np.int64)
        flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).ravel())
        batch = pa.table(
            {
                "row": pa.array(rows),
                "id": pa.array(ids, pa.string()),
                "vector": pa.FixedSizeListArray.from_arrays(flat, self.dim),
            }
        )
        if self._table is None:
            self._table = self.lancedb.connect(self.folder).create_table(TABLE, batch)
        else:
            self._table.add(batch)
        self.count += len(vectors)

    def finish(self) -> dict[str, int | str | None]:
        """Index the whole table (parameters from its final size) and record its files, as ``write`` does; the
        index's parameters."""
        params = build_params(self.name, self.count, self.dim, self.settings, self.metric)
        if self.name != "FLAT":
            try:
                self._table.create_index("vector", config=_index_config(self.lancedb, self.name, params))
            except (RuntimeError, ValueError, OSError) as exc:
                why = _first_line(exc)
                raise InputError(f"--index-factory 'lance:{self.name}' on {self.count:,} vectors: {why}") from None
        files = _dataset_files(self.folder / f"{TABLE}.lance")
        (self.folder / FILES).write_text(json.dumps({"type": self.name, "files": files}, indent=1))
        return params


# A user's own Lance table (cone doctor --index: cone.indexing.user_index), and its repairs.

_VECTOR_FIELD = re.compile(r"fixed_size_list<item: (float|double|halffloat)")


def _user_table(path: Path, table: str | None) -> tuple[object, str]:
    """The table of a Lance dataset folder (``NAME.lance``) or of a LanceDB folder (``table``, or its only one)."""
    lancedb = lancedb_module()
    if path.name.endswith(".lance"):
        if table is not None:
            raise InputError(f"--index {path} is one Lance dataset; --table goes with a LanceDB folder")
        folder, table = path.parent, path.name[: -len(".lance")]
    else:
        folder = path
    db = lancedb.connect(folder)
    names = list(db.list_tables().tables)
    if table is None:
        if len(names) != 1:
            raise InputError(
                f"--index {path}: a folder of {len(names)} Lance tables ({', '.join(names)}): name one with --table"
                if names
                else f"--index {path}: not a Lance dataset or LanceDB folder"
            )
        table = names[0]
    if table not in names:
        raise InputError(f"--index {path}: no table {table!r} (it has {', '.join(names) or 'none'})")
    return db.open_table(table), table


def _user_code_bytes(kind: str, compression: dict, dim: int) -> float:
    if compression.get("type") == "pq":
        return int(compression["num_sub_vectors"]) * int(compression.get("num_bits", 8)) / 8
    if "SQ" in kind:
        return float(dim)
    if "RQ" in kind:
        return dim / 8
    return 4.0 * dim


def _user_search(tbl: object, column: str, metric: str, row_of: dict[int, int]) -> Callable:
    def search(queries: np.ndarray, k: int) -> np.ndarray:
        query = tbl.search(list(np.asarray(queries, dtype=np.float32)), vector_column_name=column)
        try:
            found = query.distance_type(metric).limit(k).with_row_id(True).to_arrow()
        except (RuntimeError, ValueError, OSError) as exc:  # an index file damaged: read only when searched
            raise InputError(f"--index: LanceDB cannot search table {tbl.name!r} ({_first_line(exc)})") from None
        ids = found["_rowid"].to_numpy()
        rows = np.full((len(queries), k), -1, dtype=np.int64)
        for q, mine in enumerate(_per_query(found, len(queries), k, found["_distance"].to_numpy())):
            rows[q, : len(mine)] = [row_of[int(r)] for r in ids[mine]]
        return rows

    return search


def open_user(path: Path, table: str | None) -> UserIndex:
    """A Lance table as LanceDB opens it: its vectors (in row order), its first index (type, metric, codes). A file
    of it LanceDB cannot read (truncated, zeroed, overwritten: its RuntimeError or ValueError) is one line."""
    try:
        return _open_user(path, table)
    except (RuntimeError, ValueError, OSError) as exc:
        raise InputError(f"--index {path}: LanceDB cannot read it ({_first_line(exc)})") from None


def _open_user(path: Path, table: str | None) -> UserIndex:
    tbl, table = _user_table(path, table)
    indices = tbl.list_indices()
    vector_fields = [f.name for f in tbl.schema if _VECTOR_FIELD.match(str(f.type))]
    column = indices[0].columns[0] if indices else (vector_fields[0] if vector_fields else None)
    if column is None:
        raise InputError(f"--index {path}: table {table!r} has no vector column")
    n = tbl.count_rows()
    scan = tbl.search().select([column]).with_row_id(True).limit(n).to_arrow()
    vectors = np.asarray(scan[column].combine_chunks().flatten(), dtype=np.float32).reshape(n, -1)
    row_of = {int(r): i for i, r in enumerate(scan["_rowid"].to_numpy())}
    if indices:
        config = indices[0]
        stats = tbl.index_stats(config.name)
        metric = str(stats.distance_type).lower()
        details = dict(getattr(config, "index_details", None) or {})
        compression = dict(details.get("compression") or {})
        kind = str(stats.index_type)
        params: dict[str, object] = {"index": config.name, "column": column, **compression}
    else:
        metric, kind, compression = L2, "no index (exhaustive scan)", {}
        params = {"column": column}
    code = _user_code_bytes(kind, compression, vectors.shape[1])
    search = _user_search(tbl, column, metric, row_of)
    where = f"{path} (table {table})"
    return UserIndex(NAME, where, kind, metric, params, code, n, vectors.shape[1], search, vectors, tbl)


def user_repairs(index: UserIndex, vectors: np.ndarray) -> list[RepairRecipe]:
    """The same index type under a metric whose PQ encodes residuals (where the index uses ``dot``), and the same
    type over centered vectors; each with its ``create_index`` call. An exhaustive scan has nothing to repair."""
    if index.params.get("index") is None:
        return []
    config = "".join(part.capitalize() for part in index.kind.split("_"))  # IVF_PQ -> lancedb.index.IvfPq
    options = {}
    if index.params.get("type") == "pq":
        options = {"num_sub_vectors": int(index.params["num_sub_vectors"]), "num_bits": int(index.params["num_bits"])}
    column = str(index.params["column"])
    mean = vectors.mean(axis=0)

    def call(metric: str) -> str:
        settings = ", ".join([f'distance_type="{metric}"'] + [f"{k}={v}" for k, v in options.items()])
        return f'tbl.create_index("{column}", config={config}({settings}), replace=True)'

    def recipe(name: str, metric: str, rows: np.ndarray, how: str, change: str, center: bool) -> RepairRecipe:
        def write(path: Path) -> None:
            lancedb, pa = lancedb_module(), pyarrow_module()
            table = pa.table({column: pa.FixedSizeListArray.from_arrays(pa.array(rows.ravel()), rows.shape[1])})
            made = lancedb.connect(path.parent).create_table(path.name[: -len(".lance")], table)
            made.create_index(column, config=getattr(lancedb.index, config)(distance_type=metric, **options))

        def opened(path: Path) -> UserIndex:
            made = open_user(path, None)
            return searching_centered(made, mean) if center else made

        return RepairRecipe(name, how, change, write, opened, ".lance", center, metric)

    made = []
    if index.metric == DOT:  # Lance's PQ encodes residuals from the IVF centres only under l2 and cosine
        for metric in (COSINE, L2):
            how = f'{call(metric)}; search with .distance_type("{metric}")'
            change = f'queries use .distance_type("{metric}") (the same ranking as dot where rows are unit length)'
            made.append(recipe(f"metric {metric}", metric, vectors, how, change, False))
    how = f"a table of (x - mean)/|x - mean| (the mean: {index.dim} floats beside it), then {call(index.metric)}"
    change = "each query centered and normalized with the same mean before .search"
    made.append(recipe("center", index.metric, centered(vectors, mean), how, change, True))
    return made


# What a build records in index_params: each a count > 0 where present (refine_factor may be null: not applied).
RECORDED_COUNTS = ("num_partitions", "num_sub_vectors", "num_bits", "m", "ef_construction", "nprobes", "ef")


def check_params(folder: Path, name: str, params: dict) -> None:
    """The manifest's index_params by the rules a build follows (``build_params``): the search settings the type
    takes, and every count a whole number > 0. LanceDB itself fails each search on one it cannot take (nprobes
    -5: an OverflowError), so a manifest edited so is refused at load."""
    for setting in ("nprobes", "ef", "refine_factor"):
        if params.get(setting) is not None and setting not in SEARCH_SETTINGS[name]:
            raise DamagedIndex(f"{folder}: manifest's index_params set {setting}, which lance:{name} does not take")
    for key in (*RECORDED_COUNTS, "refine_factor"):
        value = params.get(key)
        unset = value is None and key == "refine_factor"
        if key in params and not unset and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise DamagedIndex(f"{folder}: manifest's index_params {key} is {value!r}, not a whole number > 0")


class LanceStore:
    """LanceDB (cone.indexing.codes.Store): ``lance:TYPE``, under ``dot``, ``l2`` (its default) or ``cosine``."""

    name = NAME
    prefix = PREFIX
    metrics = (DOT, L2, COSINE)
    default_metric = L2  # LanceDB's own
    exact = PREFIX + "FLAT"  # the store's exhaustive search of float32 rows
    legacy_metric = DOT  # every Lance index cone built before the metric was a choice
    doctor_types = tuple(PREFIX + name for name in ("IVF_PQ", "IVF_HNSW_SQ", "IVF_RQ"))
    open_user = staticmethod(open_user)
    repairs = staticmethod(user_repairs)

    def claims(self, path: Path) -> bool:
        return path.is_dir()  # a Lance dataset (NAME.lance) or a LanceDB folder of tables

    def parse(self, factory: str, metric: str | None) -> IndexType:
        metric = metric or self.default_metric
        if metric not in self.metrics:
            raise InputError(f"invalid index type {factory!r}: LanceDB searches by {', '.join(self.metrics)}")
        return IndexType(PREFIX + type_of(factory), self.name, metric)

    def types(self) -> tuple[str, ...]:
        return tuple(PREFIX + t for t in TYPES)

    def check(self, kind: IndexType, dim: int, search_params: str) -> None:
        lancedb_module()
        build_params(type_of(kind.factory), PQ_CENTROIDS, dim, parse_search_params(search_params), kind.metric)

    def build(self, vectors: np.ndarray, kind: IndexType, search_params: str, ids: list[str] | None) -> LanceCodes:
        return LanceCodes.build(vectors, kind, parse_search_params(search_params), ids)

    def streamed(self, folder: Path, final: Path, kind: IndexType, dim: int, search_params: str) -> LanceWriter:
        """The table is written a shard at a time and indexed at the end."""
        return LanceWriter(folder, kind, dim, parse_search_params(search_params))

    def read(
        self, folder: Path, kind: IndexType, dim: int, search_params: str, on_disk: bool, params: dict
    ) -> LanceCodes:
        if params.get("metric", kind.metric) != kind.metric:
            raise DamagedIndex(f"{folder}: index_params say {params['metric']}, the manifest's metric {kind.metric}")
        check_params(folder, type_of(kind.factory), params)
        return LanceCodes.read(folder, kind.factory, dim, params | {"metric": kind.metric})


def pyarrow_module() -> ModuleType:
    import pyarrow  # a dependency of lancedb itself

    return pyarrow


def _first_line(exc: BaseException) -> str:
    """The library's message, its first line, without the Rust source location Lance appends (", /rustc/...")."""
    text = str(exc).strip().splitlines()
    return re.sub(r",? /rustc/\S+", "", text[0] if text else type(exc).__name__)[:200]
