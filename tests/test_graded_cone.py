"""The graded cone (cone:C, rogue:K:S, + chains), compressed-index rows and the significance of comparisons."""

from __future__ import annotations

import numpy as np
import pytest

from cone.cli.options import factory_list
from cone.data.loaders import load_beir
from cone.encoders.registry import Encoders, load_encoder
from cone.errors import InputError
from cone.eval import metrics
from cone.eval.harness import load_eval_data, run_eval
from cone.eval.plan import EvalPlan
from cone.eval.results import EvalResult, Samples
from cone.eval.significance import compare, pairs
from cone.geometry import anisotropy
from cone.indexing import postprocess as pp
from cone.indexing.dense import build_dense
from cone.indexing.open import open_index
from cone.indexing.spec import IndexSpec, parse_index_type

from tiny import folder_name


@pytest.fixture(scope="module")
def corpus() -> np.ndarray:
    """Anisotropic-enough Gaussian data with unequal variances, as an encoder's raw vectors would be."""
    rng = np.random.default_rng(0)
    return rng.standard_normal((2000, 32)) * np.linspace(0.5, 3.0, 32) + 0.2


@pytest.mark.parametrize("target", [0.3, 0.5, 0.9, 0.99, 0.999])
def test_cone_reaches_its_target_mean_pair_cosine(corpus, target):
    coned = pp.apply(corpus, pp.fit(corpus, f"cone:{target}"))
    assert anisotropy(coned).value == pytest.approx(target, abs=0.005)
    queries = corpus[:10]  # queries get the same offset, fitted on the corpus
    assert np.allclose(pp.apply(queries, pp.fit(corpus, f"cone:{target}")), coned[:10], atol=1e-4)


def test_cone_below_the_spaces_own_cosine_is_refused(corpus):
    strong = pp.apply(corpus, pp.fit(corpus, "cone:0.9"))
    with pytest.raises(InputError, match="already 0.9"):
        pp.fit(strong, "cone:0.5")


def test_rogue_scales_the_highest_variance_coordinates_only(corpus):
    params = pp.fit(corpus, "rogue:2:30")
    out = pp.apply(corpus, params)
    top = np.argsort(-corpus.var(axis=0))[:2]
    assert np.allclose(out[:, top], 30 * corpus[:, top], rtol=1e-5)
    rest = np.setdiff1d(np.arange(32), top)
    assert np.allclose(out[:, rest], corpus[:, rest], rtol=1e-5)


def test_stages_compose_left_to_right(corpus):
    coned_then_centered = pp.apply(corpus, pp.fit(corpus, "cone:0.9+center"))
    centered_then_coned = pp.apply(corpus, pp.fit(corpus, "center+cone:0.9"))
    assert abs(anisotropy(coned_then_centered).value) < 0.01  # the repair measured on the damage
    assert anisotropy(centered_then_coned).value == pytest.approx(0.9, abs=0.005)
    whitened = pp.apply(corpus, pp.fit(corpus, "rogue:2:30+whiten"))
    assert np.allclose(np.cov(whitened, rowvar=False, bias=True), np.eye(32), atol=1e-3)
    assert pp.param_names("cone:0.9+whiten") == ["0.shift", "1.mean", "1.transform"]


@pytest.mark.parametrize(
    ("spec", "normal"),
    [("none+center", "center"), ("cone:.90", "cone:0.9"), ("rogue:2:30.0+whiten", "rogue:2:30+whiten")],
)
def test_specs_are_normalised(spec, normal):
    assert pp.parse(spec) == normal and pp.is_synthetic(normal) == normal.startswith(("cone", "rogue"))


@pytest.mark.parametrize("bad", ["cone:1", "cone:1.5", "cone:x", "rogue:0:3", "rogue:2:-1", "rogue:2", "whiten+"])
def test_bad_specs_are_refused(bad):
    with pytest.raises(InputError, match="unknown --postprocess"):
        pp.parse(bad)


def test_a_chained_synthetic_spec_round_trips_through_its_index(tiny_beir, tiny_checkpoints, tmp_path):
    enc = load_encoder("baseline", tiny_checkpoints)
    ds = load_beir(tiny_beir, "tiny")
    spec = "center+cone:0.9"
    folder = tmp_path / folder_name("baseline", spec, "last", "SQfp16")
    assert folder.name == "baseline-center-cone0.9-SQfp16"
    build_dense(enc, ds, folder, spec, parse_index_type("SQfp16"), progress=False)
    index = open_index(folder, Encoders(tiny_checkpoints))
    assert index.manifest.postprocess == spec and sorted(index.params) == pp.param_names(spec)
    assert index.manifest.random_pair_cosines.mean == pytest.approx(0.9, abs=0.02)  # 20,000 sampled pairs
    texts = [ds.queries["q1"]]
    assert np.array_equal(index.search(texts, 5).rows, index.search(enc.encode(texts), 5).rows)


