"""``cone doctor --index postgresql://...?table=T``: a user's own pgvector table, on the embedded server that
tests/test_pgvector.py starts (its session fixture), read in a read-only session, repaired in pgvector's terms, and
with --fix an index made beside the user's. Small data: 600 vectors of d 32 in a synthetic cone (every sign bit
the same), as tests/test_toy_store.py's doctor test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import psutil
import pytest
from test_pgvector import connect, pg_data  # noqa: F401 -- the session's embedded server

from cone.cli import main
from cone.indexing.pgvector_store import COPY_HEADER, COPY_TRAILER, copy_rows

pgserver = pytest.importorskip("pgserver")

DIM = 32


def dsn_of(pg_data: Path, user: str = "postgres", password: str = "", database: str = "postgres", **query) -> str:  # noqa: F811
    """The embedded server's URI, as another role or database, with the doctor's query parameters."""
    parts = urlsplit(pgserver.get_server(pg_data).get_uri())
    params = "&".join([parts.query, *(f"{k}={v}" for k, v in query.items())])
    return urlunsplit(parts._replace(netloc=f"{user}:{password}@", path=f"/{database}", query=params))


def coned_table(conn, name: str, index: str | None = "binary") -> None:
    """600 rows of a 32-d cone (a common offset of 3 under unit noise), the binary recipe's index on them."""
    vectors = np.random.default_rng(0).standard_normal((600, DIM)).astype(np.float32) + 3.0
    conn.execute(f'DROP TABLE IF EXISTS "{name}"')
    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    conn.execute(f'CREATE TABLE "{name}" (id bigint PRIMARY KEY, embedding vector({DIM}))')
    with conn.cursor().copy(f'COPY "{name}" (id, embedding) FROM STDIN WITH (FORMAT BINARY)') as copy:
        copy.write(COPY_HEADER + copy_rows(0, vectors, "vector") + COPY_TRAILER)
    if index == "binary":
        conn.execute(
            f'CREATE INDEX "{name}_bits" ON "{name}" USING hnsw ((binary_quantize(embedding)::bit({DIM})) '
            "bit_hamming_ops)"
        )


def catalog(conn, table: str) -> list[tuple]:
    """The table's file and every index on it with its definition: what a read-only doctor leaves as it was."""
    return conn.execute(
        "SELECT c.relfilenode, i.relname, pg_get_indexdef(i.oid) FROM pg_class c LEFT JOIN pg_index x ON "
        "x.indrelid = c.oid LEFT JOIN pg_class i ON i.oid = x.indexrelid WHERE c.relname = %s ORDER BY 2",
        (table,),
    ).fetchall()


