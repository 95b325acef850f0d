"""``cone doctor --index``: the index a user already has (a FAISS file, a Lance table, a USearch file), as it is.

It says what the index is (type, metric, parameters, bytes of code per vector), measures the instruments on its
vectors and the recall@10 of that very index against exact search of the same vectors in the index's own metric,
then builds the repairs that index's store offers (``Store.repairs``: FAISS's centering in front of the user's own
structure, LanceDB's residual metrics and centered table, USearch's wider codecs and centered vectors; each store's
module says how) and measures each the same way, with the same queries.

A repair counts only where its per-query recall@10 beats the index's by the paired randomization test (adjusted
for the repairs tried); the prescription is the cheapest such repair that reaches the target, else the best one,
with its bytes per vector. Nothing is prescribed to an index that already keeps the target.

Each store reads its user's index (``Store.open_user``; cone.indexing.user_index) and writes its repairs; this
module measures them alike, whatever the store.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

import faiss
import numpy as np
from scipy.stats import false_discovery_control

from cone.errors import InputError
from cone.eval import metrics
from cone.eval.doctor import Diagnosis, K, check_vectors, diagnose, flat_index, top_rows
from cone.eval.significance import ALPHA, paired_p
from cone.geometry import unit_rows
from cone.indexing.factory import STORES, FloatCodes
from cone.indexing.user_index import RepairRecipe, UserIndex, centered

DEFAULT_QUERIES = 200  # documents sampled as queries when no --queries file is given


@dataclass(frozen=True)
class Repair:
    """One repair the index's store offers, built and measured."""

    name: str
    how: str  # what the user does, in that store's terms
    code_bytes: float
    recall_at_10: float  # vs exact search of the raw vectors in the index's metric, the raw queries
    code_change: str  # "none", or what the user's code must do differently
    p: float | None = None  # paired randomization test of its per-query recall against the index's, BH-adjusted
    exact_kept: float | None = None  # how much of today's exact top 10 exact search in its own space keeps: its ceiling

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class IndexCheckup:
    found: UserIndex
    n_queries: int
    queries_from: str
    target: float
    diagnosis: Diagnosis
    recall_at_10: float
    repairs: list[Repair] = field(default_factory=list)
    prescription: Repair | None = None
    fixed: dict[str, object] | None = None  # --fix: where it was written and what it measured

    def to_json(self) -> dict:
        return {
            "index": self.found.describe(),
            "n_queries": self.n_queries,
            "queries_from": self.queries_from,
            "target_recall_at_10": self.target,
            "diagnosis": self.diagnosis.to_json(),
            "recall_at_10": self.recall_at_10,
            "repairs": [r.to_json() for r in self.repairs],
            "prescription": None if self.prescription is None else self.prescription.to_json(),
            "fixed": self.fixed,
        }


# --- measuring it ----------------------------------------------------------------------------------------------


def exact_rows(vectors: np.ndarray, queries: np.ndarray, metric: str) -> np.ndarray:
    """Exact top 10 in the index's own metric: what the index approximates. A sign-bit index approximates the
    cosine of the float vectors its bits were taken from."""
    vectors, queries = np.asarray(vectors, dtype=np.float32), np.asarray(queries, dtype=np.float32)
    if metric in ("cos", "cosine", "hamming"):
        return top_rows(FloatCodes(flat_index(unit_rows(vectors))), unit_rows(queries))
    if metric in ("l2", "l2sq"):
        return top_rows(FloatCodes(flat_index(vectors, faiss.METRIC_L2)), queries)
    if metric in ("inner product", "dot", "ip"):
        return top_rows(FloatCodes(flat_index(vectors)), queries)
    raise InputError(f"the index's metric {metric!r} has no exact search here (inner product, l2, cosine)")