def test_factory_lists_keep_faiss_commas_and_always_hold_the_exact_reference():
    assert factory_list("Flat,SQ8,PQ32,IVF256,Flat,HNSW32") == ["Flat", "SQ8", "PQ32", "IVF256,Flat", "HNSW32"]
    assert factory_list("OPQ8,IVF16,PQ8") == ["Flat", "OPQ8,IVF16,PQ8"]
    assert factory_list("IVF4,Flat;SQ8") == ["Flat", "IVF4,Flat", "SQ8"]


def test_overlap_with_the_exact_top_k():
    exact = np.array([[0, 1, 2, 3], [4, 5, 6, 7]])
    assert metrics.overlap_at_k(np.array([[3, 2, 1, 0], [4, 9, 9, 9]]), exact, k=4) == pytest.approx((1 + 0.25) / 2)


def test_per_query_ndcg_averages_to_the_reported_ndcg():
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 1}}
    run = {"q1": {"x": 2.0, "a": 1.0}, "q2": {"b": 1.0}}
    per_query = metrics.per_query_ndcg(qrels, run)
    assert per_query[2] == 0.0 and per_query.mean() == pytest.approx(metrics.retrieval(qrels, run)["ndcg_at_10"])


def _row(model: str, postprocess: str, ndcg: np.ndarray, sts: np.ndarray | None = None) -> EvalResult:
    samples = Samples(ndcg=ndcg, sts=None if sts is None else {"stsb": sts})
    return EvalResult(
        IndexSpec(model, postprocess=postprocess),
        f"{model}-{postprocess}",
        metrics={"ndcg_at_10": ndcg.mean()},
        samples=samples,
    )


def test_significance_where_the_answer_is_known():
    rng = np.random.default_rng(1)
    base = rng.uniform(0.2, 0.6, 300)
    gold = rng.uniform(0, 5, 500)
    noise = rng.standard_normal(500)
    rows = [
        _row("minilm", "none", base, sts=noise),
        _row("minilm", "center", base.copy(), sts=noise.copy()),  # identical: no difference to find
        _row("minilm", "whiten", np.clip(base + 0.3, 0, 1), sts=gold + 0.1 * noise),  # better on every query
    ]
    assert [(a.postprocess, b.postprocess) for a, b in pairs(rows)] == [("none", "center"), ("none", "whiten")]
    same, better = compare(rows, {"stsb": list(gold)})
    assert same.ndcg_delta == 0 and same.ndcg_p == 1.0 and not same.ndcg_significant
    ((same_sts,),) = [same.sts]
    assert same_sts.delta == 0 and not same_sts.significant
    assert better.ndcg_delta == pytest.approx(0.3, abs=0.01) and better.ndcg_p <= 1e-3 and better.ndcg_significant
    ((better_sts,),) = [better.sts]
    assert better_sts.delta > 0.5 and better_sts.ci95[0] > 0 and better_sts.significant


def test_baseline_and_regularized_are_compared_like_for_like():
    ndcg = np.linspace(0, 1, 50)
    rows = [_row(m, p, ndcg) for m in ("baseline", "regularized") for p in ("none", "center")]
    found = {(a.label, b.label) for a, b in pairs(rows)}
    assert ("baseline+center", "regularized+center") in found and ("baseline", "regularized") in found
    assert ("baseline", "regularized+center") not in found


def test_eval_rows_per_factory_with_recall_against_flat(shared_tiny_beir, tiny_checkpoints, tmp_path):
    data = load_eval_data(shared_tiny_beir, "tiny")
    plan = EvalPlan(
        ("baseline",),
        tmp_path / "idx",
        ("center",),
        factories=(parse_index_type("Flat"), parse_index_type("SQfp16")),
        checkpoints=tiny_checkpoints,
        progress=False,
    )
    results = run_eval(data, plan)
    flat, fp16 = results
    assert (flat.factory, fp16.factory) == ("Flat", "SQfp16") and "recall_at_10_vs_flat" not in flat.metrics
    assert fp16.metrics["recall_at_10_vs_flat"] > 0.95  # float16 storage barely moves a cosine ranking
    assert fp16.metrics["ndcg_at_10"] == pytest.approx(flat.metrics["ndcg_at_10"], abs=0.05)
    assert fp16.to_json()["factory"] == "SQfp16" and fp16.label == "baseline+center [SQfp16]"


