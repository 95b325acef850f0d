"""``cone doctor --index``: the index a user already has (a FAISS file, a Lance table, a USearch file), as it is.

It says what the index is (type, metric, parameters, bytes of code per vector), measures the instruments on its
vectors and the recall@10 of that very index against exact search of the same vectors in the index's own metric,
then builds the repairs that index's store offers and measures each the same way, with the same queries:

- FAISS: a new index file, the same structure retrained behind an ``IndexPreTransform`` that centers (the
  documents' mean, learned by ``CenteringTransform``) and L2-normalizes, so a plain ``faiss.read_index`` user
  changes no code; a binary index (sign bits) becomes ``IndexLSH`` behind the same centering, which stores the
  same d/8 bytes but takes float queries.
- LanceDB: the same index type under another metric (Lance's PQ encodes residuals from the IVF centres only
  under ``l2`` and ``cosine``, not ``dot``), or a table of centered vectors; each with its ``create_index`` call.
- USearch: a wider codec (f16, bf16), or the same codec on centered vectors (USearch keeps no transform, so the
  user subtracts the mean from each vector and query).

A repair counts only where its per-query recall@10 beats the index's by the paired randomization test (adjusted
for the repairs tried); the prescription is the cheapest such repair that reaches the target, else the best one,
with its bytes per vector. Nothing is prescribed to an index that already keeps the target.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import faiss
import numpy as np
from scipy.stats import false_discovery_control

from cone.errors import InputError
from cone.eval import metrics
from cone.eval.doctor import Diagnosis, K, check_vectors, diagnose, flat_index, top_rows
from cone.eval.significance import ALPHA, paired_p
from cone.geometry import unit_rows
from cone.indexing.factory import FloatCodes, sign_codes
from cone.indexing.lance import lancedb_module, pyarrow_module
from cone.output import native_stdout_silenced

FAISS_METRICS = {faiss.METRIC_INNER_PRODUCT: "inner product", faiss.METRIC_L2: "l2"}
USEARCH_CODEC_BYTES = {
    "f64": 8.0,
    "f32": 4.0,
    "f16": 2.0,
    "bf16": 2.0,
    "i8": 1.0,
    "e4m3": 1.0,
    "e5m2": 1.0,
    "b1": 1 / 8,
}
USEARCH_WIDER = ("f16", "bf16")  # the codecs a USearch user would try before giving up on compression
DEFAULT_QUERIES = 200  # documents sampled as queries when no --queries file is given


@dataclass
class Found:
    """An index as its store keeps it, and how to search it: ``search(queries, k)`` gives the top-k rows of the
    vectors (row numbers of ``--vectors``, or of the vectors the index keeps)."""

    store: str  # "faiss", "lancedb", "usearch"
    path: str
    kind: str
    metric: str
    params: dict[str, object]
    code_bytes: float  # bytes of code per vector
    ntotal: int
    dim: int
    search: Callable[[np.ndarray, int], np.ndarray]
    vectors: np.ndarray | None = None  # the float vectors it keeps, in row order; None: it keeps none
    handle: object = None  # the store's own object (faiss.Index, LanceDB table, usearch Index)

    def describe(self) -> dict:
        return {
            "store": self.store,
            "path": self.path,
            "type": self.kind,
            "metric": self.metric,
            "params": self.params,
            "code_bytes_per_vector": self.code_bytes,
            "vectors": self.ntotal,
            "dim": self.dim,
            "keeps_float_vectors": self.vectors is not None,
        }


@dataclass(frozen=True)
class Repair:
    """One repair the index's store offers, built and measured."""

    name: str
    how: str  # what the user does, in that store's terms
    code_bytes: float
    recall_at_10: float  # vs exact search of the raw vectors in the index's metric, the raw queries
    code_change: str  # "none", or what the user's code must do differently
    p: float | None = None  # paired randomization test of its per-query recall against the index's, BH-adjusted
    exact_kept: float | None = None  # how much of today's exact top 10 exact search in its own space keeps: its ceiling

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class IndexCheckup:
    found: Found
    n_queries: int
    queries_from: str
    target: float
    diagnosis: Diagnosis
    recall_at_10: float
    repairs: list[Repair] = field(default_factory=list)
    prescription: Repair | None = None
    fixed: dict[str, object] | None = None  # --fix: where it was written and what it measured

    def to_json(self) -> dict:
        return {
            "index": self.found.describe(),
            "n_queries": self.n_queries,
            "queries_from": self.queries_from,
            "target_recall_at_10": self.target,
            "diagnosis": self.diagnosis.to_json(),
            "recall_at_10": self.recall_at_10,
            "repairs": [r.to_json() for r in self.repairs],
            "prescription": None if self.prescription is None else self.prescription.to_json(),
            "fixed": self.fixed,
        }


