"""The recall sweep: index types over the same vectors, searched with the same queries, each type's top 10
measured against the first type's (exact search). The eval's rows (index folders over a whole corpus) and the
doctor's trials (codes over a sample, one repair at a time) both run on it; what each builds and how it searches
is theirs to give.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

from cone.errors import InputError
from cone.eval.metrics import overlap_at_k

K = 10  # recall@10: the top 10 of a type against exact search's
Kind = TypeVar("Kind")
Built = TypeVar("Built")
Result = TypeVar("Result")


@dataclass(frozen=True)
class Swept(Generic[Kind, Built, Result]):
    """One type of the sweep: what was built and what its search found, or why it could not be built."""

    kind: Kind
    built: Built | None = None
    found: Result | None = None
    rows: np.ndarray | None = None  # its top rows per query
    recall_at_10: float | None = None  # against the first type's top 10 (1.0 for the first itself)
    reference: bool = False  # the first type: exact search, what the others are measured against
    reason: str | None = None  # why it was not built (InputError's line)


def recall_sweep(
    kinds: Iterable[Kind],
    build: Callable[[Kind], Built],
    search: Callable[[Built], tuple[Result, np.ndarray]],
    measured: Sequence[int] | slice = slice(None),
) -> Iterator[Swept[Kind, Built, Result]]:
    """Each of ``kinds`` built (an InputError is its reason, and the sweep goes on) and searched (``search``: what
    it found and its top rows), its recall@10 over the ``measured`` queries against the first kind's. The first
    kind is the exact reference: where it cannot be built, nothing else is measured."""
    reference = None
    for kind in kinds:
        try:
            built = build(kind)
        except InputError as exc:
            yield Swept(kind, reason=str(exc), reference=reference is None)
            if reference is None:
                return
            continue
        found, rows = search(built)
        first = reference is None
        reference = rows if first else reference
        recall = overlap_at_k(rows[measured], reference[measured], K)
        yield Swept(kind, built, found, rows, recall, first)
