"""Streamed dense builds: the corpus a shard at a time, FAISS fitted on a sample, inverted lists and the document
table on disk; the same answers as the in-memory build, and a service that answers over them."""

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient

from cone.cli import main
from cone.data.loaders import load_beir
from cone.encoders.registry import Encoders, load_encoder
from cone.errors import DamagedIndex, InputError
from cone.indexing import store, streaming
from cone.indexing.dense import build_dense
from cone.indexing.factory import IVF_DATA
from cone.indexing.manifest import MANIFEST
from cone.indexing.open import open_index
from cone.indexing.spec import parse_index_type
from cone.indexing.streaming import StreamOptions, build_dense_streaming
from cone.service.app import create_app

EXHAUSTIVE = "nprobe=4"  # every list of IVF4 probed: exact search, comparable with Flat


def streamed(encoder, beir, out, shard_size=7, sample_size=1000, postprocess="none"):
    options = StreamOptions(shard_size=shard_size, sample_size=sample_size)
    folder = beir / "tiny"
    return build_dense_streaming(
        encoder, folder, out, parse_index_type("IVF4,Flat"), postprocess, EXHAUSTIVE, options, progress=False
    )


def ranked(index, queries, k=10):
    found = index.search(queries, k)
    return [[(h.doc_id, round(h.score, 5)) for h in found.hits(i)] for i in range(len(queries))]


QUERIES = ["cell protein expression", "gene therapy", "doc 3"]


@pytest.mark.parametrize("postprocess", ["none", "center"])
def test_a_streamed_index_answers_as_the_in_memory_one(shared_tiny_beir, tiny_checkpoints, tmp_path, postprocess):
    encoder = load_encoder("baseline", tiny_checkpoints)
    whole = build_dense(encoder, load_beir(shared_tiny_beir, "tiny"), tmp_path / "whole", postprocess, progress=False)
    stream = streamed(encoder, shared_tiny_beir, tmp_path / "stream", postprocess=postprocess)
    a, b = open_index(whole, Encoders(tiny_checkpoints)), open_index(stream, Encoders(tiny_checkpoints))
    assert ranked(a, QUERIES) == ranked(b, QUERIES)
    assert (stream / IVF_DATA).is_file() and not (stream / "shards").exists()
    manifest = b.manifest
    assert manifest.n_docs == 40 and manifest.fit_sample == 40 and manifest.index_factory == "IVF4,Flat"
    # the sample is every row here, in another order: only uniformity (over random pairs) may move
    order_free = {k: v for k, v in a.manifest.geometry.model_dump().items() if not k.startswith("uniformity")}
    assert {k: getattr(manifest.geometry, k) for k in order_free} == pytest.approx(order_free, rel=1e-4, abs=1e-6)
    assert [b.docs[r]["id"] for r in range(3)] == ["d0", "d1", "d2"]  # the file's order, not sorted ids
    assert manifest.corpus_fingerprint == a.manifest.corpus_fingerprint  # the same documents, whatever the order


def test_shards_and_the_sample_bound_what_a_build_holds(shared_tiny_beir, tiny_checkpoints, tmp_path, monkeypatch):
    encoder = load_encoder("baseline", tiny_checkpoints)
    one = open_index(streamed(encoder, shared_tiny_beir, tmp_path / "one", shard_size=1000), Encoders(tiny_checkpoints))
    seen, fitted = [], []
    encode = encoder.encode
    monkeypatch.setattr(encoder, "encode", lambda texts, **kw: seen.append(len(texts)) or encode(texts, **kw))
    correct = streaming.correct_vectors
    monkeypatch.setattr(streaming, "correct_vectors", lambda raw, spec: fitted.append(len(raw)) or correct(raw, spec))
    many = open_index(
        streamed(encoder, shared_tiny_beir, tmp_path / "many", shard_size=7, sample_size=16), Encoders(tiny_checkpoints)
    )
    assert seen == [7, 7, 7, 7, 7, 5] and fitted == [16] and many.manifest.fit_sample == 16
    assert ranked(one, QUERIES) == ranked(many, QUERIES)  # exhaustive probing: the sample only moves centroids


