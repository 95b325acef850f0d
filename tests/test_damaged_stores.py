"""Issue 48: damage that no store raised DamagedIndex for. A search that fails for any reason of the index's (not
the request's) is a 409 that marks the index unavailable, never a 500; a reload checks it again. A file damaged
before the service opens it (random bytes of the same size, array data out of range, manifest values the store or
its file contradict) is refused at load with the reason. Every case is a real damaged file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from cone.encoders.registry import load_encoder
from cone.indexing.factory import INDEX_FILE, IVF_DATA
from cone.indexing.faiss_store import FILE_RECORD
from cone.indexing.spec import parse_index_type
from cone.indexing.streaming import StreamOptions, build_dense_streaming
from cone.service.app import ADMIN_KEY_ENV, create_app

from tiny import build_tiny_indexes

BM25_INDICES = Path("bm25") / "indices.csc.index.npy"


@pytest.fixture(scope="module")
def kinds(shared_tiny_beir, tiny_checkpoints, tmp_path_factory) -> dict[str, Path]:
    """baseline (Flat), bm25, a streamed IVF4,Flat (lists on disk), lance:FLAT and usearch:f32, over 40 documents."""
    from cone.data.loaders import load_beir
    from cone.indexing.dense import build_dense

    root = tmp_path_factory.mktemp("kinds")
    build_tiny_indexes(root, shared_tiny_beir, tiny_checkpoints, [("baseline", "none")])
    encoder = load_encoder("baseline", tiny_checkpoints)
    options = StreamOptions(shard_size=7, sample_size=1000)
    kind = parse_index_type("IVF4,Flat")
    build_dense_streaming(encoder, shared_tiny_beir / "tiny", root / "stream", kind, "none", "nprobe=4", options)
    dataset = load_beir(shared_tiny_beir, "tiny")
    for name, factory in (("lance", "lance:FLAT"), ("usearch", "usearch:f32")):
        build_dense(encoder, dataset, root / name, "none", parse_index_type(factory), progress=False)
    return {
        "flat": root / "baseline",
        "bm25": root / "bm25",
        "stream": root / "stream",
        "lance": root / "lance",
        "usearch": root / "usearch",
    }


def randomize(file: Path, keep: int = 0) -> None:
    """Overwrite ``file`` in place with random bytes past its first ``keep``: its size, inode and name stay (a bad
    disk block, not a truncation)."""
    size = file.stat().st_size
    with open(file, "r+b") as out:
        out.seek(keep)
        out.write(np.random.default_rng(7).bytes(size - keep))


def npy_header(file: Path) -> int:
    """The bytes of a .npy file's header (magic, version, header length, the header)."""
    with open(file, "rb") as f:
        np.lib.format.read_magic(f)
        np.lib.format.read_array_header_1_0(f)
        return f.tell()


def edit_manifest(folder: Path, **changes: object) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    for key, value in changes.items():
        if isinstance(value, dict):
            manifest[key] = {**manifest.get(key, {}), **value}
        else:
            manifest[key] = value
    (folder / "manifest.json").write_text(json.dumps(manifest))


def search(client: TestClient, name: str):
    return client.get("/search", params={"model": name, "q": "cell protein", "k": 10})


def test_a_search_that_fails_while_served_is_a_409_and_the_next_reload_checks_the_index_again(
    kinds, tiny_checkpoints, tmp_path, monkeypatch
):
    root = tmp_path / "indexes"
    for name in ("flat", "bm25", "stream"):
        shutil.copytree(kinds[name], root / name)
    lists = root / "stream" / IVF_DATA
    written = lists.read_bytes()
    monkeypatch.setenv(ADMIN_KEY_ENV, "s3cret")
    app = create_app(root, tiny_checkpoints, load_in_background=False)
    with TestClient(app, raise_server_exceptions=False) as client:
        assert search(client, "stream").status_code == 200
        randomize(lists)  # under the mapped lists: ids far past the 40 documents (IndexError in the table)
        for _ in range(2):  # the second request finds the index already marked unavailable
            got = search(client, "stream")
            assert got.status_code == 409 and "stream" in got.json()["detail"], got.text[:300]
        listed = {m["name"]: m for m in client.get("/models").json()["models"]}["stream"]
        assert not listed["available"] and "damaged while served" in listed["reason"], listed
        compared = client.get("/compare", params={"q": "cell protein"})
        assert compared.status_code == 200 and "stream" in {m["name"] for m in compared.json()["unavailable"]}
        for good in ("flat", "bm25"):
            assert search(client, good).status_code == 200, good
        with open(lists, "r+b") as repair:  # in place, as damaged: never shorter than the mapping
            repair.write(written)  # repaired: the next reload opens it again (an unavailable entry is never kept)
        assert client.post("/admin/reload", headers={"X-API-Key": "s3cret"}).json()["available"] == 3
        assert search(client, "stream").status_code == 200


