"""Qdrant as a store, on Qdrant Edge (``qdrant-edge-py``, the Qdrant team's in-process engine): one shard, a folder
``shard/`` in the index folder, whose point ids are the rows. Qdrant builds the HNSW graph and the quantized codes
itself (its optimizer, run to the end when the build finishes); cone only asks and then checks what was built.

Types, in Qdrant's terms: ``qdrant:hnsw`` (float32 vectors, no quantization), ``qdrant:int8`` (scalar quantization;
``quantile`` a build setting, Qdrant's default otherwise), ``qdrant:pqR`` (product quantization at compression
ratio R: 4, 8, 16, 32, 64), ``qdrant:bq1``, ``qdrant:bq1.5``, ``qdrant:bq2`` (binary quantization at 1, 1.5, 2 bits
per dimension; ``query_encoding`` a setting: default, binary, scalar4bits, scalar8bits), ``qdrant:tqB``
(TurboQuant at B bits: 1, 1.5, 2, 4, 8) and ``qdrant:exact`` (the float32 vectors searched exhaustively: Qdrant's
``exact`` search). Metrics: ``cosine`` (Qdrant's ``Cosine``, the default here: Qdrant itself has none), ``dot``
(``Dot``) and ``l2`` (``Euclid``, whose score is the Euclidean distance: reported as 1 - d²/2).

Search settings (``--search-params``): ``hnsw_ef``, ``exact`` (true: exhaustive, graph unused; Qdrant then scores
the float32 vectors, not the codes: tested, one-bit codes lose nothing under it),
``rescore`` and ``oversampling`` (quantized types: the candidates re-scored by the float32 vectors). Qdrant searches
a segment smaller than ``full_scan_threshold`` exhaustively whatever the type; it is set to 1 KB here so that every
type but ``exact`` goes through the graph, and the manifest says which search every query took (``search``).
Scores are Qdrant's: the cosine (Cosine, Dot) or distance (Euclid) of the vectors or, without rescoring, of the
codes; a binary code searched without rescoring scores in its own units (its rows are still what recall measures).

What was built is checked from the shard itself: every point indexed (``ShardInfo.indexed_vectors_count``) and every
indexed segment's own config (``segment.json``, Qdrant's) naming the HNSW index and the quantization asked for;
``read`` checks the shard's vector size and distance (``edge_config.json``), and the store's ``verify`` the same
account as the build, with the points the manifest recorded. Qdrant rewrites the shard's files itself, so integrity
goes by these checks, not by file hashes, and the service's reload by the store's ``state`` (the segments' files by
name and size, not their times). Qdrant Edge opens a folder once (a lock on its write-ahead log): a process keeps one
open shard per folder, shared by everything that opens the index (the service and the eval), and a shard open in
another process is StoreUnavailable in one line (transient: the service's 503 for that index, opened again at the
next reload).

qdrant_edge is imported only here (``pip install 'cone[qdrant]'``; 0.9.0 is the version measured).
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import threading
import weakref
from collections.abc import Callable, Hashable
from pathlib import Path
from types import ModuleType
from typing import TypeVar

import numpy as np

from cone.errors import DamagedIndex, InputError, StoreUnavailable
from cone.indexing.codes import COSINE, DOT, L2, IndexType, parse_search_params, similarity
from cone.indexing.location import files_state
from cone.indexing.user_index import RepairRecipe, UserIndex, centered, no_table, searching_centered

NAME = "qdrant"  # --store's name
PREFIX = "qdrant:"
SHARD = "shard"  # the shard's folder in the index folder
DISTANCE = {COSINE: "Cosine", DOT: "Dot", L2: "Euclid"}
TYPE = re.compile(r"^(?:(?P<plain>exact|hnsw)|int8|pq(?P<pq>4|8|16|32|64)|bq(?P<bq>1|1\.5|2)|tq(?P<tq>1|1\.5|2|4|8))$")
TYPES = ("exact", "hnsw", "int8", "pq16", "pq32", "bq1", "bq1.5", "bq2", "tq1", "tq2", "tq4")  # cone eval's sweep
BQ_ENCODING = {"1": "OneBit", "1.5": "OneAndHalfBits", "2": "TwoBits"}
TQ_BITS = {"1": "Bits1", "1.5": "Bits1_5", "2": "Bits2", "4": "Bits4", "8": "Bits8"}
QUERY_ENCODINGS = {"default": "Default", "binary": "Binary", "scalar4bits": "Scalar4Bits", "scalar8bits": "Scalar8Bits"}
QUANTIZED_KEY = {"int8": "scalar", "pq": "product", "bq": "binary", "tq": "turbo"}  # segment.json's names
HNSW_M, HNSW_EF_CONSTRUCT = 16, 100  # Qdrant's defaults, recorded
FULL_SCAN_KB = 1  # below this a segment is searched exhaustively (Qdrant's default is 10 000 KB: most test corpora)
INSTALL = "pip install 'cone[qdrant]'"
BOOLEAN = ("true", "false")
T = TypeVar("T")
SETTINGS = ("hnsw_ef", "exact", "rescore", "oversampling", "quantile", "query_encoding")


def qdrant_module() -> ModuleType:
    """qdrant_edge, or the one line that says it is not installed and how to install it."""
    try:
        import qdrant_edge
    except ImportError as exc:
        raise InputError(f"Qdrant store unavailable: qdrant-edge-py is not installed ({exc}); fix: {INSTALL}") from None
    return qdrant_edge


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


def family(factory: str) -> tuple[str, str | None]:
    """``qdrant:bq1.5`` -> ("bq", "1.5"); ``qdrant:int8`` -> ("int8", None); an unknown type is refused."""
    name = factory[len(PREFIX) :].strip().lower()
    found = TYPE.match(name)
    if not found:
        known = "exact, hnsw, int8, pq4-pq64, bq1, bq1.5, bq2, tq1, tq1.5, tq2, tq4, tq8"
        raise InputError(f"invalid --index-factory {factory!r}: Qdrant types are {PREFIX}TYPE, TYPE one of {known}")
    for group in ("pq", "bq", "tq"):
        if found.group(group):
            return group, found.group(group)
    return found.group("plain") or "int8", None


def build_params(kind: IndexType, search_params: str) -> dict[str, int | str | None]:
    """The type's settings, checked (a setting the type does not take is refused), and what every search uses."""
    settings = parse_search_params(search_params)
    group, size = family(kind.factory)
    quantized = group in QUANTIZED_KEY
    takes = {"hnsw_ef", "exact"} if group == "hnsw" else set() if group == "exact" else set(SETTINGS[:4])
    takes |= {"quantile"} if group == "int8" else {"query_encoding"} if group == "bq" else set()
    for name in settings:
        if name not in takes:
            allowed = ", ".join(s for s in SETTINGS if s in takes) or "no settings"
            raise InputError(f"invalid --search-params: {kind.factory} takes {allowed}, not {name!r}")
    params: dict[str, int | str | None] = {"distance": DISTANCE[kind.metric], "m": HNSW_M}
    params |= {"ef_construct": HNSW_EF_CONSTRUCT, "full_scan_threshold_kb": FULL_SCAN_KB}
    params["quantization"] = f"{QUANTIZED_KEY[group]}:{size or 'int8'}" if quantized else None
    for name in ("exact", "rescore"):
        if name in settings and settings[name].lower() not in BOOLEAN:
            raise InputError(f"invalid --search-params: {name} is true or false, not {settings[name]!r}")
    exact = group == "exact" or settings.get("exact", "false").lower() == "true"
    params["search"] = "exhaustive" if exact else "hnsw"
    if "hnsw_ef" in settings:
        if not settings["hnsw_ef"].isdigit() or int(settings["hnsw_ef"]) < 1:
            raise InputError(f"invalid --search-params: hnsw_ef is a whole number > 0, not {settings['hnsw_ef']!r}")
        params["hnsw_ef"] = int(settings["hnsw_ef"])
    if quantized:
        params["rescore"] = settings.get("rescore", "true").lower()  # Qdrant's default: rescore where it can
        params["oversampling"] = str(_number(settings, "oversampling", 1.0, 1.0, 1e6))
    if "quantile" in settings:
        params["quantile"] = str(_number(settings, "quantile", 1.0, 0.5, 1.0))
    if group == "bq":
        encoding = settings.get("query_encoding", "default").lower()
        if encoding not in QUERY_ENCODINGS:
            raise InputError(f"invalid --search-params: query_encoding is one of {', '.join(QUERY_ENCODINGS)}")
        params["query_encoding"] = encoding
    return params