# --- opening an index ------------------------------------------------------------------------------------------


def open_index(path: Path, table: str | None = None) -> Found:
    """A FAISS index file (float or binary), a Lance dataset folder (``NAME.lance``), a LanceDB folder (with
    ``table``, or its only table), or a USearch ``.usearch`` file; anything else in one line."""
    if not path.exists():
        raise InputError(f"--index {path}: no such file or folder")
    if path.is_dir():
        return _open_lance(path, table)
    if table is not None:
        raise InputError("--table names a table of a LanceDB folder; --index is a file")
    if path.suffix == ".usearch":
        return _open_usearch(path)
    return _open_faiss(path)


def _read_faiss(path: Path) -> tuple[object, bool]:
    errors = []
    for read, binary in ((faiss.read_index, False), (faiss.read_index_binary, True)):
        try:
            with native_stdout_silenced():
                return read(str(path)), binary
        except RuntimeError as exc:
            errors.append(str(exc).splitlines()[-1])
    raise InputError(f"--index {path}: not a FAISS index file, a Lance folder or a .usearch file ({errors[0][:120]})")


def _innermost(index: faiss.Index) -> faiss.Index:
    """The index that keeps the codes, past every transform chain and id map in front of it."""
    index = faiss.downcast_index(index)
    while isinstance(index, faiss.IndexPreTransform | faiss.IndexIDMap | faiss.IndexIDMap2):
        index = faiss.downcast_index(index.index)
    return index


def _faiss_name(index: faiss.Index) -> str:
    """``IndexPreTransform(CenteringTransform, NormalizationTransform) > IndexIVFPQ``."""
    if isinstance(index, faiss.IndexBinary):
        return type(index).__name__
    index = faiss.downcast_index(index)
    if isinstance(index, faiss.IndexPreTransform):
        chain = [type(faiss.downcast_VectorTransform(index.chain.at(i))).__name__ for i in range(index.chain.size())]
        return f"IndexPreTransform({', '.join(chain)}) > {_faiss_name(index.index)}"
    return type(index).__name__


def _faiss_params(index: faiss.Index) -> dict[str, object]:
    inner = _innermost(index)
    params: dict[str, object] = {}
    for name in ("nlist", "nprobe", "code_size"):
        if hasattr(inner, name):
            params[name] = int(getattr(inner, name))
    pq = getattr(inner, "pq", None)
    if pq is not None:
        params |= {"pq_M": int(pq.M), "pq_nbits": int(pq.nbits)}
        if hasattr(inner, "by_residual"):
            params["by_residual"] = bool(inner.by_residual)
    if hasattr(inner, "hnsw"):
        params |= {"hnsw_M": int(inner.hnsw.nb_neighbors(1)), "efSearch": int(inner.hnsw.efSearch)}
    sq = getattr(inner, "sq", None)
    if sq is not None:
        params["sq_bits"] = int(sq.bits)
    return params


