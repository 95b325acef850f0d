"""Encoder runtimes: a sentence-transformers model exported once to OpenVINO (fp32, bf16, static int8) by
sentence-transformers' own helpers, recorded in the index, and queries refused when another runtime would
encode them. The exports here are of a tiny random RoBERTa, and of a tiny random BERT with E5's prompt per role, so
they take seconds."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from cone import cpu
from cone.cli.main import main
from cone.data.loaders import load_beir
from cone.encoders import export
from cone.encoders.base import DOCUMENT, QUERY, ROLES, TORCH, Runtime
from cone.encoders.e5 import PASSAGE_PREFIX, QUERY_PREFIX
from cone.encoders.registry import load_encoder
from cone.errors import DamagedIndex, InputError, ModelUnavailable
from cone.eval.harness import build_indexes, load_eval_data, run_eval
from cone.eval.plan import EvalPlan
from cone.eval.significance import pairs
from cone.indexing.dense import DenseIndex, build_dense
from cone.indexing.manifest import read_manifest
from cone.indexing.open import open_index

from tiny import folder_name

pytest.importorskip("optimum.intel", reason="the OpenVINO backend is not installed (make install installs it)")

OPENVINO = Runtime("openvino")
OPENVINO_INT8 = Runtime("openvino", "int8")
SENTENCES = ["the cell shows increased expression", "a dog runs in the park", "stock market fell sharply"]


@pytest.fixture(autouse=True)
def _export_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("CONE_EXPORT_DIR", str(tmp_path_factory.getbasetemp() / "exports"))


@pytest.fixture()
def calibrated_data(tiny_beir):
    """The tiny dataset plus LM text under lmtext/, which static int8 calibrates on."""
    (tiny_beir / "lmtext").mkdir()
    lines = [" ".join(json.loads(line)["text"].split()[:12]) for line in (tiny_beir / "tiny" / "corpus.jsonl").open()]
    (tiny_beir / "lmtext" / "text.txt").write_text("\n".join(lines * 3) + "\n")
    return tiny_beir


@pytest.fixture(scope="module")
def prompted_bert_dir(tmp_path_factory) -> Path:
    """A tiny random BERT saved as cone saves e5 (encoders/e5.py): Transformer + mean Pooling + Normalize, with E5's
    prompts under sentence-transformers' names ``query`` and ``passage``; their words are in its WordPiece vocabulary,
    so each role's text differs in tokens, not in unknowns."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling
    from transformers import BertConfig, BertModel, BertTokenizerFast

    root = tmp_path_factory.mktemp("prompted-bert")
    hf, folder = root / "hf", root / "st"
    hf.mkdir()
    words = sorted({word for text in [*SENTENCES, QUERY_PREFIX, PASSAGE_PREFIX] for word in text.split()})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ":", *(w.rstrip(":") for w in words)]
    (hf / "vocab.txt").write_text("\n".join(dict.fromkeys(vocab)) + "\n")
    BertTokenizerFast(str(hf / "vocab.txt"), model_max_length=512).save_pretrained(str(hf))
    torch.manual_seed(0)
    # 512 positions, as e5's: sentence-transformers' int8 helper pads its calibration text to 384 tokens, and BERT's
    # positions are absolute (a model of fewer cannot be calibrated by it)
    config = BertConfig(vocab_size=len(set(vocab)), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512)  # fmt: skip
    BertModel(config).save_pretrained(str(hf))
    transformer = Transformer(str(hf), max_seq_length=512)
    modules = [transformer, Pooling(transformer.get_embedding_dimension(), pooling_mode="mean"), Normalize()]
    prompts = {"query": QUERY_PREFIX, "passage": PASSAGE_PREFIX}
    SentenceTransformer(modules=modules, prompts=prompts, device="cpu").save(str(folder))
    return folder


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_runtime_combinations_are_checked_in_one_line():
    assert Runtime().tag == "torch" and OPENVINO.tag == "openvino" and OPENVINO_INT8.tag == "openvino-int8"
    with pytest.raises(InputError, match="--quantize int8 is not available with --backend torch"):
        Runtime("torch", "int8")
    with pytest.raises(InputError, match="unknown backend"):
        Runtime("tensorrt")


def test_openvino_fp32_export_reproduces_torch_and_is_cached(tiny_roberta_dir, monkeypatch):
    spec = f"st:{tiny_roberta_dir}"
    reference = load_encoder(spec)
    exported = load_encoder(spec, runtime=OPENVINO)
    assert exported.runtime == OPENVINO and exported.fingerprint != reference.fingerprint
    assert np.allclose(exported.encode(SENTENCES), reference.encode(SENTENCES), atol=1e-4)
    monkeypatch.setattr("cone.encoders.export._export", lambda *a: pytest.fail("exported a second time"))
    again = load_encoder(spec, runtime=OPENVINO)
    assert again.fingerprint == exported.fingerprint  # same graph, same precision: same fingerprint


