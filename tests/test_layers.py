"""Every layer's space: `--layers` on the project's LMs and on any sentence-transformers model, one forward pass
for all layers, the per-layer rows, their comparisons and the profile figure; and `--sts` with several files."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch

from cone.cli.main import main
from cone.encoders.registry import load_encoder
from cone.errors import InputError
from cone.eval.harness import load_eval_data, run_eval
from cone.eval.plan import EvalPlan
from cone.eval.significance import pairs
from cone.indexing.dense import cache_corpus_layers, corpus_texts, corpus_vectors

SENTENCES = ["the cell shows increased expression", "a dog runs in the park", "stock market fell"]


def test_lm_layers_from_one_pass_equal_each_layer_alone(tiny_checkpoints):
    encoder = load_encoder("baseline", tiny_checkpoints)
    assert encoder.all_layers() == ["emb", 1, 2]
    together = encoder.encode_layers(SENTENCES, ["emb", 0, 1, 2, "last"])
    for layer, vectors in together.items():
        assert np.allclose(vectors, encoder.at_layer(layer).encode(SENTENCES), atol=1e-5), layer
    assert np.allclose(together[2], together["last"], atol=1e-6)  # the last block's state is the LayerNorm'd output
    assert not np.allclose(together["emb"], together[0], atol=1e-3)  # emb: tokens only; 0: tokens + positions
    with pytest.raises(InputError, match="layer 3 of baseline: choose last, emb or 0..2"):
        encoder.at_layer(3)


@pytest.mark.parametrize("name", ["baseline", "regularized"])
def test_shipped_lm_layers_are_the_masked_mean_of_their_states(name):
    """The committed checkpoints' vectors, through the sentence-transformers module, against the mean of each
    sentence's own states (no padding, no pooling module): emb = token-table rows, N = hidden state N."""
    from cone.models.checkpoint import checkpoints_dir, load_checkpoint

    encoder = load_encoder(name)
    found = encoder.encode_layers(SENTENCES, ["emb", 0, 1, 4, "last"], batch_size=2)
    gpt, tokenizer, _ = load_checkpoint(checkpoints_dir() / name)
    for i, sentence in enumerate(SENTENCES):
        ids = torch.tensor([tokenizer.encode(sentence).ids])
        with torch.no_grad():
            states = gpt.eval().hidden_states(ids)
            expected = {"emb": gpt.wte(ids), 0: states[0], 1: states[1], 4: states[4], "last": states[-1]}
        for layer, tokens in expected.items():
            assert np.allclose(found[layer][i], tokens[0].mean(0).numpy(), atol=1e-5), (sentence, layer)


def test_sentence_transformer_layers_are_mean_pooled_hidden_states(tiny_roberta_dir):
    from transformers import AutoModel, AutoTokenizer

    encoder = load_encoder(f"st:{tiny_roberta_dir}")
    assert encoder.all_layers() == ["emb", 1, 2]
    found = encoder.encode_layers(SENTENCES, ["emb", 1, 2, "last"])
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_roberta_dir))
    model = AutoModel.from_pretrained(str(tiny_roberta_dir)).eval()
    for i, sentence in enumerate(SENTENCES):
        batch = tokenizer([sentence], return_tensors="pt")
        with torch.no_grad():
            states = model(**batch, output_hidden_states=True).hidden_states
        for layer, state in (("emb", 0), (1, 1), (2, 2)):
            assert np.allclose(found[layer][i], states[state][0].mean(0).numpy(), atol=1e-4), (sentence, layer)
    # Its own output is the mean of the last layer (mean Pooling, no Normalize): the same vectors.
    assert np.allclose(found[2], found["last"], atol=1e-5)
    assert encoder.at_layer(1).fingerprint != encoder.fingerprint
    with pytest.raises(InputError, match="choose last, emb or 0..2"):
        encoder.at_layer(7)


def test_every_layer_of_the_corpus_is_encoded_in_one_pass_and_cached(shared_tiny_beir, tiny_checkpoints, monkeypatch):
    from cone.data.loaders import load_beir

    dataset = load_beir(shared_tiny_beir, "tiny")
    encoder = load_encoder("regularized", tiny_checkpoints)
    calls = []
    original = type(encoder).encode_layers

    def counted(self, texts, layers, *args, **kwargs):
        calls.append(list(layers))
        return original(self, texts, layers, *args, **kwargs)

    monkeypatch.setattr(type(encoder), "encode_layers", counted)
    layers = encoder.all_layers()
    assert cache_corpus_layers(encoder, layers, dataset, progress=False) == layers
    assert calls == [layers]  # one pass for all three
    assert cache_corpus_layers(encoder, layers, dataset, progress=False) == []  # all cached now
    cached = corpus_vectors(encoder.at_layer(1), dataset, progress=False)
    assert calls == [layers]  # served from the cache
    alone = original(encoder, corpus_texts(dataset)[:5], [1])[1]  # layer 1 of the first rows, encoded alone
    assert cached.shape == (len(dataset.corpus), encoder.dim) and np.allclose(cached[:5], alone, atol=1e-5)


