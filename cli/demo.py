"""``cone demo``: the main job, end to end: the service as soon as its first index is written; meanwhile the
other indexes (each joins the service when written), the instruments and the eval report."""

from __future__ import annotations

import argparse
import sys
import threading
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from cone.cli.eval import announce_skips, summary, this_command
from cone.cli.geometry import render_checkpoint, render_synthetic
from cone.cli.options import (
    add_checkpoints_option,
    add_data_dir_option,
    add_dataset_option,
    add_progress_option,
    comma_list,
    runtime_for,
    unique_list,
)
from cone.cli.serve import add_listen_options, check_listen, serve
from cone.data.loaders import data_dir
from cone.encoders.auto import AUTO, auto_help
from cone.encoders.base import Runtime
from cone.encoders.registry import LM_MODELS, missing
from cone.errors import Interrupted
from cone.eval.harness import EvalData, load_eval_data
from cone.eval.plan import EvalPlan
from cone.eval.report import ReportFiles
from cone.eval.sweep import evaluate_and_report
from cone.geometry.synthetic import synthetic_report
from cone.indexing import postprocess as pp
from cone.indexing.spec import MODEL_NAMES, model_spec
from cone.models.analysis import checkpoint_report
from cone.models.checkpoint import checkpoints_dir
from cone.pipeline.demo import build_each, build_order, stop
from cone.pipeline.demo import work_in_background as background
from cone.service.progress import DONE, FAILED, BuildProgress

DEFAULT_OUT = Path("runs/demo")
DEFAULT_POSTPROCESS = "none,center,whiten"


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "demo",
        help="the whole pipeline: the service on its first index, then the other indexes, instruments, eval report",
        description="1) the fastest model's indexes (BM25: seconds), then the search service on them; meanwhile "
        "2) the other models' indexes, fastest first, each joining the service when written (the page and /readyz "
        "show their progress), 3) the blind-spot proof on synthetic data and the reference checkpoints' embedding "
        "tables, 4) the eval report, linked from the page when written. Indexes are built when missing and reused "
        "after; Ctrl-C keeps every one already written. With --no-serve: the same in order, without the service.",
    )
    add_data_dir_option(p)
    add_dataset_option(p)
    p.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"where indexes and the report go (default {DEFAULT_OUT})"
    )
    p.add_argument("--models", type=unique_list, default=list(MODEL_NAMES), help="comma list (default every model)")
    p.add_argument(
        "--postprocess", type=comma_list, default=comma_list(DEFAULT_POSTPROCESS), help=f"default {DEFAULT_POSTPROCESS}"
    )
    p.add_argument(
        "--backend",
        choices=(AUTO, "torch"),
        default=AUTO,
        help=f"what encodes each model's corpus and queries: {auto_help()}. torch: every model on torch (the "
        f"reference). Default {AUTO}",
    )
    add_checkpoints_option(p)
    p.add_argument("--quick", action="store_true", help="evaluate the quick subset (minutes; see docs/eval.md)")
    add_listen_options(p)
    p.add_argument("--no-serve", action="store_true", help="stop after the report instead of starting the service")
    add_progress_option(p)
    p.set_defaults(handler=run_demo)


