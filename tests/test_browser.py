"""The page in a real headless Chromium (Debian's, driven by Playwright): type a query, see columns."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest
import uvicorn

from cone.service.app import create_app

from local_service import free_port, wait_ready
from tiny import build_tiny_indexes

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
    build_tiny_indexes(root, shared_tiny_beir, tiny_checkpoints, [("baseline", "none"), ("regularized", "none")])
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


def test_query_shows_one_column_per_available_model(served):
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"Chromium not found at {CHROMIUM}: `make install` installs Debian's chromium")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page()
        page.goto(served + "/")
        page.fill("#q", "cell protein expression")
        page.click("button[type=submit]")
        page.wait_for_selector(".column .hit", timeout=30_000)
        columns = page.eval_on_selector_all(".column", "cs => cs.map(c => c.dataset.model)")
        assert sorted(columns) == ["baseline", "bm25", "regularized"]
        scores = page.eval_on_selector_all(".column[data-model=baseline] .score", "s => s.map(e => e.textContent)")
        assert len(scores) == 5 and all(-1.0 <= float(s) <= 1.0 for s in scores)
        assert page.locator(".column[data-model=baseline] img.hist").count() == 1
        assert "unavailable" in page.inner_text("#missing")
        page.fill("#q", "   ")
        page.click("button[type=submit]")
        page.wait_for_function("document.getElementById('error').textContent.length > 0", timeout=10_000)
        assert "empty or whitespace" in page.inner_text("#error")
        browser.close()
