from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from cone.cli import build_parser, main
from cone.cli.train import _regularizers
from cone.errors import ConeError
from cone.geometry import anisotropy
from cone.models import train as train_module
from cone.models.analysis import checkpoint_report
from cone.models.checkpoint import load_checkpoint, load_token_counts
from cone.models.tokenizer import train_tokenizer
from cone.models.train import DEFAULT_REG_COS, TrainConfig, train

from tiny import TINY, tiny_cfg, train_cut_at


def last_log(path: Path) -> dict:
    return json.loads((path / "train_log.jsonl").read_text().splitlines()[-1])


def test_tokenizer_has_exact_vocab_size(tiny_corpus):
    assert train_tokenizer(tiny_corpus.read_text().splitlines(), 300).get_vocab_size() == 300


def test_tokenizer_refuses_a_vocab_the_corpus_cannot_fill(tiny_corpus):
    with pytest.raises(ConeError, match="supports only"):
        train_tokenizer(tiny_corpus.read_text().splitlines()[:3], 5000)


def test_encode_ignores_padding(tiny_checkpoints):
    from cone.encoders.registry import load_encoder

    encoder = load_encoder("baseline", tiny_checkpoints)
    short, long = "a cell", "a cell shows increased expression of the protein in treated mice"
    for layer in ("last", "emb", 0, 1):
        view = encoder.at_layer(layer)
        alone = view.encode([short])
        padded = view.encode([short, long], batch_size=2)[0]  # batched with a longer text: padded
        assert alone.shape == (1, 32)
        assert np.allclose(alone[0], padded, atol=1e-5), layer


def test_regularized_table_ends_less_anisotropic(tiny_corpus, tmp_path):
    base = train(tmp_path / "base", [tiny_corpus], tiny_cfg(0.0), TINY, progress=False)
    reg = train(tmp_path / "reg", [tiny_corpus], tiny_cfg(1.0), TINY, progress=False)
    a_base = anisotropy(load_checkpoint(base)[0].wte.weight).value
    a_reg = anisotropy(load_checkpoint(reg)[0].wte.weight).value
    assert a_reg < a_base - 0.05
    log = last_log(reg)
    assert {
        "step",
        "tokens",
        "train_loss",
        "val_loss",
        "anisotropy",
        "effective_rank",
        "decorrelation",
        "sigreg",
    } <= set(log)
    report = checkpoint_report(reg)
    counts = load_token_counts(reg).numpy()
    norms = np.linalg.norm(load_checkpoint(reg)[0].wte.weight.detach().numpy(), axis=1)
    assert report["n_unseen"] == (counts == 0).sum() > 0 and report["n_seen"] == (counts > 0).sum()
    expected = norms[counts == 0].mean() / norms[counts > 0].mean()
    assert report["unseen_seen_norm_ratio"] == pytest.approx(expected, rel=1e-5)
    assert len(report["logit_test"]["prompts"]) >= 6


def test_same_data_order_whatever_the_regularizer(tiny_corpus, tmp_path, monkeypatch):
    real_step = train_module.train_step
    seen: dict[float, list[torch.Tensor]] = {0.0: [], 1.0: []}
    for reg in seen:

        def recording_step(model, opt, cfg, x, step, reg=reg):
            seen[reg].append(x.clone())
            return real_step(model, opt, cfg, x, step)

        monkeypatch.setattr(train_module, "train_step", recording_step)
        train(tmp_path / f"reg-{reg}", [tiny_corpus], tiny_cfg(reg, tokens=8 * 16 * 4), TINY, progress=False)
    assert len(seen[0.0]) == len(seen[1.0]) == 4
    assert all(torch.equal(a, b) for a, b in zip(seen[0.0], seen[1.0], strict=True))  # reg_cos draws no batch RNG
    assert not torch.equal(seen[0.0][0], seen[0.0][1])  # and the batches do move on from step to step


def test_interrupt_saves_and_resume_matches_uninterrupted(tiny_corpus, tmp_path, monkeypatch):
    straight = train(tmp_path / "straight", [tiny_corpus], tiny_cfg(1.0), TINY, progress=False)
    train_cut_at(12, tmp_path / "cut", tiny_corpus, tiny_cfg(1.0), TINY, monkeypatch)
    assert json.loads((tmp_path / "cut" / "config.json").read_text())["step"] == 12
    resumed = train(tmp_path / "cut", [tiny_corpus], tiny_cfg(1.0), TINY, resume=True, progress=False)
    assert last_log(resumed)["val_loss"] == pytest.approx(last_log(straight)["val_loss"], abs=1e-6)
    assert last_log(resumed)["step"] == last_log(straight)["step"]


