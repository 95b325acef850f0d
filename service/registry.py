"""The indexes a service answers from: loaded from one folder, each with a lock, swapped atomically.

A reload builds a complete new mapping and then replaces the reference in one assignment: a request
that already holds an entry finishes on it, the next request sees the new set. An index whose files (and its
model's weights) are the very files it was opened from keeps its entry: a reload re-opens what changed, so a
reload of an unchanged folder loads no encoder and frees nothing. Reload requests coalesce (``request_reload``):
one reload runs, at most one waits, and a request made while one waits joins it.
"""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

from cone.encoders.base import TORCH, torch_threads
from cone.encoders.registry import Encoders, changing_weights, missing
from cone.errors import ConeError, DamagedIndex, ModelUnavailable, StoreUnavailable
from cone.indexing import store
from cone.indexing.index import Hit, Index, SearchResult
from cone.indexing.location import files_state
from cone.indexing.manifest import BM25Manifest, DenseManifest, read_manifest
from cone.indexing.open import index_state, open_index
from cone.indexing.spec import MODEL_NAMES
from cone.service.batching import DEFAULT_BATCHING, BatchSettings, MicroBatcher, usable_cores
from cone.service.limits import one_line
from cone.service.progress import BuildProgress, ModelProgress

# The spread covers the whole corpus up to this size (all of SciFact); beyond it, a search with k = corpus size
# would cost every query a full scan, so the spread is that of the highest-scoring SPREAD_DOCS documents.
SPREAD_DOCS = 10_000


@dataclass
class Entry:
    """One model's index (or why there is none). ``lock``: its encoder's slots (``encoder_slots``), shared by the
    indexes of one encoder; concurrent searches are gathered into batches (``batching``) that each take one."""

    name: str
    manifest: DenseManifest | BM25Manifest | None
    index: Index | None = None
    reason: str | None = None
    lock: threading.Lock | threading.Semaphore = field(default_factory=threading.Lock)
    batching: BatchSettings = DEFAULT_BATCHING
    failed: bool = False  # set by ``fail``: the index broke while served; unavailable until a reload
    transient: bool = False  # unavailable because its store's server could not be reached: a 503, tried again
    source: tuple | None = None  # ``index_state`` of its folder and its weights when opened: None, never reused

    def __post_init__(self) -> None:
        self.reason = self.reason and one_line(self.reason)
        # The batcher runs a plain function of the index, never a method of this entry: an entry and its batcher
        # referring to each other would be a cycle that only a full GC frees, and every reload would leave the
        # old entries (their encoders, files and mapped lists) behind until then.
        threads = batch_threads(self.index, self.batching)
        self._batcher = MicroBatcher(partial(_search_batch, self.index, threads), self.lock, self.batching)

    @property
    def available(self) -> bool:
        return self.index is not None and not self.failed

    def fail(self, exc: Exception) -> IndexFailed:
        """Mark this index unavailable with the reason, until a reload opens (and so checks) it again: its files
        were damaged under it (DamagedIndex), or its store failed in a way no check foresaw (a bad disk block
        read as ids past the corpus: IndexError; a setting its library refuses: OverflowError)."""
        why = str(exc) if isinstance(exc, DamagedIndex) else f"search failed ({type(exc).__name__}: {str(exc)[:200]})"
        self.reason, self.failed = one_line(f"damaged while served: {why}"), True
        return IndexFailed(f"model {self.name!r} is unavailable: {self.reason}")

    def search(self, query: str, k: int) -> tuple[list[Hit], dict[str, float]]:
        """Top-k hits and this query's score spread over the top ``SPREAD_DOCS`` documents the index returns.
        The request is checked before it gets here (a text, 1 <= k <= MAX_K), so any failure is the index's: it
        marks the entry unavailable and is raised as IndexFailed, never as the store's own exception."""
        try:
            found, spread = self._batcher.submit((query, k))
            return found.hits(0, k), spread
        except StoreUnavailable:  # its server, not the index: a 503 for now, and the next search tries again
            raise
        except Exception as exc:
            raise self.fail(exc) from exc


def parallel_batches(index: Index | None, batching: BatchSettings) -> int:
    """The batches of this index's encoder that may run at once: ``batching.parallel`` for torch's, which runs calls
    side by side; one for an exported model (OpenVINO's compiled model holds one infer request) and for BM25."""
    encoder = getattr(index, "encoder", None)
    return batching.parallel if encoder is not None and encoder.runtime.backend == TORCH.backend else 1


