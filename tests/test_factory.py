"""Index types: FAISS factory strings and 1-bit codes, checked before FAISS sees them, built, written, served."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fastapi.testclient import TestClient

from cone.cli import main
from cone.data.loaders import load_beir
from cone.encoders.registry import Encoders, load_encoder
from cone.errors import InputError
from cone.indexing.dense import build_dense
from cone.indexing.factory import (
    BINARY_FILE,
    RESCORE_FILE,
    build_codes,
    parse_search_params,
    sign_codes,
)
from cone.indexing.manifest import read_manifest
from cone.indexing.open import open_index
from cone.indexing.spec import parse_index_type
from cone.service.app import create_app

from tiny import folder_name, unit_rows


@pytest.mark.parametrize(
    ("factory", "named"),
    [
        ("IVF0,Flat", "'IVF0' has a count of 0"),
        ("PCA0,Flat", "'PCA0' has a count of 0"),
        ("SQ0", "'SQ0' has a count of 0"),
        ("SQ5", "scalar quantizers have 4, 6, 8 bits"),
        ("HNSW0", "'HNSW0' has a count of 0"),
        ("HNSW1", "HNSW needs a degree of at least 2"),
        ("NSG0,Flat", "'NSG0' has a count of 0"),
        ("NSG4,Flat", "NSG needs a degree of at least 8"),
        ("BIN+rescore:0", "rescoring depth R must be at least 1"),
        ("IVF4,BIN", "1-bit codes are BIN or BIN.rescore:R, alone"),
        ("", "empty"),
    ],
)
def test_factories_faiss_would_crash_hang_or_misbuild_on_are_refused_naming_the_part(factory, named):
    with pytest.raises(InputError, match=named):
        parse_index_type(factory)


@pytest.mark.parametrize("params", ["nprobe=0", "nprobe=-1", "efSearch=0", "qb=9", "qb=0", "nprobe", "=3"])
def test_search_params_that_break_searches_are_refused(params):
    with pytest.raises(InputError, match="invalid --search-params"):
        parse_search_params(params)


def test_an_ivf_with_more_lists_than_vectors_is_refused_with_the_numbers():
    with pytest.raises(InputError, match="64 inverted lists but only 40 vectors"):
        build_codes(unit_rows(40, 16), parse_index_type("IVF64,Flat"))


def test_qb_applies_to_rabitq_only_and_is_kept():
    vectors = unit_rows(300, 32)
    assert build_codes(vectors, parse_index_type("RaBitQ"), "qb=4").index.qb == 4
    assert build_codes(vectors, parse_index_type("IVF4,RaBitQ"), "nprobe=4,qb=8").index.qb == 8
    with pytest.raises(InputError, match="qb applies to RaBitQ indexes only"):
        build_codes(vectors, parse_index_type("Flat"), "qb=4")


def test_sign_codes_are_sentence_transformers_ubinary():
    vectors = unit_rows(5, 20)
    assert np.array_equal(sign_codes(vectors), np.packbits(vectors > 0, axis=1))


def test_bin_scores_sign_agreement_and_full_depth_rescoring_is_exact():
    vectors, queries = unit_rows(200, 64), unit_rows(7, 64, seed=1)
    flat_scores, flat_rows = build_codes(vectors, parse_index_type("Flat")).search(queries, 10)
    scores, rows = build_codes(vectors, parse_index_type("BIN")).search(queries, 10)
    agree = (np.packbits(queries > 0, 1)[:, None, :] ^ np.packbits(vectors[rows] > 0, 2)).astype(np.uint8)
    hamming = np.unpackbits(agree, axis=2).sum(axis=2)
    np.testing.assert_allclose(scores, 1 - 2 * hamming / 64, atol=1e-6)
    assert (np.diff(scores, axis=1) <= 0).all()
    rescored, rescored_rows = build_codes(vectors, parse_index_type("BIN+rescore:200")).search(queries, 10)
    assert np.array_equal(rescored_rows, flat_rows)
    np.testing.assert_allclose(rescored, flat_scores, atol=1e-5)


def test_a_shared_offset_makes_sign_codes_constant_and_centering_gives_them_back():
    """What the binary rows of the eval measure: a cone sets every sign bit of the offset's direction alike."""
    healthy = unit_rows(500, 64)
    cone = unit_rows(500, 64, offset=3.0)
    constant_bits = [(sign_codes(x) == sign_codes(x)[0]).mean() for x in (healthy, cone, cone - cone.mean(0))]
    assert constant_bits[1] > 0.95 > 0.6 > constant_bits[0] and constant_bits[2] < 0.6


@pytest.mark.parametrize("factory", ["BIN", "BIN+rescore:8", "RaBitQ", "IVF2,RaBitQ"])
def test_new_index_types_round_trip_through_the_manifest_and_the_service(
    factory, shared_tiny_beir, tiny_checkpoints, tmp_path
):
    encoder = load_encoder("baseline", tiny_checkpoints)
    dataset = load_beir(shared_tiny_beir, "tiny")
    params = "nprobe=2,qb=4" if factory.startswith("IVF") else ""
    folder = tmp_path / "served" / folder_name("baseline", "center", factory=factory)
    build_dense(encoder, dataset, folder, "center", parse_index_type(factory), progress=False, search_params=params)
    manifest = read_manifest(folder)
    assert (manifest.index_factory, manifest.search_params, manifest.postprocess) == (factory, params, "center")
    index = open_index(folder, Encoders(tiny_checkpoints))
    hits = index.search(["cell protein gene"], 5).hits(0)
    assert len(hits) == 5 and len({h.doc_id for h in hits}) == 5
    assert (factory == "BIN+rescore:8") == (RESCORE_FILE in {p.name for p in folder.iterdir()})
    with TestClient(create_app(folder.parent, tiny_checkpoints, load_in_background=False)) as client:
        body = client.get("/search", params={"model": folder.name, "q": "cell protein gene", "k": 5}).json()
    assert [h["doc_id"] for h in body["hits"]] == [h.doc_id for h in hits]


