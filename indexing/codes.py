"""What a vector store is to cone: the ``Store`` protocol every store implements (FAISS, LanceDB, USearch), the
``Codes`` it builds, streams and opens, and the parsed index type with its metric.

A store is one module and one line of ``cone.indexing.factory.STORES``; nothing else names a store. An index
type is the store's own type string (``PQ32``, ``lance:IVF_PQ``, ``usearch:i8``) and a metric, written
``TYPE@METRIC`` (``lance:IVF_PQ@l2``): the metric is part of what an index is, because a compressed code that
scores well under ``l2`` can lose its neighbours under ``dot`` (docs/results.md, section 6). Every store's
search returns similarities (higher is nearer: the cosine for unit rows, whatever distance the store computed)
and rows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from cone.errors import InputError
from cone.indexing.user_index import RepairRecipe, UserIndex

DOT, L2, COSINE, HAMMING = "dot", "l2", "cosine", "hamming"
METRICS = (DOT, L2, COSINE)  # what --metric takes; HAMMING is implied by a 1-bit code, never chosen
METRIC_MARK = "@"  # TYPE@METRIC
# Search settings that must be a count > 0: FAISS's, LanceDB's (cone.indexing.lance) and USearch's.
COUNTED_PARAMS = ("nprobe", "efSearch", "qb", "ht", "max_codes", "k_factor", "nprobes", "ef", "refine_factor")
QUERY_BITS = range(1, 9)  # RaBitQ's query quantization (qb)


@dataclass(frozen=True)
class IndexType:
    """A parsed, checked index type: its store, the store's type string and the metric it searches by."""

    factory: str  # the store's own type string, without the metric
    store: str  # its store's name in cone.indexing.factory.STORES
    metric: str
    implied: bool = False  # the metric goes without saying (FAISS's inner product, a 1-bit code's Hamming)
    rescore: int | None = None  # BIN+rescore:R

    @property
    def spec(self) -> str:
        """The index type as cone names it everywhere (folder names, manifests' identity, report rows)."""
        return self.factory if self.implied else f"{self.factory}{METRIC_MARK}{self.metric}"

    @property
    def binary(self) -> bool:
        return self.metric == HAMMING

    @property
    def ivf_lists(self) -> int | None:
        found = re.match(r"^(?:[^,]*,)?IVF(\d+)", self.factory)
        return int(found.group(1)) if found else None


def split_metric(text: str) -> tuple[str, str | None]:
    """``TYPE@METRIC`` -> (TYPE, METRIC); (TYPE, None) where no metric is named. An unknown metric is refused."""
    factory, mark, metric = text.strip().partition(METRIC_MARK)
    if not mark:
        return factory.strip(), None
    metric = metric.strip().lower()
    if metric not in (*METRICS, HAMMING):
        raise InputError(f"invalid index type {text!r}: the metric is one of {', '.join(METRICS)}, not {metric!r}")
    return factory.strip(), metric


def parse_search_params(params: str) -> dict[str, str]:
    """``name=value,...`` with every known count > 0; each store checks the names it takes."""
    settings: dict[str, str] = {}
    for setting in filter(None, (s.strip() for s in params.split(","))):
        name, sep, value = setting.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise InputError(f"invalid --search-params {params!r}: {setting!r} is not name=value")
        name, value = name.strip(), value.strip()
        if name in COUNTED_PARAMS and not (value.isdigit() and int(value) > 0):
            raise InputError(f"invalid --search-params {params!r}: {name} must be a whole number > 0, not {value!r}")
        if name == "qb" and int(value) not in QUERY_BITS:
            raise InputError(f"invalid --search-params {params!r}: qb (RaBitQ's query bits) is 1 to 8, not {value}")
        settings[name] = value
    return settings


Setting = int | float | bool
BOOLEANS = {"on": True, "true": True, "1": True, "off": False, "false": False, "0": False}


def typed_settings(params: str, schema: Mapping[str, type], store: str) -> dict[str, Setting]:
    """``name=value,...`` read by one store's own ``schema`` (each name's type): ``int`` a count > 0, ``float`` a
    number > 0 (an oversampling factor), ``bool`` on/off (true/false, 1/0). A name the store does not take is
    refused with the ones it does."""
    settings: dict[str, Setting] = {}
    for name, value in parse_search_params(params).items():
        kind = schema.get(name)
        if kind is None:
            raise InputError(
                f"invalid --search-params {params!r}: {store} takes {', '.join(schema) or 'no settings'}, not {name}"
            )
        settings[name] = _typed(params, name, value, kind)
    return settings


