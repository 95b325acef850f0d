"""``cone doctor``: is this space a cone, what will each index type lose on it, and which repair fixes that.

On a sample of the user's own vectors (no qrels needed): the instruments and what they name (a cone, rogue
dimensions, low rank); then, for every index type and every repair, recall@10 against exact search in the space
the user has (their model's own ranking is the truth), and the bytes each type stores per vector. The
prescription is the cheapest type + repair that keeps recall@10 at the target; a repair is prescribed only where
it lets a cheaper type pass (a healthy space is told to change nothing). With qrels, nDCG@10 of each row too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

import faiss
import numpy as np
from scipy.stats import false_discovery_control

from cone.data.loaders import RetrievalDataset, doc_text
from cone.encoders.base import DOCUMENT, QUERY
from cone.errors import InputError
from cone.eval import metrics
from cone.eval.recall import K, recall_sweep
from cone.eval.significance import ALPHA, paired_p
from cone.geometry import as_matrix, measure, pair_cosines, spread, unit_rows
from cone.geometry.instruments import refuse_unmeasurable_rows
from cone.geometry.summary import Geometry
from cone.indexing import postprocess as pp
from cone.indexing.codes import IndexType
from cone.indexing.factory import STORES, Codes, build_codes
from cone.indexing.spec import EXACT, parse_index_type

REPAIRS = ("none", "center", "whiten", "abtt:3", "standardize")
# At equal bytes and relevance, the repair with the fewest fitted numbers: a mean (d), a mean and scales (2d), a mean
# and 3 directions (4d), a mean and a d x d matrix.
SIMPLEST = ("none", "center", "standardize", "abtt:3", "whiten")
RESCORE_DEPTH = 4 * K  # sentence-transformers' documented rescore multiplier (4) at k = 10
CONE_PAIR_COSINE = 0.3  # random pairs' mean cosine above this: a cone (healthy encoders sit near 0.0-0.2)
ROGUE_SHARE = 10.0  # a coordinate with this many times its fair share (1/d) of the variance is rogue
LOW_RANK = 0.5  # effective rank below this share of d


@dataclass(frozen=True)
class Diagnosis:
    """What the instruments see in the raw vectors, in the doctor's words and numbers."""

    geometry: Geometry
    pair_cosine_mean: float  # of random distinct documents
    pair_cosine_std: float
    rogue_dims: list[int]  # coordinates, largest share first
    rogue_shares: list[float]  # each one's share of the total variance
    findings: list[str]  # "cone", "rogue dimensions", "low rank"; empty: healthy

    def to_json(self) -> dict:
        return {
            "findings": self.findings,
            "pair_cosine_mean": self.pair_cosine_mean,
            "pair_cosine_std": self.pair_cosine_std,
            "top_pc_share": self.geometry.top_pc_share,
            "rogue_dims": self.rogue_dims,
            "rogue_shares": self.rogue_shares,
            "geometry": self.geometry.model_dump(),
        }


@dataclass(frozen=True)
class Trial:
    """One index type over one repair of the sample."""

    factory: str
    repair: str
    bytes_per_vector: float
    recall_at_10: float  # vs exact search of the same (repaired) vectors: what the index type loses
    ndcg_at_10: float | None = None  # with qrels

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class RepairEffect:
    """What a repair does to exact search itself: how much of the raw exact top 10 its exact top 10 keeps, and
    (with qrels) its exact nDCG@10 against the raw one by the eval's paired randomization test."""

    repair: str
    agreement: float
    ndcg_at_10: float | None = None
    ndcg_delta: float | None = None
    ndcg_p: float | None = None  # Benjamini-Hochberg adjusted over the repairs tried

    def acceptable(self, target: float) -> bool:
        """The repair keeps what the model ranks (agreement ≥ target), or qrels say it ranks no worse."""
        if self.repair == "none" or self.agreement >= target:
            return True
        return self.ndcg_delta is not None and (self.ndcg_delta >= 0 or self.ndcg_p >= ALPHA)

    def ranks_better(self) -> bool:
        """Relevance judgments say this repair's exact ranking is better than today's (paired test, adjusted)."""
        return self.repair != "none" and self.ndcg_delta is not None and self.ndcg_delta > 0 and self.ndcg_p < ALPHA

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Prescription:
    factory: str
    repair: str
    bytes_per_vector: float
    recall_at_10: float
    mb_per_million: float
    reason: str


