"""The sqlite-vec store (cone.indexing.sqlite_vec_store): vec0 tables in one database file, built in memory and
streamed, searched, written and opened again, and refused where the file or its table is not what was written."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cone.cli import main
from cone.errors import DamagedIndex, InputError
from cone.eval.metrics import overlap_at_k
from cone.geometry import unit_rows
from cone.indexing.factory import build_codes, read_codes
from cone.indexing.spec import parse_index_type
from cone.indexing.sqlite_vec_store import DB_FILE, connect

pytest.importorskip("sqlite_vec")
N, D = 300, 64


@pytest.fixture(scope="module")
def rows() -> np.ndarray:
    return unit_rows(np.random.default_rng(0).standard_normal((N, D))).astype(np.float32)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("sqlite:float@dot", "no inner product"),
        ("sqlite:bit@l2", "Hamming only"),
        ("sqlite:int8+rescore:10", "sqlite-vec types are"),
        ("sqlite:f16", "sqlite-vec types are"),
    ],
)
def test_types_vec0_does_not_have_are_refused_in_one_line(text, why):
    with pytest.raises(InputError, match=why) as refused:
        parse_index_type(text)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("text", ["sqlite:float@l2", "sqlite:float@cosine"])
def test_float_tables_are_exact_and_score_the_cosine(rows, text):
    codes = build_codes(rows, parse_index_type(text))
    scores, found = codes.search(rows[:20], 10)
    cosines = rows[:20] @ rows.T
    assert overlap_at_k(found, np.argsort(-cosines, axis=1)[:, :10]) == 1.0
    assert scores == pytest.approx(np.take_along_axis(cosines, found, 1), abs=1e-5)


def test_codes_lose_what_they_round_and_rescoring_wins_it_back(rows):
    exact = np.argsort(-(rows[:50] @ rows.T), axis=1)[:, :10]
    kept = {
        t: overlap_at_k(build_codes(rows, parse_index_type(t)).search(rows[:50], 10)[1], exact)
        for t in ("sqlite:int8@l2", "sqlite:bit", "sqlite:bit+rescore:100")
    }
    assert kept["sqlite:bit"] < kept["sqlite:bit+rescore:100"] and kept["sqlite:bit"] < kept["sqlite:int8@l2"]
    codes = build_codes(rows, parse_index_type("sqlite:bit"))
    assert codes.bytes_per_vector() < build_codes(rows, parse_index_type("sqlite:float")).bytes_per_vector() / 4


@pytest.mark.parametrize("text", ["sqlite:float@cosine", "sqlite:int8@l2", "sqlite:bit", "sqlite:bit+rescore:30"])
def test_a_written_table_is_opened_again_and_answers_the_same(rows, tmp_path, text):
    kind = parse_index_type(text)
    codes = build_codes(rows, kind)
    codes.write(tmp_path)
    again = read_codes(tmp_path, kind, D, "", False, codes.params)
    assert again.ntotal == N
    for (a_scores, a_rows), (b_scores, b_rows) in [(codes.search(rows[:10], 5), again.search(rows[:10], 5))]:
        assert np.array_equal(a_rows, b_rows) and a_scores == pytest.approx(b_scores)
    if text != "sqlite:bit":
        assert again.vectors() == pytest.approx(rows, abs=0.1 if "int8" in text else 1e-6)


def test_a_file_that_is_not_the_table_written_is_a_damaged_index(rows, tmp_path):
    kind = parse_index_type("sqlite:int8@cosine")
    codes = build_codes(rows, kind)
    (tmp_path / DB_FILE).write_bytes(b"not a database" * 100)
    with pytest.raises(DamagedIndex, match="not a readable SQLite database"):
        read_codes(tmp_path, kind, D, "", False, codes.params)
    (tmp_path / DB_FILE).unlink()
    build_codes(rows, parse_index_type("sqlite:float@cosine")).write(tmp_path)
    with pytest.raises(DamagedIndex, match=r"not vec0\(embedding int8\[64\] distance_metric=cosine\)"):
        read_codes(tmp_path, kind, D, "", False, codes.params)


def test_cone_index_builds_streams_and_evaluates_sqlite_vec(tiny_beir, tiny_checkpoints, tmp_path):
    argv = ["index", "--model", "baseline", "--dataset", "tiny", "--data-dir", str(tiny_beir), "--no-progress"]
    argv += ["--checkpoints", str(tiny_checkpoints), "--index-factory", "sqlite:int8@cosine"]
    assert main([*argv, "--out", str(tmp_path / "memory")]) == 0
    assert main([*argv, "--out", str(tmp_path / "stream"), "--stream", "--shard-size", "16"]) == 0
    (memory,), (streamed,) = (list((tmp_path / f).glob("*/" + DB_FILE)) for f in ("memory", "stream"))
    assert memory.parent.name == streamed.parent.name == "baseline-sqlite_int8_cosine"
    argv = ["eval", "--models", "baseline", "--dataset", "tiny", "--data-dir", str(tiny_beir), "--no-sts"]
    argv += ["--checkpoints", str(tiny_checkpoints), "--out", str(tmp_path / "eval"), "--no-progress"]
    assert main([*argv, "--store", "sqlite-vec"]) == 0
    rows = {r["factory"]: r for r in json.loads((tmp_path / "eval" / "report.json").read_text())["results"]}
    assert rows["sqlite:float@l2"]["metrics"]["recall_at_10_vs_flat"] == pytest.approx(1.0)
    assert {"sqlite:int8@l2", "sqlite:bit", "sqlite:bit+rescore:100"} <= set(rows)


def users_file(path, vectors: np.ndarray, element: str) -> None:
    """A user's own database: a vec0 table of the store's own quantizer, keys from 1 as SQLite numbers rows."""
    conn = connect(str(path))
    quantize = {"int8": "vec_quantize_int8(?, 'unit')", "bit": "vec_quantize_binary(?)"}[element]
    metric = " distance_metric=cosine" if element == "int8" else ""
    conn.execute(f"CREATE VIRTUAL TABLE docs USING vec0(embedding {element}[{vectors.shape[1]}]{metric})")
    rows = [(i + 1, v.tobytes()) for i, v in enumerate(vectors)]
    conn.executemany(f"INSERT INTO docs(rowid, embedding) VALUES (?, {quantize})", rows)
    conn.commit()
    conn.close()


@pytest.mark.parametrize("element", ["int8", "bit"])
def test_the_doctor_checks_a_users_vec0_table_and_repairs_it(tmp_path, capsys, element):
    rng = np.random.default_rng(1)
    m, x = rng.standard_normal(32), rng.standard_normal((600, 32))
    x = 0.99 * m / np.linalg.norm(m) + 0.14 * x / np.linalg.norm(x, axis=1, keepdims=True)  # a 0.99 cone
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    users_file(tmp_path / "mine.db", x, element)
    fix = tmp_path / "fixed.db"
    argv = ["doctor", "--index", str(tmp_path / "mine.db"), "--vectors", str(tmp_path / "x.npy"), "--fix", str(fix)]
    assert main([*argv, "--json", "--no-progress"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["index"]["store"] == "sqlite-vec" and report["index"]["type"] == f"vec0 {element}[32], exact KNN"
    repairs = {r["name"]: r for r in report["repairs"]}
    assert set(repairs) == {"float column", f"center ({element})"}
    assert repairs["float column"]["recall_at_10"] > report["recall_at_10"]
    assert repairs[f"center ({element})"]["recall_at_10"] > report["recall_at_10"]
    assert report["fixed"]["recall_at_10"] == report["prescription"]["recall_at_10"] and fix.is_file()


def test_a_file_that_is_not_a_database_or_a_table_without_vec0_columns_is_one_line(tmp_path, capsys):
    (tmp_path / "not.db").write_bytes(b"just text, not SQLite\n" * 50)
    assert main(["doctor", "--index", str(tmp_path / "not.db"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "not a SQLite database (file is not a database)" in err and len(err.splitlines()) == 1
    conn = connect(str(tmp_path / "plain.db"))
    conn.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, embedding BLOB)")
    conn.close()
    assert main(["doctor", "--index", str(tmp_path / "plain.db"), "--table", "docs", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "table 'docs' is not a vec0 table of sqlite-vec" in err and len(err.splitlines()) == 1
    assert main(["doctor", "--index", str(tmp_path / "plain.db"), "--no-progress"]) == 2
    assert "0 vec0 tables (none): name one with --table" in capsys.readouterr().err