def _number(settings: dict[str, str], name: str, default: float, low: float, high: float) -> float:
    try:
        value = float(settings.get(name, default))
    except ValueError:
        value = float("nan")
    if not low <= value <= high:
        raise InputError(f"invalid --search-params: {name} is a number from {low} to {high:g}, not {settings[name]!r}")
    return value


def _quantization(q: ModuleType, kind: IndexType, params: dict) -> object | None:
    group, size = family(kind.factory)
    if group == "int8":
        quantile = float(params["quantile"]) if "quantile" in params else None
        return q.ScalarQuantizationConfig(type=q.ScalarType.Int8, quantile=quantile, always_ram=True)
    if group == "pq":
        return q.ProductQuantizationConfig(compression=getattr(q.CompressionRatio, f"X{size}"), always_ram=True)
    if group == "bq":
        encoding = getattr(q.BinaryQuantizationEncoding, BQ_ENCODING[size])
        query = getattr(q.BinaryQuantizationQueryEncoding, QUERY_ENCODINGS[str(params["query_encoding"])])
        return q.BinaryQuantizationConfig(encoding=encoding, query_encoding=query, always_ram=True)
    if group == "tq":
        return q.TurboQuantQuantizationConfig(bits=getattr(q.TurboQuantBitSize, TQ_BITS[size]), always_ram=True)
    return None