@dataclass(frozen=True)
class Checkup:
    n_docs: int
    n_queries: int
    queries_from: str  # "queries" (the dataset's) or "held-out documents"
    target: float
    diagnosis: Diagnosis
    trials: list[Trial]
    repairs: list[RepairEffect]
    prescription: Prescription | None
    search_params: dict[str, str] = field(default_factory=dict)
    untried: dict[str, str] = field(default_factory=dict)  # type -> why this sample could not build it

    @property
    def exact_suspect(self) -> bool:
        """Rogue dimensions are named and no relevance judgments were given: the exact top 10 every recall here is
        measured against is itself the thing in doubt (a few coordinates decide most of every cosine)."""
        return "rogue dimensions" in self.diagnosis.findings and self.repairs[0].ndcg_at_10 is None

    def to_json(self) -> dict:
        return {
            "n_docs": self.n_docs,
            "n_queries": self.n_queries,
            "queries_from": self.queries_from,
            "target_recall_at_10": self.target,
            "diagnosis": self.diagnosis.to_json(),
            "trials": [t.to_json() for t in self.trials],
            "repairs": [r.to_json() for r in self.repairs],
            "search_params": self.search_params,
            "untried": self.untried,
            "exact_search_suspect": self.exact_suspect,
            "prescription": None if self.prescription is None else self.prescription.__dict__,
        }


IndexTypes = dict[str, IndexType]  # the doctor's index types by the names its report gives them


def diagnose(vectors: np.ndarray) -> Diagnosis:
    """The instruments on the raw vectors, and what they name."""
    geometry = measure(vectors)
    pairs = spread(pair_cosines(vectors))
    variance = np.asarray(vectors, dtype=np.float64).var(axis=0)
    shares = variance / variance.sum()
    rogue = [int(j) for j in np.argsort(-shares, kind="stable") if shares[j] >= ROGUE_SHARE / len(shares)]
    findings = []
    if pairs["mean"] >= CONE_PAIR_COSINE:
        findings.append("cone")
    if rogue:
        findings.append("rogue dimensions")
    if geometry.effective_rank < LOW_RANK * geometry.d:
        findings.append("low rank")
    rogue_shares = [float(shares[j]) for j in rogue]
    return Diagnosis(geometry, pairs["mean"], pairs["std"], rogue, rogue_shares, findings)


