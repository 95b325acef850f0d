"""The index identity (cone.indexing.spec.IndexSpec) and report.json's schema (cone.eval.schema): every committed
report and index folder reads back into them, names and labels as they were."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from cone.encoders.base import TORCH, Runtime
from cone.encoders.registry import ENCODER_NAMES, load_encoder
from cone.errors import InputError
from cone.eval.plan import EvalPlan
from cone.eval.schema import Report, read_report
from cone.indexing.manifest import read_manifest
from cone.indexing.open import open_index
from cone.indexing.reuse import open_or_build_dense
from cone.indexing.spec import EXACT, LEXICAL, MODEL_NAMES, IndexSpec, model_spec, parse_index_type

ROOT = Path(__file__).resolve().parents[1]
REPORTS = sorted((ROOT / "docs").glob("**/report.json"))
# Index folders written by main at 783402c, before the spec (30 made-up documents, the shipped baseline
# checkpoint, post-processing center; named as its `cone index` named them), with the top 3 that code answered for
# "cell protein expression".
FOLDERS_783402C = Path(__file__).parent / "fixtures" / "index-783402c"
ANSWERS_783402C = {
    "baseline-center-SQ8_l2": [("d12", 0.66405), ("d3", 0.56308), ("d10", 0.55385)],
    "baseline-center-BIN": [("d12", 0.44531), ("d3", 0.40625), ("d29", 0.39062)],
    "baseline-center-lance_FLAT_cosine": [("d12", 0.66394), ("d3", 0.56286), ("d10", 0.55407)],
    "baseline-center-usearch_i8_cosine": [("d12", 0.66363), ("d3", 0.55379), ("d10", 0.54801)],
}


def _runtime(tag: str) -> Runtime:
    backend, _, quantize = tag.partition("-")
    return Runtime(backend, quantize or "none")


def _spec_of_row(row) -> IndexSpec:
    plain = model_spec(row.model)  # the row's model name read as the command line reads it
    if plain.lexical:
        return plain
    return IndexSpec(row.model, parse_index_type(row.factory), row.postprocess, row.layer, _runtime(row.runtime))


def test_every_committed_report_fits_the_schema_and_its_rows_are_specs_that_name_them():
    assert len(REPORTS) >= 6
    named = 0
    for path in REPORTS:
        report = read_report(path)
        labels = {_spec_of_row(r).label for r in report.results}
        for row in report.results:
            spec = _spec_of_row(row)
            if row.model == "bm25":
                assert spec.lexical and spec.label == "bm25" and row.factory == spec.factory == "Flat"
            if row.available:
                assert spec.folder_name() == row.index, path  # the folder the eval wrote, named by the spec
                named += 1
        for comparison in report.comparisons:  # the comparisons name rows by the spec's label
            assert {comparison.a, comparison.b} <= labels, (path, comparison.a, comparison.b)
    assert named > 300


def test_a_report_that_does_not_fit_is_one_line_naming_the_key(tmp_path):
    good = json.loads(REPORTS[0].read_text())
    del good["results"][0]["factory"]
    (tmp_path / "report.json").write_text(json.dumps(good))
    with pytest.raises(
        InputError, match=r"report.json: not a report of this cone \(results\.0\.factory: Field required"
    ):
        read_report(tmp_path / "report.json")
    (tmp_path / "report.json").write_text("{")
    with pytest.raises(InputError, match="corrupt JSON"):
        read_report(tmp_path / "report.json")
    with pytest.raises(InputError, match="cannot read"):
        read_report(tmp_path / "absent.json")
    assert Report.model_validate(json.loads(REPORTS[0].read_text())).to_json() == json.loads(REPORTS[0].read_text())


@pytest.mark.parametrize(
    ("spec", "folder", "label"),
    [
        (IndexSpec("minilm"), "minilm", "minilm"),
        (IndexSpec("baseline", parse_index_type("PQ32"), "center"), "baseline-center-PQ32", "baseline+center [PQ32]"),
        (IndexSpec("baseline", parse_index_type("PQ32@l2")), "baseline-PQ32_l2", "baseline [PQ32@l2]"),
        (
            IndexSpec("baseline", parse_index_type("lance:ivf_pq")),
            "baseline-lance_IVF_PQ_l2",
            "baseline [lance:IVF_PQ@l2]",
        ),
        (
            IndexSpec("minilm", postprocess="cone:0.99", layer=2, runtime=Runtime("openvino", "int8")),
            "minilm-openvino-int8-layer2-cone0.99",
            "minilm@openvino-int8[2]+cone:0.99 (synthetic)",
        ),
        (IndexSpec("st:/m/a_b"), "st__m_a_b-" + IndexSpec("st:/m/a_b").folder_name().rsplit("-", 1)[1], "st:/m/a_b"),
    ],
)
def test_a_spec_names_its_folder_and_its_row(spec, folder, label):
    assert (spec.folder_name(), spec.label) == (folder, label)


def test_two_specs_differing_in_any_field_name_two_folders():
    base = IndexSpec("baseline", parse_index_type("SQ8"), "center")
    others = [
        replace(base, model="regularized"),
        replace(base, index_type=parse_index_type("SQ8@l2")),
        replace(base, postprocess="whiten"),
        replace(base, layer=2),
        replace(base, runtime=Runtime("openvino")),
    ]
    assert len({spec.folder_name() for spec in [base, *others]}) == 6
    assert base.with_type(EXACT, "nprobe=4") == IndexSpec("baseline", postprocess="center")  # Flat takes none


@pytest.mark.parametrize("name", sorted(ANSWERS_783402C))
def test_folders_written_before_the_spec_load_name_themselves_and_answer_the_same(name, tmp_path):
    folder = shutil.copytree(FOLDERS_783402C / name, tmp_path / name)
    written = json.loads((folder / "manifest.json").read_text())
    index = open_index(folder)
    assert index.manifest.to_dict() == written
    assert index.spec.folder_name() == name and index.spec.mismatch(index.manifest) is None
    hits = index.search(["cell protein expression"], 3).hits(0)
    assert [(h.doc_id, round(h.score, 5)) for h in hits] == ANSWERS_783402C[name]


def test_a_folder_written_before_the_spec_is_reused_by_its_spec_and_refused_by_another(tmp_path):
    from cone.data.loaders import load_corpus
    from cone.indexing.dense import correct_corpus

    folder = shutil.copytree(FOLDERS_783402C / "baseline-center-SQ8_l2", tmp_path / "baseline-center-SQ8_l2")
    (tmp_path / "made").mkdir()
    lines = [json.loads(line) for line in (folder / "docs.jsonl").read_text().splitlines()]
    corpus = [{"_id": d["id"], "title": d["title"], "text": d["snippet"]} for d in lines]
    (tmp_path / "made" / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in corpus))
    dataset = load_corpus(tmp_path, "made")
    encoder = load_encoder("baseline")
    asked = IndexSpec("baseline", parse_index_type("SQ8@l2"), "center")
    created = read_manifest(folder).created
    index = open_or_build_dense(encoder, dataset, asked, lambda: correct_corpus(encoder, dataset, "center"), tmp_path)
    assert index.folder == folder and index.manifest.created == created  # reused, not rebuilt
    for other in (replace(asked, index_type=parse_index_type("SQ8")), replace(asked, postprocess="whiten")):
        assert other.mismatch(read_manifest(folder)) == "built as baseline+center [SQ8@l2] (no settings)"


def test_bm25_is_an_index_kind_read_at_the_edge_and_no_encoder(tmp_path):
    assert "bm25" not in ENCODER_NAMES and (*ENCODER_NAMES, "bm25") == MODEL_NAMES
    with pytest.raises(InputError, match="unknown model 'bm25'; choose from .*minilm, e5, mpnet or st:PATH"):
        load_encoder("bm25")  # the encoder registry knows encoders only
    with pytest.raises(InputError, match="unknown model 'bm2'; choose from .*minilm, e5, mpnet, bm25 or st:PATH"):
        model_spec("bm2")
    lexical = model_spec("bm25")
    assert lexical == IndexSpec.bm25() and lexical.lexical and lexical.kind == LEXICAL
    assert (lexical.folder_name(), lexical.label, lexical.factory) == ("bm25", "bm25", "Flat")  # as written before
    assert not model_spec("minilm").lexical and not IndexSpec("bm25").lexical  # the kind says it, not the name
    plan = EvalPlan(models=("bm25", "minilm"), indexes=tmp_path)
    assert plan.plain == {"bm25": IndexSpec.bm25(), "minilm": IndexSpec("minilm")}
    assert plan.model_runtimes(IndexSpec.bm25()) == (TORCH,)


def test_a_bm25_manifest_reads_back_into_the_lexical_spec_by_its_kind():
    manifest = read_manifest(Path(__file__).parent / "fixtures" / "index-0.1.0" / "bm25")
    assert IndexSpec.of_manifest(manifest) == IndexSpec.bm25()
    renamed = manifest.model_copy(update={"model": "renamed"})
    assert IndexSpec.of_manifest(renamed).lexical and IndexSpec.bm25().mismatch(manifest) is None
