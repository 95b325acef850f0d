"""Evaluate every (model, post-processing) pair on one dataset through the indexes the service serves.

Retrieval goes through the same index folders as ``cone index`` and ``cone serve`` (built here when
missing, reused when their manifest still matches), so the eval measures exactly what a user queries.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path

import numpy as np

from cone.data.loaders import RetrievalDataset, StsPairs, load_beir, load_sts
from cone.encoders.base import QUERY, Encoder, Layer, LayeredEncoder, Runtime
from cone.encoders.cluster import encoder_for
from cone.encoders.registry import load_encoder
from cone.errors import InputError, ModelUnavailable
from cone.eval import metrics
from cone.eval.plan import ALL_LAYERS, EvalPlan
from cone.eval.recall import recall_sweep
from cone.eval.results import GEOMETRY_KEYS, STS_MEAN, EvalResult, Samples, sts_key, sts_name
from cone.geometry import pair_cosines, spread
from cone.indexing.dense import cache_corpus_layers, correct_corpus
from cone.indexing.index import SearchResult, VectorIndex
from cone.indexing.reuse import open_or_build_bm25, open_or_build_dense
from cone.indexing.spec import IndexSpec

RETRIEVE_K = 100
RANDOM_PAIRS = 20_000
QUICK_QUERIES, QUICK_DOCS, QUICK_STS_PAIRS = 50, 1000, 200


@dataclass
class EvalData:
    dataset: RetrievalDataset  # corpus, every query (hubness), test qrels (retrieval)
    sts: dict[str, StsPairs]  # name -> pairs; each reported apart, and their mean when there are several
    quick: bool


def quick_subset(ds: RetrievalDataset, sts: dict[str, StsPairs]) -> tuple[RetrievalDataset, dict[str, StsPairs]]:
    """The first 50 test queries, a 1,000-document corpus holding their relevant documents (the rest
    drawn with a fixed seed), and the first 200 pairs of each STS set: the whole path in minutes, not the real
    figures."""
    test = sorted(ds.qrels)[:QUICK_QUERIES]
    relevant = {d for q in test for d in ds.qrels[q] if d in ds.corpus}
    others = sorted(set(ds.corpus) - relevant)
    rng = np.random.default_rng(0)
    picked = rng.choice(len(others), size=max(0, min(len(others), QUICK_DOCS - len(relevant))), replace=False)
    keep = relevant | {others[i] for i in picked}
    subset = RetrievalDataset(
        name=f"{ds.name}-quick",
        corpus={d: ds.corpus[d] for d in sorted(keep)},
        queries={q: ds.queries[q] for q in test},
        qrels={q: {d: g for d, g in ds.qrels[q].items() if d in keep} for q in test},
    )
    n = QUICK_STS_PAIRS
    return subset, {name: StsPairs(p.sentence1[:n], p.sentence2[:n], p.scores[:n]) for name, p in sts.items()}


DEFAULT_STS = "stsb"  # STS-B test, under the data dir


def sts_names(paths: list[Path]) -> dict[str, Path]:
    """A short, unique name per STS file (its stem; with its folder when two stems agree)."""
    stems = [sts_name(Path(p).stem) for p in paths]
    named = {}
    for path, stem in zip(paths, stems, strict=True):
        name = stem if stems.count(stem) == 1 else sts_name(f"{Path(path).parent.name}_{stem}")
        if name in named:
            raise InputError(f"--sts names {path} twice")
        named[name] = Path(path)
    return named


def load_eval_data(
    root: Path, name: str, quick: bool = False, with_sts: bool = True, sts_files: list[Path] | None = None
) -> EvalData:
    """The BEIR dataset ``name`` (or path) and the STS sets: ``sts_files`` (CSV sentence1,sentence2,score), by
    default STS-B test; none when ``with_sts`` is false."""
    dataset = load_beir(root, name)
    if not dataset.qrels:
        raise InputError(f"dataset {name!r} under {root} has no test qrels to evaluate against")
    paths = sts_names(sts_files) if sts_files else {DEFAULT_STS: Path(root) / "stsb" / "test.csv"}
    sts = {key: load_sts(path) for key, path in paths.items()} if with_sts else {}
    if not any(g > 0 and d in dataset.corpus for docs in dataset.qrels.values() for d, g in docs.items()):
        raise InputError(f"dataset {name!r} under {root}: no test qrel with a score > 0 names a document of its corpus")
    if quick:
        dataset, sts = quick_subset(dataset, sts)
    return EvalData(dataset, sts, quick)


def build_indexes(
    plain: IndexSpec, data: EvalData, plan: EvalPlan, on_encoded: Callable[[int], None] | None = None
) -> list[Path]:
    """The exact (Flat) index of each of ``plan``'s runtimes and post-processings of a model (``plain``: its spec as
    parsed, ``EvalPlan.plain``; the lexical index has one) that ``run_eval`` reads, built where missing or stale
    and reused otherwise, and not evaluated: a service can answer from them before the eval runs. Their folders; a
    post-processing this model's space cannot take is left out (the eval gives its reason).

    ``on_encoded(n)``: told each batch of corpus documents encoded; it may raise to stop the build, and then
    nothing of the model is written (indexes are written after the encoding, each atomically)."""
    if plain.lexical:
        return [open_or_build_bm25(data.dataset, plan.indexes, plan.progress).folder]
    folders = []
    for runtime in plan.model_runtimes(plain):
        encoder = load_encoder(plain.model, plan.checkpoints, runtime=runtime, data_root=plan.data_root)
        for postprocess in plan.postprocesses:
            spec = IndexSpec(plain.model, postprocess=postprocess, layer=encoder.layer, runtime=runtime)
            corpus = partial(correct_corpus, encoder, data.dataset, spec.postprocess, plan.progress, on_encoded)
            with suppress(InputError):
                index = open_or_build_dense(encoder, data.dataset, spec, corpus, plan.indexes, plan.progress)
                folders.append(index.folder)
    return folders


def _similarity(
    qrels: dict, query_pos: dict[str, int], queries: np.ndarray, index: VectorIndex
) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    """Cosines of relevant (query, doc) pairs vs random ones, and what a global threshold can do."""
    docs = index.doc_vectors()
    row_of = {doc_id: row for row, doc_id in enumerate(index.docs.ids)}
    pairs = [(query_pos[q], row_of[d]) for q, rel in qrels.items() for d, g in rel.items() if g > 0 and d in row_of]
    qi, di = np.array(pairs).T
    relevant = (queries[qi].astype(np.float64) * docs[di]).sum(axis=1)
    test_rows = sorted({query_pos[q] for q in qrels})
    random = pair_cosines(queries[test_rows], docs, n_pairs=RANDOM_PAIRS)
    threshold, f1 = metrics.threshold_f1(relevant, random)
    rand, rel = spread(random), spread(relevant)
    values = {
        **{f"random_cos_{k}": v for k, v in rand.items()},
        **{f"relevant_cos_{k}": v for k, v in rel.items()},
        "separation": metrics.separation(relevant, random),
        "threshold": threshold,
        "threshold_f1": f1,
    }
    return values, random, relevant


@dataclass(frozen=True)
class EncodedEvalData:
    """One model layer's raw vectors of the queries (all, sorted by id) and of both sides of each STS set."""

    query_ids: list[str]
    queries: np.ndarray
    sts: dict[str, tuple[np.ndarray, np.ndarray]]


