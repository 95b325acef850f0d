from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from cone.data.loaders import load_beir
from cone.encoders.registry import load_encoder
from cone.indexing.dense import build_dense
from cone.service.app import ADMIN_KEY_ENV, create_app
from cone.service.batching import BatchSettings
from cone.service.schemas import MAX_QUERY_CHARS

from tiny import build_tiny_indexes


@pytest.fixture(scope="module")
def index_dir(shared_tiny_beir, tiny_checkpoints, tmp_path_factory) -> Path:
    """baseline, baseline-center, regularized, bm25, 'broken' (a baseline index with a truncated FAISS file) and
    'unsigned' (one whose manifest is valid JSON but lacks its encoder fingerprint)."""
    root = tmp_path_factory.mktemp("indexes")
    dense = [("baseline", "none"), ("baseline", "center"), ("regularized", "none")]
    build_tiny_indexes(root, shared_tiny_beir, tiny_checkpoints, dense)
    shutil.copytree(root / "baseline", root / "broken")
    (root / "broken" / "index.faiss").write_bytes(b"not a faiss index")
    shutil.copytree(root / "baseline", root / "unsigned")
    manifest = json.loads((root / "unsigned" / "manifest.json").read_text())
    del manifest["encoder_fingerprint"]
    (root / "unsigned" / "manifest.json").write_text(json.dumps(manifest))
    return root


