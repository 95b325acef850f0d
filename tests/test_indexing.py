from __future__ import annotations

import json
import shutil
from pathlib import Path

import faiss
import numpy as np
import pytest

from cone.cli import main
from cone.data.loaders import load_beir, load_sts
from cone.encoders.registry import Encoders, load_encoder, missing
from cone.encoders.roberta import ROBERTA_PATH_ENV, roberta
from cone.errors import ConeError, DamagedIndex, InputError, ModelUnavailable
from cone.indexing import postprocess as pp
from cone.indexing import store
from cone.indexing.dense import DenseIndex, build_dense
from cone.indexing.factory import build_codes
from cone.indexing.lexical import BM25Index, build_bm25
from cone.indexing.manifest import manifest_from_dict, read_manifest
from cone.indexing.open import open_index
from cone.indexing.spec import parse_index_type

from tiny import folder_name


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CONE_CACHE_DIR", str(tmp_path / "cache"))


def test_beir_loader_reads_plain_dicts(tiny_beir):
    ds = load_beir(tiny_beir, "tiny")
    assert len(ds.corpus) == 40 and ds.corpus["d3"]["title"] == "doc 3"
    assert ds.qrels["q2"] == {"d2": 1} and len(ds.queries) == 10


def test_malformed_lines_name_file_and_line(tiny_beir, tmp_path):
    corpus = tiny_beir / "tiny" / "corpus.jsonl"
    corpus.write_text(corpus.read_text() + "{not json\n")
    with pytest.raises(ConeError, match=r"corpus.jsonl:41"):
        load_beir(tiny_beir, "tiny")
    sts = tmp_path / "sts.csv"
    sts.write_text("sentence1,sentence2,score\na,b,1.0\nc,d,high\n")
    with pytest.raises(ConeError, match=r"sts.csv:3"):
        load_sts(sts)


@pytest.mark.parametrize("spec", ["center", "whiten", "abtt:2"])
def test_postprocess_on_queries_equals_the_corpus_fit(spec):
    rng = np.random.default_rng(0)
    corpus = rng.standard_normal((500, 8)) @ rng.standard_normal((8, 8)) + 3.0
    params = pp.fit(corpus, spec)
    out = pp.apply(corpus, params)
    assert np.allclose(out.mean(0), 0, atol=1e-4)
    query = corpus[:5]
    assert np.allclose(pp.apply(query, params), out[:5], atol=1e-5)
    if spec == "whiten":
        assert np.allclose(np.cov(out, rowvar=False, bias=True), np.eye(8), atol=1e-3)
    if spec == "abtt:2":
        assert np.allclose(out @ params["directions"], 0, atol=1e-4)


def test_bad_postprocess_is_refused():
    for bad in ("whitening", "abtt:0", "abtt:x"):
        with pytest.raises(ConeError):
            pp.parse(bad)


def test_tiny_roberta_end_to_end(tiny_beir, tiny_roberta_dir, tmp_path, monkeypatch):
    monkeypatch.setenv(ROBERTA_PATH_ENV, str(tiny_roberta_dir))
    enc = load_encoder("roberta")
    assert enc.name == "roberta" and enc.dim == 32
    ds = load_beir(tiny_beir, "tiny")
    folder = build_dense(enc, ds, tmp_path / "idx" / "roberta", progress=False)
    manifest = read_manifest(folder)
    assert manifest.model == "roberta" and manifest.n_docs == 40 and manifest.dim == 32
    index = open_index(folder)
    scores = index.search(["the cell protein"], 5).scores
    assert scores.shape == (1, 5) and np.all(scores <= 1.0001) and np.all(np.diff(scores[0]) <= 1e-6)
    # A random RoBERTa is a cone: raw cosines tie near 1. Centered, a document's own text finds it first.
    centered = open_index(build_dense(enc, ds, tmp_path / "idx" / "roberta-center", "center", progress=False))
    text = f"{ds.corpus['d7']['title']} {ds.corpus['d7']['text']}"
    assert centered.search([text], 1).hits(0)[0].doc_id == "d7"


def test_roberta_absent_is_unavailable_with_reason_and_fix(monkeypatch, tmp_path):
    monkeypatch.setenv(ROBERTA_PATH_ENV, str(tmp_path / "no-such-model"))
    with pytest.raises(ModelUnavailable) as exc:
        roberta()
    assert exc.value.reason and "huggingface-cli download" in exc.value.fix


