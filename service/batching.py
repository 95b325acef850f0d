"""Micro-batching: concurrent requests for one index gathered for a few milliseconds and run as one call.

Encoding one query at a time leaves most of a CPU's matrix throughput unused, and requests that queue
behind one encoder lock wait for each other anyway. Here the first request of a batch leads: it waits
until the batch is full or its own window has passed, takes up to ``max_batch`` waiting requests, and
runs them in one call in one of the encoder's slots; every other request only waits for its result. There is
no background thread, so an index that a reload drops leaves nothing running behind it.

An encoder that can run two calls at once (torch's) may be given several slots (``BatchSettings.parallel``), the
cores shared out between them as torch threads: while one batch encodes, the next is formed and runs beside it. On
2 cores (docs/benchmarks.md, "The service against the machine's limit") two slots cost more CPU a request at 16
clients (smaller batches), and their gain on the wall clock at 64 clients came and went between recordings: one slot
is the default.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")

DEFAULT_WINDOW_MS = 0.0  # measured best on 2 cores (docs/benchmarks.md): batches grow with the load alone
DEFAULT_MAX_BATCH = 32


def usable_cores() -> int:
    """The cores this process may run on (its affinity, as a container's CPU set limits it; the machine's cores where
    the system keeps no affinity, as macOS does not)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


@dataclass(frozen=True)
class BatchSettings:
    """How long the first request of a batch waits for others, the largest batch (1: each runs alone), and how many
    batches of one encoder run at once where its encoder allows it.

    With a window of 0 nothing waits, yet requests that arrive while a batch runs still form the next one:
    batches then grow with the load alone (no added latency when idle)."""

    window_ms: float = DEFAULT_WINDOW_MS
    max_batch: int = DEFAULT_MAX_BATCH
    parallel: int = 1


DEFAULT_BATCHING = BatchSettings()


@dataclass
class _Request(Generic[Item, Result]):
    item: Item
    arrived: float = field(default_factory=time.monotonic)
    woken: threading.Event = field(default_factory=threading.Event)  # a result, an error, or "lead now"
    result: Result | None = None
    error: BaseException | None = None
    done: bool = False


class MicroBatcher(Generic[Item, Result]):
    """``submit`` one item, get its result; ``run`` sees a list of items and returns their results in order.
    ``slots``: the batches that may run at once (a lock: one), shared by every batcher of one encoder."""

    def __init__(
        self,
        run: Callable[[Sequence[Item]], Sequence[Result]],
        slots: threading.Lock | threading.Semaphore,
        settings: BatchSettings = DEFAULT_BATCHING,
    ) -> None:
        self._run, self._slots, self.settings = run, slots, settings
        self._waiting: list[_Request[Item, Result]] = []
        self._changed = threading.Condition()
        self._has_leader = False

    def submit(self, item: Item) -> Result:
        if self.settings.max_batch <= 1:
            with self._slots:
                return self._run([item])[0]
        request: _Request[Item, Result] = _Request(item)
        with self._changed:
            self._waiting.append(request)
            leads = not self._has_leader
            self._has_leader = True
            self._changed.notify_all()  # a leader waiting for a full batch counts again
        while True:
            if leads:
                self._lead(request)
            request.woken.wait()
            if request.done:
                break
            request.woken.clear()  # promoted: lead the next batch
            leads = True
        if request.error is not None:
            raise request.error
        return request.result

    def _lead(self, leader: _Request[Item, Result]) -> None:
        deadline = leader.arrived + self.settings.window_ms / 1000.0
        try:
            with self._changed:
                while len(self._waiting) < self.settings.max_batch and (left := deadline - time.monotonic()) > 0:
                    self._changed.wait(min(left, threading.TIMEOUT_MAX))
        finally:  # even if the wait is interrupted, the batch runs and leadership passes on: nothing may hang
            self._take_and_run_batch()

    def _take_and_run_batch(self) -> None:
        with self._slots:  # requests keep arriving while the running batches run: they join this one
            with self._changed:
                batch = self._waiting[: self.settings.max_batch]
                del self._waiting[: self.settings.max_batch]
                if self._waiting:
                    self._waiting[0].woken.set()  # the oldest request left over leads the next batch
                else:
                    self._has_leader = False
            self._run_batch(batch)

    def _run_batch(self, batch: list[_Request[Item, Result]]) -> None:
        try:
            results = self._run([r.item for r in batch])
            for request, result in zip(batch, results, strict=True):  # a short answer is an error, not a hang
                request.result = result
        except BaseException as exc:  # every request of the batch answers with the error, none hangs
            for request in batch:
                request.error = exc
        finally:
            for request in batch:
                request.done = True
                request.woken.set()