def default_types(n_docs: int, dim: int) -> tuple[IndexTypes, dict[str, str]]:
    """The index types a user's store offers, sized for ``n_docs`` vectors of ``dim``, by the names the report
    gives them; and their search params. FAISS's are sized here; every other store adds its own
    (``Store.doctor_types``) where it can build them (installed)."""
    pq = max(m for m in range(1, dim // 8 + 1) if dim % m == 0)  # d/8 bytes, a divisor of d as FAISS needs
    lists = max(1, n_docs // 100)
    names = ["Flat", "SQfp16", "SQ8", f"PQ{pq}", "BIN", f"BIN+rescore:{RESCORE_DEPTH}", "RaBitQ", "HNSW32"]
    names.append(f"IVF{lists},Flat")
    types = {name: parse_index_type(name) for name in names}  # the doctor's own plan, parsed where it is made
    for store in STORES.values():
        try:
            own = {name: parse_index_type(name) for name in store.doctor_types}
            for kind in own.values():
                store.check(kind, dim, "")
        except InputError:  # not installed here: the user's store is not this one
            continue
        types |= own
    params = {"HNSW32": "efSearch=64", f"IVF{lists},Flat": f"nprobe={max(1, lists // 8)}"}
    return types, params


def top_rows(codes: Codes, queries: np.ndarray) -> np.ndarray:
    return codes.search(queries, K)[1]


def _trials(
    docs: np.ndarray,
    queries: np.ndarray,
    types: IndexTypes,
    params: dict[str, str],
    ndcg: Callable | None,
    step: Callable[[], None],
    untried: dict[str, str],
) -> Iterator[tuple[Trial, np.ndarray]]:
    """Every type over every repair, on the eval's recall sweep: its recall@10 against exact search of the same
    (repaired) vectors, with that exact top 10 (to compare a repair's own ranking with the raw one), in the order
    of ``types``. Exact search is swept first whether or not ``types`` names it (then it is not reported). A type
    this sample cannot train (PQ's 256 centroids on 40 vectors) goes into ``untried`` with its store's reason."""
    reference = next((name for name, kind in types.items() if kind == EXACT), EXACT.spec)
    swept_types = {reference: EXACT} | types  # the reference first
    for repair in REPAIRS:
        fitted = pp.fit(docs, repair)
        d, q = unit_rows(pp.apply(docs, fitted)), unit_rows(pp.apply(queries, fitted))

        def build(name: str, d: np.ndarray = d) -> Codes:
            return build_codes(d, swept_types[name], params.get(name, ""))

        def search(codes: Codes, q: np.ndarray = q) -> tuple[Codes, np.ndarray]:
            return codes, top_rows(codes, q)

        exact, trials = None, {}
        for swept in recall_sweep(swept_types, build, search):
            exact = swept.rows if swept.reference else exact
            if swept.kind not in types:
                continue
            step()
            if swept.reason is not None:
                untried.setdefault(swept.kind, swept.reason)
                continue
            mean_ndcg = None if ndcg is None else float(ndcg(swept.rows).mean())
            bytes_per_vector = float(swept.built.bytes_per_vector())
            trials[swept.kind] = Trial(swept.kind, repair, bytes_per_vector, swept.recall_at_10, mean_ndcg)
        yield from ((trials[name], exact) for name in types if name in trials)


def flat_index(vectors: np.ndarray, metric: int = faiss.METRIC_INNER_PRODUCT) -> faiss.Index:
    index = faiss.IndexFlat(vectors.shape[1], metric)
    index.add(vectors)
    return index


def prescribe(trials: list[Trial], repairs: list[RepairEffect], target: float) -> Prescription | None:
    """The fewest bytes per vector with recall@10 ≥ target, among repairs that keep the model's ranking (or, where
    relevance says some rank better, among those); at equal bytes the better nDCG@10, then no repair over one and
    the simpler repair over the more fitted, then recall."""
    better = {r.repair for r in repairs if r.ranks_better()}
    # Where relevance says a repair ranks better, today's exact ranking is no longer the one to keep.
    kept = better or {r.repair for r in repairs if r.acceptable(target)}
    ndcg = {r.repair: r.ndcg_at_10 or 0.0 for r in repairs}
    passing = [t for t in trials if t.recall_at_10 >= target and t.repair in kept]
    if not passing:
        return None
    best = min(
        passing,
        key=lambda t: (t.bytes_per_vector, -ndcg[t.repair], SIMPLEST.index(t.repair), -t.recall_at_10),
    )
    raw = next((t for t in trials if t.factory == best.factory and t.repair == "none"), None)
    if best.repair == "none":
        reason = f"{best.factory} keeps {best.recall_at_10:.3f} of exact search's top 10 as the vectors are"
    else:
        effect = next(r for r in repairs if r.repair == best.repair)
        reason = (
            f"{best.repair} lets {best.factory} keep {best.recall_at_10:.3f} of exact search's top 10 "
            f"(without it: {raw.recall_at_10:.3f}); {best.repair} itself keeps {effect.agreement:.3f} of today's "
            "exact top 10"
        )
        if effect.ndcg_delta is not None:
            reason += f", nDCG@10 {effect.ndcg_delta:+.3f} (p {effect.ndcg_p:.3g})"
    mb = best.bytes_per_vector * 1e6 / 2**20
    return Prescription(best.factory, best.repair, best.bytes_per_vector, best.recall_at_10, mb, reason)


def check_target(target: float) -> None:
    if not 0 < target <= 1:
        raise InputError(f"--target must be in (0, 1], not {target}")


def check_vectors(vectors: object, name: str = "the vectors") -> np.ndarray:
    """A matrix the checkup can measure, or one line that says why not, before any work: numeric, 2-D with at
    least 2 columns, finite, no zero row, and more distinct rows than a top 10 (a matrix of one row repeated
    makes every result a tie, and any index type "keeps" all of it)."""
    try:
        x = as_matrix(vectors)
        refuse_unmeasurable_rows(x)
    except InputError as exc:
        raise InputError(f"{name}: {exc}") from None
    if x.shape[1] < 2:
        raise InputError(f"{name}: shape {x.shape}: need at least 2 columns (one coordinate has no direction)")
    rows = np.ascontiguousarray(x).view(np.dtype((np.void, x.dtype.itemsize * x.shape[1])))
    distinct = len(np.unique(rows))
    if distinct <= 2 * K:
        raise InputError(
            f"{name}: only {distinct} distinct row{'s' * (distinct > 1)} of {len(x):,}: every top {K} would be ties, "
            f"so recall@{K} could not tell index types apart (need more than {2 * K})"
        )
    return x


def unit_scale(docs: np.ndarray, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Documents and queries times the power of two that brings the documents' largest coordinate into [0.5, 1):
    cosines do not depend on the scale, but the repairs' fits (variances, whitening) overflow at 1e30 and underflow
    at 1e-30 in float32. A power of two scales every float exactly, so vectors at any finite scale give the
    figures of the same vectors at unit scale."""
    _, exponent = np.frexp(np.abs(docs).max())
    return np.ldexp(docs, -int(exponent)), np.ldexp(queries, -int(exponent))


def check_types(types: IndexTypes, dim: int) -> None:
    """Every index type named can be built at ``dim`` by its store, or one line naming it, before any work; none
    is dropped."""
    for name, kind in types.items():
        try:
            STORES[kind.store].check(kind, dim, "")
        except InputError as exc:
            raise InputError(f"--types {name!r} cannot be built at d = {dim}: {exc}") from None


def checkup(
    sample: Sample, target: float = 0.95, types: IndexTypes | None = None, step: Callable[[], None] = lambda: None
) -> Checkup:
    """Diagnose the sample's raw document vectors and try every index type x repair with its queries."""
    check_target(target)
    docs = check_vectors(sample.docs, "the documents' vectors")
    docs, queries = unit_scale(docs, sample.queries)
    if len(docs) < 2 * K:
        raise InputError(f"need at least {2 * K} documents to measure recall@{K}, got {len(docs)}")
    if queries.shape[1] != docs.shape[1]:
        raise InputError(f"queries have {queries.shape[1]} dimensions, documents {docs.shape[1]}")
    default, params = default_types(len(docs), docs.shape[1])
    types = types or default
    check_types(types, docs.shape[1])
    untried: dict[str, str] = {}
    found = list(_trials(docs, queries, types, params, sample.ndcg, step, untried))
    trials = [trial for trial, _ in found]
    exact = {trial.repair: rows for trial, rows in found}
    repairs = _adjusted([_effect(repair, exact[repair], exact["none"], sample.ndcg) for repair in REPAIRS])
    diagnosis = diagnose(docs)
    prescription = prescribe(trials, repairs, target)
    return Checkup(
        len(docs), len(queries), sample.queries_from, target, diagnosis, trials, repairs, prescription, params, untried
    )


def _effect(repair: str, rows: np.ndarray, raw: np.ndarray, ndcg: Callable | None) -> RepairEffect:
    agreement = metrics.overlap_at_k(rows, raw, K)
    if ndcg is None:
        return RepairEffect(repair, agreement)
    mine, before = ndcg(rows), ndcg(raw)
    p = 1.0 if repair == "none" else paired_p(before, mine)
    return RepairEffect(repair, agreement, float(mine.mean()), float(mine.mean() - before.mean()), p)


def _adjusted(effects: list[RepairEffect]) -> list[RepairEffect]:
    """The repairs' p-values corrected for their number (Benjamini-Hochberg), as the eval's comparisons are."""
    tested = [e for e in effects if e.repair != "none" and e.ndcg_p is not None]
    if not tested:
        return effects
    adjusted = dict(zip((e.repair for e in tested), false_discovery_control([e.ndcg_p for e in tested]), strict=True))
    return [replace(e, ndcg_p=float(adjusted[e.repair])) if e.repair in adjusted else e for e in effects]


def steps(types: IndexTypes | None, n_docs: int, dim: int) -> int:
    """How many builds ``checkup`` runs (for a progress bar)."""
    return len(REPAIRS) * len(types or default_types(n_docs, dim)[0])


@dataclass(frozen=True)
class Sample:
    """What the doctor measures: raw document vectors, raw query vectors, and where the queries came from."""

    docs: np.ndarray
    queries: np.ndarray
    queries_from: str
    ndcg: Callable[[np.ndarray], np.ndarray] | None = None  # each query's nDCG@10 from its top-10 rows (qrels)


def split_vectors(vectors: np.ndarray, n_docs: int, n_queries: int, seed: int = 0) -> Sample:
    """A user's own matrix: ``n_docs`` random rows to index and ``n_queries`` others held out as queries."""
    n = len(vectors)
    n_queries = min(n_queries, n // 10)
    if n - n_queries < 2 * K or n_queries < 1:
        raise InputError(f"need at least {2 * K + 10} vectors to hold some out as queries, got {n}")
    order = np.random.default_rng(seed).permutation(n)
    queries, docs = order[:n_queries], np.sort(order[n_queries : n_queries + n_docs])
    return Sample(np.asarray(vectors[docs]), np.asarray(vectors[queries]), "held-out documents")


def sample_corpus(
    documents: dict[str, dict[str, str]],
    encode: Callable[[list[str], str], np.ndarray],
    n_docs: int,
    n_queries: int,
    dataset: RetrievalDataset | None = None,
    seed: int = 0,
    doc_vectors: Callable[[list[str]], np.ndarray] | None = None,
) -> Sample:
    """Encode a sample of ``documents``. With a BEIR ``dataset``, its test queries are the queries and every
    document they judge relevant is in the sample (so nDCG@10 is measured on the sample); else held-out
    documents are the queries. ``doc_vectors``: ids -> their vectors, where the caller has them (a cache)."""
    rng = np.random.default_rng(seed)
    ids = sorted(documents)
    doc_vectors = doc_vectors or (lambda chosen: encode([doc_text(documents[d]) for d in chosen], DOCUMENT))
    if dataset is None or not dataset.qrels:
        picked = [ids[i] for i in rng.permutation(len(ids))[: n_docs + min(n_queries, len(ids) // 10)]]
        return split_vectors(doc_vectors(picked), n_docs, n_queries, seed)
    judged = sorted({d for rel in dataset.qrels.values() for d, g in rel.items() if g > 0 and d in documents})
    others = [d for d in ids if d not in set(judged)]
    extra = [others[i] for i in rng.permutation(len(others))[: max(0, n_docs - len(judged))]]
    picked = sorted(judged + extra)
    query_ids = sorted(dataset.qrels)[:n_queries]
    docs = doc_vectors(picked)
    queries = encode([dataset.queries[q] for q in query_ids], QUERY)
    qrels = {q: dataset.qrels[q] for q in query_ids}
    return Sample(docs, queries, f"the dataset's test queries ({dataset.name})", _ndcg(query_ids, picked, qrels))


def _ndcg(
    query_ids: list[str], doc_ids: list[str], qrels: dict[str, dict[str, int]]
) -> Callable[[np.ndarray], np.ndarray]:
    """Each query's nDCG@10 from its top-10 rows of the sampled documents (``doc_ids``: each row's id)."""

    def ndcg(rows: np.ndarray) -> np.ndarray:
        ranked = zip(query_ids, rows, strict=True)
        run = {q: {doc_ids[r]: float(K - rank) for rank, r in enumerate(row) if r >= 0} for q, row in ranked}
        return metrics.per_query_ndcg(qrels, run)

    return ndcg


def judged_vectors(
    vectors: np.ndarray,
    queries: np.ndarray,
    qrels: dict[str, dict[str, int]] | None,
    n_docs: int,
    seed: int = 0,
    queries_from: str = "your queries",
) -> Sample:
    """A user's own matrix with their own query vectors. With ``qrels`` (ids: row numbers of ``queries`` and of
    ``vectors``) the judged queries are the queries, every document they judge relevant is in the sample, and each
    repair is judged by nDCG@10; without, all of ``queries`` against a sample of ``n_docs`` rows."""
    n = len(vectors)
    judged: list[int] = []
    query_rows = list(range(len(queries)))
    if qrels is not None:
        try:
            query_rows = sorted({int(q) for q in qrels})
            judged = sorted({int(d) for rel in qrels.values() for d, g in rel.items() if g > 0})
        except ValueError:
            raise InputError("--qrels: with --vectors, query-id and corpus-id are row numbers (0, 1, ...)") from None
        if not query_rows or query_rows[0] < 0 or query_rows[-1] >= len(queries):
            raise InputError(f"--qrels names query rows outside the {len(queries)} rows of --queries")
        if judged and (judged[0] < 0 or judged[-1] >= n):
            raise InputError(f"--qrels names document rows outside the {n} rows of --vectors")
    rng = np.random.default_rng(seed)
    others = np.setdiff1d(np.arange(n), judged)
    picked = sorted(judged + [int(r) for r in rng.permutation(others)[: max(0, n_docs - len(judged))]])
    sample = Sample(np.asarray(vectors[picked]), np.asarray(queries[query_rows]), queries_from)
    if qrels is None:
        return sample
    query_ids = [str(q) for q in query_rows]
    judged_qrels = {q: qrels[q] for q in query_ids}
    return replace(sample, ndcg=_ndcg(query_ids, [str(r) for r in picked], judged_qrels))
