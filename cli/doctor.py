"""``cone doctor``: is my space a cone, what will my index lose, and what do I do?"""

from __future__ import annotations

import argparse
import errno
import os
import sys
import tempfile
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
from tqdm import tqdm

from cone.cli.geometry import load_matrix
from cone.cli.options import (
    LAYER_HELP,
    add_checkpoints_option,
    add_progress_option,
    add_runtime_options,
    index_types,
    layer,
    positive_int,
    runtime_for,
)
from cone.data.loaders import data_dir, load_beir, read_documents, read_qrels
from cone.encoders.registry import ENCODER_NAMES, load_encoder
from cone.errors import InputError
from cone.eval import doctor, index_doctor
from cone.eval.figures import doctor_figure
from cone.geometry import as_matrix
from cone.indexing import postprocess as pp
from cone.indexing.dense import corpus_vectors
from cone.indexing.factory import open_user_index
from cone.indexing.spec import model_spec
from cone.output import dump_json, native_stderr_collected, table

REPORT = "doctor.json"
FIGURE = "doctor.png"


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "doctor",
        help="say whether a space is a cone, what each index type loses on it, and which repair fixes it",
        description="Measure a sample of your vectors (from a model and a corpus, or a saved .npy matrix): the "
        "instruments and what they name (a cone, rogue dimensions, low rank); then, for every index type (Flat, "
        "SQfp16, SQ8, PQ, BIN, BIN+rescore, RaBitQ, HNSW, IVF, and LanceDB's where it is installed) as is and after "
        "every repair (center, whiten, abtt:3, standardize), recall@10 against exact search of the same vectors and "
        "the bytes each type keeps per vector; and what each repair does to exact search itself. Prescribes the "
        "cheapest type + repair that keeps recall@10 at --target (a repair only where it lets a cheaper type pass "
        "and keeps the model's ranking). No qrels needed; a BEIR folder's test queries and qrels add nDCG@10.",
    )
    source = p.add_mutually_exclusive_group()
    source.add_argument("--model", help=f"the encoder: {', '.join(ENCODER_NAMES)} or st:PATH")
    source.add_argument(
        "--vectors",
        type=Path,
        help="a saved (N, d) .npy matrix of document vectors instead; with --index, the vectors the index was built "
        "from (row i = id i), where it keeps no float vectors",
    )
    p.add_argument(
        "--index",
        help="the index you already have, measured as it is: a FAISS index file (IndexPreTransform chains and binary "
        "indexes too), a Lance dataset folder or a LanceDB folder (with --table), a USearch .usearch file, a Qdrant "
        "Edge shard folder, a SQLite file (.db, .sqlite, .sqlite3) with a sqlite-vec vec0 table (with --table), or a "
        "pgvector table: postgresql://USER:PASSWORD@HOST/DB?table=T&column=C (&index=NAME where the column has "
        "several; for the binary recipe &rescore=R, default 40, and &metric= of its re-rank, default cosine), read "
        "in a read-only session (the password is never printed); cone's embedded server's tables: "
        "postgresql://postgres@/postgres?host=DATA_FOLDER&table=T (started if it is not running)",
    )
    p.add_argument(
        "--table",
        help="with --index on a LanceDB folder or a SQLite file: the table (default: its only one); on a "
        "postgresql:// DSN, the table where the DSN names none (?table=T)",
    )
    p.add_argument(
        "--fix",
        nargs="?",
        const="",
        metavar="OUT",
        help="with --index: write the prescribed repair there (a FAISS file, a Lance dataset folder NAME.lance, a "
        ".usearch file, a Qdrant shard folder, a SQLite file) and measure it as read back; on a pgvector table, "
        "create the prescribed index beside yours (CREATE INDEX CONCURRENTLY, named OUT or TABLE_REPAIR_cone; "
        "nothing dropped or altered) and measure it as built; the index you have is never modified",
    )
    p.add_argument(
        "--corpus",
        type=Path,
        help="with --model: a BEIR folder (its test queries are the queries), a .jsonl of {_id, text[, title]} "
        "records, or a text file of one document a line",
    )
    p.add_argument("--sample", type=positive_int, default=5000, help="documents measured (default %(default)s)")
    p.add_argument(
        "--queries",
        type=queries_option,
        default=200,
        help="how many queries (the dataset's, else documents held out of the sample; with --index, documents of the "
        "index; default %(default)s), or a .npy matrix of query vectors (with --vectors or --index)",
    )
    p.add_argument(
        "--qrels",
        type=Path,
        help="with --vectors and --queries Q.npy: relevance judgments (BEIR's TSV: query-id, corpus-id, score, with "
        "its header; the ids are row numbers of Q.npy and of --vectors), so each repair is judged by nDCG@10",
    )
    p.add_argument("--target", type=float, default=0.95, help="recall@10 to keep (default %(default)s)")
    p.add_argument(
        "--types",
        type=index_types,
        default=None,
        help="index types to try, comma-separated (default: Flat, SQfp16, SQ8, PQ<d/8>, BIN, BIN+rescore:40, "
        "RaBitQ, HNSW32, IVF<N/100>,Flat)",
    )
    p.add_argument(
        "--inject",
        default="none",
        help="a synthetic degradation applied to the vectors first (cone:0.99, rogue:2:30): to see the doctor "
        "find what is known to be there",
    )
    p.add_argument("--layer", type=layer, default="last", help=f"which space of the model: {LAYER_HELP}")
    p.add_argument("--seed", type=int, default=0, help="of the sample (default 0)")
    p.add_argument("--out", type=Path, help=f"folder for {REPORT} and {FIGURE} (recall vs bytes per vector)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    add_runtime_options(p)
    add_checkpoints_option(p)
    add_progress_option(p)
    p.set_defaults(handler=run_doctor)


def queries_option(text: str) -> int | Path:
    """``--queries 200`` (how many) or ``--queries Q.npy`` (the query vectors)."""
    return positive_int(text) if text.strip().lstrip("-").isdigit() else Path(text)


def _queries_file(args: argparse.Namespace) -> Path:
    return args.queries if isinstance(args.queries, Path) else Path("Q.npy")


def _sample(args: argparse.Namespace) -> doctor.Sample:
    if args.vectors is not None:
        if args.corpus is not None:
            raise InputError("--corpus goes with --model; --vectors are measured as they are")
        vectors = doctor.check_vectors(load_matrix(args.vectors), str(args.vectors))
        if args.types is not None:
            doctor.check_types(args.types, vectors.shape[1])
        if not isinstance(args.queries, Path):
            return doctor.split_vectors(vectors, args.sample, args.queries, args.seed)
        queries = _query_matrix(args.queries, vectors.shape[1])
        qrels = None if args.qrels is None else read_qrels(args.qrels)
        return doctor.judged_vectors(vectors, queries, qrels, args.sample, args.seed, str(args.queries))
    if args.corpus is None:
        raise InputError("--model needs --corpus (a BEIR folder, a .jsonl or a text file of documents)")
    if model_spec(args.model).lexical:
        raise InputError(f"{args.model} has no vectors to doctor; name a dense model")
    documents = read_documents(args.corpus)  # a bad corpus is refused before the model loads
    is_beir = args.corpus.is_dir() and (args.corpus / "qrels" / "test.tsv").is_file()
    dataset = load_beir(args.corpus.parent, str(args.corpus.resolve())) if is_beir else None
    runtime = runtime_for(args.backend, args.quantize, args.model, data_dir())
    encoder = load_encoder(args.model, args.checkpoints, args.layer, runtime)
    if args.types is not None:
        doctor.check_types(args.types, encoder.dim)  # before any encoding

    def encode(texts: list[str], role: str) -> np.ndarray:
        return encoder.encode(texts, progress=not args.no_progress, role=role)

    doc_vectors = None
    if dataset is not None and len(dataset.corpus) <= 2 * args.sample:
        # A corpus near the sample's size is encoded whole, through the embedding cache the index and the eval
        # share: a second checkup, or an index of the same corpus, encodes nothing again.
        every = corpus_vectors(encoder, dataset, progress=not args.no_progress)
        row = {doc_id: number for number, doc_id in enumerate(sorted(dataset.corpus))}

        def doc_vectors(ids: list[str]) -> np.ndarray:
            return every[[row[doc_id] for doc_id in ids]]

    return doctor.sample_corpus(documents, encode, args.sample, args.queries, dataset, args.seed, doc_vectors)


def _injected(sample: doctor.Sample, spec: str) -> doctor.Sample:
    fitted = pp.fit(sample.docs, spec)  # fitted on the documents, applied to both, as an index would
    return doctor.Sample(
        pp.apply(sample.docs, fitted), pp.apply(sample.queries, fitted), sample.queries_from, sample.ndcg
    )


def check_writable(folder: Path, option: str, given: Path | None = None) -> None:
    """``folder`` can take files, found before any work (not after a whole checkup, as a traceback) and without
    creating it: the nearest folder on its way that exists is tried with a temporary file, which leaves nothing
    behind, so a refusal of any input leaves no folder made for its output. ``option`` and ``given``: what the
    user passed (``--out DIR``, or ``--fix OUT``, whose parent is ``folder``), as the refusal names it."""
    there = folder
    while not there.exists() and there != there.parent:
        there = there.parent
    try:
        if there.exists() and not there.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
        with tempfile.TemporaryFile(dir=there):
            pass
    except OSError as exc:
        raise InputError(f"{option} {given or folder}: cannot write there ({exc.strerror or exc})") from None


def summarized_warnings(caught: list[warnings.WarningMessage], native: list[str]) -> str | None:
    """The libraries' warnings (Python's, and the lines native code wrote to stderr) in one line: how many, of
    which kinds, the most frequent."""
    said = [f"{w.category.__name__}: {str(w.message).splitlines()[0][:100]}" for w in caught]
    said += [line.strip()[:100] for line in native]
    if not said:
        return None
    kinds = Counter(said)
    common, count = kinds.most_common(1)[0]
    kinds_said = f"{len(kinds)} kind{'s' * (len(kinds) > 1)}"
    return f"{len(said):,} warnings from libraries while measuring ({kinds_said}; most often, {count:,}×: {common})"


def run_doctor(args: argparse.Namespace) -> int:
    if args.index is not None:
        return run_index_doctor(args)
    for option in ("table", "fix"):
        if getattr(args, option) is not None:
            raise InputError(f"--{option} goes with --index")
    if args.model is None and args.vectors is None:
        raise InputError("name what to measure: --model (with --corpus), --vectors X.npy or --index PATH")
    if isinstance(args.queries, Path) and args.vectors is None:
        raise InputError("--queries Q.npy goes with --vectors or --index; with --model, --queries is a number")
    if args.qrels is not None and not isinstance(args.queries, Path):
        raise InputError("--qrels goes with --vectors and --queries Q.npy (its ids are their row numbers)")
    inject = pp.parse(args.inject)
    doctor.check_target(args.target)  # before any encoding
    if args.out is not None:
        check_writable(args.out, "--out")
    with warnings.catch_warnings(record=True) as caught, native_stderr_collected() as native:
        warnings.simplefilter("always")
        sample = _sample(args)
        if inject != "none":
            sample = _injected(sample, inject)
        total = doctor.steps(args.types, len(sample.docs), sample.docs.shape[1])
        with tqdm(total=total, desc="index types x repairs", unit="build", disable=args.no_progress) as bar:
            result = doctor.checkup(sample, args.target, args.types, lambda: bar.update(1))
    summary = summarized_warnings(caught, native)
    if summary is not None:
        print(summary, file=sys.stderr)
    payload = {"source": args.model or str(args.vectors), "injected": inject, **result.to_json()}
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / REPORT).write_text(dump_json(payload) + "\n")
        doctor_figure(result.trials, result.target, args.out / FIGURE)
    if args.json:
        print(dump_json(payload))
    else:
        print(render(result, args.out, str(args.vectors or "X.npy"), str(_queries_file(args))))
    return 0