def _damage(case: str, folder: Path) -> None:
    if case == "stream-lists-random":
        randomize(folder / IVF_DATA)
    elif case == "stream-lists-random-unrecorded":  # a folder written before sizes and CRCs were recorded
        randomize(folder / IVF_DATA)
        (folder / FILE_RECORD).unlink()
    elif case == "bm25-indices-random":
        randomize(folder / BM25_INDICES, keep=npy_header(folder / BM25_INDICES))
    elif case == "lance-nprobes-negative":
        edit_manifest(folder, index_params={"nprobes": -5})
    elif case == "flat-body-random":
        randomize(folder / INDEX_FILE, keep=64)  # FAISS's header (type, d, ntotal, metric) read as it was
    elif case == "flat-manifest-says-ivf":
        edit_manifest(folder, index_factory="IVF64,Flat")
    elif case == "lance-manifest-says-ivf-pq":
        edit_manifest(folder, index_factory="lance:IVF_PQ")
    elif case == "usearch-codec-unknown":
        edit_manifest(folder, index_params={"codec": "nope"})
    elif case == "usearch-manifest-says-f16":  # a manifest consistent in itself, not with the f32 file
        edit_manifest(folder, index_factory="usearch:f16", index_params={"codec": "f16", "bits_per_dim": 16})
    else:
        raise AssertionError(case)


CASES = {  # case -> (the index kind damaged, a word of the reason)
    "stream-lists-random": ("stream", "CRC-32"),
    "stream-lists-random-unrecorded": ("stream", "holds id"),  # the ids' bounds, read where the lists lie
    "bm25-indices-random": ("bm25", "indices"),
    "lance-nprobes-negative": ("lance", "nprobes"),
    "flat-body-random": ("flat", f"{INDEX_FILE} is not the file written"),
    "flat-manifest-says-ivf": ("flat", "IVF64"),
    "lance-manifest-says-ivf-pq": ("lance", "written as FLAT"),
    "usearch-codec-unknown": ("usearch", "codec"),
    "usearch-manifest-says-f16": ("usearch", "holds f32"),
}


def test_a_store_damaged_before_start_is_unavailable_at_load_with_its_reason_and_the_others_serve(
    kinds, tiny_checkpoints, tmp_path
):
    root = tmp_path / "indexes"
    shutil.copytree(kinds["flat"], root / "flat")
    shutil.copytree(kinds["bm25"], root / "bm25")
    for case, (kind, _) in CASES.items():
        shutil.copytree(kinds[kind], root / case)
        _damage(case, root / case)
    with TestClient(create_app(root, tiny_checkpoints, load_in_background=False), raise_server_exceptions=False) as c:
        listed = {m["name"]: m for m in c.get("/models").json()["models"]}
        for case, (_, word) in CASES.items():
            assert not listed[case]["available"], (case, "listed available")  # refused at load, before any search
            assert word in listed[case]["reason"], (case, listed[case]["reason"])
            got = search(c, case)
            assert got.status_code == 409 and got.json()["detail"].endswith(listed[case]["reason"]), got.text[:300]
        for good in ("flat", "bm25"):
            assert listed[good]["available"] and search(c, good).status_code == 200, good
        assert c.get("/compare", params={"q": "cell"}).status_code == 200


@pytest.mark.parametrize("case", ["stream-lists-random", "bm25-indices-random", "flat-body-random"])
def test_a_store_damaged_while_served_is_refused_by_the_next_reload(
    kinds, tiny_checkpoints, tmp_path, monkeypatch, case
):
    kind, word = CASES[case]
    root = tmp_path / "indexes"
    shutil.copytree(kinds[kind], root / case)
    monkeypatch.setenv(ADMIN_KEY_ENV, "s3cret")
    with TestClient(create_app(root, tiny_checkpoints, load_in_background=False), raise_server_exceptions=False) as c:
        assert search(c, case).status_code == 200
        _damage(case, root / case)
        assert c.post("/admin/reload", headers={"X-API-Key": "s3cret"}).json()["available"] == 0
        listed = {m["name"]: m for m in c.get("/models").json()["models"]}[case]
        assert not listed["available"] and word in listed["reason"], listed
        assert search(c, case).status_code == 409


FAISS_TYPES = [
    "Flat", "SQ8", "SQfp16", "PQ8", "PQ8@l2", "HNSW32", "IVF4,Flat", "IVF4,PQ8", "IVF4,SQ8@l2", "RaBitQ",
    "IVF4,RaBitQ", "PCA16,Flat", "OPQ8,IVF4,PQ8", "IVF4_HNSW32,Flat", "IMI2x2,Flat@l2", "BIN", "BIN+rescore:8",
]  # fmt: skip


@pytest.mark.parametrize("factory", FAISS_TYPES)
def test_every_faiss_type_reads_back_past_the_load_checks_and_a_manifest_naming_another_is_refused(factory, tmp_path):
    from cone.errors import DamagedIndex
    from cone.indexing.factory import build_codes, read_codes

    vectors = np.random.default_rng(0).standard_normal((300, 32)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    kind = parse_index_type(factory)
    build_codes(vectors, kind).write(tmp_path)
    codes = read_codes(tmp_path, kind, 32, "", False)
    assert codes.ntotal == 300 and (codes.search(vectors[:3], 1)[1][:, 0] >= 0).all()
    if not kind.binary:
        other = parse_index_type("IVF8,Flat" if factory != "IVF8,Flat" else "Flat")
        with pytest.raises(DamagedIndex, match="the manifest says"):
            read_codes(tmp_path, other, 32, "", False)