def test_a_users_binary_recipe_under_a_cone_is_read_only_measured_and_fixed_beside_it(pg_data, capsys):  # noqa: F811
    with connect(pg_data) as conn:
        coned_table(conn, "docs")
        conn.execute("DROP ROLE IF EXISTS reader")
        conn.execute("CREATE ROLE reader LOGIN")
        conn.execute("GRANT SELECT ON docs TO reader")
        conn.execute("REVOKE TEMP ON DATABASE postgres FROM PUBLIC")
        before = catalog(conn, "docs")
    try:
        # Read-only: a role that can only read the table (no temporary tables, nothing of its own) runs it whole.
        reader = dsn_of(pg_data, "reader", "s3cret", table="docs")
        assert main(["doctor", "--index", reader, "--json", "--no-progress"]) == 0
        out, err = capsys.readouterr()
        report = json.loads(out)
        assert "s3cret" not in out + err
    finally:
        with connect(pg_data) as conn:
            conn.execute("GRANT TEMP ON DATABASE postgres TO PUBLIC")
            after = catalog(conn, "docs")
    assert after == before
    index = report["index"]
    assert index["store"] == "pgvector" and index["dim"] == DIM and index["vectors"] == 600
    assert "bit_hamming_ops" in index["type"] and "binary_quantize" in index["type"] and index["metric"] == "cosine"
    assert report["recall_at_10"] < 0.5  # every sign bit is the same: Hamming's top 40 is chance
    repairs = {r["name"].split(" ")[0]: r for r in report["repairs"]}
    assert set(repairs) == {"halfvec", "binary"}
    centered = next(r for r in report["repairs"] if "centered" in r["name"])
    assert centered["recall_at_10"] > report["recall_at_10"] + 0.2 and centered["p"] < 0.05
    assert 'binary_quantize(l2_normalize("embedding" - \'[' in centered["how"]  # the SQL, the mean in it
    assert 'CREATE INDEX CONCURRENTLY NAME ON "docs" USING hnsw' in centered["how"]
    prescribed = report["prescription"]
    assert prescribed is not None and prescribed["recall_at_10"] > report["recall_at_10"] and prescribed["p"] < 0.05

    # --fix as the reader: refused in one line (it may not create an index), nothing made
    assert main(["doctor", "--index", reader, "--fix", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "s3cret" not in err and "owner" in err
    # --fix as the table's owner: the prescribed index beside the user's, measured as built there
    owner = dsn_of(pg_data, table="docs")
    assert main(["doctor", "--index", owner, "--fix", "docs_fixed", "--json", "--no-progress"]) == 0
    fixed = json.loads(capsys.readouterr().out)["fixed"]
    assert fixed["repair"] == prescribed["name"] and "index docs_fixed" in fixed["path"]
    assert fixed["recall_at_10"] > report["recall_at_10"] + 0.2 and fixed["p"] < 0.05
    with connect(pg_data) as conn:
        now = catalog(conn, "docs")
    assert [row for row in now if row[1] != "docs_fixed"] == before  # the user's index untouched
    assert any(row[1] == "docs_fixed" and "CREATE INDEX docs_fixed ON public.docs USING hnsw" in row[2] for row in now)
    # the text: the index, its recall, the prescription with its SQL
    assert main(["doctor", "--index", owner.replace("table=docs", "table=docs&index=docs_bits"), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "INDEX: pgvector hnsw (bit_hamming_ops)" in text and "PRESCRIPTION: " in text
    assert 'CREATE INDEX CONCURRENTLY NAME ON "docs"' in text


def test_a_healthy_index_needs_nothing_and_a_table_without_an_index_is_exact(pg_data, capsys):  # noqa: F811
    with connect(pg_data) as conn:
        coned_table(conn, "plain", index=None)
        conn.execute("CREATE INDEX plain_hnsw ON plain USING hnsw (embedding vector_l2_ops)")
        coned_table(conn, "scanned", index=None)
    assert main(["doctor", "--index", dsn_of(pg_data, table="plain"), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "hnsw (vector_l2_ops) on embedding, metric l2" in text and "PRESCRIPTION: none needed" in text
    assert main(["doctor", "--index", dsn_of(pg_data, table="plain"), "--json", "--no-progress"]) == 0
    repairs = {r["name"]: r for r in json.loads(capsys.readouterr().out)["repairs"]}
    # another operator class changes the exact ranking of rows that are not unit length: its ceiling says how much
    other = repairs["opclass vector_cosine_ops (hnsw)"]
    assert other["exact_kept"] < 0.9 and other["recall_at_10"] <= other["exact_kept"] + 0.05
    assert repairs["opclass vector_ip_ops (hnsw)"]["exact_kept"] < other["exact_kept"]
    assert main(["doctor", "--index", dsn_of(pg_data, table="scanned"), "--json", "--no-progress"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["recall_at_10"] == 1.0 and report["repairs"] == [] and "sequential scan" in report["index"]["type"]


def refused(argv: list[str], capsys) -> str:
    """The one line a bad --index gets (exit 2), checked to be one line."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    return captured.err


def test_faults_are_one_line_each_and_never_show_the_password(pg_data, tmp_path, capsys):  # noqa: F811
    with connect(pg_data) as conn:
        coned_table(conn, "faulty", index=None)
        conn.execute("ALTER TABLE faulty ADD COLUMN scores real[], ADD COLUMN loose vector")
        conn.execute("UPDATE faulty SET loose = CASE WHEN id % 2 = 0 THEN '[1,2,3]'::vector ELSE '[1,2]'::vector END")
        conn.execute("DROP ROLE IF EXISTS locked")
        conn.execute("CREATE ROLE locked LOGIN PASSWORD 'right-one'")
        conn.execute("DROP DATABASE IF EXISTS novector")
        conn.execute("CREATE DATABASE novector")
        hba = Path(conn.execute("SHOW hba_file").fetchone()[0])
    saved = hba.read_text()
    hba.write_text("local all locked scram-sha-256\n" + saved)  # this role alone must give its password
    try:
        with connect(pg_data) as conn:
            conn.execute("SELECT pg_reload_conf()")
        wrong = dsn_of(pg_data, "locked", "wr0ng-s3cret", table="faulty")
        err = refused(["doctor", "--index", wrong], capsys)
        assert "password authentication failed" in err and "wr0ng-s3cret" not in err
    finally:
        hba.write_text(saved)
        with connect(pg_data) as conn:
            conn.execute("SELECT pg_reload_conf()")
    err = refused(["doctor", "--index", dsn_of(pg_data, database="novector", table="t")], capsys)
    assert "no pgvector extension (vector)" in err
    err = refused(["doctor", "--index", dsn_of(pg_data, table="faulty", column="scores")], capsys)
    assert "column scores is real[], not pgvector's vector or halfvec" in err
    err = refused(["doctor", "--index", dsn_of(pg_data, table="faulty", column="loose")], capsys)
    assert "column loose has no one dimension (its rows': 2, 3)" in err
    queries = tmp_path / "q.npy"
    np.save(queries, np.ones((5, DIM + 1), dtype=np.float32))
    faulty = dsn_of(pg_data, table="faulty", column="embedding")
    err = refused(["doctor", "--index", faulty, "--queries", str(queries)], capsys)
    assert f"has {DIM + 1} dimensions, the vectors {DIM}" in err
    err = refused(["doctor", "--index", dsn_of(pg_data, table="docs; DROP TABLE faulty")], capsys)
    assert "no such table" in err
    with connect(pg_data) as conn:
        assert conn.execute("SELECT to_regclass('faulty')").fetchone()[0] is not None
    err = refused(["doctor", "--index", dsn_of(pg_data, table="faulty")], capsys)
    assert "name the column" in err and "embedding, loose" in err
    assert "name the table" in refused(["doctor", "--index", dsn_of(pg_data, password="s3cret")], capsys)
    err = refused(["doctor", "--index", "mysql://me:s3cret@host/db?table=t"], capsys)
    assert "no store reads mysql://" in err and "s3cret" not in err


@pytest.mark.slow
def test_the_embedded_servers_table_is_read_with_the_server_stopped_it_is_started(pg_data):  # noqa: F811
    """A command run while cone's embedded server is stopped (a fresh process, as a user's): the DSN's host is its
    data folder, so the doctor starts it, as the store does."""
    with connect(pg_data) as conn:
        coned_table(conn, "stopped", index=None)
        conn.execute("CREATE INDEX stopped_ivf ON stopped USING ivfflat (embedding vector_ip_ops) WITH (lists = 4)")
    server = pgserver.get_server(pg_data)
    postmaster = psutil.Process(server.get_pid())
    postmaster.terminate()  # Postgres's smart shutdown: the data folder stays, the socket goes
    postmaster.wait(30)
    try:
        location = f"postgresql://postgres@/postgres?host={pg_data}&table=stopped"
        argv = [sys.executable, "-m", "cone", "doctor", "--index", location, "--json", "--no-progress"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    finally:
        server.ensure_postgres_running()  # the command stopped the server it started when it exited
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert "ivfflat (vector_ip_ops)" in report["index"]["type"] and report["index"]["metric"] == "dot"
    assert report["index"]["params"]["lists"] == "4" and report["index"]["params"]["ivfflat.probes"] == "1"