def test_refuses_to_overwrite_and_to_resume_other_settings(tiny_corpus, tmp_path):
    out = train(tmp_path / "run", [tiny_corpus], tiny_cfg(0.0, tokens=8 * 16 * 6), TINY, progress=False)
    with pytest.raises(ConeError, match="already holds a checkpoint"):
        train(out, [tiny_corpus], tiny_cfg(0.0, tokens=8 * 16 * 6), TINY, progress=False)
    with pytest.raises(ConeError, match="reg_cos"):
        train(out, [tiny_corpus], tiny_cfg(1.0, tokens=8 * 16 * 6), TINY, resume=True, progress=False)


def test_corrupt_or_mismatched_checkpoint_one_clear_error(tiny_corpus, tmp_path, capsys):
    out = train(tmp_path / "run", [tiny_corpus], tiny_cfg(0.0, tokens=8 * 16 * 6), TINY, progress=False)
    config = json.loads((out / "config.json").read_text())
    config["model"]["n_embd"] = 64
    (out / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConeError, match="shape"):
        load_checkpoint(out)
    (out / "model.safetensors").write_bytes(b"\x00garbage")
    assert main(["geometry", "checkpoint", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cone: error:") and err.count("\n") == 1


def test_reg_cos_is_on_by_default_and_zero_needs_saying():
    assert DEFAULT_REG_COS > 0

    def regularizers(*argv: str) -> dict:
        return _regularizers(build_parser().parse_args(["train", "--out", "x", *argv]))

    assert regularizers() == {"reg_cos": DEFAULT_REG_COS, "reg": {}}
    assert regularizers("--reg-cos", "0") == {"reg_cos": 0.0, "reg": {}}


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "--out", "o", "--corpus", "missing.txt"], "not found"),
        (["train", "--out", "o", "--n-embd", "30", "--n-head", "4", "--corpus", "x.txt"], "divisible"),
        (["train", "--out", "o", "--data-dir", "/nonexistent"], "default training corpus not found"),
    ],
)
def test_bad_arguments_clear_errors(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_empty_corpus_is_refused(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    assert main(["train", "--out", str(tmp_path / "o"), "--corpus", str(empty)]) == 2
    assert "empty" in capsys.readouterr().err


def test_negative_reg_cos_is_an_argument_error(capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["train", "--out", "x", "--reg-cos", "-1"])
    assert exc.value.code == 2


def test_bf16_autocast_only_where_the_cpu_has_it(monkeypatch, tmp_path):
    monkeypatch.setattr(train_module, "bf16_is_fast", lambda: False)
    assert TrainConfig().bf16 is False
    monkeypatch.setattr(train_module, "bf16_is_fast", lambda: True)
    assert TrainConfig().bf16 is True
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--out", str(tmp_path), "--fp32", "--bf16"])


def test_the_heading_points_somewhere_in_an_isotropic_table_and_nowhere_in_a_cone():
    from cone.models.analysis import heading_spread, heading_summary

    rng = np.random.default_rng(0)
    vocab, d, positions = 2000, 64, 300
    isotropic = rng.standard_normal((vocab, d))
    cone = 10.0 * np.ones(d) + 0.1 * isotropic  # every row nearly along one direction
    targets = rng.integers(0, vocab, size=positions)
    for table in (isotropic, cone):
        hidden = table[targets] + 0.5 * rng.standard_normal((positions, d))  # g heads towards its target row
        found = heading_summary(heading_spread(table, hidden, targets), vocab)
        if table is isotropic:
            spread_iso, gap_iso = found["cos_std_over_vocab"], found["target_minus_median_cos"]
            assert found["target_rank_median"] == 1 and gap_iso > 0.5
        else:
            assert found["cos_std_over_vocab"] < spread_iso / 10  # every token has about the same cosine
            assert found["target_minus_median_cos"] < gap_iso / 10
    assert found["positions"] == positions


def test_checkpoint_report_has_the_heading_test_on_held_out_text(tiny_checkpoints, tmp_path):
    report = checkpoint_report(tiny_checkpoints / "baseline", tmp_path)  # no corpus there: the prompts
    heading = report["heading"]
    assert heading["positions"] > 20 and "prompts" in heading["text"]
    assert 0 < heading["target_rank_percentile_mean"] <= 1 and heading["cos_std_over_vocab"] > 0