def encode_eval_data(
    encoder: LayeredEncoder, layers: list[Layer], data: EvalData, progress: bool
) -> dict[Layer, EncodedEvalData]:
    """Every query and STS sentence, each layer of ``layers`` from one forward pass; each post-processing then
    only re-applies its corpus-fitted correction."""
    query_ids = sorted(data.dataset.queries)
    texts = [data.dataset.queries[q] for q in query_ids]
    bounds = {}
    for name, pairs in data.sts.items():
        bounds[name] = len(texts)
        texts += pairs.sentence1 + pairs.sentence2
    # STS pairs are symmetric: both sides are encoded as queries (E5's model card: "query: " on both sides).
    found = encoder.encode_layers(texts, layers, progress=progress, role=QUERY)
    encoded = {}
    for layer, vectors in found.items():
        sts = {}
        for name, pairs in data.sts.items():
            start, n = bounds[name], len(pairs.scores)
            sts[name] = (vectors[start : start + n], vectors[start + n : start + 2 * n])
        encoded[layer] = EncodedEvalData(query_ids, vectors[: len(query_ids)], sts)
    return encoded


def _ranking(found: SearchResult, n_docs: int, query_ids: list[str], qrels: dict) -> tuple[dict, np.ndarray]:
    """Retrieval and hubness of one index's search over every query; also each test query's nDCG@10."""
    run = found.run(query_ids)
    values = {**metrics.retrieval(qrels, run), **metrics.hubness(found.rows, n_docs)}
    return values, metrics.per_query_ndcg(qrels, run)


