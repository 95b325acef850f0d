"""The Qdrant store (cone.indexing.qdrant_store) on Qdrant Edge: each quantizer built, checked from the shard itself
(indexed, quantized as asked), searched, written and opened again; one open shard per folder per process; refused in
one line where a setting, the shard's dimension or another process's lock says it cannot serve."""

from __future__ import annotations

import gc
import json
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from cone.cli import main
from cone.data.loaders import load_beir
from cone.encoders.registry import Encoders, load_encoder
from cone.errors import DamagedIndex, InputError
from cone.eval.metrics import overlap_at_k
from cone.geometry import unit_rows
from cone.indexing.dense import build_dense
from cone.indexing.factory import build_codes, index_state, read_codes
from cone.indexing.open import open_index
from cone.indexing.qdrant_store import SHARD, _segments, check_shard
from cone.indexing.spec import parse_index_type
from cone.service.app import ADMIN_KEY_ENV, create_app

qdrant_edge = pytest.importorskip("qdrant_edge")
N, D = 400, 64


@pytest.fixture(scope="module")
def rows() -> np.ndarray:
    return unit_rows(np.random.default_rng(0).standard_normal((N, D))).astype(np.float32)


@pytest.mark.parametrize(
    ("text", "params", "why"),
    [
        ("qdrant:pq12", "", "Qdrant types are"),
        ("qdrant:hnsw", "rescore=false", "takes hnsw_ef, exact, not 'rescore'"),
        ("qdrant:pq16", "quantile=0.99", "not 'quantile'"),
        ("qdrant:int8", "quantile=0.2", "quantile is a number from 0.5 to 1"),
        ("qdrant:bq1", "query_encoding=ternary", "query_encoding is one of"),
        ("qdrant:exact", "hnsw_ef=64", "takes no settings"),
        ("qdrant:int8", "rescore=maybe", "rescore is true or false"),
    ],
)
def test_types_and_settings_qdrant_does_not_take_are_refused_in_one_line(text, params, why):
    with pytest.raises(InputError, match=why) as refused:
        build_codes(np.zeros((1, D), np.float32), parse_index_type(text), params)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("qdrant:hnsw", None),
        ("qdrant:int8@dot", "scalar"),
        ("qdrant:pq16@l2", "product"),
        ("qdrant:bq1.5", "binary"),
        ("qdrant:tq2", "turbo"),
    ],
)
def test_every_point_is_in_a_graph_quantized_as_asked_by_the_shards_own_account(rows, text, key):
    codes = build_codes(rows, parse_index_type(text), "oversampling=4" if key else "")
    assert codes.params["indexed_vectors"] == N and codes.params["search"] == "hnsw"
    indexed = [s for s in _segments(codes.path) if s["index"]["type"] == "hnsw"]
    assert len(indexed) == codes.params["indexed_segments"] >= 1
    assert all(list(s.get("quantization_config") or {None: 0}) == [key] for s in indexed)
    exact = np.argsort(-(rows[:40] @ rows.T), axis=1)[:, :10]
    assert overlap_at_k(codes.search(rows[:40], 10)[1], exact) > (0.95 if key is None else 0.5)
    codes.close()


def test_a_shard_qdrant_did_not_index_is_refused(rows, tmp_path):
    """A shard under Qdrant's own default thresholds, not optimized: its points sit in a plain segment."""
    q = qdrant_edge
    config = q.EdgeConfig(vectors=q.EdgeVectorParams(size=D, distance=q.Distance.Cosine))
    shard = q.EdgeShard.create(str(tmp_path), config)
    shard.update(q.UpdateOperation.upsert_points([q.Point(i, rows[i].tolist()) for i in range(N)]))
    with pytest.raises(DamagedIndex, match=f"not indexed \\(0 of {N} points are in an HNSW graph\\)"):
        check_shard(tmp_path, shard, parse_index_type("qdrant:hnsw"), D, N)
    shard.close()


