"""The demo's work beside the service: each model's indexes, fastest first, counted as they are encoded (the
service shows it and loads each model when written), then the instruments and the eval report. The steps
themselves (``DemoSteps``) are the command's, which says what each did; here is their order, the stages the
service reads, and how a failure or a Ctrl-C ends them."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from cone.encoders.registry import build_rank, missing
from cone.errors import ConeError, Interrupted, ModelUnavailable
from cone.eval.harness import EvalData, build_indexes
from cone.eval.plan import EvalPlan
from cone.eval.report import ReportFiles
from cone.indexing.spec import LEXICAL
from cone.service.progress import BUILDING, EVALUATING, STOPPED, BuildProgress


def build_order(models: list[str], checkpoints: Path | None) -> list[str]:
    """The models to build, fastest first by the work of encoding a corpus (BM25 only tokenizes; each encoder's
    entry says its blocks x width; an st:PATH model, unknown, last); one without weights is left to the eval, which
    says why."""
    chosen = [model for model in models if missing(model, checkpoints) is None]
    return sorted(chosen, key=lambda model: (-1.0, 0) if model == LEXICAL else build_rank(model))


def build_each(
    models: list[str], data: EvalData, plan: EvalPlan, builds: BuildProgress
) -> Iterator[tuple[str, list[Path], float]]:
    """Each model's exact indexes in turn (``build_indexes``; ``models``: names of ``plan``'s), its documents
    counted in ``builds``, which the service reads; each model's folders and seconds as it is written (none for
    weights that do not load: the eval says why)."""
    for model in models:
        started, count = time.monotonic(), builds.counter(model)
        try:
            folders = build_indexes(plan.plain[model], data, plan, count)
        except ModelUnavailable:
            folders = []
        builds.built(model)
        yield model, folders, time.monotonic() - started


class DemoSteps(Protocol):
    """What the demo does beside the service, step by step, each saying what it did."""

    def build(self, models: list[str], builds: BuildProgress) -> None: ...

    def show_instruments(self) -> None: ...

    def evaluate(self) -> ReportFiles: ...

    def tell(self, line: str, failure: bool = False) -> None:
        """A line for the person who started the demo (``failure``: on the error stream)."""
        ...


def work_in_background(steps: DemoSteps, models: list[str], builds: BuildProgress, report_url: str) -> None:
    """The demo's work while the service answers: the other models' indexes, the instruments, the report. A
    failure is told (and by /readyz); the service serves on with the indexes already written."""
    try:
        steps.build(models, builds)
        builds.stage = EVALUATING
        steps.show_instruments()
        files = steps.evaluate()
        builds.finish(files.json.parent)
        steps.tell(f"The page links the report: {report_url}")
    except Interrupted:  # Ctrl-C: the main thread says what is kept
        builds.stage = STOPPED
    except ConeError as exc:
        builds.fail(str(exc))
        steps.tell(f"cone: {exc.label}: {exc} (the service serves on)", failure=True)
    except Exception as exc:  # a defect: said once, and /readyz stops promising what will not come
        builds.fail(f"{type(exc).__name__}: {exc}")
        steps.tell(f"cone: the demo's background work failed ({type(exc).__name__}: {exc})", failure=True)


def stop(worker: threading.Thread, builds: BuildProgress) -> None:
    """Stop the builder at its next batch, and wait while it builds: a model half-encoded is dropped (nothing of it
    is written yet), an index being written is finished. Its other work writes no index and is not waited for."""
    builds.cancel()
    while worker.is_alive() and builds.stage == BUILDING:
        worker.join(0.1)