@pytest.mark.parametrize(("factory", "damage"), [("BIN", BINARY_FILE), ("BIN+rescore:8", RESCORE_FILE)])
def test_a_damaged_binary_index_is_unavailable_and_the_others_serve(
    factory, damage, shared_tiny_beir, tiny_checkpoints, tmp_path
):
    encoder = load_encoder("baseline", tiny_checkpoints)
    dataset = load_beir(shared_tiny_beir, "tiny")
    build_dense(encoder, dataset, tmp_path / "baseline", progress=False)
    damaged = build_dense(
        encoder, dataset, tmp_path / "baseline-bin", "none", parse_index_type(factory), progress=False
    )
    (damaged / damage).write_bytes((damaged / damage).read_bytes()[:50])
    with TestClient(create_app(tmp_path, tiny_checkpoints, load_in_background=False)) as client:
        models = {m["name"]: m for m in client.get("/models").json()["models"]}
        assert not models["baseline-bin"]["available"] and "corrupt index files" in models["baseline-bin"]["reason"]
        assert client.get("/search", params={"model": "baseline", "q": "cell"}).status_code == 200
        assert client.get("/healthz").status_code == 200


def test_another_factory_never_replaces_an_index_and_the_eval_reuses_only_a_matching_one(
    tiny_beir, tiny_checkpoints, tmp_path, capsys
):
    argv = ["index", "--model", "baseline", "--dataset", "tiny", "--data-dir", str(tiny_beir)]
    argv += ["--checkpoints", str(tiny_checkpoints), "--out", str(tmp_path / "ow"), "--no-progress"]
    assert main(argv) == 0 and main([*argv, "--index-factory", "HNSW32"]) == 0
    assert sorted(p.name for p in (tmp_path / "ow").iterdir()) == ["baseline", "baseline-HNSW32"]
    assert read_manifest(tmp_path / "ow" / "baseline").index_factory == "Flat"
    # A folder under the Flat row's name that holds something else is rebuilt, not reported as Flat.
    (tmp_path / "ow" / "baseline").rename(tmp_path / "flat-elsewhere")
    (tmp_path / "ow" / "baseline-HNSW32").rename(tmp_path / "ow" / "baseline")
    eval_argv = ["eval", "--models", "baseline", "--dataset", "tiny", "--data-dir", str(tiny_beir), "--no-sts"]
    eval_argv += ["--checkpoints", str(tiny_checkpoints), "--indexes", str(tmp_path / "ow")]
    assert main([*eval_argv, "--out", str(tmp_path / "eval"), "--no-progress"]) == 0
    assert read_manifest(tmp_path / "ow" / "baseline").index_factory == "Flat"
    report = json.loads((tmp_path / "eval" / "report.json").read_text())
    assert report["results"][0]["index"] == "baseline" and report["results"][0]["factory"] == "Flat"


def test_bad_factories_and_params_exit_2_before_any_index_is_written(tiny_beir, tiny_checkpoints, tmp_path, capsys):
    argv = ["index", "--model", "baseline", "--dataset", "tiny", "--data-dir", str(tiny_beir)]
    argv += ["--checkpoints", str(tiny_checkpoints), "--out", str(tmp_path / "idx"), "--no-progress"]
    refused_by_the_parser = (
        ["--index-factory", "IVF0,Flat"],
        ["--index-factory", "HNSW1"],
        ["--index-factory", "SQ0"],
        ["--index-factory", "IVF4,Flat", "--search-params", "nprobe=0"],
        ["--index-factory", "HNSW8", "--search-params", "efSearch=0"],
    )
    for bad in refused_by_the_parser:
        with pytest.raises(SystemExit) as exited:
            main([*argv, *bad])
        assert exited.value.code == 2
    assert main([*argv, "--index-factory", "IVF64,Flat"]) == 2  # known once the corpus is: 40 documents
    assert not (tmp_path / "idx").exists() or not any((tmp_path / "idx").iterdir())
    err = capsys.readouterr().err
    assert "nprobe must be a whole number > 0" in err and "efSearch must be a whole number > 0" in err
    assert "64 inverted lists but only 40 vectors" in err


def test_eval_refuses_bad_search_params_before_any_work(tiny_beir, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["eval", "--models", "baseline", "--dataset", "tiny", "--data-dir", str(tiny_beir), "--out", str(out)]
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--index-factory", "Flat,IVF4,Flat", "--search-params", "nprobe=-1"])
    assert exited.value.code == 2 and "nprobe must be a whole number > 0, not '-1'" in capsys.readouterr().err
    assert not out.exists()


def test_a_bin_index_takes_no_search_params():
    with pytest.raises(InputError, match="a BIN index has no search parameters"):
        build_codes(unit_rows(50, 16), parse_index_type("BIN+rescore:8"), "nprobe=2")