def test_exact_search_is_exhaustive_and_scores_each_metric_as_the_cosine(rows):
    queries = rows[:20]
    cosines = queries @ rows.T
    for metric in ("cosine", "dot", "l2"):
        codes = build_codes(rows, parse_index_type(f"qdrant:exact@{metric}"))
        scores, found = codes.search(queries, 10)
        assert codes.params["search"] == "exhaustive"
        assert overlap_at_k(found, np.argsort(-cosines, axis=1)[:, :10]) == 1.0
        assert scores == pytest.approx(np.take_along_axis(cosines, found, 1), abs=1e-4)
        codes.close()


def test_rescoring_with_oversampling_wins_back_what_one_bit_loses(rows):
    exact = np.argsort(-(rows[:40] @ rows.T), axis=1)[:, :10]
    kind = parse_index_type("qdrant:bq1")
    found = {}
    for params in ("rescore=false", "oversampling=8", "exact=true"):
        codes = build_codes(rows, kind, params)
        found[params] = overlap_at_k(codes.search(rows[:40], 10)[1], exact)
        codes.close()
    assert found["oversampling=8"] > found["rescore=false"] + 0.2
    assert found["exact=true"] == 1.0  # Qdrant's exact search scores the float32 vectors, not the codes


def test_a_written_shard_opens_again_once_per_process_and_answers_the_same(rows, tmp_path):
    kind = parse_index_type("qdrant:int8@l2")
    codes = build_codes(rows, kind, "hnsw_ef=64")
    codes.write(tmp_path)
    before = codes.search(rows[:10], 5)
    first = read_codes(tmp_path, kind, D, "hnsw_ef=64", False, codes.params)
    second = read_codes(tmp_path, kind, D, "hnsw_ef=64", False, codes.params)  # the service's and the eval's
    assert first.shard is second.shard and first.ntotal == N
    first.close()
    after = second.search(rows[:10], 5)  # still open for its other holder
    assert np.array_equal(before[1], after[1]) and before[0] == pytest.approx(after[0])
    assert second.vectors() == pytest.approx(rows, abs=1e-6)
    elsewhere = textwrap.dedent(
        f"""
        from pathlib import Path
        from cone.errors import ConeError
        from cone.indexing.factory import read_codes
        from cone.indexing.spec import parse_index_type
        try:
            read_codes(Path({str(tmp_path)!r}), parse_index_type("qdrant:int8@l2"), {D}, "", False, {{}})
        except ConeError as exc:
            print(type(exc).__name__, exc)
        """
    )
    done = subprocess.run([sys.executable, "-c", elsewhere], capture_output=True, text=True, timeout=120)
    assert done.stdout.startswith("StoreUnavailable") and "open in another process" in done.stdout
    assert len(done.stdout.strip().splitlines()) == 1
    second.close()


def test_a_shard_of_another_dimension_or_metric_is_refused_in_one_line(rows, tmp_path):
    kind = parse_index_type("qdrant:hnsw@cosine")
    codes = build_codes(rows, kind)
    codes.write(tmp_path)
    codes.close()
    with pytest.raises(DamagedIndex, match="a Qdrant shard of 64-dim Cosine vectors, the index is 32-dim Cosine"):
        read_codes(tmp_path, kind, 32, "", False, {})
    with pytest.raises(DamagedIndex, match="the index is 64-dim Dot"):
        read_codes(tmp_path, parse_index_type("qdrant:hnsw@dot"), D, "", False, {})
    (tmp_path / SHARD / "edge_config.json").unlink()
    with pytest.raises(DamagedIndex, match="not a Qdrant Edge shard"):
        read_codes(tmp_path, kind, D, "", False, {})


