"""USearch as a store: usearch:CODEC (HNSW as it ships) and usearch:exact:CODEC (the same codes searched
exhaustively), built in memory or streamed, read back through the manifest, served, damaged, evaluated."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fastapi.testclient import TestClient

from cone.cli import main
from cone.encoders.registry import Encoders
from cone.errors import InputError
from cone.indexing.dense import build_dense
from cone.indexing.factory import build_codes
from cone.indexing.manifest import read_manifest
from cone.indexing.open import open_index
from cone.indexing.spec import for_store, parse_index_type
from cone.indexing.usearch_store import CODECS, FILE_RECORD, INDEX_FILE
from cone.service.app import create_app

from tiny import folder_name, unit_rows

pytest.importorskip("usearch")


def test_codecs_parse_with_their_metric_and_b1_is_hamming_only():
    assert parse_index_type("usearch:I8").spec == "usearch:i8@cosine"  # USearch's own default metric
    assert parse_index_type("usearch:exact:bf16@l2").spec == "usearch:exact:bf16@l2"
    assert parse_index_type("usearch:b1").spec == "usearch:b1" and parse_index_type("usearch:b1").metric == "hamming"
    assert for_store("Flat", "usearch").spec == "usearch:exact:f32@cosine"
    with pytest.raises(InputError, match="USearch codecs are usearch:f32"):
        parse_index_type("usearch:i4")
    with pytest.raises(InputError, match="Hamming distance only"):
        parse_index_type("usearch:b1@dot")
    with pytest.raises(InputError, match="takes ef only, not 'nprobe'"):
        build_codes(unit_rows(50, 16), parse_index_type("usearch:i8"), "nprobe=4")
    assert build_codes(unit_rows(50, 16), parse_index_type("usearch:i8"), "ef=32").params["expansion_search"] == 32
    with pytest.raises(InputError, match="usearch:exact:i8 searches every code, it takes no settings"):
        build_codes(unit_rows(50, 16), parse_index_type("usearch:exact:i8"), "ef=32")  # once recorded and ignored


@pytest.mark.parametrize("metric", ["dot", "l2", "cosine"])
def test_every_codec_scores_cosines_and_exact_f32_is_flat(metric):
    vectors, queries = unit_rows(400, 32), unit_rows(10, 32, seed=1)
    flat_scores, flat_rows = build_codes(vectors, parse_index_type("Flat")).search(queries, 10)
    scores, rows = build_codes(vectors, parse_index_type(f"usearch:exact:f32@{metric}")).search(queries, 10)
    assert np.array_equal(rows, flat_rows)
    np.testing.assert_allclose(scores, flat_scores, atol=1e-5)
    for codec in CODECS[1:-1]:  # each distance (i8's in integer units too) read back as the cosine
        scores, rows = build_codes(vectors, parse_index_type(f"usearch:exact:{codec}@{metric}")).search(queries, 10)
        exact = np.take_along_axis(queries @ vectors.T, rows, 1)
        np.testing.assert_allclose(scores, exact, atol=0.08)
        assert (np.diff(scores, axis=1) <= 1e-6).all()
    bits = build_codes(vectors, parse_index_type("usearch:exact:b1")).search(queries, 10)[0]
    assert ((bits >= -1) & (bits <= 1)).all() and (np.diff(bits, axis=1) <= 0).all()


def test_bytes_per_vector_are_the_files_and_follow_the_codec(tmp_path):
    vectors = unit_rows(300, 64)
    sizes = {}
    for codec in ("f32", "f16", "i8", "b1"):
        codes = build_codes(vectors, parse_index_type(f"usearch:{codec}"))
        sizes[codec] = codes.bytes_per_vector()
        codes.write(tmp_path)
        assert sizes[codec] == pytest.approx((tmp_path / INDEX_FILE).stat().st_size / 300)
    # the codes shrink 4 / 2 / 1 / 1/8 bytes a dimension; the graph's links and keys are the same for each
    assert sizes["f32"] - sizes["f16"] == pytest.approx(2 * 64, abs=1)
    assert sizes["f16"] - sizes["i8"] == pytest.approx(64, abs=1)
    assert sizes["i8"] - sizes["b1"] == pytest.approx(64 - 8, abs=1)


@pytest.mark.parametrize("factory", ["usearch:i8@dot", "usearch:exact:b1"])
def test_a_usearch_index_round_trips_through_the_manifest_and_the_service(factory, tiny, tiny_checkpoints, tmp_path):
    encoder, dataset = tiny
    folder = tmp_path / "served" / folder_name("baseline", "center", factory=factory)
    build_dense(encoder, dataset, folder, "center", parse_index_type(factory), progress=False)
    manifest = read_manifest(folder)
    kind = parse_index_type(factory)
    assert (manifest.index_factory, manifest.index_metric) == (kind.factory, kind.metric)
    assert manifest.index_params["codec"] == factory.split(":")[-1].split("@")[0]
    assert {"connectivity", "expansion_add", "expansion_search"} <= set(manifest.index_params)  # HNSW as it ships
    index = open_index(folder, Encoders(tiny_checkpoints))
    hits = index.search(["cell protein gene"], 5).hits(0)
    assert len(hits) == 5 and len({h.doc_id for h in hits}) == 5
    with TestClient(create_app(folder.parent, tiny_checkpoints, load_in_background=False)) as client:
        body = client.get("/search", params={"model": folder.name, "q": "cell protein gene", "k": 5}).json()
        listed = {m["name"]: m for m in client.get("/models").json()["models"]}
    assert [h["doc_id"] for h in body["hits"]] == [h.doc_id for h in hits]
    assert listed[folder.name]["index_factory"] == kind.spec


@pytest.mark.parametrize("damage", ["truncate", "flip a byte", "delete the record"])
def test_a_damaged_usearch_file_is_unavailable_and_the_others_serve(damage, tiny, tiny_checkpoints, tmp_path):
    encoder, dataset = tiny
    build_dense(encoder, dataset, tmp_path / "baseline", progress=False)
    damaged = build_dense(
        encoder, dataset, tmp_path / "baseline-usearch", "none", parse_index_type("usearch:f16"), progress=False
    )
    file = damaged / INDEX_FILE
    data = bytearray(file.read_bytes())
    if damage == "truncate":
        file.write_bytes(data[:100])
    elif damage == "flip a byte":
        data[len(data) // 2] ^= 0xFF  # inside the graph or the codes: USearch would read it as it is
        file.write_bytes(data)
    else:
        (damaged / FILE_RECORD).unlink()
    with TestClient(create_app(tmp_path, tiny_checkpoints, load_in_background=False)) as client:
        models = {m["name"]: m for m in client.get("/models").json()["models"]}
        assert not models["baseline-usearch"]["available"]
        assert {"truncate": "written as", "flip a byte": "SHA-256", "delete the record": FILE_RECORD}[damage] in (
            models["baseline-usearch"]["reason"]
        )
        assert client.get("/search", params={"model": "baseline", "q": "cell"}).status_code == 200


def test_a_streamed_usearch_index_ranks_as_the_in_memory_one(tiny_beir, tiny_checkpoints, tmp_path):
    argv = ["index", "--model", "baseline", "--dataset", "tiny", "--data-dir", str(tiny_beir), "--no-progress"]
    argv += ["--checkpoints", str(tiny_checkpoints), "--store", "usearch", "--metric", "l2"]
    assert main([*argv, "--out", str(tmp_path / "memory")]) == 0
    assert main([*argv, "--out", str(tmp_path / "stream"), "--stream", "--shard-size", "12"]) == 0
    name = "baseline-usearch_exact_f32_l2"
    memory, streamed = (
        open_index(tmp_path / where / name, Encoders(tiny_checkpoints)) for where in ("memory", "stream")
    )
    assert streamed.manifest.fit_sample == 40 and streamed.spec.factory == "usearch:exact:f32@l2"
    queries = ["cell protein gene", "market stock rose"]
    runs = memory.search(queries, 5).run(queries), streamed.search(queries, 5).run(queries)
    for a, b in zip(runs[0].values(), runs[1].values(), strict=True):
        assert list(a) == list(b) and list(a.values()) == pytest.approx(list(b.values()), abs=1e-5)


def test_the_eval_gives_every_codec_a_row_against_faiss_flat(shared_tiny_beir, tiny_checkpoints, tmp_path):
    argv = ["eval", "--models", "baseline", "--dataset", "tiny", "--data-dir", str(shared_tiny_beir), "--no-sts"]
    argv += ["--checkpoints", str(tiny_checkpoints), "--out", str(tmp_path), "--no-progress", "--store", "usearch"]
    assert main(argv) == 0
    rows = {r["factory"]: r for r in json.loads((tmp_path / "report.json").read_text())["results"]}
    assert len(rows) == 1 + 2 * len(CODECS) and all(r["available"] for r in rows.values())
    exact = rows["usearch:exact:f32@cosine"]["metrics"]
    assert exact["recall_at_10_vs_flat"] == pytest.approx(1.0)
    assert rows["usearch:exact:b1"]["metrics"]["bytes_per_vector"] < exact["bytes_per_vector"]