def test_missing_weights_are_told_from_the_files_alone(tiny_roberta_dir, tiny_checkpoints, tmp_path, monkeypatch):
    monkeypatch.setattr("cone.encoders.registry.load_encoder", lambda *a, **k: pytest.fail("missing() loaded a model"))
    monkeypatch.setenv(ROBERTA_PATH_ENV, str(tmp_path / "no-such-model"))
    assert "no config.json" in missing("roberta").reason
    monkeypatch.setenv(ROBERTA_PATH_ENV, str(tiny_roberta_dir))
    assert missing("roberta") is None and missing("minilm") is None and missing("bm25") is None
    assert missing("baseline", tiny_checkpoints) is None
    absent = missing("baseline", tmp_path)
    assert "no checkpoint" in absent.reason and absent.fix.endswith("--reg-cos 0")


def test_cli_skips_unavailable_model(tiny_beir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(ROBERTA_PATH_ENV, str(tmp_path / "missing"))
    code = main(
        [
            "index",
            "--model",
            "roberta",
            "--dataset",
            "tiny",
            "--data-dir",
            str(tiny_beir),
            "--out",
            str(tmp_path / "idx"),
            "--no-progress",
        ]
    )
    assert code == 3
    assert "unavailable" in capsys.readouterr().err
    assert not (tmp_path / "idx" / "roberta").exists()


def test_manifest_mismatch_is_refused(tiny_beir, tiny_roberta_dir, tmp_path, monkeypatch):
    monkeypatch.setenv(ROBERTA_PATH_ENV, str(tiny_roberta_dir))
    enc = load_encoder("roberta")
    folder = build_dense(enc, load_beir(tiny_beir, "tiny"), tmp_path / "idx" / "roberta", progress=False)
    with pytest.raises(ConeError, match="built for model"):
        open_index(folder, model="minilm")
    with pytest.raises(ConeError, match="another corpus"):
        open_index(folder, corpus_fingerprint="0" * 16)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["dim"] = 64
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ConeError, match="dimension"):
        DenseIndex(folder, enc)


def test_failed_build_leaves_previous_index_loadable(tiny_beir, tmp_path, monkeypatch):
    ds = load_beir(tiny_beir, "tiny")
    folder = build_bm25(ds, tmp_path / "idx" / "bm25", progress=False)
    before = (folder / "manifest.json").read_text()

    def crash(*args, **kwargs):
        raise KeyboardInterrupt  # as if killed while writing the documents

    monkeypatch.setattr(store, "write_docs", crash)
    with pytest.raises(KeyboardInterrupt):
        build_bm25(ds, folder, progress=False)
    assert (folder / "manifest.json").read_text() == before
    assert len(BM25Index(folder).docs) == 40
    assert [p.name for p in (tmp_path / "idx").iterdir()] == ["bm25"]


def test_bm25_finds_its_document(tiny_beir, tmp_path):
    ds = load_beir(tiny_beir, "tiny")
    index = BM25Index(build_bm25(ds, tmp_path / "idx" / "bm25", progress=False))
    found = index.search([ds.corpus["d5"]["text"], "zzzz"], 3)
    assert found.hits(0)[0].doc_id == "d5" and found.scores[0, 0] > found.scores[0, 1]
    assert not found.scores[1].any()  # a term no document has: every score is 0, no document is preferred


def test_embeddings_are_cached_across_postprocessings(tiny_beir, tiny_roberta_dir, tmp_path, monkeypatch):
    monkeypatch.setenv(ROBERTA_PATH_ENV, str(tiny_roberta_dir))
    enc = load_encoder("roberta")
    calls = []
    real = enc.encode
    monkeypatch.setattr(enc, "encode", lambda texts, **kw: calls.append(len(texts)) or real(texts, **kw))
    ds = load_beir(tiny_beir, "tiny")
    for spec in ("none", "center", "whiten"):
        build_dense(enc, ds, tmp_path / "idx" / folder_name("roberta", spec), spec, progress=False)
    assert calls == [40]


