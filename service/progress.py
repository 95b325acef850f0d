"""How far a background build has got, shared by the thread that builds and the service that shows it.

The builder (``cone demo``) counts each model's corpus documents as its encoder returns them (``counter``) and
says when a model's indexes are written (``built``); the service lists what is still building (``pending``) and
is told of each model written (``when_built``), so that it loads it while it serves. Nothing here prints.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cone.errors import Interrupted

# The stages of the work beside the service, in order; FAILED and STOPPED end it early.
BUILDING, EVALUATING, DONE, FAILED, STOPPED = "building", "evaluating", "done", "failed", "stopped"


@dataclass
class ModelProgress:
    """One model's indexes on their way: corpus documents encoded of ``total``, since ``started``."""

    model: str
    total: int
    done: int = 0
    started: float | None = None  # time.monotonic() when its build began; None while queued

    @property
    def state(self) -> str:
        """queued | encoding (its corpus) | indexing (every document encoded: its indexes being written)."""
        if self.started is None:
            return "queued"
        return "indexing" if self.done >= self.total else "encoding"

    def seconds_left(self, now: float | None = None) -> float | None:
        """The encoding's time left at its rate so far; None before its first batch."""
        if self.started is None or self.done == 0:
            return None
        elapsed = (time.monotonic() if now is None else now) - self.started
        return elapsed / self.done * max(self.total - self.done, 0)


class BuildProgress:
    """The models still to build (in build order), the stage of the work, the eval report once written, and the
    flag that stops the builder at its next batch (``cancel``)."""

    def __init__(self, models: list[str], total: int) -> None:
        self._pending = {model: ModelProgress(model, total) for model in models}
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []
        self.cancelled = threading.Event()
        self.stage = BUILDING
        self.failure: str | None = None  # why the work stopped (stage FAILED)
        self.report: Path | None = None  # the eval report's folder (report.md, report.json), once written

    def pending(self) -> list[ModelProgress]:
        with self._lock:
            return list(self._pending.values())

    def get(self, model: str) -> ModelProgress | None:
        with self._lock:
            return self._pending.get(model)

    def counter(self, model: str) -> Callable[[int], None]:
        """``model``'s build begins: the callback that counts its documents encoded (``on_encoded``), and that
        raises Interrupted once ``cancel`` was called, before anything of the model is written."""
        progress = self.get(model)
        if progress is None:
            raise KeyError(f"{model!r} is not among the models to build")
        self._check_cancelled()
        progress.started = time.monotonic()

        def count(n: int) -> None:
            self._check_cancelled()
            progress.done += n

        return count

    def built(self, model: str) -> None:
        """``model``'s indexes are written (or it has none to write): every listener runs (the service loads
        them), and only then does it leave the pending list, so it is always either building or served."""
        for listener in list(self._listeners):
            listener()
        with self._lock:
            self._pending.pop(model, None)

    def when_built(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def cancel(self) -> None:
        self.cancelled.set()

    def _check_cancelled(self) -> None:
        if self.cancelled.is_set():
            raise Interrupted("the build was stopped")

    def finish(self, report: Path) -> None:
        self.report, self.stage = report, DONE

    def fail(self, reason: str) -> None:
        self.failure, self.stage = reason, FAILED