def _open_faiss(path: Path) -> Found:
    index, binary = _read_faiss(path)
    if binary:
        dim = index.d

        def search_bits(queries: np.ndarray, k: int) -> np.ndarray:
            return index.search(sign_codes(queries), k)[1]

        params = {"bits": dim, "codes": "sign bits of each coordinate (1 where > 0), as sentence-transformers' ubinary"}
        return Found(
            "faiss",
            str(path),
            _faiss_name(index),
            "hamming",
            params,
            dim / 8,
            index.ntotal,
            dim,
            search_bits,
            None,
            index,
        )
    id_map = getattr(faiss.downcast_index(index), "id_map", None)
    if id_map is not None and not np.array_equal(faiss.vector_to_array(id_map), np.arange(index.ntotal)):
        raise InputError(f"--index {path}: its ids are not 0..N-1, so they cannot name rows of --vectors")
    inner = _innermost(index)
    vectors = None
    if isinstance(index, faiss.IndexFlat):  # exact vectors kept as they were added
        vectors = index.reconstruct_n(0, index.ntotal)
    code = float(getattr(inner, "code_size", 4 * index.d)) if not isinstance(index, faiss.IndexFlat) else 4.0 * index.d

    def search(queries: np.ndarray, k: int) -> np.ndarray:
        return index.search(np.ascontiguousarray(queries, dtype=np.float32), k)[1]

    metric = FAISS_METRICS.get(index.metric_type, f"metric {index.metric_type}")
    return Found(
        "faiss",
        str(path),
        _faiss_name(index),
        metric,
        _faiss_params(index),
        code,
        index.ntotal,
        index.d,
        search,
        vectors,
        index,
    )


def _open_usearch(path: Path) -> Found:
    try:
        from usearch.index import Index
    except ImportError as exc:
        raise InputError(f"--index {path}: usearch is not installed ({exc}); fix: pip install usearch") from None
    try:
        index = Index.restore(str(path))
    except (RuntimeError, ValueError, OSError) as exc:
        raise InputError(f"--index {path}: not a readable USearch file ({str(exc).splitlines()[0][:120]})") from None
    if index is None:
        raise InputError(f"--index {path}: not a readable USearch file (no metadata)")
    codec = str(index.dtype).split(".")[-1].lower()
    metric = str(index.metric).split(".")[-1].lower()
    keys = np.asarray(index.keys, dtype=np.int64)
    if not np.array_equal(np.sort(keys), np.arange(len(keys))):
        raise InputError(f"--index {path}: keys are not 0..N-1, so they cannot name rows of --vectors")
    params = {
        "connectivity": int(index.connectivity),
        "expansion_add": int(index.expansion_add),
        "expansion_search": int(index.expansion_search),
        "codec": codec,
    }

    def search(queries: np.ndarray, k: int) -> np.ndarray:
        found = index.search(np.ascontiguousarray(queries, dtype=np.float32), k)
        rows = np.asarray(found.keys, dtype=np.int64).reshape(len(queries), -1)
        counts = np.asarray(found.counts).reshape(-1)
        rows[np.arange(rows.shape[1])[None, :] >= counts[:, None]] = -1
        return rows

    vectors = None
    if codec in ("f32", "f64"):
        vectors = np.asarray(index.get(np.arange(len(keys)), dtype=np.float32))
    return Found(
        "usearch",
        str(path),
        f"USearch HNSW, {codec} codec",
        metric,
        params,
        USEARCH_CODEC_BYTES.get(codec, float("nan")) * index.ndim,
        len(keys),
        int(index.ndim),
        search,
        vectors,
        index,
    )


def _open_lance(path: Path, table: str | None) -> Found:
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
    tbl = db.open_table(table)
    indices = tbl.list_indices()
    vector_fields = [
        f.name for f in tbl.schema if re.match(r"fixed_size_list<item: (float|double|halffloat)", str(f.type))
    ]
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
        metric, kind, compression = "l2", "no index (exhaustive scan)", {}
        params = {"column": column}
    code = _lance_code_bytes(kind, compression, vectors.shape[1])

    def search(queries: np.ndarray, k: int) -> np.ndarray:
        query = tbl.search(list(np.asarray(queries, dtype=np.float32)), vector_column_name=column)
        found = query.distance_type(metric).limit(k).with_row_id(True).to_arrow()
        which = found["query_index"].to_numpy() if "query_index" in found.column_names else np.zeros(found.num_rows)
        distances, ids = found["_distance"].to_numpy(), found["_rowid"].to_numpy()
        rows = np.full((len(queries), k), -1, dtype=np.int64)
        for q in range(len(queries)):
            mine = np.flatnonzero(which == q)
            mine = mine[np.argsort(distances[mine], kind="stable")][:k]
            rows[q, : len(mine)] = [row_of[int(r)] for r in ids[mine]]
        return rows

    return Found(
        "lancedb", f"{path} (table {table})", kind, metric, params, code, n, vectors.shape[1], search, vectors, tbl
    )