def test_eval_layers_all_gives_a_row_per_layer_compared_and_profiled(shared_tiny_beir, tiny_checkpoints, tmp_path):
    argv = ["eval", "--dataset", "tiny", "--data-dir", str(shared_tiny_beir), "--checkpoints", str(tiny_checkpoints)]
    argv += ["--models", "baseline,bm25", "--postprocess", "none,center", "--layers", "all"]
    argv += ["--out", str(tmp_path / "out"), "--no-progress"]
    assert main(argv) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    rows = [(r["model"], r["layer"], r["postprocess"]) for r in report["results"]]
    assert rows == [("baseline", layer, spec) for layer in ("emb", 1, 2) for spec in ("none", "center")] + [
        ("bm25", "last", "none")
    ]
    compared = {(c["a"], c["b"]) for c in report["comparisons"]}
    assert {("baseline[emb]", "baseline[1]"), ("baseline[1]", "baseline[2]")} <= compared
    assert ("baseline[1]", "baseline[1]+center") in compared
    figures = {p.name for p in (tmp_path / "out" / "figures").iterdir()}
    assert {"layers-baseline.png", "cone-map.png"} <= figures
    assert "layers-bm25.png" not in figures


def test_a_layer_one_model_lacks_is_an_unavailable_row_not_a_crash(shared_tiny_beir, tiny_checkpoints, tmp_path):
    data = load_eval_data(shared_tiny_beir, "tiny")
    results = run_eval(
        data, EvalPlan(("baseline",), tmp_path / "idx", layers=(1, 5), checkpoints=tiny_checkpoints, progress=False)
    )
    one, five = results
    assert one.available and one.index == "baseline-layer1"
    assert not five.available and "layer 5 of baseline" in five.reason


def test_adjacent_layers_are_paired_in_depth_order(shared_tiny_beir, tiny_checkpoints, tmp_path):
    data = load_eval_data(shared_tiny_beir, "tiny")
    layers = [2, "emb", 1]  # asked out of order: compared by depth
    results = run_eval(
        data, EvalPlan(("baseline",), tmp_path / "idx", layers=layers, checkpoints=tiny_checkpoints, progress=False)
    )
    assert [(a.layer, b.layer) for a, b in pairs(results)] == [("emb", 1), (1, 2)]


def _write_sts(path, rows):
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["sentence1", "sentence2", "score"])
        writer.writerows(rows)


def test_several_sts_files_are_each_reported_and_averaged(shared_tiny_beir, tiny_checkpoints, tmp_path):
    source = shared_tiny_beir / "stsb" / "test.csv"
    with source.open() as handle:
        pairs_ = list(csv.reader(handle))[1:]
    _write_sts(tmp_path / "five.csv", pairs_)
    _write_sts(tmp_path / "hundred.csv", [(a, b, float(s) * 20) for a, b, s in pairs_])  # another score scale
    sts = [tmp_path / "five.csv", tmp_path / "hundred.csv"]
    data = load_eval_data(shared_tiny_beir, "tiny", sts_files=sts)
    (row,) = run_eval(data, EvalPlan(("baseline",), tmp_path / "idx", checkpoints=tiny_checkpoints, progress=False))
    m = row.metrics
    assert m["five_spearman"] == pytest.approx(m["hundred_spearman"])  # Spearman ignores the scale
    assert m["sts_mean_spearman"] == pytest.approx((m["five_spearman"] + m["hundred_spearman"]) / 2)
    assert "stsb_spearman" not in m


def test_sts_files_with_one_stem_are_told_apart_and_a_bad_one_is_one_line(tiny_beir, tmp_path, capsys):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        _write_sts(tmp_path / folder / "test.csv", [("x y", "x z", 1.0), ("p q", "r s", 2.0)])
    data = load_eval_data(tiny_beir, "tiny", sts_files=[tmp_path / "a" / "test.csv", tmp_path / "b" / "test.csv"])
    assert set(data.sts) == {"a_test", "b_test"}
    (tmp_path / "bad.csv").write_text("s1,s2\nx,y\n")
    argv = ["eval", "--dataset", "tiny", "--data-dir", str(tiny_beir), "--out", str(tmp_path / "o")]
    assert main([*argv, "--models", "bm25", "--sts", str(tmp_path / "bad.csv")]) == 2
    err = capsys.readouterr().err
    assert "bad.csv:1: expected the header sentence1,sentence2,score" in err and len(err.strip().splitlines()) == 1