def _findings(d: doctor.Diagnosis) -> list[str]:
    lines = [
        f"random pairs' cosine {d.pair_cosine_mean:.3f} ± {d.pair_cosine_std:.3f}; top principal direction "
        f"{d.geometry.top_pc_share:.1%} of the variance; effective rank {d.geometry.effective_rank:.0f} of "
        f"{d.geometry.d}; anisotropy {d.geometry.anisotropy:.3f}"
    ]
    if "cone" in d.findings:
        lines.append(f"CONE: unrelated documents score {d.pair_cosine_mean:.2f} on average (healthy: near 0)")
    if "rogue dimensions" in d.findings:
        shown = ", ".join(f"{j} ({s:.1%})" for j, s in zip(d.rogue_dims[:8], d.rogue_shares[:8], strict=False))
        lines.append(f"ROGUE DIMENSIONS: coordinates {shown} of the variance each (fair share {1 / d.geometry.d:.2%})")
    if "low rank" in d.findings:
        lines.append(f"LOW RANK: the vectors use {d.geometry.effective_rank:.0f} of {d.geometry.d} directions")
    if not d.findings:
        lines.append("no cone, no rogue dimension, no rank collapse")
    return lines


def _suspect(result: doctor.Checkup, source: str, queries: str) -> list[str]:
    d = result.diagnosis
    named = ", ".join(f"{j} ({s:.1%})" for j, s in zip(d.rogue_dims[:8], d.rogue_shares[:8], strict=False))
    standardize = next(r for r in result.repairs if r.repair == "standardize")
    return [
        f"EXACT SEARCH ITSELF IS SUSPECT: coordinates {named} of the variance decide most of every cosine, and every "
        "recall above is measured against today's exact top 10, rogue coordinates and all.",
        f"  standardize (each coordinate to unit variance) keeps {standardize.agreement:.3f} of that top 10: it "
        "changes which documents come first, and only relevance can say which ranking is right (on MiniLM, two "
        "rogue coordinates x30 broke exact search and standardizing repaired it: docs/results.md).",
        f"  settle it: cone doctor --vectors {source} --queries {queries} --qrels qrels.tsv (query-id and corpus-id: "
        "row numbers of the queries and of the vectors)",
    ]


