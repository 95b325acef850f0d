"""`cone demo` serves its first index at once and builds the others beside the service: the count of documents
the builder reports, what the service says of a model on its way (503, /readyz, /models), each model joining by
a reload, the report served once written, and an interrupted build that leaves nothing half-written."""

from __future__ import annotations

import importlib
import threading
import time

import numpy as np
import pytest
from fastapi.testclient import TestClient

from cone.cli import demo
from cone.cli.main import main
from cone.encoders.registry import load_encoder
from cone.errors import Interrupted
from cone.eval.harness import build_indexes, load_eval_data
from cone.eval.plan import EvalPlan
from cone.indexing import dense
from cone.indexing.spec import IndexSpec
from cone.service.app import create_app
from cone.service.progress import BuildProgress, ModelProgress

from local_service import free_port
from tiny import build_tiny_indexes, hold_after_first_batch

BATCH = 8  # the tiny corpus's 40 documents in 5 counted batches


@pytest.fixture()
def counted_batches(tmp_path, monkeypatch):
    """An embedding cache of this test's own (so that the corpus is really encoded) and small counted batches."""
    monkeypatch.setenv(dense.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(dense, "COUNTED_BATCH", BATCH)
    return tmp_path / "cache"


def _plan(indexes, checkpoints, postprocesses=("none", "center")) -> EvalPlan:
    return EvalPlan(models=(), indexes=indexes, postprocesses=postprocesses, checkpoints=checkpoints, progress=False)


def test_the_count_is_of_the_documents_encoded_and_the_vectors_are_the_encoders(
    shared_tiny_beir, tiny_checkpoints, tmp_path, counted_batches
):
    data = load_eval_data(shared_tiny_beir, "tiny")
    counted = []
    folders = build_indexes(IndexSpec("baseline"), data, _plan(tmp_path / "idx", tiny_checkpoints), counted.append)
    assert [f.name for f in folders] == ["baseline", "baseline-center"]
    assert counted == [BATCH] * 5  # once for the two post-processings: they share the cached vectors
    encoder = load_encoder("baseline", tiny_checkpoints)
    batched = dense.corpus_vectors(encoder, data.dataset, progress=False)  # from the cache the build filled
    assert np.allclose(batched, encoder.encode(dense.corpus_texts(data.dataset)), atol=1e-5)
    built = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "idx").iterdir()}
    again = []
    build_indexes(IndexSpec("baseline"), data, _plan(tmp_path / "idx", tiny_checkpoints), again.append)
    assert again == [] and {p.name: p.stat().st_mtime_ns for p in (tmp_path / "idx").iterdir()} == built


def test_time_left_is_the_encodings_rate_so_far():
    build = ModelProgress("minilm", total=100)
    assert build.state == "queued" and build.seconds_left() is None
    build.started = 10.0
    assert build.state == "encoding" and build.seconds_left(now=12.0) is None  # no batch back yet
    build.done = 25
    assert build.seconds_left(now=20.0) == pytest.approx(30.0)  # 25 documents in 10 s: 75 more in 30 s
    build.done = 100
    assert build.state == "indexing" and build.seconds_left(now=30.0) == 0


def test_an_interrupted_build_writes_nothing_and_the_next_demo_reuses_what_was_written(
    shared_tiny_beir, tiny_checkpoints, tmp_path, counted_batches
):
    data = load_eval_data(shared_tiny_beir, "tiny")
    indexes = tmp_path / "out" / "tiny" / "indexes"
    builds = BuildProgress(["baseline", "regularized"], len(data.dataset.corpus))
    build_indexes(IndexSpec("baseline"), data, _plan(indexes, tiny_checkpoints), builds.counter("baseline"))
    builds.built("baseline")
    count = builds.counter("regularized")

    def cancel_after_two_batches(n: int) -> None:
        count(n)
        if builds.get("regularized").done >= 2 * BATCH:
            builds.cancel()  # Ctrl-C: the next batch stops the build

    with pytest.raises(Interrupted):
        build_indexes(IndexSpec("regularized"), data, _plan(indexes, tiny_checkpoints), cancel_after_two_batches)
    assert builds.get("regularized").done == 2 * BATCH  # the third batch came back after the Ctrl-C: dropped
    assert sorted(p.name for p in indexes.iterdir()) == ["baseline", "baseline-center"]  # nor any hidden folder
    assert len(list(counted_batches.iterdir())) == 1  # baseline's vectors cached, none of regularized's

    written = {p.name: p.stat().st_mtime_ns for p in indexes.iterdir()}
    argv = ["demo", "--dataset", "tiny", "--data-dir", str(shared_tiny_beir), "--checkpoints", str(tiny_checkpoints)]
    argv += ["--models", "baseline,regularized", "--postprocess", "none,center", "--out", str(tmp_path / "out")]
    assert main([*argv, "--no-serve", "--no-progress"]) == 0
    now = {p.name: p.stat().st_mtime_ns for p in indexes.iterdir()}
    assert set(now) == {"baseline", "baseline-center", "regularized", "regularized-center"}
    assert {name: now[name] for name in written} == written  # reused, not rebuilt