def test_int8_is_calibrated_quantized_and_close_to_fp32(tiny_roberta_dir, calibrated_data, capfd):
    spec = f"st:{tiny_roberta_dir}"
    fp32 = load_encoder(spec, runtime=OPENVINO).encode(SENTENCES)
    capfd.readouterr()
    encoder = load_encoder(spec, runtime=OPENVINO_INT8, data_root=calibrated_data)
    # NNCF's calibration bars ("Statistics collection ━━━ 100%") once printed on stdout, before a --json's JSON
    # (benchmarks/backend_bench.py --json): an export's progress goes to stderr
    out, err = capfd.readouterr()
    assert out == "" and "Statistics collection" in err
    int8 = encoder.encode(SENTENCES)
    assert "openvino-int8" in encoder.fingerprint
    cosines = (fp32 * int8).sum(1) / np.linalg.norm(fp32, axis=1) / np.linalg.norm(int8, axis=1)
    assert not np.allclose(fp32, int8, atol=1e-6)  # it really runs another graph ...
    assert cosines.min() > 0.9  # ... that still computes the same function


@pytest.mark.parametrize(("runtime", "floor"), [(OPENVINO, 0.9999), (OPENVINO_INT8, 0.999)])
def test_a_prompted_model_keeps_each_roles_prompt_through_the_export(
    prompted_bert_dir, calibrated_data, runtime, floor
):
    """e5's case (issue 49): the exported graph is given each role's prompt, so its query vectors are torch's query
    vectors and its document vectors torch's document vectors; a prompt dropped or swapped on the way lands on the
    other role's vectors, or on the unprompted ones, each below the floor."""
    spec = f"st:{prompted_bert_dir}"
    reference = load_encoder(spec)
    exported = load_encoder(spec, runtime=runtime, data_root=calibrated_data)
    assert exported.runtime == runtime
    assert (exported.prompt(QUERY), exported.prompt(DOCUMENT)) == (QUERY_PREFIX, PASSAGE_PREFIX)
    torch_vectors = {role: reference.encode(SENTENCES, role=role) for role in ROLES}
    unprompted = reference.model.encode(SENTENCES, convert_to_numpy=True)
    for role, other in (ROLES, ROLES[::-1]):
        vectors = exported.encode(SENTENCES, role=role)
        assert _cosines(vectors, torch_vectors[role]).min() >= floor
        assert _cosines(vectors, torch_vectors[other]).max() < floor
        assert _cosines(vectors, unprompted).max() < floor


def test_an_export_of_the_same_weights_runs_with_the_models_own_prompts(prompted_bert_dir, tmp_path):
    """The export folder is named by the weights: a second folder of the same weights, its prompts swapped, finds the
    first one's export, and must still be run with its own prompts."""
    load_encoder(f"st:{prompted_bert_dir}", runtime=OPENVINO)  # exported with the first folder's prompts
    swapped = tmp_path / "swapped"
    shutil.copytree(prompted_bert_dir, swapped)
    config = swapped / "config_sentence_transformers.json"
    found = json.loads(config.read_text())
    found["prompts"] |= {"query": PASSAGE_PREFIX, "passage": QUERY_PREFIX}
    config.write_text(json.dumps(found))
    reference, exported = load_encoder(f"st:{swapped}"), load_encoder(f"st:{swapped}", runtime=OPENVINO)
    assert (exported.prompt(QUERY), exported.prompt(DOCUMENT)) == (PASSAGE_PREFIX, QUERY_PREFIX)
    for role in ROLES:
        assert _cosines(exported.encode(SENTENCES, role=role), reference.encode(SENTENCES, role=role)).min() >= 0.9999