def _typed(params: str, name: str, value: str, kind: type) -> Setting:
    if kind is bool:
        if value.lower() not in BOOLEANS:
            raise InputError(f"invalid --search-params {params!r}: {name} is on or off, not {value!r}")
        return BOOLEANS[value.lower()]
    try:
        number = kind(value)
    except ValueError:
        number = 0
    if not number > 0:
        what = "a whole number" if kind is int else "a number"
        raise InputError(f"invalid --search-params {params!r}: {name} must be {what} > 0, not {value!r}")
    return number


def similarity(distances: np.ndarray, metric: str) -> np.ndarray:
    """A store's distances between unit rows as similarities: 1 - d for ``dot`` and ``cosine`` (stores report
    1 - q·x and 1 - cos), 1 - d/2 for ``l2`` (squared L2 of unit rows is 2 - 2 cos)."""
    distances = np.asarray(distances, dtype=np.float32)
    return 1.0 - distances / 2.0 if metric == L2 else 1.0 - distances


class Codes(Protocol):
    """The vectors as one store keeps and searches them."""

    @property
    def ntotal(self) -> int: ...

    @property
    def params(self) -> dict[str, int | str | None]:
        """What the store chose from N and d and what every search applies (the manifest's index_params)."""
        ...

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top ``k`` similarities and rows per query, best first; -inf and -1 where fewer were found."""
        ...

    def vectors(self) -> np.ndarray:
        """The stored float32 rows in row order (InputError where the store keeps only codes)."""
        ...

    def bytes_per_vector(self) -> float:
        """What the store keeps per vector."""
        ...

    def write(self, folder: Path) -> None: ...

    def close(self) -> None: ...


class StreamWriter(Protocol):
    """A streamed build's store: fitted on a sample, then given the corrected vectors a shard at a time."""

    def train(self, sample: np.ndarray) -> None: ...

    def add(self, vectors: np.ndarray, ids: list[str]) -> None: ...

    def finish(self) -> dict[str, int | str | None]:
        """Write what is left into the index folder; the manifest's index_params."""
        ...


class Store(Protocol):
    """One vector store: how its index types are named, built (in memory or streamed), opened and measured."""

    name: str  # --store's name
    prefix: str  # its types' prefix ("" for FAISS, whose types are factory strings)
    metrics: tuple[str, ...]  # the metrics --metric may choose
    default_metric: str  # the store's own default
    exact: str  # its exhaustive search of the float32 rows (what --store makes of the default Flat)
    legacy_metric: str | None  # what an index written before the metric was recorded searched by
    doctor_types: tuple[str, ...]  # what `cone doctor` tries of this store by default (FAISS's: sized by the doctor)

    def parse(self, factory: str, metric: str | None) -> IndexType:
        """The checked type; ``metric`` None: the store's default."""
        ...

    def types(self) -> tuple[str, ...]:
        """The types ``cone eval --store NAME`` adds."""
        ...

    def check(self, kind: IndexType, dim: int, search_params: str) -> None:
        """Refuse what cannot be built before any encoding: search parameters the type does not take, ..."""
        ...

    def build(self, vectors: np.ndarray, kind: IndexType, search_params: str, ids: list[str] | None) -> Codes: ...

    def streamed(self, folder: Path, final: Path, kind: IndexType, dim: int, search_params: str) -> StreamWriter:
        """A writer into ``folder`` (the build's temporary folder; ``final`` is where it will be)."""
        ...

    def read(self, folder: Path, kind: IndexType, dim: int, search_params: str, on_disk: bool, params: dict) -> Codes:
        """What a build wrote; DamagedIndex for a missing, truncated or corrupt file."""
        ...

    # An index its user built with the store's own API (cone doctor --index; cone.indexing.user_index).

    def claims(self, path: Path) -> bool:
        """Whether ``path`` has the shape of this store's index (a folder, a suffix), before anything is read."""
        ...

    def open_user(self, path: Path, table: str | None) -> UserIndex:
        """The user's index as the store reads it (``table``: one of a folder of tables); InputError otherwise."""
        ...

    def repairs(self, index: UserIndex, vectors: np.ndarray) -> list[RepairRecipe]:
        """What the store offers to repair ``index`` (built over ``vectors``), in the store's own terms."""
        ...

    # Where the data lives elsewhere (a database server): ``configured``, ``verify``, ``state`` and ``release``,
    # which a store whose data lives in its index folder leaves out (cone.indexing.location has what it does).