def test_fetch_without_network_is_one_clear_error(tmp_path, capsys, monkeypatch):
    import cone.data.fetch as fetch

    monkeypatch.setitem(fetch.SOURCES, "stsb", "http://127.0.0.1:9/stsbenchmark.tsv.gz")
    assert main(["data", "fetch", "stsb", "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cone: error: cannot download") and err.count("\n") == 1


def test_stsb_install_converts_to_csv(tmp_path):
    import gzip

    import cone.data.fetch as fetch

    tsv = "split\tgenre\tdataset\tyear\tsid\tscore\tsentence1\tsentence2\ntest\tx\ty\t2012\t1\t2.5\tA b.\tC d.\n"
    fetch.install_stsb(gzip.compress(tsv.encode()), tmp_path)
    pairs = load_sts(tmp_path / "stsb" / "test.csv")
    assert pairs.scores == [2.5] and pairs.sentence1 == ["A b."]


def test_bm25_query_of_stopwords_only_scores_zero(tiny_beir, tmp_path):
    index = BM25Index(build_bm25(load_beir(tiny_beir, "tiny"), tmp_path / "bm25", progress=False))
    scores = index.search(["the and of", "0"], 3).scores
    assert scores.shape == (2, 3) and not scores.any()


def test_approximate_index_keeps_its_search_params(tiny_beir, tmp_path, capsys):
    argv = ["index", "--model", "baseline", "--dataset", "tiny", "--data-dir", str(tiny_beir), "--out", str(tmp_path)]
    assert main([*argv, "--index-factory", "IVF2,Flat", "--search-params", "nprobe=2", "--no-progress"]) == 0
    index = open_index(tmp_path / "baseline-IVF2_Flat")
    assert index.manifest.search_params == "nprobe=2" and index.faiss_index.nprobe == 2
    assert main([*argv, "--index-factory", "IVF2,Flat", "--search-params", "nonsense=1", "--no-progress"]) == 2
    assert "invalid --search-params" in capsys.readouterr().err


@pytest.fixture()
def dense_manifest(tiny_beir, tiny_checkpoints, tmp_path) -> dict:
    enc = load_encoder("baseline", tiny_checkpoints)
    folder = build_dense(enc, load_beir(tiny_beir, "tiny"), tmp_path / "idx" / "baseline", progress=False)
    return json.loads((folder / "manifest.json").read_text())


def _damaged(manifest: dict, key: str, value: object) -> dict:
    damaged = json.loads(json.dumps(manifest))
    *path, last = key.split(".")
    holder = damaged
    for part in path:
        holder = holder[part]
    if value is KeyError:
        del holder[last]
    else:
        holder[last] = value
    return damaged


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("encoder_fingerprint", KeyError, "lacks 'encoder_fingerprint'"),
        ("metric", KeyError, "lacks 'metric'"),
        ("geometry_raw", KeyError, "lacks 'geometry_raw'"),
        ("kind", "sparse", "not one of dense, bm25"),
        ("kind", KeyError, "lacks 'kind'"),
        ("n_docs", True, "'n_docs' is true: Input should be a valid integer"),
        ("n_docs", -1, "'n_docs' is -1: Input should be greater than 0"),
        ("dim", "x", "'dim' is 'x': Input should be a valid integer"),
        ("geometry.anisotropy", "high", "'geometry.anisotropy' is 'high': Input should be a valid number"),
        ("geometry.anisotropy", float("nan"), "'geometry.anisotropy' is NaN: Input should be a finite number"),
        ("geometry.n", 5.5, "'geometry.n' is 5.5: Input should be a valid integer"),
        ("random_pair_cosines.histogram.counts", [1, 2], "edges one longer than counts"),
        ("random_pair_cosines.mean", None, "'random_pair_cosines.mean' is null"),
        ("random_pair_cosines.n_pairs", 3.5, "'random_pair_cosines.n_pairs' is 3.5: Input should be a valid integer"),
        ("random_pair_cosines.name", "x", "'random_pair_cosines.name' is 'x': Extra inputs are not permitted"),
        ("random_pair_cosines.histogram.name", "x", "'random_pair_cosines.histogram.name' is 'x': Extra inputs"),
        ("n_docs", 0, "'n_docs' is 0"),
        ("layer", -2, "'layer' is -2: not last, emb or a layer number"),
        ("postprocess", "whitening", "unknown --postprocess"),
        ("quantize", "int3", "'quantize' is 'int3': unknown quantization"),
        ("format", 2, "manifest format 2 is not the 1 this cone"),
    ],
)
def test_a_damaged_manifest_is_one_clear_error_naming_the_key(dense_manifest, tmp_path, key, value, message):
    with pytest.raises(DamagedIndex, match=message):
        manifest_from_dict(_damaged(dense_manifest, key, value), tmp_path / "manifest.json")


def test_a_whole_manifest_reads_back_as_it_was_written(dense_manifest, tmp_path):
    manifest = manifest_from_dict(dense_manifest, tmp_path / "manifest.json")
    assert manifest.to_dict() == dense_manifest and manifest.kind == "dense" and manifest.dim == 32