def test_int8_without_calibration_text_is_one_clear_error(tiny_roberta_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("CONE_EXPORT_DIR", str(tmp_path / "exports"))  # nothing exported yet
    with pytest.raises(InputError, match="int8 calibration needs LM text: no lmtext"):
        load_encoder(f"st:{tiny_roberta_dir}", runtime=OPENVINO_INT8, data_root=tmp_path)


def test_an_index_records_its_runtime_and_refuses_queries_from_another(tiny_roberta_dir, tiny_beir, tmp_path):
    spec = f"st:{tiny_roberta_dir}"
    dataset = load_beir(tiny_beir, "tiny")
    encoder = load_encoder(spec, runtime=OPENVINO)
    folder = build_dense(encoder, dataset, tmp_path / folder_name(spec, "none", runtime=OPENVINO), progress=False)
    assert folder.name.endswith("-openvino")
    manifest = read_manifest(folder)
    assert (manifest.backend, manifest.quantize) == ("openvino", "none")
    with pytest.raises(DamagedIndex, match="corpus encoded by openvino, queries would be by torch"):
        DenseIndex(folder, load_encoder(spec))
    with pytest.raises(DamagedIndex, match="corpus encoded by openvino, not torch"):
        open_index(folder, runtime=TORCH)
    served = open_index(folder)  # what the service does: the manifest's runtime encodes the queries
    assert served.encoder.runtime == OPENVINO
    text = f"{dataset.corpus['d3']['title']} {dataset.corpus['d3']['text']}"
    assert served.search([text], 1).hits(0)[0].doc_id == "d3"


def test_cone_index_with_backend_and_quantize(tiny_roberta_dir, calibrated_data, tmp_path, capsys):
    args = ["index", "--model", f"st:{tiny_roberta_dir}", "--dataset", "tiny", "--data-dir", str(calibrated_data)]
    out = ["--out", str(tmp_path / "idx"), "--no-progress"]
    assert main([*args, *out, "--backend", "openvino", "--quantize", "int8"]) == 0
    folder = next((tmp_path / "idx").iterdir())
    assert folder.name.endswith("-openvino-int8") and read_manifest(folder).quantize == "int8"
    assert main([*args, *out, "--backend", "torch", "--quantize", "int8"]) == 2
    assert "--quantize int8 is not available with --backend torch" in capsys.readouterr().err
    assert main(["index", "--model", "bm25", "--dataset", "tiny", "--data-dir", str(calibrated_data), *out,
                 "--backend", "openvino"]) == 2  # fmt: skip


def test_cone_index_auto_on_a_cpu_with_amx_builds_and_records_openvino_int8(
    tiny_roberta_dir, calibrated_data, tmp_path, monkeypatch, capsys
):
    real_bf16 = cpu.bf16_is_fast()
    monkeypatch.setattr(cpu, "cpu_flags", lambda: frozenset({"avx2", "avx512_vnni", "avx512_bf16", "amx_bf16"}))
    monkeypatch.setattr(export, "bf16_is_fast", lambda: real_bf16)  # OpenVINO compiles for the CPU it runs on
    args = ["index", "--model", f"st:{tiny_roberta_dir}", "--dataset", "tiny", "--data-dir", str(calibrated_data)]
    assert main([*args, "--out", str(tmp_path / "idx"), "--no-progress"]) == 0  # no --backend: auto
    assert "runs st:" in capsys.readouterr().err
    (folder,) = (tmp_path / "idx").iterdir()
    manifest = read_manifest(folder)
    assert folder.name.endswith("-openvino-int8") and (manifest.backend, manifest.quantize) == ("openvino", "int8")


def test_a_model_s_own_runtime_names_the_index_its_eval_reads(tiny_roberta_dir, shared_tiny_beir, tmp_path):
    """`cone demo` builds each model's indexes first and evaluates them after: with a runtime of its own (auto's
    choice) a model's folders are named and reused alike."""
    spec = f"st:{tiny_roberta_dir}"
    data = load_eval_data(shared_tiny_beir, "tiny", with_sts=False)
    plan = EvalPlan((spec,), tmp_path / "idx", runtime_of={spec: OPENVINO}, progress=False)
    (built,) = build_indexes(plan.plain[spec], data, plan)
    assert built.name == folder_name(spec, "none", runtime=OPENVINO)
    written = built.stat().st_mtime_ns
    (result,) = run_eval(data, plan)
    assert (result.label, result.index, result.available) == (f"{spec}@openvino", built.name, True)
    assert built.stat().st_mtime_ns == written  # read, not rebuilt


def test_eval_rows_per_runtime_compared_with_torch(tiny_roberta_dir, tiny_checkpoints, tiny_beir, tmp_path):
    spec = f"st:{tiny_roberta_dir}"
    data = load_eval_data(tiny_beir, "tiny")
    plan = EvalPlan(
        (spec, "baseline"), tmp_path / "idx", runtimes=(TORCH, OPENVINO), checkpoints=tiny_checkpoints, progress=False
    )
    results = run_eval(data, plan)
    labels = [r.label for r in results]
    assert labels == [spec, f"{spec}@openvino", "baseline", "baseline@openvino"]
    assert "runs on torch only" in results[3].reason
    torch_row, openvino_row = results[0], results[1]
    assert abs(torch_row.metrics["ndcg_at_10"] - openvino_row.metrics["ndcg_at_10"]) < 1e-3  # fp32: same ranking
    assert (torch_row, openvino_row) in pairs(results)


def test_bf16_needs_a_cpu_with_native_bf16(tiny_roberta_dir, monkeypatch):
    monkeypatch.setattr("cone.encoders.export.bf16_is_fast", lambda: False)
    with pytest.raises(InputError, match="native bf16"):
        load_encoder(f"st:{tiny_roberta_dir}", runtime=Runtime("openvino", "bf16"))


def test_the_language_models_run_on_torch_only(tiny_checkpoints):
    with pytest.raises(InputError, match="runs on torch only"):
        load_encoder("baseline", tiny_checkpoints, runtime=OPENVINO)


@pytest.mark.skipif(
    importlib.util.find_spec("optimum.onnxruntime") is not None, reason="ONNX Runtime backend installed"
)
def test_onnx_without_its_packages_is_unavailable_with_the_reason(tiny_roberta_dir):
    with pytest.raises(ModelUnavailable) as found:
        load_encoder(f"st:{tiny_roberta_dir}", runtime=Runtime("onnx", "int8"))
    assert "not installed" in found.value.reason and "transformers<4.58" in found.value.fix
