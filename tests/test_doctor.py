"""cone doctor on spaces whose right answer is known: a healthy clustered space, the same space in a pure offset
cone, and with rogue dimensions; then the command line."""

from __future__ import annotations

import json
import os
import warnings

import numpy as np
import pytest

from cone.cli import main
from cone.eval import doctor
from cone.indexing.spec import parse_index_type

CLUSTERS, PER_CLUSTER, DIM = 150, 10, 64
# PQ and IVF train the longest: left out
TYPES = {t: parse_index_type(t) for t in ("Flat", "SQfp16", "SQ8", "BIN", "BIN+rescore:40", "HNSW32")}


def clustered(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Documents in tight clusters of 10 and one query near each cluster: every query's true top 10 is its
    cluster, in any space that keeps the clusters apart."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((CLUSTERS, DIM))
    labels = np.repeat(np.arange(CLUSTERS), PER_CLUSTER)
    docs = centers[labels] + 0.25 * rng.standard_normal((len(labels), DIM))
    queries = centers + 0.25 * rng.standard_normal((CLUSTERS, DIM))
    return docs.astype(np.float32), queries.astype(np.float32), labels


def cluster_ndcg(labels: np.ndarray):
    """Per-query nDCG@10 with a query's cluster as its relevant documents (what qrels would say)."""
    ideal = (1 / np.log2(np.arange(2, 12))).sum()

    def ndcg(rows: np.ndarray) -> np.ndarray:
        gains = (labels[rows] == np.arange(len(rows))[:, None]) / np.log2(np.arange(2, 12))
        return gains.sum(axis=1) / ideal

    return ndcg


def offset_cone(x: np.ndarray, strength: float = 12.0) -> np.ndarray:
    direction = np.ones(x.shape[1]) / np.sqrt(x.shape[1])
    return (x + strength * np.linalg.norm(x, axis=1).mean() * direction).astype(np.float32)


@pytest.fixture(scope="module")
def healthy():
    docs, queries, labels = clustered()
    return doctor.checkup(doctor.Sample(docs, queries, "cluster centers"), target=0.9, types=TYPES)


def test_a_healthy_space_is_told_to_change_nothing(healthy):
    assert healthy.diagnosis.findings == []
    assert healthy.prescription is not None and healthy.prescription.repair == "none"
    flat = next(t for t in healthy.trials if t.factory == "Flat" and t.repair == "none")
    assert flat.recall_at_10 == 1.0 and flat.bytes_per_vector == 4 * DIM


def test_types_without_flat_are_measured_against_exact_search_in_the_order_given():
    """The library's caller may leave Flat out (the command line adds it): each type is still measured against
    exact search, not the first type against itself, and one this sample cannot train stops nothing."""
    docs, queries, _ = clustered()
    sample = doctor.Sample(offset_cone(docs[:60]), offset_cone(queries), "cluster centers")
    types = {name: parse_index_type(name) for name in ("PQ4", "BIN", "SQ8")}  # PQ's 256 centroids need > 60 rows
    found = doctor.checkup(sample, target=0.9, types=types)
    raw = [t for t in found.trials if t.repair == "none"]
    assert [t.factory for t in raw] == ["BIN", "SQ8"] and "PQ4" in found.untried
    assert raw[0].recall_at_10 < 0.9  # sign bits of a cone, against exact search (1.0 against themselves)


def test_a_pure_offset_cone_is_named_and_centering_prescribed_for_a_cheaper_index(healthy):
    docs, queries, _ = clustered()
    coned = doctor.checkup(
        doctor.Sample(offset_cone(docs), offset_cone(queries), "cluster centers"), target=0.9, types=TYPES
    )
    assert coned.diagnosis.findings == ["cone"] and coned.diagnosis.pair_cosine_mean > 0.9
    p = coned.prescription
    assert p is not None and p.repair != "none"
    raw_passing = [t for t in coned.trials if t.repair == "none" and t.recall_at_10 >= 0.9]
    assert p.bytes_per_vector < min(t.bytes_per_vector for t in raw_passing)  # the repair buys a cheaper type
    by_type = {(t.factory, t.repair): t.recall_at_10 for t in coned.trials}
    assert by_type[("BIN", "none")] < 0.5 < by_type[("BIN", "center")]  # a sign bit is what the offset makes constant
    assert p.bytes_per_vector == healthy.prescription.bytes_per_vector  # centering gives the healthy space back


def test_the_command_prints_a_prescription_and_writes_its_report_and_figure(tmp_path, capsys):
    docs, queries, _ = clustered()
    np.save(tmp_path / "x.npy", offset_cone(np.concatenate([docs, queries])))
    argv = ["doctor", "--vectors", str(tmp_path / "x.npy"), "--out", str(tmp_path / "out"), "--no-progress"]
    assert main([*argv, "--types", "Flat,SQ8,BIN,lance:IVF_RQ", "--target", "0.9"]) == 0
    out = capsys.readouterr().out
    assert "CONE: unrelated documents score" in out and "PRESCRIPTION: --index-factory" in out
    report = json.loads((tmp_path / "out" / "doctor.json").read_text())
    assert report["diagnosis"]["findings"] == ["cone"]
    assert {t["factory"] for t in report["trials"]} == {"Flat", "SQ8", "BIN", "lance:IVF_RQ"}
    lance = [t for t in report["trials"] if t["factory"] == "lance:IVF_RQ"]
    assert all(t["bytes_per_vector"] > 4 * DIM for t in lance)  # LanceDB keeps the vectors beside its index
    assert (tmp_path / "out" / "doctor.png").stat().st_size > 10_000


def test_the_model_path_with_a_beir_folder_adds_ndcg(tiny_beir, tiny_checkpoints, capsys):
    argv = [
        "doctor",
        "--model",
        "baseline",
        "--corpus",
        str(tiny_beir / "tiny"),
        "--checkpoints",
        str(tiny_checkpoints),
    ]
    assert main([*argv, "--json", "--no-progress", "--types", "Flat,SQ8,BIN"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["queries_from"] == "the dataset's test queries (tiny)" and report["n_docs"] == 40
    assert all(t["ndcg_at_10"] is not None for t in report["trials"])
    assert report["repairs"][0]["repair"] == "none" and report["repairs"][1]["ndcg_p"] is not None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--vectors", "missing.npy"], "missing.npy: no such file"),
        (["--model", "minilm"], "--model needs --corpus"),
        (["--model", "bm25", "--corpus", "."], "bm25 has no vectors"),
        (["--vectors", "x.npy", "--target", "2"], "--target must be in (0, 1]"),
        (["--vectors", "x.npy", "--inject", "cone:2"], "unknown --postprocess stage"),
        (["--vectors", "x.npy", "--corpus", "."], "--corpus goes with --model"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    np.save(tmp_path / "x.npy", np.random.default_rng(0).standard_normal((100, 8)).astype(np.float32))
    assert main(["doctor", *argv, "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def _rows_with(value: float) -> np.ndarray:
    x = np.random.default_rng(0).standard_normal((100, 8)).astype(np.float32)
    x[[3, 50], 2] = value
    return x


@pytest.mark.parametrize(
    ("matrix", "argv", "message"),
    [
        (np.ones(100, np.float32), [], "expected a 2-D (N, d) array, got shape (100,)"),
        (np.float32(1.0), [], "expected a 2-D (N, d) array, got shape ()"),
        (np.ones((100, 1), np.float32), [], "shape (100, 1): need at least 2 columns"),
        (np.array([["a", "b"]] * 100), [], "expected a numeric array, got dtype <U1"),
        (_rows_with(np.nan), [], "NaN in rows 3, 50 (2 of 100)"),
        (_rows_with(np.inf), [], "inf in rows 3, 50 (2 of 100)"),
        (np.zeros((100, 8), np.float32), [], "(100 of 100) all zero"),
        (np.tile(np.arange(1, 9, dtype=np.float32), (100, 1)), [], "only 1 distinct row of 100"),
        # refused with the command line, by FAISS's own factory parser (argparse's exit)
        (None, ["--types", "NOPE"], "argument --types: invalid --index-factory 'NOPE': could not parse index string"),
        (None, ["--types", "SQ8,NOPE,BIN"], "argument --types: invalid --index-factory 'NOPE'"),
        (None, ["--out", "/proc/doctor"], "--out /proc/doctor: cannot write there"),
        (None, ["--out", "x.npy/doctor"], "--out x.npy/doctor: cannot write there (Not a directory)"),
    ],
    ids=[
        "1-D",
        "0-D",
        "one column",
        "strings",
        "NaN",
        "inf",
        "all zero",
        "all duplicates",
        "NOPE",
        "SQ8,NOPE,BIN",
        "out under /proc",
        "out under a file",
    ],
)
def test_bad_vectors_types_and_out_are_refused_in_one_line_before_any_work(
    matrix, argv, message, tmp_path, capsys, monkeypatch
):
    """Issue 40, item 4: each was a traceback, a silent drop or a refusal after the whole checkup had run."""
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    np.save(tmp_path / "x.npy", rng.standard_normal((100, 8)).astype(np.float32) if matrix is None else matrix)

    def no_work(*_args, **_kwargs):
        raise AssertionError("an index was built before the input was checked")

    monkeypatch.setattr(doctor, "build_codes", no_work)
    try:
        code = main(["doctor", "--vectors", "x.npy", *argv, "--no-progress"])
    except SystemExit as refused:  # a refusal of the command line's own
        code = refused.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_read_only_out_folder_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    np.save(tmp_path / "x.npy", np.random.default_rng(0).standard_normal((100, 8)).astype(np.float32))
    (tmp_path / "ro").mkdir(mode=0o555)
    monkeypatch.setattr(doctor, "build_codes", lambda *_a, **_k: pytest.fail("built before --out was checked"))
    assert main(["doctor", "--vectors", str(tmp_path / "x.npy"), "--out", str(tmp_path / "ro"), "--no-progress"]) == 2
    assert "cannot write there (Permission denied)" in capsys.readouterr().err


def test_library_warnings_are_summarized_in_one_line(tmp_path, capsys, monkeypatch):
    docs, queries, _ = clustered()
    np.save(tmp_path / "x.npy", np.concatenate([docs, queries]))
    checkup = doctor.checkup

    def noisy(*args, **kwargs):
        for _ in range(500):  # as numpy warns once per call, each recorded when every warning is caught
            warnings.warn("invalid value encountered in divide", RuntimeWarning, stacklevel=1)
        warnings.warn("a second kind", UserWarning, stacklevel=1)
        return checkup(*args, **kwargs)

    monkeypatch.setattr(doctor, "checkup", noisy)
    assert main(["doctor", "--vectors", str(tmp_path / "x.npy"), "--types", "Flat,SQ8", "--no-progress"]) == 0
    err = capsys.readouterr().err.strip()
    assert err == (
        "501 warnings from libraries while measuring (2 kinds; most often, 500×: RuntimeWarning: invalid value "
        "encountered in divide)"
    )


# --- cone doctor --index: the index a user already has ------------------------------------------------------

STRONG_CONE = 30.0  # random pairs' cosine ~0.999 on the clustered space


@pytest.fixture(scope="module")
def user_indexes(tmp_path_factory):
    """The same coned vectors in a FAISS PQ file, a Lance table under `dot` with IVF_PQ, a USearch i8 file; and the
    healthy space's PQ file, the reference a repair is judged against."""
    import faiss
    import pyarrow as pa
    from usearch.index import Index

    from cone.geometry import unit_rows
    from cone.indexing.lance import lancedb_module

    folder = tmp_path_factory.mktemp("user-indexes")
    docs, queries, _ = clustered()
    spaces = {
        "healthy": (unit_rows(docs), unit_rows(queries)),
        "coned": (unit_rows(offset_cone(docs, STRONG_CONE)), unit_rows(offset_cone(queries, STRONG_CONE))),
    }
    for name, (x, q) in spaces.items():
        np.save(folder / f"{name}.npy", x.astype(np.float32))
        np.save(folder / f"{name}-queries.npy", q.astype(np.float32))
        index = faiss.index_factory(DIM, "PQ8", faiss.METRIC_INNER_PRODUCT)
        index.do_polysemous_training = False  # 20 s here, and it changes no code (cone.indexing.factory says why)
        index.train(x)
        index.add(x)
        faiss.write_index(index, str(folder / f"{name}.faiss"))
    coned = spaces["coned"][0].astype(np.float32)
    lancedb = lancedb_module()
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(coned.ravel()), DIM)
    table = lancedb.connect(folder / "lancedb").create_table("docs", pa.table({"vector": vectors}))
    table.create_index("vector", config=lancedb.index.IvfPq(distance_type="dot", num_partitions=4, num_sub_vectors=8))
    usearch = Index(ndim=DIM, metric="cos", dtype="i8")
    usearch.add(np.arange(len(coned)), coned)
    usearch.save(str(folder / "coned.usearch"))
    return folder, spaces


def _doctor_index(capsys, *argv: str) -> dict:
    assert main(["doctor", "--index", *argv, "--json", "--no-progress"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_faiss_pq_file_on_coned_vectors_is_named_measured_and_fixed_in_a_file_plain_faiss_reads(
    user_indexes, tmp_path, capsys
):
    import faiss

    from cone.eval import metrics
    from cone.eval.index_doctor import exact_rows

    folder, spaces = user_indexes
    out = tmp_path / "fixed.faiss"
    report = _doctor_index(
        capsys,
        str(folder / "coned.faiss"),
        "--vectors",
        str(folder / "coned.npy"),
        "--queries",
        str(folder / "coned-queries.npy"),
        "--fix",
        str(out),
    )
    assert report["index"]["type"] == "IndexPQ" and report["index"]["metric"] == "inner product"
    assert report["index"]["code_bytes_per_vector"] == 8 and report["diagnosis"]["findings"] == ["cone"]
    assert report["recall_at_10"] < 0.5  # PQ's codebooks on raw coordinates: the cone takes its resolution
    assert report["prescription"]["name"].startswith("center") and report["prescription"]["code_bytes"] == 8
    assert report["prescription"]["p"] < 0.05  # better by the paired test over the queries, not by noise
    assert report["prescription"]["exact_kept"] > 0.9  # centering the clustered space keeps its exact top 10
    # The same PQ under L2: the code's error along the cone cancels, and unit rows rank as by the inner product
    by_l2 = next(r for r in report["repairs"] if r["name"] == "metric l2")
    assert by_l2["exact_kept"] == 1.0 and by_l2["code_bytes"] == 8
    assert by_l2["recall_at_10"] > 2 * report["recall_at_10"] and by_l2["p"] < 0.05

    def recall(index: faiss.Index, space: str) -> float:
        x, q = spaces[space]
        return metrics.overlap_at_k(index.search(q.astype(np.float32), 10)[1], exact_rows(x, q, "ip"), 10)

    fixed = faiss.read_index(str(out))  # plain FAISS, no cone code: the repair is inside the file
    healthy = recall(faiss.read_index(str(folder / "healthy.faiss")), "healthy")
    assert recall(fixed, "coned") >= 0.9 * healthy
    assert report["fixed"]["recall_at_10"] == pytest.approx(recall(fixed, "coned"))


def test_a_lance_dot_ivf_pq_table_is_prescribed_a_residual_metric_or_centering_with_its_create_index_call(
    user_indexes, tmp_path, capsys
):
    folder, _ = user_indexes
    queries = str(folder / "coned-queries.npy")
    fix = tmp_path / "fixed.lance"
    report = _doctor_index(capsys, str(folder / "lancedb"), "--table", "docs", "--queries", queries, "--fix", str(fix))
    assert report["index"]["type"] == "IVF_PQ" and report["index"]["metric"] == "dot"
    assert report["index"]["code_bytes_per_vector"] == 8 and report["index"]["keeps_float_vectors"]
    assert report["recall_at_10"] < 0.5  # under dot Lance's PQ quantizes raw coordinates, not residuals
    by_name = {r["name"]: r for r in report["repairs"]}
    assert by_name["metric cosine"]["recall_at_10"] > 0.9 and by_name["center"]["recall_at_10"] > 0.9
    assert by_name["metric cosine"]["exact_kept"] == 1.0  # on unit rows cosine ranks exactly as dot
    assert report["prescription"]["code_bytes"] == 8 and "create_index(" in report["prescription"]["how"]
    assert report["fixed"]["repair"] == report["prescription"]["name"] and report["fixed"]["recall_at_10"] > 0.9
    again = _doctor_index(capsys, str(fix), "--queries", queries)  # the new table, read as a Lance dataset
    assert again["index"]["metric"] != "dot" or again["recall_at_10"] > 0.9


def test_a_usearch_i8_file_is_named_measured_and_given_its_codecs_cost(user_indexes, capsys):
    folder, _ = user_indexes
    argv = [str(folder / "coned.usearch"), "--vectors", str(folder / "coned.npy")]
    report = _doctor_index(capsys, *argv, "--queries", str(folder / "coned-queries.npy"))
    assert report["index"]["params"]["codec"] == "i8" and report["index"]["metric"] == "cos"
    assert report["index"]["code_bytes_per_vector"] == DIM
    by_name = {r["name"]: r for r in report["repairs"]}
    assert by_name["codec f16"]["code_bytes"] == 2 * DIM and "center (i8)" in by_name
    # USearch's i8 keeps this cone's clusters (measured): the doctor says so rather than prescribing a change.
    assert report["recall_at_10"] >= 0.95 and report["prescription"] is None
    assert main(["doctor", "--index", *argv, "--no-progress"]) == 0
    assert "PRESCRIPTION: none needed" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["coned.faiss"], "it keeps no float vectors; pass --vectors X.npy"),
        (["coned.faiss", "--vectors", "healthy-queries.npy"], "--vectors is 150 x 64, the index holds 1500 x 64"),
        (["coned.npy"], "not a FAISS index file, a Lance folder or a .usearch file"),
        (["lancedb", "--table", "nope"], "no table 'nope' (it has docs)"),
        (["coned.faiss", "--vectors", "coned.npy", "--fix", "coned.npy"], "--fix coned.npy: already exists"),
        (["coned.faiss", "--types", "SQ8"], "--types goes without --index"),
        (
            ["coned.usearch", "--vectors", "coned.npy", "--fix", "f.faiss"],
            "a usearch repair is written as NAME.usearch",
        ),
    ],
)
def test_bad_index_input_is_one_line_and_exit_2(user_indexes, argv, message, capsys, monkeypatch):
    monkeypatch.chdir(user_indexes[0])
    assert main(["doctor", "--index", *argv, "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


# --- issue 41, item 5: rogue dimensions, with and without relevance -------------------------------------------


@pytest.fixture(scope="module")
def rogue_files(tmp_path_factory):
    """The clustered space with coordinates 5 and 41 scaled x30, its queries, and qrels (a query's cluster is
    what it should find) by row number: standardizing is known to rank better here."""
    folder = tmp_path_factory.mktemp("rogue")
    docs, queries, labels = clustered()
    for x in (docs, queries):
        x[:, [5, 41]] *= 30
    np.save(folder / "x.npy", docs)
    np.save(folder / "q.npy", queries)
    lines = ["query-id\tcorpus-id\tscore"] + [f"{labels[r]}\t{r}\t1" for r in range(len(docs))]
    (folder / "qrels.tsv").write_text("\n".join(lines) + "\n")
    return folder


def test_with_qrels_rogue_dimensions_get_standardizing_prescribed(rogue_files, capsys, monkeypatch):
    monkeypatch.chdir(rogue_files)
    argv = ["doctor", "--vectors", "x.npy", "--queries", "q.npy", "--qrels", "qrels.tsv", "--types", "Flat,SQ8,BIN"]
    assert main([*argv, "--target", "0.9", "--json", "--no-progress"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert sorted(report["diagnosis"]["rogue_dims"]) == [5, 41] and report["n_queries"] == CLUSTERS
    standardize = next(r for r in report["repairs"] if r["repair"] == "standardize")
    assert standardize["ndcg_delta"] > 0.3 and standardize["ndcg_p"] < 0.05
    assert report["prescription"]["repair"] == "standardize" and not report["exact_search_suspect"]


def test_without_qrels_rogue_dimensions_make_exact_search_suspect_and_name_the_command_that_settles_it(
    rogue_files, capsys, monkeypatch
):
    monkeypatch.chdir(rogue_files)
    argv = ["doctor", "--vectors", "x.npy", "--queries", "q.npy", "--types", "Flat,SQ8,BIN", "--out", "out"]
    assert main([*argv, "--target", "0.9", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "EXACT SEARCH ITSELF IS SUSPECT: coordinates " in out
    assert "standardize (each coordinate to unit variance) keeps" in out
    assert "settle it: cone doctor --vectors x.npy --queries q.npy --qrels qrels.tsv" in out
    report = json.loads((rogue_files / "out" / "doctor.json").read_text())
    assert sorted(report["diagnosis"]["rogue_dims"]) == [5, 41] and report["exact_search_suspect"] is True
    # Without relevance a repair that changes the exact ranking is never prescribed: nothing says it is better.
    assert report["prescription"] is None or report["prescription"]["repair"] == "none"


@pytest.mark.parametrize("factory", ["PCA32,IVF16,PQ8x4", "IDMap2,PQ8x4", "HNSW16", "BIN"])
def test_any_faiss_structure_is_read_and_repaired_in_a_file_plain_faiss_loads(factory, user_indexes, tmp_path, capsys):
    """IndexPreTransform chains, id maps, graphs and binary codes: the repair keeps the structure (a binary index
    becomes IndexLSH behind the centering: the same bits per vector, float queries)."""
    import faiss

    from cone.indexing.factory import sign_codes

    folder, spaces = user_indexes
    x = spaces["coned"][0].astype(np.float32)
    path = tmp_path / "user.faiss"
    if factory == "BIN":
        index = faiss.IndexBinaryFlat(DIM)
        index.add(sign_codes(x))
        faiss.write_index_binary(index, str(path))
    else:
        index = faiss.index_factory(DIM, factory, faiss.METRIC_INNER_PRODUCT)
        index.train(x)
        index.add_with_ids(x, np.arange(len(x))) if factory.startswith("IDMap") else index.add(x)
        faiss.write_index(index, str(path))
    out = tmp_path / "fixed.faiss"
    argv = [str(path), "--vectors", str(folder / "coned.npy"), "--queries", str(folder / "coned-queries.npy")]
    report = _doctor_index(capsys, *argv, "--fix", str(out))
    assert report["index"]["metric"] == ("hamming" if factory == "BIN" else "inner product")
    assert report["fixed"]["recall_at_10"] >= report["recall_at_10"]
    assert report["fixed"]["code_bytes_per_vector"] == report["index"]["code_bytes_per_vector"]
    assert faiss.read_index(str(out)).ntotal == len(x)


# --- issue 48, item 4: the doctor's edges ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["--vectors", "nan.npy", "--out", "a/b/c"],
        ["--index", "missing.faiss", "--out", "a/b/c"],
        ["--index", "missing.faiss", "--fix", "a/b/c.faiss"],
        ["--index", "nan.npy", "--out", "a/b", "--fix", "a/c/d.faiss"],
    ],
    ids=["vectors-out", "index-out", "index-fix", "index-out-and-fix"],
)
def test_a_refused_input_leaves_no_folder_made_for_the_output(argv, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    np.save(tmp_path / "nan.npy", np.full((100, 8), np.nan, dtype=np.float32))
    assert main(["doctor", *argv, "--no-progress"]) == 2
    assert "\n" not in capsys.readouterr().err.strip()
    assert not (tmp_path / "a").exists(), sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "a").rglob("*"))


def test_a_fix_that_cannot_be_written_is_refused_naming_fix(user_indexes, capsys, monkeypatch):
    monkeypatch.chdir(user_indexes[0])
    argv = ["doctor", "--index", "coned.faiss", "--vectors", "coned.npy", "--fix", "coned.npy/fixed.faiss"]
    assert main([*argv, "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--fix coned.npy/fixed.faiss: cannot write there (Not a directory)" in err and "--out" not in err, err


def _figures(result: doctor.Checkup) -> list[tuple]:
    trials = [(t.factory, t.repair, t.recall_at_10, t.bytes_per_vector) for t in result.trials]
    return trials + [(r.repair, r.agreement) for r in result.repairs]


@pytest.mark.parametrize("scale", [2.0**100, 2.0**-100])
def test_vectors_at_any_finite_scale_give_the_figures_of_the_same_vectors_at_unit_scale(scale):
    docs, queries, _ = clustered()
    docs, queries = offset_cone(docs), offset_cone(queries)
    types = {t: TYPES[t] for t in ("Flat", "SQ8", "BIN")}
    unit = doctor.checkup(doctor.Sample(docs, queries, "cluster centers"), target=0.9, types=types)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an overflow in a repair's fit is a failure, not a warning
        scaled = doctor.checkup(
            doctor.Sample(docs * np.float32(scale), queries * np.float32(scale), "cluster centers"), 0.9, types
        )
    assert _figures(scaled) == _figures(unit)
    assert scaled.prescription == unit.prescription


def test_vectors_of_magnitude_1e30_are_measured_without_overflow(tmp_path, capsys):
    docs, queries, _ = clustered()
    x = np.concatenate([docs, queries])
    np.save(tmp_path / "unit.npy", x)
    np.save(tmp_path / "huge.npy", (x.astype(np.float64) * 1e30).astype(np.float32))
    found = {}
    for name in ("unit", "huge"):
        argv = ["doctor", "--vectors", str(tmp_path / f"{name}.npy"), "--types", "Flat,SQ8", "--json"]
        assert main([*argv, "--no-progress"]) == 0
        out, err = capsys.readouterr()
        assert "overflow" not in err, err
        found[name] = {r["repair"]: r["agreement"] for r in json.loads(out)["repairs"]}
    for repair in ("whiten", "standardize"):
        assert found["huge"][repair] == pytest.approx(found["unit"][repair], abs=0.02), (repair, found)


@pytest.mark.parametrize("how", ["truncated", "zeroed", "overwritten"])
def test_a_lance_dataset_with_a_damaged_fragment_is_one_line_and_exit_2(how, tmp_path, capsys):
    import pyarrow as pa

    from cone.indexing.lance import lancedb_module

    rows = np.random.default_rng(0).standard_normal((300, 16)).astype(np.float32)
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(rows.ravel()), 16)
    lancedb_module().connect(tmp_path).create_table("docs", pa.table({"vector": vectors}))
    fragment = next((tmp_path / "docs.lance" / "data").glob("*.lance"))
    size = fragment.stat().st_size
    if how == "truncated":
        os.truncate(fragment, size // 2)
    else:
        fragment.write_bytes(bytes(size) if how == "zeroed" else np.random.default_rng(1).bytes(size))
    assert main(["doctor", "--index", str(tmp_path / "docs.lance"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"--index {tmp_path / 'docs.lance'}: LanceDB cannot read it" in err and "\n" not in err, err
    assert "/rustc/" not in err, err


@pytest.mark.parametrize(
    ("scale", "said"), [(1e30, "length 1e+30, whose float32 products overflow"), (1e-30, "vanish")]
)
def test_an_index_of_vectors_at_a_scale_no_float32_product_holds_is_refused_naming_it(scale, said, tmp_path, capsys):
    import faiss

    docs, _, _ = clustered()
    vectors = (docs / np.linalg.norm(docs, axis=1, keepdims=True)).astype(np.float64) * scale
    index = faiss.IndexFlatIP(DIM)
    index.add(vectors.astype(np.float32))
    faiss.write_index(index, str(tmp_path / "scaled.faiss"))
    assert main(["doctor", "--index", str(tmp_path / "scaled.faiss"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert said in err and "\n" not in err, err
