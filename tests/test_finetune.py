"""`cone finetune`: a tiny checkpoint fine-tuned on tiny train splits by sentence-transformers' trainer; the loss
falls, the log measures the sentence space, and the output loads as an encoder everywhere a model name goes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cone.cli.main import main
from cone.encoders.finetune import LOG, FinetuneConfig, training_pairs
from cone.encoders.registry import load_encoder
from cone.errors import InputError
from cone.models.checkpoint import read_config

pytest.importorskip("datasets", reason="cone[finetune] is not installed")
pytest.importorskip("accelerate", reason="cone[finetune] is not installed")


@pytest.fixture()
def train_data(tiny_beir, tiny_corpus):
    """The tiny dataset with what the fine-tune reads: SciFact-style train qrels, STS train/dev, LM text."""
    scifact = tiny_beir / "scifact"
    scifact.mkdir()
    docs = [json.loads(line) for line in (tiny_beir / "tiny" / "corpus.jsonl").open()]
    (scifact / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    queries = [{"_id": f"t{i}", "text": " ".join(d["text"].split()[3:9])} for i, d in enumerate(docs)]
    (scifact / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    (scifact / "qrels").mkdir()
    (scifact / "qrels" / "train.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"t{i}\t{d['_id']}\t1\n" for i, d in enumerate(docs))
    )
    test = (tiny_beir / "stsb" / "test.csv").read_text()
    for split in ("train", "dev"):
        (tiny_beir / "stsb" / f"{split}.csv").write_text(test)
    (tiny_beir / "lmtext").mkdir()
    (tiny_beir / "lmtext" / "text.txt").write_text(tiny_corpus.read_text())
    return tiny_beir


def test_training_pairs_come_from_train_splits_only(train_data):
    from cone.encoders.finetune import measured_split_texts

    (train_data / "scifact" / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nt0\td1\t1\n")
    measured = (train_data / "stsb" / "test.csv").read_text().splitlines()[1].split(",")[0]
    with (train_data / "lmtext" / "text.txt").open("a") as handle:  # lmtext shares sentences with STS-B
        handle.write("".join(f"{measured}\n" for _ in range(50)))
    held_out = measured_split_texts(train_data)
    assert " ".join(measured.lower().split()) in held_out
    pairs = training_pairs(train_data, FinetuneConfig(simcse_sentences=5000))
    assert not {" ".join(t.lower().split()) for t in pairs["simcse"]["anchor"]} & held_out
    assert len(pairs["scifact"]["anchor"]) == 39  # 40 train judgments; t0's claim is a test query: dropped
    assert all(p.startswith("doc ") for p in pairs["scifact"]["positive"])
    assert pairs["simcse"]["anchor"] == pairs["simcse"]["positive"] and len(pairs["simcse"]["anchor"]) > 100
    assert max(pairs["sts"]["score"]) == 1.0
    with pytest.raises(InputError, match="unknown or no source"):
        FinetuneConfig(sources=("msmarco",))


def test_finetune_end_to_end_loss_falls_and_output_loads(train_data, tiny_checkpoints, tmp_path):
    out = tmp_path / "ft"
    args = ["finetune", "--from", str(tiny_checkpoints / "regularized"), "--out", str(out), "--data-dir",
            str(train_data), "--mix", "scifact,simcse", "--max-steps", "40", "--eval-steps", "10", "--batch-size",
            "8", "--lr", "3e-3", "--no-progress"]  # fmt: skip
    assert main(args) == 0
    log = [json.loads(line) for line in (out / LOG).read_text().splitlines()]
    assert [r["step"] for r in log] == [10, 20, 30, 40]
    assert log[-1]["train_loss"] < log[0]["train_loss"]  # the contrastive loss falls
    assert all(0 < r["effective_rank"] <= r["d"] and -1 <= r["sts_dev_spearman"] <= 1 for r in log)
    assert log[-1]["tokens"] > log[0]["tokens"] > 0
    meta = read_config(out)["finetune"]
    assert meta["steps"] == 40 and meta["tokens_seen"] == log[-1]["tokens"] and meta["sources"] == ["scifact", "simcse"]
    encoder = load_encoder(f"st:{out}")
    before = load_encoder("regularized", tiny_checkpoints)
    sentences = ["the cell protein", "stock market news"]
    assert encoder.encode(sentences).shape == (2, before.dim)
    assert not np.allclose(encoder.encode(sentences), before.encode(sentences), atol=1e-4)  # it was trained
    assert not (out / "README.md").exists()  # no model card: it would quote training pairs
    assert main(args) == 2  # never overwrites a model


def test_finetuned_names_resolve_under_the_checkpoints_folder(train_data, tiny_checkpoints, tmp_path):
    from cone.encoders.registry import missing

    assert "cone finetune --from baseline" in missing("baseline-ft", tmp_path).fix


@pytest.mark.slow
def test_a_short_finetune_of_the_shipped_checkpoint_on_the_shared_data_logs_consistent_figures(data_dir, tmp_path):
    out = tmp_path / "ft"
    # Four steps of eight pairs, a log line every two: enough for two lines that must grow (CPU: issue 43).
    args = ["finetune", "--from", "regularized", "--out", str(out), "--data-dir", str(data_dir), "--max-steps", "4",
            "--eval-steps", "2", "--batch-size", "8", "--simcse-sentences", "100", "--no-progress"]  # fmt: skip
    assert main(args) == 0
    log = [json.loads(line) for line in (out / LOG).read_text().splitlines()]
    assert [r["step"] for r in log] == [2, 4]
    assert 0 < log[0]["tokens"] < log[1]["tokens"] and log[0]["elapsed_s"] < log[1]["elapsed_s"]
    assert all(r["d"] == 256 and 0 < r["effective_rank"] <= 256 and -1 < r["anisotropy"] < 1 for r in log)
    meta = read_config(out)
    assert meta["finetune"]["steps"] == 4 and meta["finetune"]["tokens_seen"] == log[-1]["tokens"]
    assert meta["tokens_seen"] == 4_001_792  # the pre-training's own accounting is kept beside the fine-tune's
    vectors = load_encoder(f"st:{out}").encode(["a claim about cells"])
    assert vectors.shape == (1, 256) and np.isfinite(vectors).all()


def test_reg_cos_is_added_to_the_loss_on_the_same_single_forward_per_column(tiny_checkpoints):
    import torch
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    from cone.encoders.finetune import WithRegCos
    from cone.encoders.gpt_module import sentence_model
    from cone.geometry.regularizer import reg_cos

    model = sentence_model(tiny_checkpoints / "baseline").train()  # counts tokens; dropout 0: the passes agree
    anchors, positives = ["the cell protein binds", "stock market news today", "a gene"], ["protein", "markets", "dna"]

    def columns() -> list[dict]:
        return [model.preprocess(anchors), model.preprocess(positives)]

    inner, module = MultipleNegativesRankingLoss(model), model[0]
    before = module.tokens_seen
    total = WithRegCos(model, inner, 2.0)(columns(), torch.tensor([]))
    real_tokens = sum(int(c["attention_mask"].sum()) for c in columns())
    assert module.tokens_seen - before == real_tokens  # each column embedded once, not again for the regularizer
    with torch.no_grad():
        regularizer = reg_cos(model(columns()[0])["sentence_embedding"], n=len(anchors))
        assert regularizer > 0.01  # a term that changes the sum
        assert torch.isclose(total.detach(), inner(columns(), torch.tensor([])) + 2.0 * regularizer, atol=1e-5)


def test_a_saved_encoder_loads_as_saved_and_a_module_naming_other_code_is_refused(tiny_checkpoints, tmp_path):
    from cone.encoders.gpt_module import load_sentence_model, sentence_model
    from cone.errors import ModelUnavailable

    saved = tmp_path / "saved"
    model = sentence_model(tiny_checkpoints / "baseline")
    model.prompts, model.similarity_fn_name = {"query": "query: "}, "dot"
    model.save(str(saved))
    sentences = ["the cell protein", "stock market news"]
    loaded = load_sentence_model(saved)
    assert np.array_equal(loaded.encode(sentences), model.encode(sentences))
    assert loaded.prompts["query"] == "query: " and loaded.similarity_fn_name == "dot"
    modules = json.loads((saved / "modules.json").read_text())
    for entry, refused in [
        ({**modules[1], "type": "os.system"}, "names 'os.system', code cone does not run"),
        ({**modules[1], "type": "sentence_transformers.util.cos_sim"}, "not a sentence-transformers module"),
        ({**modules[1], "path": "../elsewhere"}, "an entry cone cannot load"),
        ("Pooling", "an entry cone cannot load"),
    ]:
        (saved / "modules.json").write_text(json.dumps([modules[0], entry]))
        with pytest.raises(ModelUnavailable, match=refused):
            load_sentence_model(saved)
    (saved / "modules.json").write_text("[{")
    with pytest.raises(ModelUnavailable, match="modules.json unreadable"):
        load_sentence_model(saved)


def test_finetune_table_regenerates_from_its_json_and_compares_each_start_with_the_chosen_one(
    train_data, tiny_checkpoints, tmp_path, capsys
):
    import runpy
    from pathlib import Path

    table = runpy.run_path(str(Path(__file__).parents[1] / "benchmarks" / "finetune_table.py"), run_name="under_test")
    runs = tmp_path / "runs"
    for start in ("baseline", "regularized"):
        for seed in (0, 1):
            args = ["finetune", "--from", str(tiny_checkpoints / start), "--out", str(runs / f"{start}-seed{seed}"),
                    "--data-dir", str(train_data), "--mix", "scifact", "--max-steps", "2", "--batch-size", "8",
                    "--seed", str(seed), "--no-progress"]  # fmt: skip
            assert main(args) == 0
    (runs / "regularized-seed2").mkdir()  # unfinished: no modules.json, not a row
    common = ["--data-dir", str(train_data), "--dataset", "tiny", "--against", "regularized"]
    saved = tmp_path / "rows.json"
    capsys.readouterr()
    table["main"](
        [str(runs), *common, "--references", "", "--indexes", str(tmp_path / "idx"), "--write-json", str(saved)]
    )
    printed = capsys.readouterr().out
    table["main"](["--from-json", str(saved), *common])
    assert capsys.readouterr().out == printed  # the committed rows give the same table, to the last digit
    record = json.loads(saved.read_text())
    assert record["command"].startswith("python benchmarks/finetune_table.py") and len(record["commit"]) >= 7
    assert len(record["rows"]) == 8  # 2 starts x 2 seeds x (plain, whitened)
    for row in record["rows"]:
        assert np.mean(row["ndcg"]) == pytest.approx(row["metrics"]["ndcg_at_10"], abs=1e-6)
        assert len(row["sts"]["stsb"]) == 30
        log = (runs / f"{row['start']}-seed{row['seed']}" / LOG).read_text().splitlines()
        assert row["sts_dev_spearman"] == json.loads(log[-1])["sts_dev_spearman"]  # what picks runs: dev, not test
    table["main"](["--from-json", str(saved), *common, "--json"])
    found = json.loads(capsys.readouterr().out)
    assert [(r["model"], r["seeds"]) for r in found["rows"]] == [
        ("baseline-ft", [0, 1]),
        ("regularized-ft", [0, 1]),
    ] * 2
    assert [(c["a"], c["b"]) for c in found["comparisons"]] == [
        ("regularized-ft", "baseline-ft"),
        ("regularized-ft+whiten", "baseline-ft+whiten"),
    ]
    assert all(c["seeds"] == [0, 1] and 0 <= c["seed_p"] <= c["seed_p_adjusted"] <= 1 for c in found["comparisons"])
    baseline = [r for r in record["rows"] if r["start"] == "baseline" and r["postprocess"] == "none"]
    assert found["rows"][0]["per_seed_ndcg"] == [r["metrics"]["ndcg_at_10"] for r in baseline]
    record["rows"] = [r for r in record["rows"] if (r["start"], r["seed"]) != ("baseline", 0)]
    saved.write_text(json.dumps(record))
    table["main"](["--from-json", str(saved), *common, "--json"])
    (plain, _) = json.loads(capsys.readouterr().out)["comparisons"]
    assert plain["seeds"] == [1] and plain["seed_p"] is None  # compared on the seed both have, not seed 0 against 1
    with pytest.raises(SystemExit, match="need two starting points"):
        table["main"](["--from-json", str(saved), *common[:-1], "center"])
