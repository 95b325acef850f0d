"""LanceDB as a store: lance:TYPE index factories, built into a Lance table inside the index folder, read back
through the manifest, served, damaged, evaluated."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from fastapi.testclient import TestClient

from cone.cli import main
from cone.encoders.registry import Encoders
from cone.errors import InputError
from cone.indexing.dense import build_dense
from cone.indexing.factory import build_codes
from cone.indexing.lance import FILES, TABLE
from cone.indexing.manifest import read_manifest
from cone.indexing.open import open_index
from cone.indexing.spec import for_store, parse_index_type
from cone.service.app import create_app

from tiny import folder_name, unit_rows

pytest.importorskip("lancedb")


def test_lance_types_parse_to_the_lancedb_store_with_their_metric_and_store_maps_the_default():
    assert parse_index_type("lance:ivf_pq").factory == "lance:IVF_PQ"
    assert parse_index_type("lance:IVF_RQ").store == "lancedb" and parse_index_type("PQ32").store == "faiss"
    # LanceDB's own default metric, l2, unless another is named; the metric is part of the type's name
    assert parse_index_type("lance:ivf_pq").spec == "lance:IVF_PQ@l2"
    assert parse_index_type("lance:IVF_PQ@Cosine").metric == "cosine"
    assert (
        for_store("Flat", "lancedb").spec == "lance:FLAT@l2"
        and for_store("lance:IVF_PQ", None, "dot").spec == "lance:IVF_PQ@dot"
    )
    with pytest.raises(InputError, match="LanceDB index types are lance:FLAT"):
        parse_index_type("lance:HNSW")
    with pytest.raises(InputError, match="the metric is one of dot, l2, cosine, not 'ip'"):
        parse_index_type("lance:IVF_PQ@ip")
    with pytest.raises(InputError, match="'PQ32' is a faiss type, not one of --store lancedb"):
        for_store("PQ32", "lancedb")


def test_search_settings_a_type_does_not_take_and_untrainable_sizes_are_refused():
    with pytest.raises(InputError, match="lance:FLAT takes no search parameters, not 'nprobes'"):
        build_codes(unit_rows(50, 16), parse_index_type("lance:FLAT"), "nprobes=4")
    with pytest.raises(InputError, match="lance:IVF_PQ' on 100 vectors: .* needs at least 256 vectors"):
        build_codes(unit_rows(100, 16), parse_index_type("lance:IVF_PQ"))


def test_ivf_pq_parameters_come_from_n_and_d_and_its_top_hits_are_close_to_exact(tmp_path):
    vectors, queries = unit_rows(600, 64), unit_rows(20, 64, seed=1)
    codes = build_codes(vectors, parse_index_type("lance:IVF_PQ"), "refine_factor=50")
    # sqrt(600) ~ 24 partitions, but LanceDB trains one per 256 vectors; d/8 sub-vectors of 8 dims.
    assert codes.params == {
        "metric": "l2",
        "num_partitions": 2,
        "num_sub_vectors": 8,
        "num_bits": 8,
        "nprobes": 2,
        "refine_factor": 50,
    }
    codes.write(tmp_path)
    exact_scores, exact_rows = build_codes(vectors, parse_index_type("Flat")).search(queries, 10)
    scores, rows = codes.search(queries, 10)
    # every probe and a deep refine: the refined top 10 is the exact one, with exact cosines (1 - l2²/2)
    assert np.array_equal(rows, exact_rows)
    np.testing.assert_allclose(scores, exact_scores, atol=1e-5)
    np.testing.assert_allclose(codes.vectors(), vectors)
    for metric in ("dot", "cosine"):  # each distance read back as the cosine
        scores, rows = build_codes(vectors, parse_index_type(f"lance:FLAT@{metric}")).search(queries, 10)
        assert np.array_equal(rows, exact_rows)
        np.testing.assert_allclose(scores, exact_scores, atol=1e-5)


def test_lance_flat_ranks_like_faiss_flat(tiny, tmp_path):
    encoder, dataset = tiny
    faiss_folder = build_dense(encoder, dataset, tmp_path / "flat", "center", progress=False)
    lance_folder = build_dense(
        encoder, dataset, tmp_path / "lance", "center", parse_index_type("lance:FLAT"), progress=False
    )
    queries = [dataset.queries[q] for q in sorted(dataset.queries)]
    exact = open_index(faiss_folder, Encoders(None, encoder))
    found = open_index(lance_folder, Encoders(None, encoder))
    a, b = exact.search(queries, 40), found.search(queries, 40)
    assert np.array_equal(a.rows, b.rows)
    np.testing.assert_allclose(a.scores, b.scores, atol=1e-5)
    np.testing.assert_allclose(found.doc_vectors(), exact.doc_vectors(), atol=1e-6)


@pytest.mark.parametrize("factory", ["lance:FLAT@l2", "lance:IVF_HNSW_SQ@cosine", "lance:IVF_RQ@dot"])
def test_a_lance_index_round_trips_through_the_manifest_and_the_service(factory, tiny, tiny_checkpoints, tmp_path):
    encoder, dataset = tiny
    folder = tmp_path / "served" / folder_name("baseline", "none", factory=factory)
    build_dense(encoder, dataset, folder, "none", parse_index_type(factory), progress=False)
    manifest = read_manifest(folder)
    name, metric = factory.split("@")
    assert folder.name.endswith(f"{name.replace(':', '_')}_{metric}")  # the metric names the folder too
    assert manifest.index_factory == name and manifest.index_metric == manifest.index_params["metric"] == metric
    assert (folder / f"{TABLE}.lance").is_dir() and (folder / FILES).is_file()
    assert ("nprobes" in manifest.index_params) == (name != "lance:FLAT")
    index = open_index(folder, Encoders(tiny_checkpoints))
    hits = index.search(["cell protein gene"], 5).hits(0)
    assert len(hits) == 5 and len({h.doc_id for h in hits}) == 5
    assert all(-1.01 <= h.score <= 1.01 for h in hits)  # cosines (RaBitQ's are estimates)
    with TestClient(create_app(folder.parent, tiny_checkpoints, load_in_background=False)) as client:
        body = client.get("/search", params={"model": folder.name, "q": "cell protein gene", "k": 5}).json()
        assert client.get("/readyz").status_code == 200
        listed = {m["name"]: m for m in client.get("/models").json()["models"]}
    assert listed[folder.name]["index_factory"] == factory  # the page names the metric
    assert [h["doc_id"] for h in body["hits"]] == [h.doc_id for h in hits]
    np.testing.assert_allclose([h["score"] for h in body["hits"]], [h.score for h in hits], atol=1e-5)


@pytest.mark.parametrize("damage", ["truncate data", "delete index"])
def test_a_damaged_lance_table_is_unavailable_and_the_others_serve(damage, tiny, tiny_checkpoints, tmp_path):
    encoder, dataset = tiny
    build_dense(encoder, dataset, tmp_path / "baseline", progress=False)
    damaged = build_dense(
        encoder, dataset, tmp_path / "baseline-lance", "none", parse_index_type("lance:IVF_HNSW_SQ"), progress=False
    )
    table = damaged / f"{TABLE}.lance"
    if damage == "truncate data":
        (file,) = (table / "data").glob("*.lance")
        file.write_bytes(file.read_bytes()[:50])
    else:
        (file,) = (table / "_indices").glob("*/index.idx")
        file.unlink()
    with TestClient(create_app(tmp_path, tiny_checkpoints, load_in_background=False)) as client:
        models = {m["name"]: m for m in client.get("/models").json()["models"]}
        reason = models["baseline-lance"]["reason"]
        assert not models["baseline-lance"]["available"] and "Lance table file" in reason
        assert ("missing" in reason) == (damage == "delete index")
        assert client.get("/search", params={"model": "baseline", "q": "cell"}).status_code == 200
        assert client.get("/healthz").status_code == 200


def test_the_eval_gives_lance_rows_against_faiss_flat(shared_tiny_beir, tiny_checkpoints, tmp_path):
    argv = ["eval", "--models", "baseline", "--dataset", "tiny", "--data-dir", str(shared_tiny_beir), "--no-sts"]
    argv += ["--checkpoints", str(tiny_checkpoints), "--out", str(tmp_path), "--no-progress", "--json"]
    assert main([*argv, "--store", "lancedb"]) == 0
    rows = {r["factory"]: r for r in json.loads((tmp_path / "report.json").read_text())["results"]}
    assert set(rows) == {"Flat", "lance:FLAT@l2", "lance:IVF_PQ@l2", "lance:IVF_HNSW_SQ@l2", "lance:IVF_RQ@l2"}
    assert rows["lance:FLAT@l2"]["metrics"]["recall_at_10_vs_flat"] == pytest.approx(1.0)
    assert rows["lance:FLAT@l2"]["metrics"]["ndcg_at_10"] == pytest.approx(rows["Flat"]["metrics"]["ndcg_at_10"])
    assert 0 <= rows["lance:IVF_RQ@l2"]["metrics"]["recall_at_10_vs_flat"] <= 1
    # 40 documents cannot train an 8-bit product quantizer: that row says so, the others stand
    assert not rows["lance:IVF_PQ@l2"]["available"] and "at least 256 vectors" in rows["lance:IVF_PQ@l2"]["reason"]
    # --metric sweeps the metrics as rows of their own, each in its own folder
    assert main([*argv, "--index-factory", "Flat,lance:FLAT", "--metric", "dot,cosine"]) == 0
    rows = {r["factory"]: r for r in json.loads((tmp_path / "report.json").read_text())["results"]}
    assert set(rows) == {"Flat", "lance:FLAT@dot", "lance:FLAT@cosine"}
    assert rows["lance:FLAT@dot"]["index"] == "baseline-lance_FLAT_dot"
    assert rows["lance:FLAT@cosine"]["metrics"]["recall_at_10_vs_flat"] == pytest.approx(1.0)


def test_cone_index_store_lancedb_builds_lance_flat_and_refuses_a_faiss_type(tiny_beir, tiny_checkpoints, tmp_path):
    argv = ["index", "--model", "baseline", "--dataset", "tiny", "--data-dir", str(tiny_beir), "--no-progress"]
    argv += ["--checkpoints", str(tiny_checkpoints), "--out", str(tmp_path), "--store", "lancedb"]
    assert main(argv) == 0
    assert read_manifest(tmp_path / "baseline-lance_FLAT_l2").index_factory == "lance:FLAT"
    assert main([*argv, "--metric", "dot"]) == 0
    assert read_manifest(tmp_path / "baseline-lance_FLAT_dot").index_metric == "dot"
    assert main([*argv, "--index-factory", "PQ32"]) == 2


def test_a_streamed_lance_table_holds_the_ids_and_ranks_as_the_in_memory_one(tiny_beir, tiny_checkpoints, tmp_path):
    """--stream appends the table a shard at a time (4 shards of 12 here) and indexes it once whole."""
    argv = ["index", "--model", "baseline", "--dataset", "tiny", "--data-dir", str(tiny_beir), "--no-progress"]
    argv += ["--checkpoints", str(tiny_checkpoints), "--index-factory", "lance:FLAT"]
    assert main([*argv, "--out", str(tmp_path / "memory")]) == 0
    assert main([*argv, "--out", str(tmp_path / "stream"), "--stream", "--shard-size", "12"]) == 0
    memory = open_index(tmp_path / "memory" / "baseline-lance_FLAT_l2", Encoders(tiny_checkpoints))
    streamed = open_index(tmp_path / "stream" / "baseline-lance_FLAT_l2", Encoders(tiny_checkpoints))
    assert streamed.manifest.fit_sample == 40 and streamed.manifest.index_factory == "lance:FLAT"
    queries = ["cell protein gene", "market stock rose", "dog runs in the park"]
    runs = memory.search(queries, 5).run(queries), streamed.search(queries, 5).run(queries)
    for a, b in zip(runs[0].values(), runs[1].values(), strict=True):
        assert list(a) == list(b) and list(a.values()) == pytest.approx(list(b.values()), abs=1e-5)
    table = streamed.codes.index.to_arrow()
    assert table.num_rows == 40 and table.column("id").to_pylist() == [streamed.docs[r]["id"] for r in range(40)]


def test_a_lance_index_written_before_the_metric_was_recorded_is_dot(tiny, tmp_path):
    """cone 0.1's Lance indexes searched by dot, and their manifests had no index_metric (index_params said it)."""
    encoder, dataset = tiny
    folder = build_dense(encoder, dataset, tmp_path / "old", "none", parse_index_type("lance:FLAT@dot"), progress=False)
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest["index_metric"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    index = open_index(folder, Encoders(None, encoder))
    assert index.spec.factory == "lance:FLAT@dot" and "index_metric" not in read_manifest(folder).to_dict()
    assert len(index.search(["cell protein gene"], 3).hits(0)) == 3


@pytest.mark.slow
def test_without_lancedb_a_lance_index_says_how_to_install_it(tiny, tmp_path, monkeypatch):
    """(That cone imports no lancedb unless it opens a Lance index: tests/test_streaming.py, in a fresh interpreter.)"""
    encoder, dataset = tiny
    folder = build_dense(encoder, dataset, tmp_path / "lance", "none", parse_index_type("lance:FLAT"), progress=False)
    monkeypatch.setitem(sys.modules, "lancedb", None)  # import lancedb now raises ImportError
    with pytest.raises(InputError, match=r"lancedb is not installed .*fix: pip install 'cone\[lancedb\]'"):
        open_index(folder, Encoders(None, encoder))


@pytest.mark.parametrize("metric", ["dot", "l2", "cosine"])
def test_every_lance_type_scores_its_hits_by_their_cosine_under_every_metric(metric):
    """A search gives cosines whatever the metric: Lance's ``_distance`` is 1 - q·x under dot, 2 - 2 cos under l2,
    and under cosine 1 - cos for FLAT or a refined search but 2 - 2 cos for an index type searched as it is (its
    codes compare normalized rows by L2). Read as 1 - d, an IVF_PQ@cosine hit of cosine 0.6 showed 0.2."""
    rows = unit_rows(600, 32, seed=3)
    queries = unit_rows(5, 32, seed=4) + rows[:5]  # near a document each: high, spread-out cosines
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    # the codes' own error on these scores: 8-bit SQ is close, PQ's 4 sub-vectors of 8 bits coarser
    tolerance = {"FLAT": 1e-4, "IVF_HNSW_SQ": 0.05, "IVF_PQ": 0.12}
    for kind, within in tolerance.items():
        for refine in ("", "refine_factor=4"):
            if kind == "FLAT" and refine:
                continue
            codes = build_codes(rows, parse_index_type(f"lance:{kind}@{metric}"), refine)
            scores, found = codes.search(queries, 10)
            exact = np.einsum("qd,qkd->qk", queries, rows[found])
            error = np.abs(scores - exact).mean()
            assert error < (1e-4 if refine else within), (kind, metric, refine, error)
