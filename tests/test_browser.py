"""The page in a real headless Chromium (Debian's, driven by Playwright): choose indexes, type a query, see
their columns and their random-pair histograms overlaid."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest
import uvicorn

from cone.service.app import create_app

from local_service import free_port, wait_ready
from tiny import build_tiny_indexes, hold_after_first_batch

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def served(shared_tiny_beir, tiny_checkpoints, tmp_path_factory):
    root = tmp_path_factory.mktemp("served")
    dense = [("baseline", "none"), ("regularized", "none"), ("baseline", "whiten+cone:0.99")]
    build_tiny_indexes(root, shared_tiny_beir, tiny_checkpoints, dense)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(root, tiny_checkpoints), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    wait_ready(url, timeout=60)
    yield url
    server.should_exit = True
    thread.join(10)


def _wait_until(page, expression: str, timeout: float) -> None:
    """Poll ``expression`` from here: Playwright's wait_for_function evals its string inside the page, which the
    page's Content-Security-Policy forbids (as it should: the page runs only its own, hashed script)."""
    deadline = time.monotonic() + timeout
    while not page.evaluate(expression):
        assert time.monotonic() < deadline, f"not true after {timeout} s: {expression}"
        time.sleep(0.05)


def _loaded(page):
    """The page's image has arrived and decoded (a broken one has naturalWidth 0)."""
    return page.eval_on_selector("#overlay", "i => i.complete && i.naturalWidth > 0")


def test_chosen_indexes_get_columns_and_an_overlay_histogram(served):
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"Chromium not found at {CHROMIUM}: `make install` installs Debian's chromium")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1100, "height": 900})
        refused = []  # what the Content-Security-Policy blocked: the page must need nothing it forbids
        page.on("console", lambda m: "Content Security Policy" in m.text and refused.append(m.text))
        page.goto(served + "/")
        page.wait_for_selector("#chooser input", timeout=30_000)
        groups = page.eval_on_selector_all("#chooser .group", "gs => gs.map(g => g.dataset.model)")
        assert len(groups) == len(set(groups)) and {"baseline", "regularized", "bm25"} <= set(groups)
        checked = page.eval_on_selector_all("#chooser input:checked", "bs => bs.map(b => b.value)")
        assert sorted(checked) == ["baseline", "bm25", "regularized"]  # the plain index of each model
        synthetic = page.locator("#chooser .group[data-model=baseline] label", has_text="whiten+cone:0.99")
        assert "(synthetic)" in synthetic.inner_text() and not synthetic.locator("input").is_checked()
        _wait_until(page, "document.getElementById('overlay').naturalWidth > 0", 30)
        assert "model=baseline" in page.get_attribute("#overlay", "src")
        assert "bm25" not in page.get_attribute("#overlay", "src")  # BM25 scores are not cosines

        page.fill("#q", "cell protein expression")
        page.click("button[type=submit]")
        page.wait_for_selector(".column .hit", timeout=30_000)
        columns = page.eval_on_selector_all(".column", "cs => cs.map(c => c.dataset.model)")
        assert sorted(columns) == ["baseline", "bm25", "regularized"]
        scores = page.eval_on_selector_all(".column[data-model=baseline] .score", "s => s.map(e => e.textContent)")
        assert len(scores) == 5 and all(-1.0 <= float(s) <= 1.0 for s in scores)
        assert page.locator(".column[data-model=baseline] img.hist").count() == 1
        assert "unavailable" in page.inner_text("#missing")
        # Baseline and regularized side by side, without scrolling sideways.
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")

        synthetic.locator("input").check()  # the synthetic cone joins: a column and a curve
        page.wait_for_selector(".column[data-model='baseline-whiten-cone0.99'] .hit", timeout=30_000)
        assert "(synthetic degradation)" in page.inner_text(".column[data-model='baseline-whiten-cone0.99'] h2")
        assert "model=baseline-whiten-cone0.99" in page.get_attribute("#overlay", "src")
        _wait_until(page, "document.getElementById('overlay').complete", 30)
        assert _loaded(page)
        page.locator("#chooser input[value=bm25]").uncheck()
        _wait_until(page, "!document.querySelector('.column[data-model=bm25]')", 30)

        page.fill("#q", "   ")
        page.click("button[type=submit]")
        _wait_until(page, "document.getElementById('error').textContent.length > 0", 10)
        assert "empty or whitespace" in page.inner_text("#error")
        browser.close()
    assert refused == []


def test_a_model_joins_the_page_while_another_is_still_being_built(
    shared_tiny_beir, tiny_checkpoints, tmp_path, monkeypatch
):
    """`cone demo`'s service: bm25 serves first; baseline joins the page while regularized's build (held after its
    first batch) shows its progress; released, regularized joins too, then the eval report's link appears."""
    import argparse

    from playwright.sync_api import sync_playwright

    from cone.cli import demo
    from cone.eval.harness import load_eval_data
    from cone.indexing import dense
    from cone.service.progress import BuildProgress

    monkeypatch.setenv(dense.CACHE_ENV, str(tmp_path / "cache"))  # the corpus really encoded, in batches of 8
    monkeypatch.setattr(dense, "COUNTED_BATCH", 8)
    monkeypatch.setattr(demo.Demo, "show_instruments", lambda self: None)  # tested by test_eval's demo test
    release = hold_after_first_batch(monkeypatch, "regularized")
    models = ["bm25", "baseline", "regularized"]
    args = argparse.Namespace(
        out=tmp_path, dataset="tiny", models=models, postprocess=["none"], checkpoints=tiny_checkpoints,
        data_dir=shared_tiny_beir, no_progress=True, host="127.0.0.1", port=free_port(),
    )  # fmt: skip
    work = demo.Demo(args, load_eval_data(shared_tiny_beir, "tiny"))
    builds = BuildProgress(models, 40)
    work.build(["bm25"], builds)  # the first index, before the service
    app = create_app(work.indexes, tiny_checkpoints, builds=builds)
    server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    url = f"http://{args.host}:{args.port}"
    wait_ready(url, timeout=60)
    worker = threading.Thread(target=demo.work_in_background, args=(work, models[1:], builds), daemon=True)
    worker.start()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            page = browser.new_page()
            page.goto(url + "/")
            page.wait_for_selector("#chooser input[value=bm25]", timeout=30_000)
            baseline = "document.querySelector('#chooser input[value=baseline]:not([disabled])')"
            _wait_until(page, baseline, 60)  # joined without a reload of the page
            held = "regularized: being built, 8 of 40 documents encoded"  # its first batch, the rest held
            _wait_until(page, f"document.getElementById('building').textContent.includes('{held}')", 30)
            assert page.locator("#chooser input[value=regularized]").is_disabled()
            assert page.locator("#report").is_hidden()

            page.fill("#q", "cell protein expression")
            page.click("button[type=submit]")
            page.wait_for_selector(".column[data-model=baseline] .hit", timeout=30_000)
            columns = page.eval_on_selector_all(".column", "cs => cs.map(c => c.dataset.model)")
            assert sorted(columns) == ["baseline", "bm25"]  # regularized is still on its way: no column, no error
            assert page.inner_text("#error") == ""

            release.set()  # regularized's other batches come back: it joins, with a column for the last query
            page.wait_for_selector(".column[data-model=regularized] .hit", timeout=60_000)
            page.wait_for_selector("#report a[href='/report']", state="visible", timeout=120_000)
            assert page.inner_text("#building") == ""
            browser.close()
        assert builds.stage == "done" and (builds.report / "report.md").is_file()
    finally:
        release.set()
        builds.cancel()
        worker.join(60)
        server.should_exit = True