def render(result: doctor.Checkup, out: Path | None, source: str = "X.npy", queries: str = "Q.npy") -> str:
    repairs = list(dict.fromkeys(t.repair for t in result.trials))
    rows = []
    for factory in dict.fromkeys(t.factory for t in result.trials):
        mine = {t.repair: t for t in result.trials if t.factory == factory}
        row = {"index type": factory, "bytes/vector": round(mine["none"].bytes_per_vector, 1)}
        row |= {f"recall {r}": mine[r].recall_at_10 for r in repairs}
        if mine["none"].ndcg_at_10 is not None:  # every repair's is in --json and doctor.json
            row["nDCG@10 as is"] = mine["none"].ndcg_at_10
        rows.append(row)
    effects = []
    for r in result.repairs[1:]:
        line = f"  {r.repair}: keeps {r.agreement:.3f} of today's exact top 10"
        if r.ndcg_delta is not None:
            line += f"; exact nDCG@10 {r.ndcg_at_10:.4f} ({r.ndcg_delta:+.4f}, p {r.ndcg_p:.3g})"
        effects.append(line + ("" if r.acceptable(result.target) else " -- changes the ranking: not prescribed"))
    lines = [
        f"{result.n_docs:,} documents, {result.n_queries:,} queries ({result.queries_from})",
        *_findings(result.diagnosis),
        "",
        "recall@10 of each index type against exact search of the same vectors, as is and repaired",
        "(1.0 = the index loses nothing):",
        table(rows, list(rows[0])),
        "",
        "what each repair does to exact search itself:",
        *effects,
        "",
    ]
    lines += [f"not measured: {factory} ({why})" for factory, why in result.untried.items()]
    if result.exact_suspect:
        lines += [*_suspect(result, source, queries), ""]
    p = result.prescription
    if p is None:
        lines.append(f"PRESCRIPTION: no type keeps recall@10 ≥ {result.target:g}; keep Flat (exact) vectors")
    else:
        repair = "no repair needed" if p.repair == "none" else f"repair: --postprocess {p.repair}"
        lines.append(
            f"PRESCRIPTION: --index-factory {p.factory}, {repair} ({p.bytes_per_vector:,.0f} bytes per vector, "
            f"{p.mb_per_million:,.0f} MB per million vectors): {p.reason}"
        )
    if out is not None:
        lines.append(f"report and figure: {out / REPORT}, {out / FIGURE}")
    return "\n".join(lines)


