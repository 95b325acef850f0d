"""The registry of stores, and the one place a parsed index type (cone.indexing.spec) is sent to its store.

A type is ``TYPE`` or ``TYPE@METRIC``. ``TYPE`` names its store by prefix: a FAISS factory string or 1-bit code
(``Flat``, ``PQ32``, ``IVF64,PQ32``, ``BIN``; cone.indexing.faiss_store), ``lance:TYPE`` (LanceDB;
cone.indexing.lance), ``usearch:CODEC`` or ``usearch:exact:CODEC`` (USearch; cone.indexing.usearch_store),
``sqlite:ELEMENT`` (sqlite-vec's vec0 tables; cone.indexing.sqlite_vec_store), ``qdrant:TYPE`` (a Qdrant Edge
shard; cone.indexing.qdrant_store).
``METRIC`` is ``dot``, ``l2`` or ``cosine`` where the store offers it (cone.indexing.codes); left out, the store's
default (FAISS: dot; LanceDB: l2, its own default; USearch: cosine, its own default; sqlite-vec: l2, vec0's own,
which has no inner product). A store is added by one module
implementing cone.indexing.codes.Store and one line of ``STORES``.
"""

from __future__ import annotations

from collections.abc import Hashable
from contextlib import suppress
from pathlib import Path

import numpy as np

from cone.errors import InputError, StoreUnavailable
from cone.indexing.codes import Codes, IndexType, Store, StreamWriter, parse_search_params
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
from cone.indexing.location import StoreConfig, configured, member
from cone.indexing.pgvector_store import PgvectorStore
from cone.indexing.qdrant_store import QdrantStore
from cone.indexing.sqlite_vec_store import SqliteVecStore
from cone.indexing.usearch_store import UsearchStore
from cone.indexing.user_index import UserIndex

# The registry: --store's names, each with its store. The first is the default, whose types carry no prefix.
STORES: dict[str, Store] = {
    store.name: store
    for store in (FaissStore(), QdrantStore(), LanceStore(), UsearchStore(), PgvectorStore(), SqliteVecStore())
}
DEFAULT_STORE = FaissStore.name

__all__ = ["Codes", "IndexType", "STORES", "parse_search_params"]  # the parsers: cone.indexing.spec


def store_named(name: str) -> Store:
    if name not in STORES:
        raise InputError(f"unknown store {name!r}: one of {', '.join(STORES)}")
    return STORES[name]


def check_buildable(kind: IndexType, dim: int, search_params: str = "") -> None:
    """Refuse, before any encoding, what the type's store cannot build (a store not installed, settings the type
    does not take)."""
    STORES[kind.store].check(kind, dim, search_params)


def settings_taken(kind: IndexType, search_params: str, dim: int) -> str:
    """The settings of ``search_params`` that ``kind``'s store takes for that type, each tried alone (an eval's
    ``--search-params nprobe=64`` reaches IVF64,PQ32, not PQ32, a Lance type or a USearch codec)."""
    taken = []
    for name, value in parse_search_params(search_params).items():
        try:
            STORES[kind.store].check(kind, dim, f"{name}={value}")
        except InputError:
            continue
        taken.append(f"{name}={value}")
    return ",".join(taken)


def build_codes(vectors: np.ndarray, kind: IndexType, search_params: str = "", ids: list[str] | None = None) -> Codes:
    """The index of ``kind`` over ``vectors`` (unit rows), trained, filled and with its search parameters;
    ``ids``: the documents' ids in row order, kept beside the vectors where the store keeps them (LanceDB)."""
    return STORES[kind.store].build(vectors, kind, search_params, ids)


def streamed_writer(folder: Path, final: Path, kind: IndexType, dim: int, search_params: str = "") -> StreamWriter:
    """A streamed build's writer of ``kind`` into ``folder`` (to become ``final``); refused where the type cannot be
    built a shard at a time."""
    return STORES[kind.store].streamed(folder, final, kind, dim, search_params)


def read_codes(
    folder: Path, kind: IndexType, dim: int, search_params: str, on_disk: bool, params: dict | None = None
) -> Codes:
    """What ``Codes.write`` (or a streamed writer) wrote, by the store of ``kind``, verified against the manifest;
    ``on_disk``: a streamed FAISS build's lists stay on disk; ``params``: the manifest's index_params. Raises
    DamagedIndex for unreadable files or data that is not what the manifest says, StoreUnavailable where the store's
    server cannot be reached."""
    store, params = STORES[kind.store], params or {}
    codes = store.read(folder, kind, dim, search_params, on_disk, params)
    try:
        member(store, "verify")(folder, kind, dim, params)
    except BaseException:
        codes.close()
        raise
    return codes


def configure_stores(config: StoreConfig) -> None:
    """Every store of the registry built from ``config`` (the command line's and the environment's settings of the
    stores whose data lives in a server); a store that takes none stays as it is."""
    for name, store in STORES.items():
        STORES[name] = configured(store, config)


def index_state(folder: Path, kind: IndexType, params: dict) -> Hashable | None:
    """What tells the service's reload that the index at ``folder`` is made of the very data it was opened from
    (equal tokens: it is); None where it cannot be read. StoreUnavailable where the store's server is unreachable."""
    return member(STORES[kind.store], "state")(folder, kind, params)


def release_folder(folder: Path) -> bool:
    """Drop what any store owns elsewhere for the index folder ``folder``, which is going away; False where a
    store's server could not be reached (the folder is then kept, so that a later build releases it)."""
    with suppress(StoreUnavailable):
        for store in STORES.values():
            member(store, "release")(folder)
        return True
    return False


def open_user_index(index: str | Path, table: str | None = None) -> UserIndex:
    """A user's own index (a FAISS file, a Lance folder, a ``.usearch`` file), opened by the first store that
    claims its path by its shape, the default store asked last (FAISS claims any file: it reads one by content); or
    a server's table named by a URL (``postgresql://...``), opened by the store whose ``schemes`` name its scheme.
    The URL is never repeated in an error (it may hold a password)."""
    scheme, sep, _ = str(index).partition("://")
    if sep:
        reader = next((s for s in STORES.values() if scheme.lower() in getattr(s, "schemes", ())), None)
        if reader is None:
            raise InputError(f"--index {scheme}://...: no store reads {scheme}:// locations")
        return reader.open_user(str(index), table)
    path = Path(index)
    if not path.exists():
        raise InputError(f"--index {path}: no such file or folder")
    asked = [store for name, store in STORES.items() if name != DEFAULT_STORE] + [STORES[DEFAULT_STORE]]
    claimed = next((store for store in asked if store.claims(path)), None)
    if claimed is None:
        raise InputError(f"--index {path}: no store reads a {'folder' if path.is_dir() else 'file'} of this kind")
    return claimed.open_user(path, table)