def shard_config(q: ModuleType, kind: IndexType, dim: int, params: dict) -> object:
    """One HNSW segment of every point (indexing from the first KB), with the graph settings of ``params``."""
    hnsw = q.HnswIndexConfig(
        m=int(params["m"]),
        ef_construct=int(params["ef_construct"]),
        full_scan_threshold=int(params["full_scan_threshold_kb"]),
    )
    return q.EdgeConfig(
        vectors=q.EdgeVectorParams(size=dim, distance=getattr(q.Distance, DISTANCE[kind.metric])),
        hnsw_config=hnsw,
        quantization_config=_quantization(q, kind, params),
        optimizers=q.EdgeOptimizersConfig(indexing_threshold=1, default_segment_number=1),
    )


# One open shard per folder in this process (Qdrant Edge locks a folder's write-ahead log: a second open fails),
# by the folder's path and inode: a folder rebuilt under the same name (cone index's swap) is another shard.
_OPEN: dict[tuple[Path, int], list] = {}  # (resolved folder, inode) -> [shard, number of holders]
_OPEN_LOCK = threading.Lock()


def _engine_error(path: Path, exc: BaseException) -> Exception:
    if "WouldBlock" in str(exc):  # another process's lock: it may close the shard, so tried again (the service's 503)
        why = "it is open in another process (Qdrant Edge opens a shard folder once)"
        return StoreUnavailable(f"{path}: Qdrant shard unavailable: {why}")
    return DamagedIndex(f"{path}: Qdrant shard unreadable ({_first_line(exc)})")


def _engine(path: Path, call: Callable[[], T]) -> T:
    """``call`` into Qdrant Edge, its failures one line: it raises bare Exception with the engine's message, and pyo3's
    PanicException (a BaseException) where Rust panics, as a search does on a truncated segment file."""
    try:
        return call()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001 -- the panic is no Exception
        raise _engine_error(path, exc) from None


def _query(shard: object, path: Path, queries: np.ndarray, k: int, params: object) -> list[list]:
    """Each query's points, best first, one batch."""
    q = qdrant_module()
    requests = [
        q.QueryRequest(limit=k, query=q.Query.Nearest(v.tolist()), params=params)
        for v in np.asarray(queries, dtype=np.float32)
    ]
    return _engine(path, lambda: shard.query_batch(q.QueryBatchRequest(requests)))