def test_a_streamed_build_needs_an_ivf_factory_and_says_so_before_encoding(shared_tiny_beir, tmp_path, capsys):
    argv = ["index", "--model", "baseline", "--data-dir", str(shared_tiny_beir), "--dataset", "tiny"]
    assert main([*argv, "--out", str(tmp_path), "--stream", "--index-factory", "HNSW32", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("cone: error: --stream needs a plain IVF factory") and "\n" not in err
    for kept_beside_the_lists in ("IDMap,IVF4,Flat", "IVF4,Flat,RFlat", "IVF4,PQ4x4fs"):
        assert main([*argv, "--out", str(tmp_path), "--stream", "--index-factory", kept_beside_the_lists]) == 2
        assert "needs a plain IVF factory" in capsys.readouterr().err
    with pytest.raises(SystemExit) as refused:  # FAISS's parser refuses it with the command line (argparse's exit)
        main([*argv, "--out", str(tmp_path), "--stream", "--index-factory", "IVF4,Nope", "--no-progress"])
    assert refused.value.code == 2 and "invalid --index-factory 'IVF4,Nope'" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # nothing written, not even a temporary folder


def test_a_failed_streamed_build_keeps_the_previous_index(shared_tiny_beir, tiny_checkpoints, tmp_path, monkeypatch):
    encoder = load_encoder("baseline", tiny_checkpoints)
    out = streamed(encoder, shared_tiny_beir, tmp_path / "idx")
    before = (out / MANIFEST).read_text()
    calls, encode = [], encoder.encode

    def failing(texts, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise InputError("encoder failed on shard 3")
        return encode(texts, **kw)

    monkeypatch.setattr(encoder, "encode", failing)
    with pytest.raises(InputError, match="shard 3"):
        streamed(encoder, shared_tiny_beir, out)
    assert (out / MANIFEST).read_text() == before and [p.name for p in tmp_path.iterdir()] == ["idx"]


def test_the_document_table_is_read_from_disk_and_checked(shared_tiny_beir, tiny_checkpoints, tmp_path):
    out = streamed(load_encoder("baseline", tiny_checkpoints), shared_tiny_beir, tmp_path / "idx")
    table = store.read_docs(out, 40)
    # Read, not mapped: the offsets file truncated under the table (a mapped one would be a SIGBUS) changes nothing.
    offsets = (out / store.OFFSETS).read_bytes()
    (out / store.OFFSETS).write_bytes(b"")
    assert len(table) == 40 and table.doc_id(39) == "d39" and table.doc_id(0) == "d0"
    (out / store.OFFSETS).write_bytes(offsets)
    lines = (out / store.DOCS).read_bytes().splitlines(keepends=True)
    (out / store.DOCS).write_bytes(
        b"".join(lines[:20]) + b'{"id": 5}\n'.ljust(len(lines[20]), b" ") + b"".join(lines[21:])
    )
    with pytest.raises(DamagedIndex, match=r"row 20 is corrupt"):
        store.read_docs(out, 40)[20]
    (out / store.DOCS).write_bytes(b"".join(lines[:30]))  # truncated: refused on opening
    with pytest.raises(DamagedIndex, match="manifest says 40"):
        store.read_docs(out, 40)
    (out / store.OFFSETS).unlink()  # an index from before the offsets file: its lines are counted
    assert len(store.read_docs(out, 30)) == 30


def test_threads_read_the_document_table_at_once(shared_tiny_beir, tiny_checkpoints, tmp_path):
    out = streamed(load_encoder("baseline", tiny_checkpoints), shared_tiny_beir, tmp_path / "idx")
    table = store.read_docs(out, 40)
    rows = [r % 40 for r in range(4000)]
    with ThreadPoolExecutor(8) as pool:  # pread has no shared file position to race on
        ids = list(pool.map(table.doc_id, rows))
    assert ids == [f"d{r}" for r in rows]


def test_a_streamed_index_without_its_lists_is_damaged(shared_tiny_beir, tiny_checkpoints, tmp_path):
    out = streamed(load_encoder("baseline", tiny_checkpoints), shared_tiny_beir, tmp_path / "idx")
    (out / IVF_DATA).unlink()
    with pytest.raises(DamagedIndex, match="without its lists"):
        open_index(out, Encoders(tiny_checkpoints))


def test_the_service_answers_over_a_streamed_index(shared_tiny_beir, tiny_checkpoints, tmp_path):
    streamed(load_encoder("baseline", tiny_checkpoints), shared_tiny_beir, tmp_path / "baseline")
    with TestClient(create_app(tmp_path, tiny_checkpoints, load_in_background=False)) as client:
        body = client.get("/search", params={"model": "baseline", "q": "cell protein", "k": 3}).json()
    assert [h["rank"] for h in body["hits"]] == [1, 2, 3] and all(h["doc_id"].startswith("d") for h in body["hits"])


def test_cone_index_stream_from_the_command_line(shared_tiny_beir, tmp_path, tiny_checkpoints, capsys):
    argv = ["index", "--model", "baseline", "--data-dir", str(shared_tiny_beir), "--dataset", "tiny"]
    argv += ["--checkpoints", str(tiny_checkpoints), "--out", str(tmp_path), "--stream", "--shard-size", "9"]
    assert main([*argv, "--index-factory", "IVF4,PQ4x4", "--search-params", "nprobe=2", "--no-progress"]) == 0
    folder = tmp_path / "baseline-IVF4_PQ4x4"
    assert capsys.readouterr().out.strip() == f"index written to {folder}"  # FAISS's printf silenced
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["encoded_on"] == "local" and manifest["search_params"] == "nprobe=2"


@pytest.mark.slow
def test_a_plain_index_imports_neither_ray_nor_lancedb(shared_tiny_beir, tiny_checkpoints, tmp_path):
    """Without --ray nothing of Ray is imported; cone's command line, index opener and service import no lancedb
    (both optional parts). One fresh interpreter checks both: tests/test_lance.py once started a second one, which
    imported cone again (seconds of CPU), for the lancedb half."""
    code = (
        "import sys; from cone.cli import main; import cone.indexing.open, cone.service.app; "
        "print('lancedb' in sys.modules); "
        f"main(['index', '--model', 'baseline', '--data-dir', {str(shared_tiny_beir)!r}, '--dataset', 'tiny', "
        f"'--checkpoints', {str(tiny_checkpoints)!r}, '--out', {str(tmp_path)!r}, '--no-progress']); "
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    lines = done.stdout.strip().splitlines()
    assert lines[0] == "False" and lines[-1] == "[]", lines