def recalls_at_10(found: UserIndex, queries: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """Each query's recall@10 of that index against exact search of the same vectors, in its metric
    (eval.metrics.overlap_at_k, the measure every doctor row uses, one query at a time for the paired test)."""
    rows = found.search(queries, K)
    return np.array([metrics.overlap_at_k(a[None], b[None], K) for a, b in zip(rows, exact, strict=True)])


def index_vectors(found: UserIndex, given: np.ndarray | None, name: str = "--vectors") -> np.ndarray:
    """The float vectors the index holds: its own, or ``--vectors`` where it keeps none (checked to match)."""
    if given is None:
        if found.vectors is None:
            raise InputError(
                f"--index {found.path} is a {found.kind}: it keeps no float vectors; pass --vectors X.npy (the "
                f"({found.ntotal}, {found.dim}) matrix it was built from, row i = id i)"
            )
        return check_scale(check_vectors(found.vectors, f"the vectors of {found.path}"), f"--index {found.path}")
    if given.shape != (found.ntotal, found.dim):
        raise InputError(f"{name} is {given.shape[0]} x {given.shape[1]}, the index holds {found.ntotal} x {found.dim}")
    return check_scale(given, f"--index {found.path}")


def check_scale(vectors: np.ndarray, where: str) -> np.ndarray:
    """Vectors an index can rank: the index is measured as it is, and its library scores float32 products, which
    overflow (inf: every top 10 a tie) past 3.4e38 and vanish below 1.2e-38. Unlike ``--vectors`` alone (scaled
    to unit by the doctor, as cosines allow), an index cannot be rescaled: refused, naming the scale."""
    squares = np.einsum("ij,ij->i", vectors, vectors, dtype=np.float64)
    limits = np.finfo(np.float32)
    if squares.max() > limits.max or squares.min() < limits.tiny:
        worst = np.sqrt(squares.max() if squares.max() > limits.max else squares.min())
        raise InputError(
            f"{where}: vectors of length {worst:.3g}, whose float32 products "
            f"{'overflow' if squares.max() > limits.max else 'vanish'}, so no index ranks them; rebuild it over "
            "the same vectors at unit scale (each divided by its length: the cosines are the same)"
        )
    return vectors


def _measured(
    recipe: RepairRecipe, path: Path, vectors: np.ndarray, queries: np.ndarray, exact: np.ndarray, today: np.ndarray
) -> Repair:
    """The repair written to ``path``, read back as its store reads it, and measured against the index today; and
    how much of today's exact top 10 exact search in the repair's own space keeps (a centering changes the exact
    ranking itself, so that much of its recall is not the index's to lose)."""
    path.parent.mkdir(parents=True, exist_ok=True)  # --fix's folders: made only now, every input checked
    recipe.write(path)
    made = recipe.opened(path)
    mine = recalls_at_10(made, queries, exact)
    mean = vectors.mean(axis=0)
    docs, asked = (centered(vectors, mean), centered(queries, mean)) if recipe.centered else (vectors, queries)
    kept = metrics.overlap_at_k(exact_rows(docs, asked, recipe.metric or made.metric), exact, K)
    p = paired_p(today, mine)
    return Repair(recipe.name, recipe.how, made.code_bytes, float(mine.mean()), recipe.code_change, p, kept)


def _adjusted(repairs: list[Repair]) -> list[Repair]:
    """The repairs' p-values corrected for their number (Benjamini-Hochberg), as the doctor's and the eval's are."""
    if len(repairs) < 2:
        return repairs
    adjusted = false_discovery_control([r.p for r in repairs])
    return [replace(r, p=float(p)) for r, p in zip(repairs, adjusted, strict=True)]


def prescribe(recall: float, repairs: list[Repair], target: float) -> Repair | None:
    """None where the index already keeps the target; else, among repairs whose recall is higher by the paired
    test, the cheapest that reaches the target (then the best recall), or the best where none does."""
    if recall >= target:
        return None
    better = [r for r in repairs if r.recall_at_10 > recall and r.p is not None and r.p < ALPHA]
    if not better:
        return None
    passing = [r for r in better if r.recall_at_10 >= target]
    if passing:
        return min(passing, key=lambda r: (r.code_bytes, -r.recall_at_10))
    return max(better, key=lambda r: r.recall_at_10)


def sample_queries(vectors: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    rows = np.sort(np.random.default_rng(seed).permutation(len(vectors))[: min(n, len(vectors))])
    return np.ascontiguousarray(vectors[rows], dtype=np.float32)


def checkup_index(
    found: UserIndex,
    vectors: np.ndarray,
    queries: np.ndarray,
    queries_from: str,
    target: float = 0.95,
    fix: Path | str | None = None,
) -> IndexCheckup:
    """The index as it is, every repair its store offers (built in a temporary folder), and the prescription;
    ``fix``: the prescribed repair (or the store's centering, where the index needs none) written there and
    measured as it was read back; for a store whose index lives in a server, made beside the user's index there
    (``fix`` its name, "" for the store's own) and measured as built."""
    if queries.shape[1] != found.dim:
        raise InputError(f"queries have {queries.shape[1]} dimensions, the index {found.dim}")
    recipes = STORES[found.store].repairs(found, vectors)
    if fix is not None:
        if not recipes:
            raise InputError(f"--fix: {found.kind} is an exhaustive scan; there is nothing to repair")
        suffix = recipes[0].suffix
        if suffix is not None and Path(fix).suffix != suffix:
            raise InputError(f"--fix {fix}: a {found.store} repair is written as NAME{suffix}")
    exact = found.exact(queries) if found.exact is not None else exact_rows(vectors, queries, found.metric)
    today = recalls_at_10(found, queries, exact)
    recall = float(today.mean())
    fixed = None
    with tempfile.TemporaryDirectory(prefix="cone-doctor-") as tmp:
        paths = [Path(tmp) / f"repair{i}{r.suffix or ''}" for i, r in enumerate(recipes)]
        repairs = _adjusted(
            [_measured(r, path, vectors, queries, exact, today) for r, path in zip(recipes, paths, strict=True)]
        )
        prescription = prescribe(recall, repairs, target)
        if fix is not None:  # the prescribed repair, or the store's centering where none is prescribed
            chosen = next((i for i, r in enumerate(repairs) if r is prescription), len(repairs) - 1)
            apply = recipes[chosen].apply
            if apply is not None:  # made beside the user's index, in its server
                where, made = apply(fix)
            else:
                copy = shutil.copytree if paths[chosen].is_dir() else shutil.copyfile
                copy(paths[chosen], Path(fix))
                where, made = str(fix), recipes[chosen].opened(Path(fix))  # read back as its user will
            mine = recalls_at_10(made, queries, exact)
            fixed = {
                "path": where,
                "repair": repairs[chosen].name,
                "recall_at_10": float(mine.mean()),
                "p": paired_p(today, mine),
                "code_bytes_per_vector": made.code_bytes,
            }
    diagnosis = diagnose(vectors)
    return IndexCheckup(found, len(queries), queries_from, target, diagnosis, recall, repairs, prescription, fixed)