def _query_matrix(path: Path, dim: int) -> np.ndarray:
    matrix = load_matrix(path)  # a missing or unreadable file is refused naming it
    try:
        queries = as_matrix(matrix)
    except InputError as exc:
        raise InputError(f"--queries {path}: {exc}") from None
    if queries.shape[1] != dim:
        raise InputError(f"--queries {path} has {queries.shape[1]} dimensions, the vectors {dim}")
    return np.ascontiguousarray(queries, dtype=np.float32)


def run_index_doctor(args: argparse.Namespace) -> int:
    """``--index PATH``: the user's own index, measured as it is, and the repair in its store's terms."""
    for option, value in (("model", args.model), ("corpus", args.corpus), ("types", args.types), ("qrels", args.qrels)):
        if value is not None:
            raise InputError(f"--{option} goes without --index (the index is measured as it is)")
    if args.inject != "none":
        raise InputError("--inject goes without --index (the index is measured as it is)")
    doctor.check_target(args.target)
    if args.out is not None:
        check_writable(args.out, "--out")
    fix = args.fix
    if fix is not None and "://" not in args.index:  # a file or folder to write (a server's repair is made there)
        if not fix:
            raise InputError("--fix OUT: name the file or folder to write the repair to")
        fix = Path(fix)
        if fix.exists():
            raise InputError(f"--fix {fix}: already exists; name a new file or folder")
        check_writable(fix.parent, "--fix", fix)
    found = open_user_index(args.index, args.table)
    given = None if args.vectors is None else doctor.check_vectors(load_matrix(args.vectors), str(args.vectors))
    vectors = index_doctor.index_vectors(found, given)
    if isinstance(args.queries, Path):
        queries, queries_from = _query_matrix(args.queries, found.dim), str(args.queries)
    else:
        queries = index_doctor.sample_queries(vectors, args.queries, args.seed)
        queries_from = f"{len(queries):,} of the indexed vectors (seed {args.seed}), each also a document"
    with warnings.catch_warnings(record=True) as caught, native_stderr_collected() as native:
        warnings.simplefilter("always")
        result = index_doctor.checkup_index(found, vectors, queries, queries_from, args.target, fix)
    summary = summarized_warnings(caught, native)
    if summary is not None:
        print(summary, file=sys.stderr)
    payload = {"vectors_from": str(args.vectors) if args.vectors else "the index", **result.to_json()}
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / REPORT).write_text(dump_json(payload) + "\n")
    print(dump_json(payload) if args.json else render_index(result, args.vectors, args.out))
    return 0