def _exact_row(
    index: VectorIndex, found: SearchResult, data: EvalData, encoded: EncodedEvalData
) -> tuple[dict, Samples]:
    """Every metric of the exact (Flat) index, whose top rows the approximate types are measured against."""
    qrels = data.dataset.qrels
    values, ndcg = _ranking(found, len(index.docs), encoded.query_ids, qrels)
    query_pos = {q: i for i, q in enumerate(encoded.query_ids)}
    similarity, random, relevant = _similarity(qrels, query_pos, index.embed(encoded.queries), index)
    values |= similarity
    sts = {}
    for name, (first, second) in encoded.sts.items():
        sts[name] = (index.embed(first) * index.embed(second)).sum(axis=1)
        values[sts_key(name)] = metrics.sts_spearman(sts[name], data.sts[name].scores)
    if len(sts) > 1:
        values[STS_MEAN] = float(np.mean([values[sts_key(name)] for name in sts]))
    values |= _geometry(index)
    top = found.rows[:, : metrics.HUB_K]
    return values, Samples(ndcg, random, relevant, sts or None, top, len(index.docs))


def _approximate_row(
    index: VectorIndex, found: SearchResult, recall: float, data: EvalData, encoded: EncodedEvalData
) -> tuple[dict, Samples]:
    """Retrieval and hubness of an approximate or compressed index, and how much of the exact top 10 it keeps."""
    values, ndcg = _ranking(found, len(index.docs), encoded.query_ids, data.dataset.qrels)
    values["recall_at_10_vs_flat"] = recall
    values["bytes_per_vector"] = index.bytes_per_vector()
    values |= _geometry(index)
    return values, Samples(ndcg, top=found.rows[:, : metrics.HUB_K], n_docs=len(index.docs))


def _geometry(index: VectorIndex) -> dict[str, float]:
    """The instruments on the index's vectors before coding, and their mean random-pair cosine (what cone:C
    targets), as its build measured them."""
    values = {k: getattr(index.manifest.geometry, k) for k in GEOMETRY_KEYS}
    return values | {"doc_pair_cos_mean": index.manifest.random_pair_cosines.mean}


def evaluate_dense(
    encoder: Encoder,
    model: str,
    postprocesses: list[str],
    data: EvalData,
    plan: EvalPlan,
    encoded: EncodedEvalData,
) -> list[EvalResult]:
    """Every (post-processing, index type) row of one model layer, from its encoded queries and cached corpus: the
    types of one correction on the recall sweep, measured against its exact index over the test queries."""
    tested = [i for i, q in enumerate(encoded.query_ids) if q in data.dataset.qrels]

    def search(index: VectorIndex) -> tuple[SearchResult, np.ndarray]:
        found = index.search(encoded.queries, RETRIEVE_K)
        return found, found.rows

    results = []
    for postprocess in postprocesses:
        exact = IndexSpec(model, postprocess=postprocess, layer=encoder.layer, runtime=encoder.runtime)
        corpus = cache(partial(correct_corpus, encoder, data.dataset, exact.postprocess, plan.progress))
        build = partial(
            open_or_build_dense, encoder, data.dataset, corpus=corpus, indexes=plan.indexes, progress=plan.progress
        )
        for swept in recall_sweep(plan.specs(exact, encoder.dim), build, search, tested):
            # unbuilt: cone:0.5 on vectors already at 0.9, lance:IVF_PQ on < 256 vectors, ...
            if swept.reason is not None:
                results.append(EvalResult(swept.kind, None, reason=swept.reason))
                continue
            if swept.reference:
                values, samples = _exact_row(swept.built, swept.found, data, encoded)
            else:
                values, samples = _approximate_row(swept.built, swept.found, swept.recall_at_10, data, encoded)
            results.append(EvalResult(swept.kind, swept.built.folder.name, metrics=values, samples=samples))
    return results


