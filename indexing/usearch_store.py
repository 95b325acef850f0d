"""USearch as a store: one ``index.usearch`` file in the index folder, the vectors kept in one of USearch's codecs
and searched by its HNSW graph as it ships (``usearch:i8``), or exhaustively over the same codes
(``usearch:exact:i8``: ``exact=True``), which isolates what the codec loses from what the graph loses.

Codecs (USearch's scalar kinds): ``f32``, ``f16``, ``bf16``, ``i8`` (each coordinate times 127, rounded),
``e4m3`` and ``e5m2`` (8-bit floats), ``b1`` (the sign of each coordinate, by Hamming distance). Metrics: ``cosine``
(USearch's own default, ``cos``), ``dot`` (``ip``) and ``l2`` (``l2sq``); ``b1`` is Hamming only. Distances are
reported as the cosine of the unit rows: 1 - d (``cos``, ``ip``), 1 - d/2 (``l2sq``), 1 - 2h/d (Hamming); USearch
keeps ``i8`` products in integer units (127² a unit), which are scaled back.

The file is read whole (never memory-mapped: a file truncated under a mapping is a SIGBUS, fatal to the service)
after its size and SHA-256 are checked against what the build recorded (``usearch_file.json``): a graph read from
a damaged file could send a search out of bounds, so a damaged file is refused before USearch parses it.

usearch is imported only here, when a USearch index is built or opened (``pip install 'cone[usearch]'``; 2.26.6 is
the version measured).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np

from cone.errors import DamagedIndex, InputError
from cone.indexing.codes import COSINE, DOT, HAMMING, L2, IndexType, parse_search_params, similarity
from cone.indexing.user_index import RepairRecipe, UserIndex, centered, no_table, searching_centered

NAME = "usearch"  # --store's name
PREFIX = "usearch:"
EXACT = "exact:"  # usearch:exact:CODEC, a brute-force search over the codes
CODECS = ("f32", "f16", "bf16", "i8", "e4m3", "e5m2", "b1")
BITS = {"f32": 32, "f16": 16, "bf16": 16, "i8": 8, "e4m3": 8, "e5m2": 8, "b1": 1}
USEARCH_METRIC = {COSINE: "cos", DOT: "ip", L2: "l2sq", HAMMING: "hamming"}
I8_UNIT = 127.0**2  # an i8 product or squared distance, in USearch's integer units, per unit of the float one
INDEX_FILE = "index.usearch"
FILE_RECORD = "usearch_file.json"  # the file's size and SHA-256 when written
INSTALL = "pip install 'cone[usearch]'"
SEARCH_SETTINGS = ("ef",)  # the HNSW search's expansion (USearch's expansion_search)


def usearch_index() -> ModuleType:
    """usearch.index, or the one line that says it is not installed and how to install it."""
    try:
        import usearch.index
    except ImportError as exc:
        raise InputError(f"USearch store unavailable: usearch is not installed ({exc}); fix: {INSTALL}") from None
    return usearch.index


def _parts(factory: str) -> tuple[bool, str]:
    """``usearch:exact:i8`` -> (True, "i8"); an unknown codec is refused naming the known ones."""
    rest = factory[len(PREFIX) :].strip().lower()
    exact = rest.startswith(EXACT)
    codec = rest[len(EXACT) :] if exact else rest
    if codec not in CODECS:
        known = ", ".join(PREFIX + c for c in CODECS)
        raise InputError(f"invalid --index-factory {factory!r}: USearch codecs are {known} (usearch:exact:CODEC too)")
    return exact, codec


def _file_record(path: Path) -> dict[str, int | str]:
    data = path.read_bytes()
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


class UsearchCodes:
    """A USearch index of one codec and metric; the Codes of cone.indexing.codes. Keys are the rows."""

    def __init__(self, index: object, kind: IndexType, params: dict[str, int | str | None]) -> None:
        self.index, self.kind, self._params = index, kind, params
        self.exact, self.codec = _parts(kind.factory)
        self.dim = int(index.ndim)
        self._file_bytes: int | None = None

    @property
    def params(self) -> dict[str, int | str | None]:
        return self._params

    @property
    def ntotal(self) -> int:
        return len(self.index)

    def encoded(self, vectors: np.ndarray) -> np.ndarray:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        return np.packbits(vectors > 0, axis=1) if self.codec == "b1" else vectors

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        scores = np.full((len(queries), k), -np.inf, dtype=np.float32)
        rows = np.full((len(queries), k), -1, dtype=np.int64)
        if not len(queries) or not self.ntotal:
            return scores, rows
        found = self.index.search(self.encoded(queries), min(k, self.ntotal), exact=self.exact)
        keys, distances = np.atleast_2d(found.keys), np.atleast_2d(found.distances).astype(np.float32)
        counts = np.atleast_1d(getattr(found, "counts", keys.shape[1]))  # one query's Matches has no counts
        width = keys.shape[1]
        valid = np.arange(width)[None, :] < counts[:, None]
        if self.kind.metric == HAMMING:
            similar = 1.0 - 2.0 * distances / self.dim
        else:
            if self.codec == "i8" and self.kind.metric != COSINE:  # integer units: 1 - 127²·q·x, 127²·|q - x|²
                distances = 1.0 - (1.0 - distances) / I8_UNIT if self.kind.metric == DOT else distances / I8_UNIT
            similar = similarity(distances, self.kind.metric)
        scores[:, :width] = np.where(valid, similar, -np.inf)
        rows[:, :width] = np.where(valid, keys.astype(np.int64), -1)
        return scores, rows

    def vectors(self) -> np.ndarray:
        """The codes decoded, as unit rows (a b1 index keeps only signs)."""
        if self.codec == "b1":
            raise InputError("a usearch:b1 index keeps only sign bits; another codec keeps the vectors")
        decoded = np.asarray(self.index.get(np.arange(self.ntotal), dtype=np.float32), dtype=np.float32)
        norms = np.linalg.norm(decoded, axis=1, keepdims=True)
        return decoded / np.where(norms > 0, norms, 1.0)

    def bytes_per_vector(self) -> float:
        """The index file's size over n (the codes, the graph's links and keys), measured from the file."""
        if self._file_bytes is None:
            with tempfile.TemporaryDirectory(prefix="cone-usearch-") as scratch:
                path = Path(scratch) / INDEX_FILE
                self.index.save(str(path))
                self._file_bytes = path.stat().st_size
        return self._file_bytes / max(1, self.ntotal)

    def write(self, folder: Path) -> None:
        path = folder / INDEX_FILE
        try:
            self.index.save(str(path))
        except RuntimeError as exc:
            raise OSError(f"{path}: {exc}") from None
        record = _file_record(path)
        self._file_bytes = int(record["bytes"])
        (folder / FILE_RECORD).write_text(json.dumps(record))

    def close(self) -> None:
        """Nothing held beyond memory."""


class UsearchWriter:
    """A streamed build: the corrected shards added to the index as they come (the index holds every code, never
    the float corpus), saved at the end."""

    def __init__(self, folder: Path, codes: UsearchCodes) -> None:
        self.folder, self.codes = folder, codes

    def train(self, sample: np.ndarray) -> None:
        """HNSW needs no training."""

    def add(self, vectors: np.ndarray, ids: list[str]) -> None:
        start = self.codes.ntotal
        keys = np.arange(start, start + len(vectors), dtype=np.uint64)
        self.codes.index.add(keys, self.codes.encoded(vectors))

    def finish(self) -> dict[str, int | str | None]:
        self.codes.write(self.folder)
        return self.codes.params


# A user's own USearch file (cone doctor --index: cone.indexing.user_index), and its repairs.

WIDER = ("f16", "bf16")  # the codecs a USearch user would try before giving up on compression
USER_BITS = BITS | {"f64": 64}  # a user's file may keep f64, which cone never builds


def _user_search(index: object) -> Callable:
    def search(queries: np.ndarray, k: int) -> np.ndarray:
        found = index.search(np.ascontiguousarray(queries, dtype=np.float32), k)
        rows = np.asarray(found.keys, dtype=np.int64).reshape(len(queries), -1)
        counts = np.asarray(found.counts).reshape(-1)
        rows[np.arange(rows.shape[1])[None, :] >= counts[:, None]] = -1
        return rows

    return search


def open_user(path: Path, table: str | None) -> UserIndex:
    """A ``.usearch`` file as ``Index.restore`` reads it; its keys must be 0..N-1."""
    no_table(path, table)
    module = usearch_index()
    try:
        index = module.Index.restore(str(path))
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
    vectors = np.asarray(index.get(np.arange(len(keys)), dtype=np.float32)) if codec in ("f32", "f64") else None
    code = USER_BITS.get(codec, float("nan")) / 8 * index.ndim
    kind = f"USearch HNSW, {codec} codec"
    return UserIndex(
        NAME, str(path), kind, metric, params, code, len(keys), int(index.ndim), _user_search(index), vectors, index
    )


def user_repairs(index: UserIndex, vectors: np.ndarray) -> list[RepairRecipe]:
    """A wider codec, or the same codec over centered vectors (USearch keeps no transform: the user subtracts the
    mean from each vector and query)."""
    codec, params = index.params["codec"], index.params
    mean = vectors.mean(axis=0)

    def recipe(name: str, dtype: str, center: bool, change: str) -> RepairRecipe:
        rows = centered(vectors, mean) if center else vectors

        def write(path: Path) -> None:
            made = usearch_index().Index(
                ndim=index.dim,
                metric=index.metric,
                dtype=dtype,
                connectivity=params["connectivity"],
                expansion_add=params["expansion_add"],
                expansion_search=params["expansion_search"],
            )
            made.add(np.arange(len(rows)), rows)
            made.save(str(path))

        def opened(path: Path) -> UserIndex:
            made = open_user(path, None)
            return searching_centered(made, mean) if center else made

        how = (
            f'Index(ndim={index.dim}, metric="{index.metric}", dtype="{dtype}", connectivity='
            f"{params['connectivity']})" + (" over (x - mean)/|x - mean|" if center else "")
        )
        return RepairRecipe(name, how, change, write, opened, ".usearch", center)

    made = [recipe(f"codec {c}", c, False, "none: the same calls") for c in WIDER if c != codec]
    change = "each query centered and normalized with the same mean (USearch keeps no transform)"
    made.append(recipe(f"center ({codec})", codec, True, change))
    return made


def check_params(folder: Path, kind: IndexType, params: dict) -> None:
    """The manifest's index_params agree with its type (``usearch:CODEC`` and its metric) and every recorded HNSW
    setting is a whole number > 0: a manifest whose codec is ``nope`` is refused, not served from a file of
    another codec."""
    exact, codec = _parts(kind.factory)
    expected = {"codec": codec, "metric": USEARCH_METRIC[kind.metric], "bits_per_dim": BITS[codec]}
    for key, value in expected.items():
        if key in params and params[key] != value:
            raise DamagedIndex(
                f"{folder}: manifest's index_params {key} is {params[key]!r}, {kind.factory} has {value!r}"
            )
    for key in ("connectivity", "expansion_add", "expansion_search"):
        value = params.get(key)
        if key in params and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise DamagedIndex(f"{folder}: manifest's index_params {key} is {value!r}, not a whole number > 0")


def check_file(folder: Path, kind: IndexType, index: object) -> None:
    """The file's own codec and metric are the manifest's type's (``usearch:f16`` is refused over an f32 file)."""
    _, codec = _parts(kind.factory)
    found = {"codec": index.dtype.name.lower(), "metric": index.metric_kind.name.lower()}
    for key, expected in (("codec", codec), ("metric", USEARCH_METRIC[kind.metric])):
        if found[key] != expected:
            raise DamagedIndex(f"{folder}: the manifest says {key} {expected}, {INDEX_FILE} holds {found[key]}")


