"""A pgvector table as its users build it from pgvector's README, for ``cone doctor --index postgresql://...``:
SciFact's corpus under a model (MiniLM by default; ``--inject cone:0.99`` for the synthetic cone) in a table
``docs (id bigint, embedding vector(d))`` with the README's binary quantization, an HNSW expression index on
``binary_quantize(embedding)::bit(d)`` with ``bit_hamming_ops`` (its queries re-rank the top R by the float
vectors), on cone's embedded Postgres in OUT/pgdata (or a server of yours: ``--dsn``).

Writes OUT/vectors.npy, queries.npy and qrels.tsv as benchmarks/doctor_indexes.py does (the corpus vectors through
cone's embedding cache), then prints the ``--index`` location of the table (without a password).

Usage: python benchmarks/doctor_pgvector.py OUT [--inject cone:0.99] [--model minilm] [--layer 12] [--dsn postgresql://...]
"""

from __future__ import annotations

from doctor_indexes import vectors_parser, write_vectors

from cone.indexing.pgvector_store import COPY_HEADER, COPY_TRAILER, Server, _redacted, copy_rows

TABLE = "docs"


def main() -> None:
    parser = vectors_parser(__doc__)
    parser.add_argument("--dsn", help="a server of yours (default: cone's embedded one in OUT/pgdata)")
    args = parser.parse_args()
    docs, _ = write_vectors(args.out, args.model, args.inject, args.layer)
    n, dim = docs.shape
    data = (args.out / "pgdata").resolve()
    server = Server(_redacted(args.dsn), dsn=args.dsn) if args.dsn else Server("embedded", data=data)
    with server.connect() as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute(f"DROP TABLE IF EXISTS {TABLE}")
        conn.execute(f"CREATE TABLE {TABLE} (id bigint PRIMARY KEY, embedding vector({dim}))")
        with conn.cursor().copy(f"COPY {TABLE} (id, embedding) FROM STDIN WITH (FORMAT BINARY)") as copy:
            copy.write(COPY_HEADER + copy_rows(0, docs, "vector") + COPY_TRAILER)
        bits = f"(binary_quantize(embedding)::bit({dim})) bit_hamming_ops"
        conn.execute(f"CREATE INDEX {TABLE}_bits ON {TABLE} USING hnsw ({bits})")
    where = f"your DSN?table={TABLE}" if args.dsn else f"postgresql://postgres@/postgres?host={data}&table={TABLE}"
    print(f"{n:,} vectors of d {dim} ({args.inject}) in table {TABLE}; cone doctor --index '{where}'")


if __name__ == "__main__":
    main()