def encoder_slots(index: Index | None, batching: BatchSettings) -> threading.Lock | threading.Semaphore:
    """A slot for each batch of one encoder that may run at once (one: a lock)."""
    batches = parallel_batches(index, batching)
    return threading.BoundedSemaphore(batches) if batches > 1 else threading.Lock()


def batch_threads(index: Index | None, batching: BatchSettings) -> int | None:
    """The torch threads each batch runs on: the cores shared out between the batches that run at once (None:
    torch's own count, where batches run one at a time)."""
    batches = parallel_batches(index, batching)
    return max(1, usable_cores() // batches) if batches > 1 else None


def _search_batch(
    index: Index, threads: int | None, requests: Sequence[tuple[str, int]]
) -> list[tuple[SearchResult, dict[str, float]]]:
    """One encode and one store search for every (query, k) of a batch, on ``threads`` torch threads: each request's
    own top k, best first, and its score spread over the top max(k, spread size) rows, for the batch at once."""
    depth = max(max(k for _, k in requests), min(len(index.docs), SPREAD_DOCS))
    with torch_threads(threads):
        found = index.search([query for query, _ in requests], depth)
    return [
        (SearchResult(found.scores[i : i + 1, :k], found.rows[i : i + 1, :k], found.docs), spread)
        for i, ((_, k), spread) in enumerate(zip(requests, score_spreads(found), strict=True))
    ]


def score_spreads(found: SearchResult) -> list[dict[str, float]]:
    """Each query's min, median and max score over the rows found (a store pads with row -1 where it found fewer:
    an empty IVF probe; a query with none has the spread of a single 0), and their count, for the batch at once."""
    valid = found.rows >= 0
    scores = np.where(valid, found.scores.astype(np.float64), np.nan)
    scores[~valid.any(axis=1)] = 0.0
    # np.median where every row was found (the usual case): nanmedian walks the rows one by one.
    middles = np.median(scores, axis=1) if valid.all() else np.nanmedian(scores, axis=1)
    spreads = zip(np.nanmin(scores, axis=1), middles, np.nanmax(scores, axis=1), valid.sum(axis=1), strict=True)
    return [{"min": float(a), "median": float(m), "max": float(b), "n": int(n)} for a, m, b, n in spreads]


def _unavailable_model(name: str, folder: Path, checkpoints: Path | None) -> Entry:
    # Only the files are looked at: loading an encoder to explain a missing index would cost start-up time.
    absent = missing(name, checkpoints)
    if absent is not None:
        return Entry(name, None, reason=absent.explanation)
    return Entry(
        name,
        None,
        reason=f"no index for {name!r} in {folder} (build it with `cone index --model {name} --out {folder}`)",
    )


def _source(path: Path, manifest: DenseManifest | BM25Manifest, checkpoints: Path | None) -> tuple | None:
    """``index_state`` of an index (its folder's files; and the data its store keeps elsewhere) and ``files_state``
    of its model's weights where they are files that can change (a checkpoint folder, st:PATH; weights installed as
    a package cannot). StoreUnavailable where the store's server cannot be reached."""
    weights = changing_weights(manifest.model, checkpoints)
    folder, model_files = index_state(path, manifest), files_state(weights) if weights else ()
    return None if folder is None or model_files is None else (folder, model_files)


def _open_entry(
    path: Path,
    checkpoints: Path | None,
    encoders: Encoders,
    locks: dict[int, threading.Lock | threading.Semaphore],
    batching: BatchSettings,
) -> Entry:
    """One index as an entry; whatever goes wrong with it makes this entry unavailable, never the service."""
    manifest = None
    try:
        manifest = read_manifest(path)
        source = _source(path, manifest, checkpoints)  # before opening: a change meanwhile is seen next time
        index = open_index(path, encoders, manifest=manifest)
    except ModelUnavailable as exc:
        return Entry(path.name, manifest, reason=exc.explanation)
    except StoreUnavailable as exc:
        return Entry(path.name, manifest, reason=str(exc), transient=True)
    except ConeError as exc:
        return Entry(path.name, manifest, reason=str(exc))
    except Exception as exc:  # a defect this code did not foresee in one index must not stop the others
        return Entry(path.name, manifest, reason=f"{path}: cannot load ({type(exc).__name__}: {str(exc)[:200]})")
    lock = locks.setdefault(id(getattr(index, "encoder", index)), encoder_slots(index, batching))
    return Entry(path.name, manifest, index=index, lock=lock, batching=batching, source=source)


def _unchanged(entry: Entry | None, path: Path, checkpoints: Path | None) -> bool:
    """Whether ``entry`` serves and was opened from exactly the files now at ``path`` (and its weights). One whose
    store's server cannot be reached now is kept: its searches answer 503 until the server is back."""
    if entry is None or not entry.available or entry.source is None:
        return False
    try:
        return entry.source == _source(path, entry.manifest, checkpoints)
    except StoreUnavailable:
        return True


def _same_weights(entry: Entry, checkpoints: Path | None) -> bool:
    """Whether ``entry``'s encoder was loaded from the very weights its model has now."""
    weights = changing_weights(entry.manifest.model, checkpoints)
    return entry.source is not None and entry.source[1] == (files_state(weights) if weights else ())


def load_entries(
    folder: Path,
    checkpoints: Path | None = None,
    batching: BatchSettings = DEFAULT_BATCHING,
    previous: dict[str, Entry] | None = None,
) -> tuple[dict[str, Entry], list[str]]:
    """Every index under ``folder``; a corrupt or mismatched one becomes an unavailable entry with its reason.
    Also the lines that say which indexes were recovered from an interrupted swap. ``previous``: the entries that
    serve now; one opened from the very files still there is kept as it is (an unavailable one is opened again).
    An index opened again gets the encoder of its model that serves now, if the weights are the same files: a
    reload after a rebuild re-reads the index, not the weights (loading them was 98% of such a reload: 0.83 s of
    0.85 s for the baseline LM, on 2 cores beside the searches)."""
    encoders = Encoders(checkpoints)  # one loaded encoder per model, shared by its indexes (and so is its lock)
    locks: dict[int, threading.Lock | threading.Semaphore] = {}
    previous = previous or {}
    paths, notes = store.list_indexes(folder)
    kept = {p.name: previous[p.name] for p in paths if _unchanged(previous.get(p.name), p, checkpoints)}
    serving = [*kept.values(), *(e for e in previous.values() if e.index is not None and e.name not in kept)]
    for entry in serving:  # an index of the same model opened again shares the kept one's encoder (and lock)
        encoder = getattr(entry.index, "encoder", None)
        if encoder is not None and (entry.name in kept or _same_weights(entry, checkpoints)):
            locks.setdefault(id(encoders.add(encoder)), entry.lock)
    entries = {
        path.name: kept.get(path.name) or _open_entry(path, checkpoints, encoders, locks, batching) for path in paths
    }
    built = {e.manifest.model for e in entries.values() if e.manifest}
    for name in MODEL_NAMES:
        if name not in built and name not in entries:
            entries[name] = _unavailable_model(name, Path(folder), checkpoints)
    return entries, notes


def freeze_libraries() -> None:
    """Import what opening an index imports (torch, transformers, sentence-transformers: every service imports
    them anyway, to tell whether roberta's weights are there), collect, and move every object alive now to the
    permanent generation (``gc.freeze``). Those ~500,000 objects are then never traversed again: the collection a
    reload runs after dropping an index costs ~0.02 s, not the 0.25-0.8 s that held the interpreter (and every
    search) before. Called before any index is loaded, so the encoders' own cycles are still collected."""
    import cone.encoders.st  # noqa: F401 (its imports are the point)

    gc.collect()
    gc.freeze()


class Registry:
    """The current set of entries, readiness, and atomic reload; and what a background builder is still making
    (``builds``: its models join by a reload as each is written)."""

    def __init__(
        self,
        folder: Path,
        checkpoints: Path | None = None,
        batching: BatchSettings = DEFAULT_BATCHING,
        builds: BuildProgress | None = None,
    ) -> None:
        self.folder, self.checkpoints, self.batching, self.builds = Path(folder), checkpoints, batching, builds
        if builds is not None:
            builds.when_built(self.load)  # a folder gone meanwhile keeps what serves, as a first load does
        self.entries: dict[str, Entry] = {}
        self.notes: list[str] = []  # what the last load recovered
        self.ready = threading.Event()
        self._reload_lock = threading.Lock()
        self._queue_lock = threading.Lock()  # guards the two below
        self._waiting: Future[dict[str, Entry]] | None = None  # the reload every request since the running one joins
        self._reloading = False  # a thread runs reloads

    def building(self, name: str) -> ModelProgress | None:
        """The build of ``name`` if it is not served yet but on its way."""
        entry = self.entries.get(name)
        if self.builds is None or (entry is not None and entry.available):
            return None
        return self.builds.get(name)

    def load(self) -> dict[str, Entry]:
        """The first load: never raises; a folder that cannot be listed leaves the set as it was, with a note."""
        try:
            return self.reload()
        except FolderGone as exc:
            self.notes = [str(exc)]
            return self.entries

    def reload(self) -> dict[str, Entry]:
        """Read the folder again and swap the new set in. A folder that is gone (moved away, replaced by a file) or
        cannot be listed raises FolderGone and keeps the set that serves: an empty set would drop every index.

        The old entries are not closed here: a request that took one before the swap finishes on it. Nothing
        refers back to an entry (no cycle), so the last request done with it frees it at once, its files closed
        with it (DocTable's and DenseIndex's finalizers) and its mapped lists unmapped; a collection after the swap
        frees their encoders' own cycles."""
        with self._reload_lock:
            try:
                if not self.folder.is_dir():
                    raise FileNotFoundError(f"no folder of indexes at {self.folder}")
                entries, notes = load_entries(self.folder, self.checkpoints, self.batching, self.entries)
            except Exception as exc:
                self.ready.set()  # ready all the same: what serves (perhaps nothing yet) is known
                why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                raise FolderGone(
                    one_line(
                        f"{self.folder}: cannot list indexes ({why}); still serving the {len(self.entries)} "
                        "loaded before"
                    )
                ) from None
            kept = {id(e) for e in entries.values()}
            replaced = any(e.index is not None and id(e) not in kept for e in self.entries.values())
            self.entries, self.notes = entries, notes  # one assignment: readers see the old set or the new one
            self.ready.set()
        # The old entries are freed by now, unless a request still holds one. Their encoders may not be:
        # sentence-transformers models (minilm, the fine-tuned LMs) hold reference cycles of their own, and
        # only a collection frees those (with their weights); left to the GC's own schedule, reloads pile them up.
        # A full collection holds the interpreter for ~0.4-0.8 s with torch loaded: run only when an index went.
        if replaced:
            gc.collect()
        return entries

    def request_reload(self) -> Future[dict[str, Entry]]:
        """A reload that starts after this call, run on the registry's own thread (never the caller's: the request
        threads and the event loop keep serving): its entries, or FolderGone. Requests coalesce: while a reload
        runs, the next one waits; a request made while one waits joins it and gets its result (a reload that
        starts after the request reads the folder as it is now, so it answers every request that joined it). A
        storm of N requests is at most two reloads at a time, never N queued."""
        with self._queue_lock:
            if self._waiting is None:
                self._waiting = Future()
            waiting = self._waiting
            if not self._reloading:
                self._reloading = True
                threading.Thread(target=self._run_reloads, name="reload", daemon=True).start()
        return waiting

    async def wait_reload(self) -> dict[str, Entry]:
        """``request_reload``'s result, awaited on an event loop. Shielded: a caller that gives up (its task
        cancelled) must not cancel the reload that every other request joined (``asyncio.wrap_future`` cancels the
        future it wraps when its awaiter is cancelled)."""
        return await asyncio.shield(asyncio.wrap_future(self.request_reload()))

    def _run_reloads(self) -> None:
        """Run the waiting reload, then the one that gathered meanwhile, until none waits."""
        while True:
            with self._queue_lock:
                future, self._waiting = self._waiting, None
                if future is None:
                    self._reloading = False
                    return
            if not future.set_running_or_notify_cancel():  # its one caller gave it up (only ``wait_reload``'s
                continue  # callers join safely): no one waits for it, and set_result would raise and end this thread
            try:
                future.set_result(self.reload())
            except BaseException as exc:  # given to every request that joined it: none waits forever
                future.set_exception(exc)


class IndexFailed(DamagedIndex):
    """An index's search failed: the entry is marked unavailable, with the reason this carries."""


class FolderGone(ConeError):
    """The folder of indexes cannot be listed: a reload keeps what serves."""