def _mb(code_bytes: float) -> str:
    return f"{code_bytes:,.4g} bytes of code per vector, {code_bytes * 1e6 / 2**20:,.1f} MB per million"


def render_index(result: index_doctor.IndexCheckup, vectors: Path | None, out: Path | None) -> str:
    f = result.found
    params = ", ".join(f"{k} {v}" for k, v in f.params.items())
    exact = "the cosine of the float vectors its bits were taken from" if f.metric == "hamming" else f.metric
    lines = [
        f"INDEX: {f.store} {f.kind}, metric {f.metric}, {f.ntotal:,} vectors of d {f.dim}; {params}",
        f"  {_mb(f.code_bytes)}",
        f"vectors: {vectors if vectors is not None else 'kept in the index'}; queries: {result.queries_from}",
        *_findings(result.diagnosis),
        "",
        f"recall@10 of this index against exact search ({exact}) of the same vectors: {result.recall_at_10:.3f}",
    ]
    if result.repairs:
        rows = [
            {
                "repair": r.name,
                "bytes/vector": round(r.code_bytes, 2),
                "recall@10": r.recall_at_10,
                "p vs today": r.p,
                "its exact top 10 keeps": r.exact_kept,
                "code change": r.code_change,
            }
            for r in result.repairs
        ]
        lines += [
            "",
            f"what {f.store}'s own repairs keep (each built and measured with the same queries; a centering "
            "changes the exact ranking itself: how much of today's top 10 its own exact search keeps is its ceiling):",
        ]
        lines.append(table(rows, list(rows[0])))
    lines.append("")
    p = result.prescription
    if result.recall_at_10 >= result.target:
        lines.append(
            f"PRESCRIPTION: none needed: this index keeps {result.recall_at_10:.3f} of exact search's top 10 "
            f"(target {result.target:g})"
        )
    elif p is None:
        lines.append(
            f"PRESCRIPTION: no repair {f.store} offers beats {result.recall_at_10:.3f} by the paired test; below "
            f"the target {result.target:g}, keep float vectors (an exact index or a wider codec)"
        )
    else:
        short = "" if p.recall_at_10 >= result.target else f" (still below the target {result.target:g})"
        lines.append(
            f"PRESCRIPTION: {p.name}: {p.how}. recall@10 {result.recall_at_10:.3f} -> {p.recall_at_10:.3f} "
            f"(p {p.p:.3g}; its own exact search keeps {p.exact_kept:.3f} of today's top 10){short}; "
            f"{_mb(p.code_bytes)} (today {f.code_bytes:,.4g}); code change: {p.code_change}"
        )
    if result.fixed is not None:
        x = result.fixed
        lines.append(
            f"FIXED: {x['path']} ({x['repair']}), read back: recall@10 {x['recall_at_10']:.3f}, "
            f"{_mb(x['code_bytes_per_vector'])}"
        )
    if out is not None:
        lines.append(f"report: {out / REPORT}")
    return "\n".join(lines)