class UsearchStore:
    """USearch (cone.indexing.codes.Store): ``usearch:CODEC`` (HNSW) and ``usearch:exact:CODEC``."""

    name = NAME
    prefix = PREFIX
    metrics = (DOT, L2, COSINE)
    default_metric = COSINE  # USearch's own (MetricKind.Cos)
    exact = PREFIX + EXACT + "f32"  # the store's exhaustive search of float32 rows
    legacy_metric = None  # every USearch index records its metric
    doctor_types = ()  # its codecs are the eval's (cone eval --store usearch), not the doctor's
    open_user = staticmethod(open_user)
    repairs = staticmethod(user_repairs)

    def claims(self, path: Path) -> bool:
        return path.suffix == ".usearch"

    def parse(self, factory: str, metric: str | None) -> IndexType:
        exact, codec = _parts(factory)
        name = PREFIX + (EXACT if exact else "") + codec
        if codec == "b1":
            if metric not in (None, HAMMING):
                raise InputError(f"invalid index type {factory!r}: usearch:b1 is compared by Hamming distance only")
            return IndexType(name, self.name, HAMMING, implied=True)
        metric = metric or self.default_metric
        if metric not in self.metrics:
            raise InputError(f"invalid index type {factory!r}: USearch searches by {', '.join(self.metrics)}")
        return IndexType(name, self.name, metric)

    def types(self) -> tuple[str, ...]:
        return tuple(PREFIX + mode + codec for mode in ("", EXACT) for codec in CODECS)

    def _params(self, kind: IndexType, search_params: str) -> dict[str, int | str | None]:
        settings = parse_search_params(search_params)
        for setting in settings:
            if setting not in SEARCH_SETTINGS:
                raise InputError(f"invalid --search-params: {kind.factory} takes ef only, not {setting!r}")
        exact, codec = _parts(kind.factory)
        if exact and settings:  # an exhaustive search has no graph to expand: ef would be recorded and ignored
            raise InputError(f"invalid --search-params: {kind.factory} searches every code, it takes no settings")
        params: dict[str, int | str | None] = {"codec": codec, "metric": USEARCH_METRIC[kind.metric]}
        params["bits_per_dim"] = BITS[codec]
        if "ef" in settings:
            params["expansion_search"] = int(settings["ef"])
        return params

    def check(self, kind: IndexType, dim: int, search_params: str) -> None:
        usearch_index()
        self._params(kind, search_params)

    def _empty(self, kind: IndexType, dim: int, search_params: str) -> UsearchCodes:
        params = self._params(kind, search_params)
        module = usearch_index()
        options = {"expansion_search": params["expansion_search"]} if "expansion_search" in params else {}
        ndim = 8 * -(-dim // 8) if params["codec"] == "b1" else dim  # sign bits are packed in whole bytes
        index = module.Index(ndim=ndim, metric=params["metric"], dtype=params["codec"], **options)
        # HNSW as it ships: what USearch chose is recorded, so the manifest says what every search used.
        params |= {"connectivity": int(index.connectivity), "expansion_add": int(index.expansion_add)}
        params["expansion_search"] = int(index.expansion_search)
        return UsearchCodes(index, kind, params)

    def build(self, vectors: np.ndarray, kind: IndexType, search_params: str, ids: list[str] | None) -> UsearchCodes:
        codes = self._empty(kind, vectors.shape[1], search_params)
        UsearchWriter(Path(), codes).add(vectors, [])
        return codes

    def streamed(self, folder: Path, final: Path, kind: IndexType, dim: int, search_params: str) -> UsearchWriter:
        return UsearchWriter(folder, self._empty(kind, dim, search_params))

    def read(
        self, folder: Path, kind: IndexType, dim: int, search_params: str, on_disk: bool, params: dict
    ) -> UsearchCodes:
        check_params(folder, kind, params)
        module = usearch_index()
        path = folder / INDEX_FILE
        try:
            recorded = json.loads((folder / FILE_RECORD).read_text())
            size, digest = int(recorded["bytes"]), str(recorded["sha256"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DamagedIndex(f"{folder}: missing or corrupt {FILE_RECORD} ({exc})") from None
        try:
            found = os.stat(path).st_size
            if found != size:
                raise DamagedIndex(f"{folder}: {INDEX_FILE} is {found:,} bytes, written as {size:,}")
            data = path.read_bytes()
        except OSError as exc:
            raise DamagedIndex(f"{folder}: {INDEX_FILE} unreadable ({exc.strerror})") from None
        if len(data) != size or hashlib.sha256(data).hexdigest() != digest:
            raise DamagedIndex(f"{folder}: {INDEX_FILE} is not the file written (its SHA-256 differs)")
        try:
            index = module.Index.restore(data)
        except (RuntimeError, ValueError) as exc:
            raise DamagedIndex(f"{folder}: corrupt {INDEX_FILE} ({str(exc).splitlines()[0][:160]})") from None
        if index is None or int(index.ndim) != (8 * -(-dim // 8) if kind.binary else dim):
            raise DamagedIndex(f"{folder}: {INDEX_FILE} is not a {dim}-dim USearch index")
        check_file(folder, kind, index)
        if "expansion_search" in params:
            index.expansion_search = int(params["expansion_search"])
        codes = UsearchCodes(index, kind, dict(params))
        codes._file_bytes = size
        return codes