def hold_shard(path: Path, create: object | None = None) -> object:
    """The shard at ``path``, opened (or created with the config ``create``) once per process and shared."""
    if create is not None:
        path.mkdir(parents=True, exist_ok=True)  # Qdrant creates it too; its inode names the shard
    try:
        key = path.resolve(), path.stat().st_ino
    except OSError as exc:
        raise DamagedIndex(f"{path}: no Qdrant shard folder ({exc.strerror})") from None
    with _OPEN_LOCK:
        if key in _OPEN:
            _OPEN[key][1] += 1
            return _OPEN[key][0]
        q = qdrant_module()
        if create is not None:
            shard = _engine(path, lambda: q.EdgeShard.create(str(path), create))
        else:
            shard = _engine(path, lambda: q.EdgeShard.load(str(path)))
        _OPEN[key] = [shard, 1]
        return shard


def release_shard(shard: object) -> None:
    """One holder of ``shard`` fewer; the last closes it (and frees the folder's lock)."""
    with _OPEN_LOCK:
        key = next((key for key, held in _OPEN.items() if held[0] is shard), None)
        if key is None:
            return
        _OPEN[key][1] -= 1
        if _OPEN[key][1] <= 0:
            del _OPEN[key]
            shard.close()


def _release_folder(path: Path) -> None:
    """Every shard still open at ``path`` closed, whoever holds it (a scratch folder about to be removed)."""
    with _OPEN_LOCK:
        for key in [key for key in _OPEN if key[0] == path.resolve()]:
            _OPEN.pop(key)[0].close()


def _segments(path: Path) -> list[dict]:
    """Each segment's vector config as Qdrant wrote it (segment.json), with its folder."""
    found = []
    for config in sorted((path / "segments").glob("*/segment.json")):
        vectors = json.loads(config.read_text())["config"]["vector_data"][""]
        found.append(vectors | {"folder": config.parent})
    return found