def evaluate_layers(
    encoder: LayeredEncoder,
    model: str,
    layers: list[Layer],
    postprocesses: list[str],
    data: EvalData,
    plan: EvalPlan,
) -> list[EvalResult]:
    """Each layer's rows, in the order asked; the corpus, queries and STS sentences of every layer encoded in
    one pass each."""
    views, rows = {}, {}
    for layer in layers:
        try:
            views[layer] = encoder.at_layer(layer)
        except InputError as exc:  # e.g. --layers 6 on a 4-block LM beside a 6-block one
            rows[layer] = [
                EvalResult(IndexSpec(model, postprocess=p, layer=layer, runtime=encoder.runtime), None, reason=str(exc))
                for p in postprocesses
            ]
    if views:
        cache_corpus_layers(encoder, list(views), data.dataset, plan.progress)
        encoded = encode_eval_data(encoder, list(views), data, plan.progress)
        for layer, view in views.items():
            rows[layer] = evaluate_dense(view, model, postprocesses, data, plan, encoded[layer])
    return [row for layer in layers for row in rows[layer]]


def evaluate_bm25(data: EvalData, indexes: Path, progress: bool) -> EvalResult:
    ds = data.dataset
    index = open_or_build_bm25(data.dataset, indexes, progress)
    query_ids = sorted(ds.queries)
    found = index.search([ds.queries[q] for q in query_ids], RETRIEVE_K)
    values, ndcg = _ranking(found, len(index.docs), query_ids, ds.qrels)
    # BM25 scores are not cosines and it has no vectors: the similarity and geometry columns do not apply.
    return EvalResult(IndexSpec.bm25(), index.folder.name, metrics=values, samples=Samples(ndcg))


def run_eval(data: EvalData, plan: EvalPlan, on_result: Callable[[EvalResult], None] | None = None) -> list[EvalResult]:
    """One result per row of ``plan`` (model, runtime, layer, post-processing, factory), each given to
    ``on_result`` as it comes; an unavailable model's results carry its reason."""
    results: list[EvalResult] = []
    for plain in plan.plain.values():
        for runtime in plan.model_runtimes(plain):
            found = _evaluate_model(plain, runtime, list(plan.postprocesses), data, plan)
            for result in found:
                if on_result is not None:
                    on_result(result)
            results.extend(found)
    return results


def _evaluate_model(
    plain: IndexSpec, runtime: Runtime, postprocesses: list[str], data: EvalData, plan: EvalPlan
) -> list[EvalResult]:
    if plain.lexical:
        return [evaluate_bm25(data, plan.indexes, plan.progress)]
    model = plain.model
    try:
        encoder = encoder_for(model, plan.checkpoints, "last", runtime, plan.data_root, plan.ray)
    except (ModelUnavailable, InputError) as exc:  # no weights; an LM asked to run on OpenVINO
        why = exc.explanation if isinstance(exc, ModelUnavailable) else str(exc)
        return [EvalResult(IndexSpec(model, postprocess=p, runtime=runtime), None, reason=why) for p in postprocesses]
    chosen = encoder.all_layers() if plan.layers == ALL_LAYERS else list(plan.layers)
    return evaluate_layers(encoder, model, chosen, postprocesses, data, plan)