def _lance_code_bytes(kind: str, compression: dict, dim: int) -> float:
    if compression.get("type") == "pq":
        return int(compression["num_sub_vectors"]) * int(compression.get("num_bits", 8)) / 8
    if "SQ" in kind:
        return float(dim)
    if "RQ" in kind:
        return dim / 8
    return 4.0 * dim


# --- measuring it ----------------------------------------------------------------------------------------------


def exact_rows(vectors: np.ndarray, queries: np.ndarray, metric: str) -> np.ndarray:
    """Exact top 10 in the index's own metric: what the index approximates. A sign-bit index approximates the
    cosine of the float vectors its bits were taken from."""
    vectors, queries = np.asarray(vectors, dtype=np.float32), np.asarray(queries, dtype=np.float32)
    if metric in ("cos", "cosine", "hamming"):
        return top_rows(FloatCodes(flat_index(unit_rows(vectors))), unit_rows(queries))
    if metric in ("l2", "l2sq"):
        return top_rows(FloatCodes(flat_index(vectors, faiss.METRIC_L2)), queries)
    if metric in ("inner product", "dot", "ip"):
        return top_rows(FloatCodes(flat_index(vectors)), queries)
    raise InputError(f"the index's metric {metric!r} has no exact search here (inner product, l2, cosine)")


