"""Index types by name: the registry of stores, and the one place an index type is parsed and sent to its store.

A type is ``TYPE`` or ``TYPE@METRIC``. ``TYPE`` names its store by prefix: a FAISS factory string or 1-bit code
(``Flat``, ``PQ32``, ``IVF64,PQ32``, ``BIN``; cone.indexing.faiss_store), ``lance:TYPE`` (LanceDB;
cone.indexing.lance), ``usearch:CODEC`` or ``usearch:exact:CODEC`` (USearch; cone.indexing.usearch_store).
``METRIC`` is ``dot``, ``l2`` or ``cosine`` where the store offers it (cone.indexing.codes); left out, the store's
default (FAISS: dot; LanceDB: l2, its own default; USearch: cosine, its own default). A store is added by one module
implementing cone.indexing.codes.Store and one line of ``STORES``.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from cone.errors import InputError
from cone.indexing.codes import Codes, IndexType, Store, StreamWriter, parse_search_params, split_metric
from cone.indexing.faiss_store import (  # noqa: F401 -- the FAISS store's names, for their users
    BINARY_FILE,
    DEFAULT_FACTORY,
    INDEX_FILE,
    IVF_DATA,
    RESCORE_FILE,
    BinaryCodes,
    FaissStore,
    FloatCodes,
    core_index,
    make_faiss,
    set_search_params,
    sign_codes,
    train_faiss,
    write_faiss,
)
from cone.indexing.lance import LanceStore
from cone.indexing.usearch_store import UsearchStore

# The registry: --store's names, each with its store. The first is the default, whose types carry no prefix.
STORES: dict[str, Store] = {store.name: store for store in (FaissStore(), LanceStore(), UsearchStore())}
DEFAULT_STORE = "faiss"

__all__ = ["Codes", "IndexType", "STORES", "parse_search_params"]


def store_named(name: str) -> Store:
    if name not in STORES:
        raise InputError(f"unknown store {name!r}: one of {', '.join(STORES)}")
    return STORES[name]


def _store_of(factory: str) -> Store:
    """The store whose prefix ``factory`` starts with (any case); FAISS's factory strings have none."""
    for store in STORES.values():
        if store.prefix and factory.lower().startswith(store.prefix):
            return store
    return STORES[DEFAULT_STORE]


def parse_factory(text: str, metric: str | None = None) -> IndexType:
    """``TYPE`` or ``TYPE@METRIC``, checked by its store (``metric``: the one to use where the text names none)."""
    factory, named = split_metric(text)
    if not factory:
        raise InputError(f"invalid --index-factory {text!r}: empty")
    return _store_of(factory).parse(factory, named or metric)


def metric_choices(text: str, metrics: list[str]) -> list[str]:
    """``text`` under each of ``metrics`` its store takes (``--metric dot,l2,cosine`` sweeps them like types): a
    type that names its metric, Flat (the exact reference) and a 1-bit code (Hamming) stay as they are; a store
    that takes none of ``metrics`` keeps its default."""
    kind = parse_factory(text)
    if split_metric(text)[1] is not None or not metrics or kind.factory == DEFAULT_FACTORY or kind.binary:
        return [kind.spec]
    taken = [m for m in metrics if m in STORES[kind.store].metrics]
    return [parse_factory(text, m).spec for m in taken] or [kind.spec]


# A factory's leading stages that take the next comma item as their own: "IVF256,Flat" is one index type.
_FACTORY_PREFIX = re.compile(r"^(IVF\d+(_HNSW\d+)?|IMI\d+x\d+|OPQ\d+(_\d+)?|PCAR?\d+|RR\d+|L2norm)$")


def parse_factory_list(text: str) -> list[str]:
    """Comma- (or ;-) separated index types, each checked: Flat,SQ8,IVF256,Flat,BIN -> [..., 'IVF256,Flat', 'BIN'];
    Flat first if absent (the exact reference every other type is measured against). A type keeps a metric only
    where it names one (``metric_choices`` gives the others theirs)."""
    factories: list[str] = []
    if ";" in text:
        factories = [t.strip() for t in text.split(";") if t.strip()]
    for token in [] if factories else [t.strip() for t in text.split(",") if t.strip()]:
        if factories and _FACTORY_PREFIX.match(factories[-1].split(",")[-1]):
            factories[-1] += f",{token}"
        else:
            factories.append(token)
    if not factories:
        raise InputError("expected a comma-separated list of index types")
    factories = [_checked(factory) for factory in factories]
    if DEFAULT_FACTORY not in factories:
        factories.insert(0, DEFAULT_FACTORY)
    return factories


