"""An index its user built with a store's own API (a FAISS file, a Lance table, a USearch file), as ``cone doctor
--index`` reads it, and the repairs that store offers for it. Each store (cone.indexing.codes.Store) opens its own
(``open_user``) and names its own repairs (``repairs``); ``open_user_index`` finds the store by the path's shape.
cone.eval.index_doctor measures both the same way for every store.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cone.errors import InputError
from cone.geometry import unit_rows


@dataclass
class UserIndex:
    """An index as its store keeps it, and how to search it: ``search(queries, k)`` gives the top-k rows of the
    vectors (row numbers of ``--vectors``, or of the vectors the index keeps; -1 where fewer were found)."""

    store: str  # its store's name in cone.indexing.factory.STORES
    path: str
    kind: str
    metric: str  # as the store names it (what its API takes)
    params: dict[str, object]
    code_bytes: float  # bytes of code per vector
    ntotal: int
    dim: int
    search: Callable[[np.ndarray, int], np.ndarray]
    vectors: np.ndarray | None = None  # the float vectors it keeps, in row order; None: it keeps none
    handle: object = None  # the store's own object (faiss.Index, LanceDB table, usearch Index)
    # Exact search where the store runs it itself (a database's scan): queries -> their exact top 10; None: cone's own
    exact: Callable[[np.ndarray], np.ndarray] | None = None

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
class RepairRecipe:
    """One repair a store offers for a user's index: what the user does, and how to write it and read it back."""

    name: str
    how: str  # what the user does, in that store's terms
    code_change: str  # "none", or what the user's code must do differently
    write: Callable[[Path], None]
    opened: Callable[[Path], UserIndex]  # as its user reads it back (queries centered too, where it centers)
    suffix: str | None  # of the file or folder it writes; None: any name (the store reads a file by its content)
    centered: bool = False  # it searches (x - mean)/|x - mean| with queries centered alike
    metric: str | None = None  # the metric it searches in, where not the index's
    # A store whose index lives in a server makes the repair beside the user's there (``--fix NAME``, "" for its own
    # name): where it was made, and the index as its user's queries then read it. None: written to a file or folder.
    apply: Callable[[object], tuple[str, UserIndex]] | None = None


def centered(vectors: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """(x - mean)/|x - mean|: the vectors (or queries) of a centering repair."""
    return np.ascontiguousarray(unit_rows(vectors - mean), dtype=np.float32)


def searching_centered(index: UserIndex, mean: np.ndarray) -> UserIndex:
    """``index`` searched as its user searches a centered repair: each query centered with the same mean."""
    search = index.search
    index.search = lambda queries, k: search(centered(queries, mean), k)
    return index


def no_table(path: Path, table: str | None) -> None:
    """``--table`` names a table of a LanceDB folder: refused for a store whose index is one file."""
    if table is not None:
        raise InputError(f"--table names a table of a LanceDB folder; --index {path} is a file")