def test_the_shard_is_checked_against_the_manifest_and_its_state_outlasts_qdrants_rewrites(rows, tmp_path):
    """verify: the shard's points are those the manifest recorded; state: equal across Qdrant's own rewrites of the
    shard (an open and a close), changed by a segment file cut short."""
    kind = parse_index_type("qdrant:int8")
    codes = build_codes(rows, kind)
    codes.write(tmp_path)
    codes.close()
    with pytest.raises(DamagedIndex, match=f"the shard holds {N} points, {N + 1} were written"):
        read_codes(tmp_path, kind, D, "", False, codes.params | {"indexed_vectors": N + 1})
    before = index_state(tmp_path, kind, codes.params)
    read_codes(tmp_path, kind, D, "", False, codes.params).close()  # Qdrant rewrites files as it opens and closes
    assert index_state(tmp_path, kind, codes.params) == before
    (data,) = (tmp_path / SHARD).glob("segments/*/vector_storage/quantized.data")
    data.write_bytes(data.read_bytes()[:-1])
    assert index_state(tmp_path, kind, codes.params) != before


def test_cone_index_streams_cone_serve_and_the_eval_share_the_shard_and_cone_eval_measures_qdrant(
    tiny_beir, tiny_checkpoints, tmp_path
):
    argv = ["index", "--model", "baseline", "--dataset", "tiny", "--data-dir", str(tiny_beir), "--no-progress"]
    argv += ["--checkpoints", str(tiny_checkpoints), "--index-factory", "qdrant:bq1", "--search-params"]
    argv += ["oversampling=2", "--out", str(tmp_path / "stream"), "--stream", "--shard-size", "16"]
    assert main(argv) == 0
    (manifest,) = (tmp_path / "stream").glob("baseline-qdrant_bq1_cosine/manifest.json")
    params = json.loads(manifest.read_text())["index_params"]
    assert params["quantization"] == "binary:1" and params["oversampling"] == "2.0" and params["indexed_vectors"] > 0
    index = open_index(manifest.parent, Encoders(tiny_checkpoints))  # the eval's holder, beside the service's
    with TestClient(create_app(manifest.parent.parent, tiny_checkpoints, load_in_background=False)) as client:
        body = client.get("/search", params={"model": manifest.parent.name, "q": "cell protein gene", "k": 5}).json()
    assert [h["doc_id"] for h in body["hits"]] == [h.doc_id for h in index.search(["cell protein gene"], 5).hits(0)]
    index.close()
    argv = ["eval", "--models", "baseline", "--dataset", "tiny", "--data-dir", str(tiny_beir), "--no-sts"]
    argv += ["--checkpoints", str(tiny_checkpoints), "--out", str(tmp_path / "eval"), "--no-progress"]
    assert main([*argv, "--index-factory", "Flat,qdrant:exact,qdrant:bq1@l2"]) == 0
    found = {r["factory"]: r for r in json.loads((tmp_path / "eval" / "report.json").read_text())["results"]}
    assert found["qdrant:exact@cosine"]["metrics"]["recall_at_10_vs_flat"] == pytest.approx(1.0)
    assert 0.0 < found["qdrant:bq1@l2"]["metrics"]["recall_at_10_vs_flat"] <= 1.0