def check_shard(path: Path, shard: object, kind: IndexType, dim: int, n: int | None) -> dict[str, int]:
    """What the shard says it holds: every point indexed, each indexed segment an HNSW graph with the codes asked
    for; the counts. DamagedIndex otherwise (a build that did not index is not the type it names)."""
    info = shard.info()
    if n is not None and info.points_count != n:
        raise DamagedIndex(f"{path}: the shard holds {info.points_count} points, {n} were written")
    if info.indexed_vectors_count != info.points_count:
        why = f"{info.indexed_vectors_count} of {info.points_count} points are in an HNSW graph"
        raise DamagedIndex(f"{path}: the shard is not indexed ({why})")
    group, size = family(kind.factory)
    try:
        indexed = [s for s in _segments(path) if s["index"]["type"] == "hnsw"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DamagedIndex(f"{path}: unreadable segment config ({_first_line(exc)})") from None
    want = QUANTIZED_KEY.get(group)
    for segment in indexed:
        if segment["size"] != dim or segment["distance"] != DISTANCE[kind.metric]:
            got = f"{segment['size']}-dim {segment['distance']}"
            raise DamagedIndex(f"{path}: a segment holds {got} vectors, the index is {dim}-dim {DISTANCE[kind.metric]}")
        quantized = segment.get("quantization_config") or {}
        if want is not None and (
            want not in quantized or not (segment["folder"] / "vector_storage" / "quantized.data").is_file()
        ):
            raise DamagedIndex(
                f"{path}: segment {segment['folder'].name} is not {want}-quantized ({quantized or 'none'})"
            )
        if want is None and quantized:
            raise DamagedIndex(
                f"{path}: segment {segment['folder'].name} is quantized ({quantized}), {kind.factory} is not"
            )
    return {
        "segments": info.segments_count,
        "indexed_segments": len(indexed),
        "indexed_vectors": info.indexed_vectors_count,
    }


def _indexed_bytes(path: Path) -> int:
    """The indexed segments' vector storage (the float32 vectors Qdrant keeps for rescoring, the codes) and graph;
    not the preallocated, sparse files Qdrant keeps beside them (payload pages, the empty appendable segment, the
    write-ahead log), which hold nothing of the vectors."""
    total = 0
    for segment in _segments(path):
        if segment["index"]["type"] == "hnsw":
            for part in ("vector_storage", "vector_index"):
                total += sum(f.stat().st_size for f in (segment["folder"] / part).rglob("*") if f.is_file())
    return total


class QdrantCodes:
    """An open Qdrant Edge shard; the Codes of cone.indexing.codes. Point ids are rows."""

    def __init__(self, path: Path, shard: object, kind: IndexType, dim: int, params: dict) -> None:
        self.path, self.kind, self.dim, self._params = path, kind, dim, params
        # The shard held, released by ``close`` or when the codes are collected: the service never closes an index
        # a reload replaced (the last request done with it drops it), and a shard left held keeps its codes in
        # memory and its folder locked for the life of the process.
        self._held = [shard]
        self._release = weakref.finalize(self, _release_held, self._held)

    @property
    def shard(self) -> object:
        return self._held[0]

    @property
    def params(self) -> dict[str, int | str | None]:
        return self._params

    @property
    def ntotal(self) -> int:
        return int(self.shard.info().points_count)

    def _search_params(self) -> object:
        q, p = qdrant_module(), self._params
        quantization = None
        if p.get("quantization"):
            quantization = q.QuantizationSearchParams(
                rescore=p["rescore"] == "true", oversampling=float(p["oversampling"])
            )
        return q.SearchParams(hnsw_ef=p.get("hnsw_ef"), exact=p["search"] == "exhaustive", quantization=quantization)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        scores = np.full((len(queries), k), -np.inf, dtype=np.float32)
        rows = np.full((len(queries), k), -1, dtype=np.int64)
        if not len(queries):
            return scores, rows
        found = _query(self.shard, self.path, queries, k, self._search_params())
        for i, points in enumerate(found):
            got = np.array([p.score for p in points], dtype=np.float32)
            scores[i, : len(points)] = similarity(got * got, L2) if self.kind.metric == L2 else got
            rows[i, : len(points)] = [int(p.id) for p in points]
        return scores, rows

    def vectors(self) -> np.ndarray:
        """The float32 vectors Qdrant keeps (Cosine: normalized by Qdrant), in row order."""
        ids = list(range(self.ntotal))
        records = _engine(self.path, lambda: self.shard.retrieve(ids, with_payload=False, with_vector=True))
        by_row = {int(r.id): r.vector for r in records}
        return np.asarray([by_row[i] for i in range(len(by_row))], dtype=np.float32)

    def bytes_per_vector(self) -> float:
        return _indexed_bytes(self.path) / max(1, self.ntotal)

    def write(self, folder: Path) -> None:
        """A copy of the shard, closed first so that its files are complete (then opened again here)."""
        release_shard(self.shard)
        try:
            shutil.copytree(self.path, folder / SHARD)
        finally:
            self._held[0] = hold_shard(self.path)

    def close(self) -> None:
        self._release()  # once: a finalizer runs at most once


def _release_held(held: list) -> None:
    release_shard(held[0])


def _discard(scratch: Path) -> None:
    """An in-memory build's shard, once its codes are gone: closed (if its holder did not) and removed."""
    _release_folder(scratch / SHARD)
    shutil.rmtree(scratch, ignore_errors=True)


class QdrantWriter:
    """A streamed build: points upserted into the shard in the build's folder as they come, indexed at the end."""

    def __init__(self, path: Path, kind: IndexType, dim: int, params: dict) -> None:
        self.path, self.kind, self.dim, self.params, self.count = path, kind, dim, params, 0
        self.shard = hold_shard(path, shard_config(qdrant_module(), kind, dim, params))

    def train(self, sample: np.ndarray) -> None:
        """Qdrant trains its quantizers itself when it indexes a segment."""

    def add(self, vectors: np.ndarray, ids: list[str]) -> None:
        q = qdrant_module()
        points = [q.Point(self.count + i, v.tolist()) for i, v in enumerate(np.asarray(vectors, dtype=np.float32))]
        _engine(self.path, lambda: self.shard.update(q.UpdateOperation.upsert_points(points)))
        self.count += len(points)

    def finish(self) -> dict[str, int | str | None]:
        """Qdrant's optimizer run to the end (the graph and the codes), checked, flushed and closed."""
        _engine(self.path, self.shard.optimize)
        _engine(self.path, self.shard.flush)
        checked = check_shard(self.path, self.shard, self.kind, self.dim, self.count)
        release_shard(self.shard)
        return self.params | checked


def _configured(path: Path) -> dict:
    """The shard's vector size and distance as Qdrant keeps them (edge_config.json), before opening it."""
    try:
        return json.loads((path / "edge_config.json").read_text())["vectors"][""]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DamagedIndex(f"{path}: not a Qdrant Edge shard (edge_config.json: {_first_line(exc)})") from None


# A user's own Qdrant Edge shard (cone doctor --index SHARD_FOLDER), and its repairs.

ENCODING_TYPE = {"one_bit": "bq1", "one_and_half_bits": "bq1.5", "two_bits": "bq2"}
CONE_METRIC = {name: metric for metric, name in DISTANCE.items()}


def type_of_config(quantization: dict | None) -> str:
    """A shard's quantization config (Qdrant's JSON) as a type of this store: ``{"binary": {"encoding":
    "one_bit"}}`` -> ``bq1``."""
    quantization = quantization or {}
    if "scalar" in quantization:
        return "int8"
    if "product" in quantization:
        return "pq" + str(quantization["product"]["compression"]).lower().lstrip("x")
    if "binary" in quantization:
        return ENCODING_TYPE[str(quantization["binary"].get("encoding") or "one_bit")]
    if "turbo" in quantization:
        return "tq" + str(quantization["turbo"].get("bits") or "bits4")[4:].replace("_", ".")
    return "hnsw"


def bits_per_dimension(name: str) -> float:
    group, size = family(PREFIX + name)
    if group == "pq":
        return 32.0 / float(size)
    if group in ("bq", "tq"):
        return float(size)
    return 8.0 if group == "int8" else 32.0


def _user_search(shard: object, path: Path, settings: dict, row_of: dict[int, int]) -> Callable:
    def search(queries: np.ndarray, k: int) -> np.ndarray:
        q = qdrant_module()
        quantization = q.QuantizationSearchParams(**settings) if settings else None
        found = _query(shard, path, queries, k, q.SearchParams(quantization=quantization))
        rows = np.full((len(queries), k), -1, dtype=np.int64)
        for i, points in enumerate(found):
            rows[i, : len(points)] = [row_of[int(p.id)] for p in points]
        return rows

    return search


def open_user(path: Path, table: str | None, settings: dict | None = None) -> UserIndex:
    """A Qdrant Edge shard folder as Qdrant opens it, searched with its defaults (``settings``: the quantization
    search settings a repair changes). Its point ids must be whole numbers; row i is the i-th smallest."""
    no_table(path, table)
    q = qdrant_module()
    try:
        config = json.loads((path / "edge_config.json").read_text())
        vector = config["vectors"][""]
        dim, distance = int(vector["size"]), str(vector["distance"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(
            f"--index {path}: not a Qdrant Edge shard with one unnamed dense vector ({_first_line(exc)})"
        ) from None
    if distance not in CONE_METRIC:
        raise InputError(f"--index {path}: distance {distance}; cone measures Cosine, Dot and Euclid")
    quantization = vector.get("quantization_config") or config.get("quantization_config")
    name = type_of_config(quantization)
    shard = hold_shard(path)
    n = int(shard.info().points_count)
    request = q.ScrollRequest(limit=max(1, n), with_payload=False, with_vector=True)
    records, _ = _engine(path, lambda: shard.scroll(request))
    if not all(isinstance(r.id, int) for r in records):
        release_shard(shard)
        raise InputError(f"--index {path}: point ids are not whole numbers, so they cannot name rows of --vectors")
    records = sorted(records, key=lambda r: r.id)
    vectors = np.asarray([r.vector for r in records], dtype=np.float32).reshape(len(records), dim)
    row_of = {int(r.id): i for i, r in enumerate(records)}
    hnsw = config.get("hnsw_config") or {}
    params = {"type": PREFIX + name, "quantization": json.dumps(quantization) if quantization else None}
    params |= {k: hnsw[k] for k in ("m", "ef_construct", "full_scan_threshold") if k in hnsw} | (settings or {})
    params["search"] = _user_search_mode(n, dim, int(hnsw.get("full_scan_threshold", QDRANT_FULL_SCAN_KB)))
    kind = f"Qdrant Edge shard, {name if quantization else 'no quantization'}"
    code = bits_per_dimension(name) / 8 * dim
    search = _user_search(shard, path, settings or {}, row_of)
    return UserIndex(NAME, str(path), kind, CONE_METRIC[distance], params, code, n, dim, search, vectors, shard)


QDRANT_FULL_SCAN_KB = 10_000  # Qdrant's default full_scan_threshold


def _user_search_mode(n: int, dim: int, full_scan_kb: int) -> str:
    """Whether Qdrant searches a shard of ``n`` vectors of ``dim`` through its graph or by a full scan: by its rule, a
    segment whose float32 vectors are under ``full_scan_threshold`` kilobytes is scanned (one segment assumed)."""
    size_kb = n * dim * 4 / 1024
    if size_kb < full_scan_kb:
        return f"exhaustive ({size_kb:,.0f} KB of vectors, under full_scan_threshold {full_scan_kb:,} KB)"
    return "hnsw"


def _same_bits_turbo(name: str) -> str:
    """TurboQuant at the bits per dimension of ``name`` (its largest size not above them; 1 at least)."""
    bits = bits_per_dimension(name)
    return "tq" + max((b for b in TQ_BITS if float(b) <= bits), key=float, default="1")


def user_repairs(index: UserIndex, vectors: np.ndarray) -> list[RepairRecipe]:
    """Rescoring with oversampling (the same shard, a search setting), TurboQuant at the same bits per dimension
    (a quantization config change: its codes are centred per dimension; tests/test_metric_rule.py), and the same
    config over centered vectors re-upserted into a new shard; each new shard with the user's graph settings. An
    unquantized shard gets the centering only."""
    name = str(index.params["type"])[len(PREFIX) :]
    metric, mean = index.metric, vectors.mean(axis=0)
    graph = {  # the user's graph settings (Qdrant's defaults where the shard names none): only the code changes
        "m": index.params.get("m", HNSW_M),
        "ef_construct": index.params.get("ef_construct", HNSW_EF_CONSTRUCT),
        "full_scan_threshold_kb": index.params.get("full_scan_threshold", QDRANT_FULL_SCAN_KB),
    }

    def new_shard(kind_name: str, center: bool) -> Callable[[Path], None]:
        def write(path: Path) -> None:
            kind = parse_index_type_of(kind_name, metric)
            writer = QdrantWriter(path, kind, index.dim, build_params(kind, "") | graph)
            writer.add(centered(vectors, mean) if center else vectors, [])
            writer.finish()

        return write

    def opened(center: bool, settings: dict | None = None) -> Callable[[Path], UserIndex]:
        def read(path: Path) -> UserIndex:
            made = open_user(path, None, settings)
            return searching_centered(made, mean) if center else made

        return read

    made = []
    if name != "hnsw":
        settings = {"rescore": True, "oversampling": float(OVERSAMPLING)}
        how = f"SearchParams(quantization=QuantizationSearchParams(rescore=True, oversampling={OVERSAMPLING}))"
        change = "each search asks for rescoring with oversampling (the shard is unchanged)"
        made.append(RepairRecipe(f"rescore x{OVERSAMPLING}", how, change, _copy(index), opened(False, settings), None))
        turbo = _same_bits_turbo(name)
        config = f"TurboQuantQuantizationConfig(bits=TurboQuantBitSize.{TQ_BITS[turbo[2:]]})"
        how = f"a new shard with {config}, the points re-upserted"
        made.append(
            RepairRecipe(
                f"quantization {turbo}", how, "none: the same searches", new_shard(turbo, False), opened(False), None
            )
        )
    how = f"a new shard of {name}: the points re-upserted as (x - mean)/|x - mean| (the mean kept beside it)"
    change = "each query centred and normalized with the same mean"
    made.append(RepairRecipe(f"center ({name})", how, change, new_shard(name, True), opened(True), None, True))
    return made


OVERSAMPLING = 4  # the rescoring repair's oversampling: Qdrant's documented range is 1 to 4


def _copy(index: UserIndex) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        shutil.copytree(Path(index.path), path)  # read-only searches: the copy is the shard as it is

    return write


def parse_index_type_of(name: str, metric: str) -> IndexType:
    """This store's type ``name`` under ``metric`` (cone's name), checked."""
    return QdrantStore().parse(PREFIX + name, metric)


class QdrantStore:
    """Qdrant Edge (cone.indexing.codes.Store): ``qdrant:TYPE`` under ``cosine`` (default), ``dot`` or ``l2``."""

    name = NAME
    prefix = PREFIX
    metrics = (DOT, L2, COSINE)
    default_metric = COSINE
    exact = PREFIX + "exact"
    legacy_metric = None  # every Qdrant index records its metric
    doctor_types = ()

    open_user = staticmethod(open_user)
    repairs = staticmethod(user_repairs)

    def claims(self, path: Path) -> bool:
        return (path / "edge_config.json").is_file()  # asked before LanceDB, which claims any folder

    def parse(self, factory: str, metric: str | None) -> IndexType:
        family(factory)
        metric = metric or self.default_metric
        if metric not in self.metrics:
            raise InputError(f"invalid index type {factory!r}: Qdrant searches by {', '.join(self.metrics)}")
        return IndexType(PREFIX + factory[len(PREFIX) :].strip().lower(), self.name, metric)

    def types(self) -> tuple[str, ...]:
        return tuple(PREFIX + t for t in TYPES)

    def check(self, kind: IndexType, dim: int, search_params: str) -> None:
        qdrant_module()
        build_params(kind, search_params)

    def build(self, vectors: np.ndarray, kind: IndexType, search_params: str, ids: list[str] | None) -> QdrantCodes:
        """A shard in a scratch folder (removed with the codes), written into the index folder by ``write``."""
        scratch = Path(tempfile.mkdtemp(prefix="cone-qdrant-"))
        writer = self.streamed(scratch, scratch, kind, vectors.shape[1], search_params)
        writer.add(vectors, [])
        params = writer.finish()
        codes = QdrantCodes(scratch / SHARD, hold_shard(scratch / SHARD), kind, vectors.shape[1], params)
        weakref.finalize(codes, _discard, scratch)
        return codes

    def streamed(self, folder: Path, final: Path, kind: IndexType, dim: int, search_params: str) -> QdrantWriter:
        return QdrantWriter(folder / SHARD, kind, dim, build_params(kind, search_params))

    def read(
        self, folder: Path, kind: IndexType, dim: int, search_params: str, on_disk: bool, params: dict
    ) -> QdrantCodes:
        path = folder / SHARD
        configured = _configured(path)
        if configured.get("size") != dim or configured.get("distance") != DISTANCE[kind.metric]:
            got = f"{configured.get('size')}-dim {configured.get('distance')}"
            raise DamagedIndex(
                f"{path}: a Qdrant shard of {got} vectors, the index is {dim}-dim {DISTANCE[kind.metric]}"
            )
        return QdrantCodes(path, hold_shard(path), kind, dim, dict(params))

    def verify(self, folder: Path, kind: IndexType, dim: int, params: dict) -> None:
        """The shard's own account (every point indexed, each indexed segment the graph and codes of ``kind``) and
        its points those the manifest recorded (``indexed_vectors``: every point, indexed at the build)."""
        path = folder / SHARD
        shard = hold_shard(path)  # the one ``read`` opened, shared
        try:
            recorded = params.get("indexed_vectors")
            check_shard(path, shard, kind, dim, None if recorded is None else int(recorded))
        finally:
            release_shard(shard)

    def state(self, folder: Path, kind: IndexType, params: dict) -> Hashable | None:
        """cone's own files of the index (the manifest, the documents: inode, size, time), the shard folder's inode,
        and each segment's files by name and size. Not the shard's files' times or inodes: Qdrant rewrites files
        of a shard whenever it opens or closes it (edge_config.json, segment.json, deleted.dat, tracker.dat; their
        sizes stay), so those would make every reload open a served shard again. Nothing is opened: a cut file
        or another segment changes a size or a name, a rebuild swaps the folders."""
        path, files = folder / SHARD, files_state(folder)
        try:
            segments = sorted(
                (str(f.relative_to(path)), f.stat().st_size) for f in path.glob("segments/**/*") if f.is_file()
            )
            inode = path.stat().st_ino
        except OSError:
            return None
        if files is None:
            return None
        return tuple(f for f in files if not Path(f[0]).is_relative_to(path)), inode, tuple(segments)