@pytest.fixture(scope="module")
def client(index_dir, tiny_checkpoints, tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CONE_CACHE_DIR", str(cache))
        mp.setenv("CONE_ROBERTA_PATH", str(cache / "absent"))
        with TestClient(create_app(index_dir, tiny_checkpoints, load_in_background=False)) as c:
            yield c


def test_models_report_availability_with_reasons(client):
    models = {m["name"]: m for m in client.get("/models").json()["models"]}
    assert {"baseline", "baseline-center", "regularized", "bm25"} <= {n for n, m in models.items() if m["available"]}
    assert not models["broken"]["available"] and "corrupt index files" in models["broken"]["reason"]
    assert not models["unsigned"]["available"] and "lacks 'encoder_fingerprint'" in models["unsigned"]["reason"]
    assert not models["roberta"]["available"] and "CONE_ROBERTA_PATH" in models["roberta"]["reason"]
    base = models["baseline"]
    assert base["dim"] == 32 and base["n_docs"] == 40 and base["postprocess"] == "none"
    assert {"anisotropy", "effective_rank", "sigreg", "decorrelation"} <= set(base["geometry"])


def test_search_get_and_post_agree_and_rank_by_score(client):
    got = client.get("/search", params={"model": "baseline", "q": "cell protein expression", "k": 5})
    assert got.status_code == 200
    body = got.json()
    scores = [h["score"] for h in body["hits"]]
    assert [h["rank"] for h in body["hits"]] == [1, 2, 3, 4, 5] and scores == sorted(scores, reverse=True)
    assert body["spread"]["min"] <= body["spread"]["median"] <= body["spread"]["max"] == pytest.approx(scores[0])
    assert all(-1.0001 <= s <= 1.0001 for s in scores) and body["metric"] == "inner_product"
    posted = client.post("/search", json={"model": "baseline", "q": "cell protein expression", "k": 5}).json()
    assert [h["doc_id"] for h in posted["hits"]] == [h["doc_id"] for h in body["hits"]]


def test_spread_covers_the_whole_corpus_up_to_its_cap(client, monkeypatch):
    params = {"model": "baseline", "q": "cell protein expression", "k": 5}
    whole = client.get("/search", params=params).json()["spread"]
    assert whole["n"] == 40
    monkeypatch.setattr("cone.service.registry.SPREAD_DOCS", 8)
    capped = client.get("/search", params=params).json()["spread"]
    assert capped["n"] == 8 and capped["max"] == pytest.approx(whole["max"]) and capped["min"] > whole["min"]


def test_bm25_search_finds_the_document_a_query_was_cut_from(client, shared_tiny_beir):
    ds = load_beir(shared_tiny_beir, "tiny")
    hits = client.get("/search", params={"model": "bm25", "q": ds.queries["q3"], "k": 3}).json()["hits"]
    assert hits[0]["doc_id"] == "d3" and hits[0]["title"] == "doc 3"


@pytest.mark.parametrize(
    ("params", "status", "fragment"),
    [
        ({"model": "baseline", "q": ""}, 422, "at least 1 character"),
        ({"model": "baseline", "q": "   \t "}, 422, "empty or whitespace"),
        ({"model": "baseline", "q": "x" * (MAX_QUERY_CHARS + 1)}, 422, f"at most {MAX_QUERY_CHARS}"),
        ({"model": "baseline", "q": "cell", "k": 0}, 422, "greater than or equal to 1"),
        ({"model": "baseline", "q": "cell", "k": 101}, 422, "less than or equal to 100"),
        ({"model": "nope", "q": "cell"}, 404, "unknown model 'nope'"),
        ({"model": "roberta", "q": "cell"}, 409, "unavailable"),
        ({"model": "broken", "q": "cell"}, 409, "corrupt index files"),
        ({"q": "cell"}, 422, "model"),
    ],
)
def test_bad_search_input_is_a_clear_4xx(client, params, status, fragment):
    response = client.get("/search", params=params)
    assert response.status_code == status and response.headers["content-type"] == "application/json"
    assert fragment in response.text


def test_compare_answers_for_every_available_model(client):
    body = client.get("/compare", params={"q": "gene expression", "k": 3}).json()
    assert {r["model"] for r in body["results"]} == {"baseline", "baseline-center", "regularized", "bm25"}
    assert all(len(r["hits"]) == 3 for r in body["results"])
    assert {"broken", "roberta", "minilm"} <= {m["name"] for m in body["unavailable"]}


def test_compare_and_histogram_take_the_chosen_indexes(client):
    params = [("q", "gene expression"), ("k", 2), ("model", "regularized"), ("model", "baseline"), ("model", "bm25")]
    body = client.get("/compare", params=[*params, ("model", "baseline")]).json()
    assert [r["model"] for r in body["results"]] == ["regularized", "baseline", "bm25"]  # as chosen, each once
    assert body["unavailable"] == []
    chosen = [("format", "json"), ("model", "baseline"), ("model", "baseline-center")]
    assert [h["name"] for h in client.get("/histogram", params=chosen).json()["histograms"]] == [
        "baseline",
        "baseline-center",
    ]
    unknown = client.get("/compare", params=[("q", "cell"), ("model", "baseline"), ("model", "nope")])
    assert unknown.status_code == 404 and "nope" in unknown.json()["detail"]
    too_long = client.get("/histogram", params=[("model", "x" * 201)])
    assert too_long.status_code == 422
    info = {m["name"]: m for m in client.get("/models").json()["models"]}
    assert info["baseline-center"]["model"] == "baseline" and info["baseline-center"]["layer"] == "last"
    assert info["baseline"]["index_factory"] == "Flat" and info["bm25"]["model"] == "bm25"


def test_histogram_png_json_and_overlay(client):
    png = client.get("/histogram", params={"model": "baseline"})
    assert png.status_code == 200 and png.headers["content-type"] == "image/png" and png.content[:4] == b"\x89PNG"
    one = client.get("/histogram", params={"model": "baseline", "format": "json"}).json()["histograms"][0]
    assert len(one["edges"]) == len(one["counts"]) + 1 and sum(one["counts"]) == one["n_pairs"]
    overlay = client.get("/histogram", params={"format": "json"}).json()["histograms"]
    assert {h["name"] for h in overlay} == {"baseline", "baseline-center", "regularized", "broken"}
    assert client.get("/histogram", params={"model": "bm25"}).status_code == 409


def test_geometry_per_index(client):
    body = client.get("/geometry", params={"model": "baseline-center"}).json()
    assert abs(body["geometry"]["mean_vector_ratio"]) < 1e-3  # centered: the mean vector is gone
    assert body["geometry_raw"]["mean_vector_ratio"] > body["geometry"]["mean_vector_ratio"]
    assert client.get("/geometry", params={"model": "bm25"}).status_code == 409


def test_health_readiness_and_page(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz").json()
    assert ready["status"] == "ready" and ready["available"] == 4 and ready["recovered"] == []
    assert ready["unavailable"] == len([m for m in client.get("/models").json()["models"] if not m["available"]]) >= 4
    page = client.get("/")
    assert page.status_code == 200 and "<form" in page.text and "/compare" in page.text
    assert client.get("/docs").status_code == 200 and "/search" in client.get("/openapi.json").json()["paths"]


def test_not_ready_until_indexes_are_loaded(index_dir, tiny_checkpoints):
    app = create_app(index_dir, tiny_checkpoints)
    c = TestClient(app)  # outside `with`: start-up (the loading) has not run
    assert c.get("/readyz").status_code == 503 and c.get("/healthz").status_code == 200
    assert c.get("/models").status_code == 503


def test_concurrent_searches_are_consistent(client):
    queries = [f"protein {w} cell" for w in ("level", "risk", "gene", "study")] * 8

    def ask(q: str) -> list[str]:
        response = client.get("/search", params={"model": "baseline", "q": q, "k": 5})
        assert response.status_code == 200
        return [h["doc_id"] for h in response.json()["hits"]]

    expected = {q: ask(q) for q in set(queries)}
    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(ask, queries))
    assert results == [expected[q] for q in queries]


@pytest.mark.slow
def test_micro_batched_searches_answer_as_one_by_one_searches_do(index_dir, tiny_checkpoints, monkeypatch, tmp_path):
    monkeypatch.setenv("CONE_CACHE_DIR", str(tmp_path))
    queries = [f"{w} protein cell" for w in ("level", "risk", "gene", "study", "tumor", "dose", "rna", "mice")] * 3
    alone = create_app(index_dir, tiny_checkpoints, load_in_background=False, batching=BatchSettings(max_batch=1))
    batched = create_app(
        index_dir, tiny_checkpoints, load_in_background=False, batching=BatchSettings(window_ms=100, max_batch=8)
    )
    with TestClient(alone) as one, TestClient(batched) as many:
        entry = many.app.state.registry.entries["baseline"]
        sizes, search = [], entry.index.search
        entry.index.search = lambda texts, k: sizes.append(len(texts)) or search(texts, k)

        def ask(client, q: str) -> dict:
            response = client.get("/search", params={"model": "baseline", "q": q, "k": 5})
            assert response.status_code == 200
            return response.json()

        expected = [ask(one, q) for q in queries]
        with ThreadPoolExecutor(max_workers=16) as pool:
            got = list(pool.map(lambda q: ask(many, q), queries))
    assert max(sizes) > 1 and sum(sizes) == len(queries)  # batched, and every query searched once
    for want, have in zip(expected, got, strict=True):
        assert [h["doc_id"] for h in have["hits"]] == [h["doc_id"] for h in want["hits"]]
        assert [h["score"] for h in have["hits"]] == pytest.approx([h["score"] for h in want["hits"]], abs=1e-5)
        assert have["spread"] == pytest.approx(want["spread"], abs=1e-5)


def test_admin_reload_is_off_without_a_key_and_swaps_atomically(
    client, index_dir, shared_tiny_beir, tiny_checkpoints, monkeypatch
):
    monkeypatch.delenv(ADMIN_KEY_ENV, raising=False)
    assert client.post("/admin/reload").status_code == 404
    monkeypatch.setenv(ADMIN_KEY_ENV, "s3cret")
    assert client.post("/admin/reload", headers={"X-API-Key": "wrong"}).status_code == 401
    registry = client.app.state.registry
    old_entries = registry.entries
    old = old_entries["regularized"]
    # Re-index while serving: the build replaces the folder atomically; the old index keeps answering.
    ds = load_beir(shared_tiny_beir, "tiny")
    build_dense(load_encoder("regularized", tiny_checkpoints), ds, index_dir / "regularized", "center", progress=False)
    assert client.get("/search", params={"model": "regularized", "q": "cell"}).status_code == 200
    assert registry.entries["regularized"].manifest.postprocess == "none"
    response = client.post("/admin/reload", headers={"X-API-Key": "s3cret"})
    assert response.status_code == 200 and response.json()["available"] >= 4
    assert registry.entries is not old_entries
    assert registry.entries["regularized"].manifest.postprocess == "center"
    hits, _ = old.search("cell", 2)  # a request that still holds the old entry completes on it
    assert len(hits) == 2


def test_serve_binds_to_loopback_by_default_and_refuses_a_missing_folder(tmp_path, capsys):
    from cone.cli import build_parser, main

    assert build_parser().parse_args(["serve", "--indexes", str(tmp_path)]).host == "127.0.0.1"
    assert main(["serve", "--indexes", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert "no such folder of indexes" in err and len(err.strip().splitlines()) == 1