def test_search_accepts_the_encoders_raw_vectors_as_well_as_texts(tiny_beir, tiny_checkpoints, tmp_path):
    enc = load_encoder("baseline", tiny_checkpoints)
    ds = load_beir(tiny_beir, "tiny")
    index = open_index(build_dense(enc, ds, tmp_path / "b", "whiten", progress=False), Encoders(tiny_checkpoints))
    texts = [ds.queries["q1"], ds.queries["q4"]]
    by_text, by_vector = index.search(texts, 5), index.search(enc.encode(texts), 5)
    assert np.array_equal(by_text.rows, by_vector.rows) and np.allclose(by_text.scores, by_vector.scores)
    assert by_text.run(["q1", "q4"]) == {
        q: {h.doc_id: h.score for h in by_text.hits(i)} for i, q in enumerate(["q1", "q4"])
    }
    assert [h.doc_id for h in by_text.hits(0)] == [index.docs.ids[r] for r in by_text.rows[0]]
    with pytest.raises(InputError, match="shape"):
        index.search(np.zeros((1, 7), dtype=np.float32), 3)
    bm25 = BM25Index(build_bm25(ds, tmp_path / "bm25", progress=False))
    with pytest.raises(InputError, match="texts, not vectors"):
        bm25.search(enc.encode(texts), 3)


def test_any_beir_folder_can_be_named_by_its_path(tiny_beir, tmp_path, capsys):
    moved = tmp_path / "elsewhere" / "mine"
    moved.parent.mkdir()
    (tiny_beir / "tiny").rename(moved)
    ds = load_beir(tmp_path / "unused", str(moved))
    assert ds.name == "mine" and len(ds.corpus) == 40
    assert (
        main(["index", "--model", "bm25", "--dataset", str(moved), "--out", str(tmp_path / "idx"), "--no-progress"])
        == 0
    )
    assert read_manifest(tmp_path / "idx" / "bm25").dataset == "mine"


@pytest.mark.parametrize("factory", ["PQ4", "IVF2,PQ4", "OPQ4,PQ4"])
def test_pq_skips_polysemous_training_only_where_no_search_reads_it(factory):
    vectors = np.random.default_rng(0).standard_normal((600, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    skipped, kept = (
        build_codes(vectors, parse_index_type(factory)).index,
        build_codes(vectors, parse_index_type(factory), "ht=64").index,
    )
    pq = [faiss.downcast_index(i) for i in (skipped, kept)]
    pq = [faiss.downcast_index(i.index) if isinstance(i, faiss.IndexPreTransform) else i for i in pq]
    assert [i.do_polysemous_training for i in pq] == [False, True]
    # Polysemous training only renumbers centroids: the PQ search's scores and ranks are the same.
    faiss.ParameterSpace().set_index_parameters(kept, "ht=2048")  # a Hamming filter that lets every code through
    (scores, rows), (kept_scores, kept_rows) = skipped.search(vectors[:20], 5), kept.search(vectors[:20], 5)
    np.testing.assert_allclose(scores, kept_scores, rtol=1e-5)
    assert (rows == kept_rows).mean() > 0.95  # ties may order differently


def test_the_shipped_minilm_loads_without_transformers_load_noise(capfd):
    from transformers.utils import logging as hf_logging

    from cone.encoders.minilm import minilm

    before = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    assert minilm().encode(["a protein"]).shape == (1, 384)
    err = capfd.readouterr().err
    assert "LOAD REPORT" not in err and "Loading weights" not in err
    assert (hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()) == before  # restored after


# Index folders written by cone 0.1.0 before manifests were typed (tests/fixtures/index-0.1.0, 30 made-up
# documents, the shipped baseline checkpoint), with the top 3 that code answered for "cell protein expression".
OLD_FOLDERS = Path(__file__).parent / "fixtures" / "index-0.1.0"
OLD_ANSWERS = {
    "baseline": [("d12", 0.63276), ("d3", 0.60729), ("d10", 0.59188)],
    "bm25": [("d19", 0.87269), ("d12", 0.77473), ("d23", 0.65313)],
}


@pytest.mark.parametrize("name", sorted(OLD_ANSWERS))
def test_folders_written_before_typed_manifests_still_load_and_answer_the_same(name, tmp_path):
    folder = shutil.copytree(OLD_FOLDERS / name, tmp_path / name)
    written = json.loads((folder / "manifest.json").read_text())
    index = open_index(folder)
    assert index.manifest.to_dict() == written  # every key kept; geometry's n and d (5183.0) now counts
    if name == "baseline":
        assert written["geometry"]["n"] == 30.0 and index.manifest.geometry.n == 30
    hits = index.search(["cell protein expression"], 3).hits(0)
    assert [(h.doc_id, round(h.score, 5)) for h in hits] == OLD_ANSWERS[name]