def recalls_at_10(found: Found, queries: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """Each query's recall@10 of that index against exact search of the same vectors, in its metric
    (eval.metrics.overlap_at_k, the measure every doctor row uses, one query at a time for the paired test)."""
    rows = found.search(queries, K)
    return np.array([metrics.overlap_at_k(a[None], b[None], K) for a, b in zip(rows, exact, strict=True)])


def index_vectors(found: Found, given: np.ndarray | None, name: str = "--vectors") -> np.ndarray:
    """The float vectors the index holds: its own, or ``--vectors`` where it keeps none (checked to match)."""
    if given is None:
        if found.vectors is None:
            raise InputError(
                f"--index {found.path} is a {found.kind}: it keeps no float vectors; pass --vectors X.npy (the "
                f"({found.ntotal}, {found.dim}) matrix it was built from, row i = id i)"
            )
        return check_vectors(found.vectors, f"the vectors of {found.path}")
    if given.shape != (found.ntotal, found.dim):
        raise InputError(f"{name} is {given.shape[0]} x {given.shape[1]}, the index holds {found.ntotal} x {found.dim}")
    return given


@dataclass(frozen=True)
class _Candidate:
    repair: Repair  # recall and bytes filled in once measured
    write: Callable[[Path], None]
    opened: Callable[[Path], Found]
    suffix: str  # of the file or folder it writes
    centered: bool = False  # it searches (x - mean)/|x - mean| with queries centered alike
    metric: str | None = None  # the metric it searches in, where not the index's


def _centered(vectors: np.ndarray, mean: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(unit_rows(vectors - mean), dtype=np.float32)


# FAISS: the user's index structure, emptied and untrained, behind centering and L2 normalization.

_RETRAINED_TRANSFORMS = ("PCAMatrix", "OPQMatrix", "ITQTransform", "CenteringTransform", "RandomRotationMatrix")


def _untrain(index: faiss.Index) -> None:
    """Mark every trained part to be trained again on the centered vectors (a transform the user set by hand,
    such as a LinearTransform of their own, is kept)."""
    index = faiss.downcast_index(index)
    if isinstance(index, faiss.IndexPreTransform):
        for i in range(index.chain.size()):
            transform = faiss.downcast_VectorTransform(index.chain.at(i))
            if type(transform).__name__ in _RETRAINED_TRANSFORMS:
                transform.is_trained = False
        _untrain(index.index)
    if isinstance(index, faiss.IndexIDMap | faiss.IndexIDMap2):
        _untrain(index.index)
    if isinstance(index, faiss.IndexIVF):
        index.quantizer.reset()  # an IVF keeps a filled quantizer as trained centroids
    storage = getattr(index, "storage", None)
    if storage is not None:
        _untrain(storage)
    if getattr(index, "do_polysemous_training", False):
        index.do_polysemous_training = False  # renumbers centroids for Hamming filters; no code or result changes
    if not isinstance(index, faiss.IndexFlat):
        index.is_trained = False


def _has_id_map(index: faiss.Index) -> bool:
    index = faiss.downcast_index(index)
    while isinstance(index, faiss.IndexPreTransform):
        index = faiss.downcast_index(index.index)
    return isinstance(index, faiss.IndexIDMap | faiss.IndexIDMap2)


def _copy(index: faiss.Index) -> faiss.Index:
    """A deep copy through FAISS's own format (clone_index refuses some transforms, CenteringTransform among them)."""
    return faiss.deserialize_index(faiss.serialize_index(index))


def _faiss_candidate(found: Found, vectors: np.ndarray) -> _Candidate:
    d = found.dim
    if found.metric == "hamming":
        inner, then = faiss.IndexLSH(d, d, False, False), "IndexLSH(d, d bits: the sign of each centered coordinate)"
        change = "queries go in as float vectors (the index takes their sign bits itself), not packed bits"
    else:
        inner = _copy(found.handle)
        inner.reset()
        _untrain(inner)
        then, change = f"your {found.kind}, retrained", "none: faiss.read_index loads it; queries go in raw"

    def write(path: Path) -> None:
        fixed = _copy(inner)  # a chain of the user's own gets the repair in front, as one chain
        if not isinstance(fixed, faiss.IndexPreTransform):
            fixed.this.disown()  # the chain owns its index and transforms (a clone's own_fields), as read_index's do
            fixed = faiss.IndexPreTransform(fixed)
            fixed.own_fields = True
        for transform in (faiss.NormalizationTransform(d, 2.0), faiss.CenteringTransform(d)):
            transform.this.disown()
            fixed.prepend_transform(transform)
        with native_stdout_silenced():
            fixed.train(np.ascontiguousarray(vectors, dtype=np.float32))
        rows = np.ascontiguousarray(vectors, dtype=np.float32)
        if _has_id_map(fixed):  # ids as today's, row i = id i: an id map takes them only with add_with_ids
            fixed.add_with_ids(rows, np.arange(len(rows), dtype=np.int64))
        else:
            fixed.add(rows)
        faiss.write_index(fixed, str(path))

    how = (
        f"a new index file: IndexPreTransform(CenteringTransform({d}), NormalizationTransform({d})) in front of "
        f"{then}; --fix OUT.faiss writes it"
    )
    repair = Repair("center (IndexPreTransform)", how, 0.0, 0.0, change)
    return _Candidate(repair, write, _open_faiss, ".faiss", centered=True)


# LanceDB: the same index type under a residual metric, or over centered vectors.


def _lance_candidates(found: Found, vectors: np.ndarray) -> list[_Candidate]:
    if found.params.get("index") is None:
        return []  # an exhaustive scan loses nothing to repair
    config = "".join(part.capitalize() for part in found.kind.split("_"))  # IVF_PQ -> lancedb.index.IvfPq
    options = {}
    if found.params.get("type") == "pq":
        options = {"num_sub_vectors": int(found.params["num_sub_vectors"]), "num_bits": int(found.params["num_bits"])}
    column = str(found.params["column"])
    mean = vectors.mean(axis=0)

    def call(metric: str) -> str:
        settings = ", ".join([f'distance_type="{metric}"'] + [f"{k}={v}" for k, v in options.items()])
        return f'tbl.create_index("{column}", config={config}({settings}), replace=True)'

    def candidate(name: str, metric: str, rows: np.ndarray, how: str, change: str) -> _Candidate:
        def write(path: Path) -> None:
            lancedb = lancedb_module()
            pa = pyarrow_module()
            table = pa.table({column: pa.FixedSizeListArray.from_arrays(pa.array(rows.ravel()), rows.shape[1])})
            made = lancedb.connect(path.parent).create_table(path.name[: -len(".lance")], table)
            made.create_index(column, config=getattr(lancedb.index, config)(distance_type=metric, **options))

        def opened(path: Path) -> Found:
            made = _open_lance(path, None)
            if name == "center":  # the user centers each query the same way before searching
                search = made.search
                made.search = lambda q, k: search(_centered(q, mean), k)
            return made

        return _Candidate(Repair(name, how, 0.0, 0.0, change), write, opened, ".lance", name == "center", metric)

    made = []
    if found.metric == "dot":  # Lance's PQ encodes residuals from the IVF centres only under l2 and cosine
        made += [
            candidate(
                f"metric {metric}",
                metric,
                vectors,
                f'{call(metric)}; search with .distance_type("{metric}")',
                f'queries use .distance_type("{metric}") (the same ranking as dot where rows are unit length)',
            )
            for metric in ("cosine", "l2")
        ]
    made.append(
        candidate(
            "center",
            found.metric,
            _centered(vectors, mean),
            f"a table of (x - mean)/|x - mean| (the mean: {found.dim} floats beside it), then {call(found.metric)}",
            "each query centered and normalized with the same mean before .search",
        )
    )
    return made


# USearch: a wider codec, or the same codec over centered vectors.


def _usearch_candidates(found: Found, vectors: np.ndarray) -> list[_Candidate]:
    from usearch.index import Index

    codec, params = found.params["codec"], found.params
    mean = vectors.mean(axis=0)

    def candidate(name: str, dtype: str, rows: np.ndarray, change: str) -> _Candidate:
        def write(path: Path) -> None:
            index = Index(
                ndim=found.dim,
                metric=found.metric,
                dtype=dtype,
                connectivity=params["connectivity"],
                expansion_add=params["expansion_add"],
                expansion_search=params["expansion_search"],
            )
            index.add(np.arange(len(rows)), rows)
            index.save(str(path))

        def opened(path: Path) -> Found:
            made = _open_usearch(path)
            if name.startswith("center"):
                search = made.search
                made.search = lambda q, k: search(_centered(q, mean), k)
            return made

        how = (
            f'Index(ndim={found.dim}, metric="{found.metric}", dtype="{dtype}", connectivity='
            f"{params['connectivity']})" + (" over (x - mean)/|x - mean|" if name.startswith("center") else "")
        )
        return _Candidate(Repair(name, how, 0.0, 0.0, change), write, opened, ".usearch", name.startswith("center"))

    made = [candidate(f"codec {c}", c, vectors, "none: the same calls") for c in USEARCH_WIDER if c != codec]
    made.append(
        candidate(
            f"center ({codec})",
            codec,
            _centered(vectors, mean),
            "each query centered and normalized with the same mean (USearch keeps no transform)",
        )
    )
    return made


def _candidates(found: Found, vectors: np.ndarray) -> list[_Candidate]:
    if found.store == "faiss":
        return [_faiss_candidate(found, vectors)]
    if found.store == "lancedb":
        return _lance_candidates(found, vectors)
    return _usearch_candidates(found, vectors)


def _measured(
    candidate: _Candidate, path: Path, vectors: np.ndarray, queries: np.ndarray, exact: np.ndarray, today: np.ndarray
) -> Repair:
    """The repair written to ``path``, read back as its store reads it, and measured against the index today; and
    how much of today's exact top 10 exact search in the repair's own space keeps (a centering changes the exact
    ranking itself, so that much of its recall is not the index's to lose)."""
    candidate.write(path)
    made = candidate.opened(path)
    mine = recalls_at_10(made, queries, exact)
    mean = vectors.mean(axis=0)
    docs, asked = (_centered(vectors, mean), _centered(queries, mean)) if candidate.centered else (vectors, queries)
    kept = metrics.overlap_at_k(exact_rows(docs, asked, candidate.metric or made.metric), exact, K)
    r = candidate.repair
    return Repair(r.name, r.how, made.code_bytes, float(mine.mean()), r.code_change, paired_p(today, mine), kept)


def _adjusted(repairs: list[Repair]) -> list[Repair]:
    """The repairs' p-values corrected for their number (Benjamini-Hochberg), as the doctor's and the eval's are."""
    if len(repairs) < 2:
        return repairs
    adjusted = false_discovery_control([r.p for r in repairs])
    return [replace(r, p=float(p)) for r, p in zip(repairs, adjusted, strict=True)]


def prescribe(recall: float, repairs: list[Repair], target: float) -> Repair | None:
    """None where the index already keeps the target; else, among repairs whose recall is higher by the paired
    test, the cheapest that reaches the target (then the best recall), or the best where none does."""
    if recall >= target:
        return None
    better = [r for r in repairs if r.recall_at_10 > recall and r.p is not None and r.p < ALPHA]
    if not better:
        return None
    passing = [r for r in better if r.recall_at_10 >= target]
    if passing:
        return min(passing, key=lambda r: (r.code_bytes, -r.recall_at_10))
    return max(better, key=lambda r: r.recall_at_10)


def sample_queries(vectors: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    rows = np.sort(np.random.default_rng(seed).permutation(len(vectors))[: min(n, len(vectors))])
    return np.ascontiguousarray(vectors[rows], dtype=np.float32)


def checkup_index(
    found: Found,
    vectors: np.ndarray,
    queries: np.ndarray,
    queries_from: str,
    target: float = 0.95,
    fix: Path | None = None,
) -> IndexCheckup:
    """The index as it is, every repair its store offers (built in a temporary folder), and the prescription;
    ``fix``: the prescribed repair (or the store's centering, where the index needs none) written there and
    measured as it was read back."""
    if queries.shape[1] != found.dim:
        raise InputError(f"queries have {queries.shape[1]} dimensions, the index {found.dim}")
    candidates = _candidates(found, vectors)
    if fix is not None:
        if not candidates:
            raise InputError(f"--fix: {found.kind} is an exhaustive scan; there is nothing to repair")
        if found.store != "faiss" and fix.suffix != candidates[0].suffix:  # FAISS reads a file by its content
            raise InputError(f"--fix {fix}: a {found.store} repair is written as NAME{candidates[0].suffix}")
    exact = exact_rows(vectors, queries, found.metric)
    today = recalls_at_10(found, queries, exact)
    recall = float(today.mean())
    fixed = None
    with tempfile.TemporaryDirectory(prefix="cone-doctor-") as tmp:
        paths = [Path(tmp) / f"repair{i}{c.suffix}" for i, c in enumerate(candidates)]
        repairs = _adjusted(
            [_measured(c, path, vectors, queries, exact, today) for c, path in zip(candidates, paths, strict=True)]
        )
        prescription = prescribe(recall, repairs, target)
        if fix is not None:  # the prescribed repair, or the store's centering where none is prescribed
            chosen = next((i for i, r in enumerate(repairs) if r is prescription), len(repairs) - 1)
            copy = shutil.copytree if paths[chosen].is_dir() else shutil.copyfile
            copy(paths[chosen], fix)
            made = candidates[chosen].opened(fix)  # read back from where it was written, as its user will
            mine = recalls_at_10(made, queries, exact)
            fixed = {
                "path": str(fix),
                "repair": repairs[chosen].name,
                "recall_at_10": float(mine.mean()),
                "p": paired_p(today, mine),
                "code_bytes_per_vector": made.code_bytes,
            }
    diagnosis = diagnose(vectors)
    return IndexCheckup(found, len(queries), queries_from, target, diagnosis, recall, repairs, prescription, fixed)
