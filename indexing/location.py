"""Where an index's data lives, and the members of the ``Store`` protocol (cone.indexing.codes) that say so.

An index is always cone's own folder: its manifest, its document table, the fitted correction. A store that keeps
its vectors in that folder (FAISS, LanceDB, USearch) needs nothing more, and implements none of the members below:
``LOCATION_DEFAULTS`` holds what such a store does, in this one place. A store whose data lives elsewhere (a table
in a database server) owns that resource too, and implements them:

- ``configured(config)``: the store built from configuration (``StoreConfig``: a server's DSN, a data folder),
  which comes from the command line or the environment and never lands in a manifest, a log line or an error;
- ``verify(folder, kind, dim, params)``: what the store serves for the folder is what the manifest says
  (DamagedIndex where not: the service's 409), called after every ``read``;
- ``state(folder, kind, params)``: a token that is equal as long as the index is made of the very data it was
  opened from (the service's reload keeps an entry whose token has not changed);
- ``release(folder)``: drop what the store owns for an index folder that is going away (the old folder of an
  atomic swap, a failed build's temporary folder, a leftover of an interrupted one), before the folder is removed.

Any of them may raise StoreUnavailable (cone.errors) where the server cannot be reached: transient, answered 503.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Hashable, Mapping
from pathlib import Path
from typing import Any

from cone.indexing.codes import IndexType, Store

# What a store is configured by: names a store knows (``pg_dsn``, ``pg_data``) and their values; a store ignores the
# names of other stores. Secrets may be among the values: a store never writes one anywhere.
StoreConfig = Mapping[str, str]


def files_state(folder: Path) -> tuple | None:
    """Each regular file under ``folder`` with its inode, size and modification time: what tells a reload that an
    index is made of the very files it was opened from (a rebuild swaps in new files, a truncation changes the
    size and the time). None where it cannot be read."""
    found = []
    try:
        for root, _, names in os.walk(folder):
            for name in names:
                info = os.stat(os.path.join(root, name))
                if stat.S_ISREG(info.st_mode):
                    found.append((os.path.join(root, name), info.st_ino, info.st_size, info.st_mtime_ns))
    except OSError:
        return None
    return tuple(sorted(found))


def _folder_state(folder: Path, kind: IndexType, params: dict) -> Hashable | None:
    return files_state(folder)


def _nothing_to_verify(folder: Path, kind: IndexType, dim: int, params: dict) -> None:
    """A folder store's ``read`` checked its files already (sizes, hashes) before its library parsed them."""


def _nothing_to_release(folder: Path) -> None:
    """Everything a folder store owns goes with the folder."""


LOCATION_DEFAULTS: dict[str, Callable[..., Any]] = {
    "verify": _nothing_to_verify,
    "state": _folder_state,
    "release": _nothing_to_release,
}


def member(store: Store, name: str) -> Callable[..., Any]:
    """The store's own ``name`` (one of ``LOCATION_DEFAULTS``), or what a store whose data lives in its folder
    does."""
    return getattr(store, name, None) or LOCATION_DEFAULTS[name]


def configured(store: Store, config: StoreConfig) -> Store:
    """``store`` built from ``config``; a store that takes no configuration is itself."""
    build = getattr(store, "configured", None)
    return store if build is None else build(config)