@dataclass
class Demo:
    """What one `cone demo` works on, and its steps."""

    args: argparse.Namespace
    data: EvalData
    runtime_of: dict[str, Runtime] = field(default_factory=dict)  # each model's, as --backend chose (else torch)

    @property
    def out(self) -> Path:
        return self.args.out / self.args.dataset

    @property
    def indexes(self) -> Path:
        return self.out / "indexes"

    @property
    def plan(self) -> EvalPlan:
        args = self.args
        return EvalPlan(
            models=args.models,
            indexes=self.indexes,
            postprocesses=args.postprocess,
            runtime_of=self.runtime_of,
            checkpoints=args.checkpoints,
            data_root=data_dir(args.data_dir),
            progress=not args.no_progress,
        )

    def build_order(self) -> list[str]:
        return build_order(self.args.models, self.args.checkpoints)

    def show_instruments(self) -> None:
        print("\n== The instruments on five synthetic distributions (cone geometry synthetic) ==")
        print(render_synthetic(synthetic_report()))
        for name in LM_MODELS:
            path = checkpoints_dir(self.args.checkpoints) / name
            print(f"\n== The {name} language model's embedding table (cone geometry checkpoint {path}) ==")
            absent = missing(name, self.args.checkpoints)
            print(
                f"not available: {absent.explanation}"
                if absent
                else render_checkpoint(checkpoint_report(path, self.args.data_dir))
            )

    def build(self, models: list[str], builds: BuildProgress) -> None:
        """Each model's indexes in turn, counted in ``builds`` (which the service reads)."""
        for model, folders, seconds in build_each(models, self.data, self.plan, builds):
            names = ", ".join(folder.name for folder in folders) or "none"
            print(f"{model}: indexes {names} ready in {self.indexes} ({seconds:.0f} s)", flush=True)

    def evaluate(self) -> ReportFiles:
        print(f"\n== The eval report of every index ({self.out / 'eval'}) ==", flush=True)
        done = evaluate_and_report(self.data, self.plan, self.out / "eval", this_command(), announce_skips())
        print(summary(done.results, done.files), flush=True)
        return done.files

    def tell(self, line: str, failure: bool = False) -> None:
        print(line, file=sys.stderr if failure else sys.stdout, flush=True)


def run_demo(args: argparse.Namespace) -> int:
    if not args.no_serve:
        check_listen(args.host, args.port)  # before any work, not after it
    for model in args.models:
        model_spec(model)  # an unknown name refused before any work
    for spec in args.postprocess:
        pp.parse(spec)
    root = data_dir(args.data_dir)
    runtime_of = {model: runtime_for(args.backend, None, model, root) for model in args.models}
    demo = Demo(args, load_eval_data(root, args.dataset, quick=args.quick), runtime_of)
    order = demo.build_order()
    builds = BuildProgress(order, len(demo.data.dataset.corpus))
    if args.no_serve:
        print(f"== Indexes for every model, fastest first ({demo.indexes}) ==", flush=True)
        demo.build(order, builds)
        demo.show_instruments()
        demo.evaluate()
        return 0
    return serve_while_building(demo, order, builds)


WORKER_GRACE_S = 5.0  # how long a Ctrl-C waits for the background work to stop before leaving without it


def serve_while_building(demo: Demo, order: list[str], builds: BuildProgress) -> int:
    """The first model's indexes, then the service; the rest of the demo in a thread beside it."""
    args = demo.args
    url = f"http://{args.host}:{args.port}/"
    worker = threading.Thread(target=work_in_background, args=(demo, order[1:], builds), name="demo", daemon=True)
    try:
        print(f"== The first index ({', '.join(order[:1]) or 'none'}: the fastest), then the service ==", flush=True)
        demo.build(order[:1], builds)
        print(f"\n== The search service at {url} (Ctrl-C stops it and keeps every index written) ==")
        rest = ", ".join(order[1:]) or "no other model"
        print(
            f"Meanwhile: the indexes of {rest}, each joining the page when written (the page and {url}readyz show "
            "their progress), then the instruments and the eval report, which the page then links.",
            flush=True,
        )
        worker.start()
        serve(demo.indexes, args.host, args.port, args.checkpoints, builds=builds)
    except KeyboardInterrupt:
        pass  # Ctrl-C before the service was up (once it is, uvicorn takes Ctrl-C and returns)
    finally:
        stop(worker, builds)
    if builds.stage not in (DONE, FAILED):
        if worker.is_alive():  # never started where the Ctrl-C came during the first index
            with suppress(KeyboardInterrupt):  # a second Ctrl-C: leave at once, as after the wait
                worker.join(WORKER_GRACE_S)
        kept = f"every index written is kept in {demo.indexes}; the next `cone demo` reuses them"
        raise Interrupted(kept, still_running=worker.is_alive())  # the eval or the instruments, which write no index
    return 0


def work_in_background(demo: Demo, models: list[str], builds: BuildProgress) -> None:
    """The demo's work while the service answers (``cone.pipeline.demo.work_in_background``)."""
    print(f"\n== The other indexes, fastest first ({demo.indexes}) ==", flush=True)
    url = f"http://{demo.args.host}:{demo.args.port}/report"
    background(demo, models, builds, url)