def test_the_doctor_checks_a_users_shard_and_prescribes_in_qdrants_terms(tmp_path, capsys):
    rng = np.random.default_rng(1)
    m, x = rng.standard_normal(32), rng.standard_normal((600, 32))
    x = 0.99 * m / np.linalg.norm(m) + 0.14 * x / np.linalg.norm(x, axis=1, keepdims=True)  # a 0.99 cone
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    q = qdrant_edge
    config = q.EdgeConfig(
        vectors=q.EdgeVectorParams(size=32, distance=q.Distance.Cosine),
        quantization_config=q.BinaryQuantizationConfig(encoding=q.BinaryQuantizationEncoding.OneBit),
        hnsw_config=q.HnswIndexConfig(m=16, ef_construct=100, full_scan_threshold=1),
        optimizers=q.EdgeOptimizersConfig(indexing_threshold=1),
    )
    shard = q.EdgeShard.create(str(tmp_path / "mine"), config)
    shard.update(q.UpdateOperation.upsert_points([q.Point(100 + i, v.tolist()) for i, v in enumerate(x)]))
    shard.optimize()
    shard.close()
    fix = tmp_path / "fixed"
    assert main(["doctor", "--index", str(tmp_path / "mine"), "--fix", str(fix), "--json", "--no-progress"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["index"]["store"] == "qdrant" and report["index"]["type"] == "Qdrant Edge shard, bq1"
    assert report["index"]["params"]["search"] == "hnsw"  # 75 KB of vectors, over its full_scan_threshold of 1 KB
    repairs = {r["name"]: r for r in report["repairs"]}
    assert set(repairs) == {"rescore x4", "quantization tq1", "center (bq1)"}
    assert all(r["recall_at_10"] > report["recall_at_10"] for r in repairs.values())
    assert report["fixed"]["recall_at_10"] == report["prescription"]["recall_at_10"]
    assert (fix / "edge_config.json").is_file() and (tmp_path / "mine" / "edge_config.json").is_file()


def test_a_truncated_segment_file_is_a_damaged_index_in_one_line_not_a_panic(rows, tmp_path):
    """Qdrant panics (pyo3's PanicException, no Exception) searching codes cut short; the index is unavailable."""
    kind = parse_index_type("qdrant:int8")
    codes = build_codes(rows, kind)
    codes.write(tmp_path)
    codes.close()
    (data,) = (tmp_path / SHARD).glob("segments/*/vector_storage/quantized.data")
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    with pytest.raises(DamagedIndex, match="Qdrant shard unreadable") as refused:
        read_codes(tmp_path, kind, D, "", False, codes.params).search(rows, 10)
    assert "\n" not in str(refused.value)


def test_a_shard_rebuilt_under_the_same_name_is_opened_anew_while_the_old_one_is_held(rows, tmp_path):
    """cone index swaps a rebuilt folder into place; the service may still hold the old shard: the new folder is
    another shard, not the old one handed out again."""
    kind = parse_index_type("qdrant:hnsw")
    first = build_codes(rows[:200], kind)
    first.write(tmp_path / "a")
    old = read_codes(tmp_path / "a", kind, D, "", False, first.params)
    (tmp_path / "a").rename(tmp_path / "a.old")
    second = build_codes(rows, kind)
    second.write(tmp_path / "a")
    new = read_codes(tmp_path / "a", kind, D, "", False, second.params)
    assert new.shard is not old.shard and (old.ntotal, new.ntotal) == (200, N)
    for codes in (first, old, second, new):
        codes.close()


def test_reloads_keep_a_served_shard_that_qdrant_rewrote_and_open_it_again_once_rebuilt(
    shared_tiny_beir, tiny_checkpoints, tmp_path, monkeypatch
):
    """Qdrant rewrites files of a shard whenever it opens or closes it: the reload goes by the store's own state."""
    encoder, dataset = load_encoder("baseline", tiny_checkpoints), load_beir(shared_tiny_beir, "tiny")
    root, kind = tmp_path / "indexes", parse_index_type("qdrant:int8")
    build_dense(encoder, dataset, root / "qd", "none", kind, progress=False)
    monkeypatch.setenv(ADMIN_KEY_ENV, "s3cret")
    with TestClient(create_app(root, tiny_checkpoints, load_in_background=False)) as client:
        registry, served = client.app.state.registry, client.app.state.registry.entries["qd"]
        assert served.available and _search(client, "qd").status_code == 200
        for _ in range(2):
            assert client.post("/admin/reload", headers={"X-API-Key": "s3cret"}).json()["available"] == 1
            assert registry.entries["qd"] is served  # not opened again
        build_dense(encoder, dataset, root / "qd", "center", kind, progress=False)  # swapped in under the same name
        assert client.post("/admin/reload", headers={"X-API-Key": "s3cret"}).json()["available"] == 1
        rebuilt = registry.entries["qd"]
        assert rebuilt is not served and rebuilt.manifest.postprocess == "center"
        assert rebuilt.index.codes.shard is not served.index.codes.shard
        assert _search(client, "qd").status_code == 200


def _search(client: TestClient, name: str):
    return client.get("/search", params={"model": name, "q": "cell protein", "k": 5})


def test_a_cut_segment_is_a_409_and_a_shard_open_in_another_process_a_503_for_that_index_alone(
    shared_tiny_beir, tiny_checkpoints, tmp_path, monkeypatch
):
    """Issue 51, item 6, through the service: a quantized.data cut in half (Qdrant panics searching it) is that
    index's 409; a shard another process holds is a 503 (transient), served after a reload once that process is
    gone; the other index answers throughout."""
    root = tmp_path / "indexes"
    build_dense(
        load_encoder("baseline", tiny_checkpoints),
        load_beir(shared_tiny_beir, "tiny"),
        root / "good",
        "none",
        parse_index_type("qdrant:int8"),
        progress=False,
    )
    for name in ("cut", "held"):
        shutil.copytree(root / "good", root / name)
    (data,) = (root / "cut" / SHARD).glob("segments/*/vector_storage/quantized.data")
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    with held_elsewhere(root / "held" / SHARD) as holder:
        monkeypatch.setenv(ADMIN_KEY_ENV, "s3cret")
        with TestClient(create_app(root, tiny_checkpoints, load_in_background=False)) as client:
            assert _search(client, "good").status_code == 200
            cut = _search(client, "cut")
            assert cut.status_code == 409 and "Qdrant shard unreadable" in cut.json()["detail"], cut.text[:300]
            held = _search(client, "held")
            assert held.status_code == 503 and "open in another process" in held.json()["detail"], held.text[:300]
            assert "\n" not in held.json()["detail"]
            assert _search(client, "good").status_code == 200
            holder.stdin.close()
            assert holder.wait(timeout=60) == 0
            # every unavailable index is opened again; the cut one opens (Qdrant reads the codes at a search only)
            assert client.post("/admin/reload", headers={"X-API-Key": "s3cret"}).json()["available"] == 3
            assert _search(client, "held").status_code == 200 and _search(client, "cut").status_code == 409


@contextmanager
def held_elsewhere(shard: Path) -> Iterator[subprocess.Popen]:
    """Another process holding ``shard`` open (Qdrant Edge's lock) until its stdin is closed."""
    hold = "import sys, qdrant_edge\nshard = qdrant_edge.EdgeShard.load(sys.argv[1])\nprint('held', flush=True)\n"
    hold += "sys.stdin.read()"
    holder = subprocess.Popen(
        [sys.executable, "-c", hold, str(shard)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        yield holder
    finally:
        holder.kill()
        holder.wait(timeout=60)


def test_codes_no_one_refers_to_release_their_shard(rows, tmp_path):
    """The service never closes an index it replaced (a reload drops the entry, the collector frees it): the shard
    it held must be closed then, or every rebuild keeps the old shard (its codes in memory, its folder locked)."""
    kind = parse_index_type("qdrant:bq1")
    codes = build_codes(rows, kind)
    codes.write(tmp_path)
    codes.close()
    opened = read_codes(tmp_path, kind, D, "", False, codes.params)
    opened.write(tmp_path / "copy")  # closes and opens its shard again: the one it then holds is released
    del opened
    gc.collect()
    with held_elsewhere(tmp_path / SHARD) as holder:  # another process can open it: no one here holds it
        assert holder.poll() is None


def test_the_doctor_on_a_shard_open_in_another_process_says_so_in_one_line(rows, tmp_path, capsys):
    codes = build_codes(rows, parse_index_type("qdrant:bq1"))
    codes.write(tmp_path)
    codes.close()
    with held_elsewhere(tmp_path / SHARD):
        assert main(["doctor", "--index", str(tmp_path / SHARD), "--no-progress"]) == 5
    err = capsys.readouterr().err.strip()
    assert err.startswith("cone: unavailable:") and "open in another process" in err and "\n" not in err, err