def test_the_service_labels_a_synthetic_index(shared_tiny_beir, tiny_checkpoints, tmp_path):
    from fastapi.testclient import TestClient

    from cone.service.app import create_app

    enc = load_encoder("baseline", tiny_checkpoints)
    ds = load_beir(shared_tiny_beir, "tiny")
    for spec in ("none", "rogue:2:30"):
        build_dense(enc, ds, tmp_path / folder_name("baseline", spec), spec, progress=False)
    with TestClient(create_app(tmp_path, tiny_checkpoints, load_in_background=False)) as client:
        models = {m["name"]: m for m in client.get("/models").json()["models"]}
        assert models["baseline-rogue2x30"]["synthetic"] is True and models["baseline"]["synthetic"] is False
        found = client.get("/search", params={"model": "baseline-rogue2x30", "q": "cell"}).json()
        assert found["synthetic"] is True
        names = {h["name"] for h in client.get("/histogram", params={"format": "json"}).json()["histograms"]}
        assert names == {"baseline", "baseline-rogue2x30 (synthetic)"}


def _exact(model: str, postprocess: str, relevant: np.ndarray, random: np.ndarray, top: np.ndarray) -> EvalResult:
    ndcg = np.full(50, 0.5)
    samples = Samples(ndcg, random=random, relevant=relevant, top=top, n_docs=200)
    spec = IndexSpec(model, postprocess=postprocess)
    return EvalResult(spec, f"{model}-{postprocess}", metrics={"ndcg_at_10": 0.5}, samples=samples)


def test_threshold_f1_and_hubness_get_a_paired_interval_that_finds_a_known_difference():
    rng = np.random.default_rng(2)
    relevant, random = rng.normal(0.5, 0.1, 300), rng.normal(0.2, 0.1, 3000)
    spread_out = np.stack([rng.permutation(200)[:10] for _ in range(400)])  # every document about as often
    hubbed = spread_out.copy()
    hubbed[:, 0] = rng.choice([0, 1, 2], size=400)  # three documents in every query's top 10: hubs
    rows = [
        _exact("minilm", "none", relevant, random, spread_out),
        _exact("minilm", "center", relevant.copy(), random.copy(), spread_out.copy()),  # identical
        _exact("minilm", "whiten", relevant + 0.2, random, hubbed),  # separates better, and has hubs
    ]
    same, changed = compare(rows, {})
    assert same.threshold_f1.delta == 0 and same.threshold_f1.ci95 == (0.0, 0.0) and not same.threshold_f1.significant
    assert same.hubness_skew.delta == 0 and not same.hubness_skew.significant
    f1_gain = metrics.threshold_f1(relevant + 0.2, random)[1] - metrics.threshold_f1(relevant, random)[1]
    assert changed.threshold_f1.delta == pytest.approx(f1_gain) and f1_gain > 0.05
    assert changed.threshold_f1.ci95[0] > 0 and changed.threshold_f1.significant
    assert changed.hubness_skew.delta > 3 and changed.hubness_skew.ci95[0] > 0
    assert changed.to_json()["hubness_skew"]["significant"] is True
    without = compare([_row("minilm", "none", np.full(50, 0.5)), _row("minilm", "center", np.full(50, 0.5))], {})
    assert without[0].threshold_f1 is None and without[0].to_json()["hubness_skew"] is None  # nothing to resample


def test_the_threshold_and_skew_match_their_definitions_on_tied_scores():
    from scipy.stats import skew

    rng = np.random.default_rng(4)
    for trial in range(20):
        relevant, random = np.round(rng.normal(0.4, 0.2, 40), 2), np.round(rng.normal(0.1, 0.2, 300), 2)
        random[:3] = relevant.max() + trial % 2  # random pairs above every relevant one, on some trials
        f1 = {t: 2 * np.mean(relevant >= t) / (1 + np.mean(relevant >= t) + np.mean(random >= t)) for t in relevant}
        best = max(f1.values())
        assert metrics.threshold_f1(relevant, random) == (max(t for t in f1 if f1[t] == best), pytest.approx(best))
        occurrences = rng.poisson(rng.uniform(0.1, 5), size=(3, 500)).astype(float)
        assert metrics.occurrence_skew(occurrences) == pytest.approx(skew(occurrences, axis=1), abs=1e-12)
    assert metrics.occurrence_skew(np.full((2, 7), 3.0)).tolist() == [0.0, 0.0]