def test_a_model_on_its_way_is_a_503_then_joins_by_a_reload_and_the_report_follows(
    shared_tiny_beir, tiny_checkpoints, tmp_path, counted_batches
):
    root = build_tiny_indexes(tmp_path / "idx", shared_tiny_beir, tiny_checkpoints, [])  # bm25 only
    builds = BuildProgress(["baseline"], 40)
    builds.counter("baseline")(16)
    with TestClient(create_app(root, tiny_checkpoints, load_in_background=False, builds=builds)) as client:
        ready = client.get("/readyz").json()
        assert ready["background"] == "building" and ready["report"] is None
        (state,) = ready["building"]
        assert (state["model"], state["state"], state["done"], state["total"]) == ("baseline", "encoding", 16, 40)
        assert state["seconds_left"] > 0
        refused = client.get("/search", params={"model": "baseline", "q": "cell protein"})
        assert refused.status_code == 503
        assert "still being built" in refused.json()["detail"] and "16 of 40 documents" in refused.json()["detail"]
        assert "\n" not in refused.json()["detail"]
        listed = {m["name"]: m for m in client.get("/models").json()["models"]}
        assert listed["baseline"]["building"]["done"] == 16 and listed["baseline"]["reason"].startswith("being built")
        assert listed["bm25"]["available"] and listed["bm25"]["building"] is None
        assert client.get("/search", params={"model": "bm25", "q": "cell protein"}).status_code == 200
        assert "once every index is built" in client.get("/report").json()["detail"]

        data = load_eval_data(shared_tiny_beir, "tiny")
        build_indexes(IndexSpec("baseline"), data, _plan(root, tiny_checkpoints, ("none",)))
        builds.built("baseline")  # the service reloads: no restart
        assert client.get("/search", params={"model": "baseline", "q": "cell protein"}).status_code == 200
        assert client.get("/readyz").json()["building"] == []

        report = tmp_path / "eval"
        report.mkdir()
        (report / "report.md").write_text("# cone eval: tiny\n")
        (report / "report.json").write_text('{"dataset": "tiny"}')
        builds.finish(report)
        ready = client.get("/readyz").json()
        assert ready["background"] == "done" and ready["report"] == "/report"
        page = client.get("/report")
        assert page.status_code == 200 and page.text == "# cone eval: tiny\n"
        assert page.headers["content-type"].startswith("text/plain")
        assert client.get("/report.json").json() == {"dataset": "tiny"}
    with TestClient(create_app(root, tiny_checkpoints, load_in_background=False)) as client:
        assert client.get("/readyz").json()["background"] is None
        assert client.get("/report").status_code == 404


def test_ctrl_c_while_the_demo_serves_keeps_every_index_written_and_drops_the_one_half_encoded(
    shared_tiny_beir, tiny_checkpoints, tmp_path, counted_batches, monkeypatch, capsys
):
    release = hold_after_first_batch(monkeypatch, "regularized")
    monkeypatch.setattr(demo.Demo, "show_instruments", lambda self: None)  # tested by test_eval's demo test
    seen = {}

    def serve_until_ctrl_c(indexes, host, port, checkpoints, builds):
        """The service's part: up once bm25 is written; Ctrl-C while regularized is half encoded, its batch
        then finishing only after the Ctrl-C (as a slow one would)."""
        seen["at start"] = sorted(p.name for p in indexes.iterdir())
        deadline = time.monotonic() + 120
        while (build := builds.get("regularized")) is None or build.done == 0:
            assert time.monotonic() < deadline, "regularized's build never began"
            time.sleep(0.05)
        seen["regularized"] = build.state
        threading.Thread(target=lambda: builds.cancelled.wait(60) and release.set(), daemon=True).start()
        raise KeyboardInterrupt

    monkeypatch.setattr(demo, "serve", serve_until_ctrl_c)
    argv = ["demo", "--dataset", "tiny", "--data-dir", str(shared_tiny_beir), "--checkpoints", str(tiny_checkpoints)]
    argv += ["--models", "regularized,baseline,bm25", "--postprocess", "none", "--out", str(tmp_path / "out")]
    assert main([*argv, "--no-progress", "--port", str(free_port())]) == 130
    assert "kept" in capsys.readouterr().err
    assert seen == {"at start": ["bm25"], "regularized": "encoding"}  # fastest first; served before the rest
    indexes = tmp_path / "out" / "tiny" / "indexes"
    assert sorted(p.name for p in indexes.iterdir()) == ["baseline", "bm25"]  # no regularized, no hidden folder


def test_ctrl_c_during_the_eval_says_what_is_kept_and_leaves_without_the_shutdown(
    shared_tiny_beir, tiny_checkpoints, tmp_path, counted_batches, monkeypatch, capsys
):
    """The eval runs in native code on the demo's thread; the interpreter's shutdown around it ended in
    std::terminate (exit 134). The demo now says what is kept and leaves with 130 at once (os._exit)."""
    evaluating, release, left = threading.Event(), threading.Event(), []
    monkeypatch.setattr(demo.Demo, "show_instruments", lambda self: None)

    def evaluate(self):  # held in the eval until the test ends, then stopped as a Ctrl-C stops it
        evaluating.set()
        release.wait(60)
        raise Interrupted

    monkeypatch.setattr(demo.Demo, "evaluate", evaluate)
    monkeypatch.setattr(demo, "WORKER_GRACE_S", 0.2)

    def leave_now(code: int) -> None:  # os._exit would end this test's process too
        left.append(code)
        raise SystemExit(code)

    def serve_until_ctrl_c(indexes, host, port, checkpoints, builds):
        assert evaluating.wait(120), "the eval never began"
        raise KeyboardInterrupt

    monkeypatch.setattr(importlib.import_module("cone.cli.main"), "leave_now", leave_now)  # the module, not main()
    monkeypatch.setattr(demo, "serve", serve_until_ctrl_c)
    argv = ["demo", "--dataset", "tiny", "--data-dir", str(shared_tiny_beir), "--checkpoints", str(tiny_checkpoints)]
    argv += ["--models", "bm25", "--postprocess", "none", "--out", str(tmp_path / "out"), "--port", str(free_port())]
    try:
        with pytest.raises(SystemExit):
            main([*argv, "--no-progress"])
    finally:
        release.set()
    assert left == [130]
    assert "every index written is kept" in capsys.readouterr().err