def _checked(text: str) -> str:
    """``text`` as cone spells its type (lance:ivf_pq -> lance:IVF_PQ), with its metric where it names one."""
    kind = parse_factory(text)
    return kind.spec if split_metric(text)[1] is not None else kind.factory


def for_store(factory: str, store: str | None, metric: str | None = None) -> str:
    """``--index-factory`` under ``--store`` and ``--metric``: another store makes the default Flat its own exact
    type (``lance:FLAT``, ``usearch:exact:f32``); a type of another store is refused (None: the store the type
    names)."""
    kind = parse_factory(factory)
    if store is None or kind.store == store:
        return parse_factory(factory, metric).spec
    chosen = store_named(store)
    if kind.factory == DEFAULT_FACTORY and split_metric(factory)[1] is None:
        return parse_factory(chosen.exact, metric).spec
    types = ", ".join(chosen.types()) or "a FAISS factory string"
    raise InputError(f"--index-factory {factory!r} is a {kind.store} type, not one of --store {store} ({types})")


def store_types(store: str) -> tuple[str, ...]:
    """The index types ``cone eval --store`` adds for a store: every type of LanceDB and USearch; FAISS's are
    --index-factory's."""
    return store_named(store).types()


def check_buildable(factory: str, dim: int, search_params: str = "") -> None:
    """Refuse, before any encoding, what the type's store cannot build (a store not installed, settings the type
    does not take)."""
    kind = parse_factory(factory)
    STORES[kind.store].check(kind, dim, search_params)


def settings_taken(factory: str, search_params: str, dim: int) -> str:
    """The settings of ``search_params`` that ``factory``'s store takes for that type, each tried alone (an eval's
    ``--search-params nprobe=64`` reaches IVF64,PQ32, not PQ32, a Lance type or a USearch codec)."""
    kind = parse_factory(factory)
    taken = []
    for name, value in parse_search_params(search_params).items():
        try:
            STORES[kind.store].check(kind, dim, f"{name}={value}")
        except InputError:
            continue
        taken.append(f"{name}={value}")
    return ",".join(taken)


def build_codes(vectors: np.ndarray, factory: str, search_params: str = "", ids: list[str] | None = None) -> Codes:
    """The index of ``factory`` over ``vectors`` (unit rows), trained, filled and with its search parameters;
    ``ids``: the documents' ids in row order, kept beside the vectors where the store keeps them (LanceDB)."""
    kind = parse_factory(factory)
    return STORES[kind.store].build(vectors, kind, search_params, ids)


def streamed_writer(folder: Path, final: Path, factory: str, dim: int, search_params: str = "") -> StreamWriter:
    """A streamed build's writer of ``factory`` into ``folder`` (to become ``final``); refused where the type
    cannot be built a shard at a time."""
    kind = parse_factory(factory)
    return STORES[kind.store].streamed(folder, final, kind, dim, search_params)


def recorded_type(index_factory: str, index_metric: str | None) -> IndexType:
    """The index type a manifest records. A manifest written before the metric was recorded names none: its
    store's legacy metric then (LanceDB's ``dot``, as its index_params also say; FAISS's default, the inner
    product)."""
    factory, _ = split_metric(index_factory)
    store = _store_of(factory)
    return store.parse(factory, index_metric or store.legacy_metric)


def read_codes(
    folder: Path, kind: IndexType, dim: int, search_params: str, on_disk: bool, params: dict | None = None
) -> Codes:
    """What ``Codes.write`` (or a streamed writer) wrote, by the store of ``kind``; ``on_disk``: a streamed FAISS
    build's lists stay on disk; ``params``: the manifest's index_params. Raises DamagedIndex for unreadable files."""
    return STORES[kind.store].read(folder, kind, dim, search_params, on_disk, params or {})
