"""Issue 33, faults and bad inputs that still got through: each test names its item and the exact input."""

from __future__ import annotations

import socket

import numpy as np
import pytest

from cone.cli import main
from cone.errors import InputError
from cone.indexing import postprocess as pp
from cone.indexing import store


def refused(argv: list[str], capsys, code: int = 2) -> str:
    """Run ``cone argv``: it must end with ``code`` (returned, or argparse's exit) and one line on stderr."""
    try:
        rc = main(argv)
    except SystemExit as exc:
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == code, err
    assert "Traceback" not in err and err.strip(), err
    return err


# --- item 11: --postprocess values round-trip exactly ------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "canonical"),
    [
        ("rogue:1:1000000", "rogue:1:1000000"),
        ("rogue:1:0.00001", "rogue:1:1e-05"),
        ("cone:0.00001", "cone:1e-05"),
        ("cone:0.99999999", "cone:0.99999999"),
        ("cone:0.1234567", "cone:0.1234567"),
        ("rogue:2:1e+20", "rogue:2:1e20"),
        ("cone:0.5e-3+whiten", "cone:0.0005+whiten"),
    ],
)
def test_postprocess_canonical_form_round_trips_and_keeps_the_value(spec, canonical):
    assert pp.parse(spec) == canonical
    assert pp.parse(canonical) == canonical
    value = spec.split("+")[0] if "whiten" in spec else spec
    assert float(canonical.split("+")[0].rsplit(":", 1)[1]) == float(value.rsplit(":", 1)[1])


def test_postprocess_folder_names_stay_portable_and_distinct():
    specs = ["rogue:1:1000000", "rogue:1:0.00001", "cone:0.00001", "cone:0.99999999", "rogue:2:1e20", "rogue:2:30"]
    names = [store.index_name("minilm", pp.parse(s)) for s in specs]
    assert len(set(names)) == len(names)
    assert all(set(n) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") for n in names)
    assert store.index_name("minilm", "rogue:2:30") == "minilm-rogue2x30"  # earlier builds' names unchanged


@pytest.mark.parametrize("bad", ["cone:1e0", "cone:0.99999999999999999", "rogue:1:0", "rogue:1:1e999", "cone:nan"])
def test_postprocess_refuses_out_of_range_values_in_any_notation(bad):
    with pytest.raises(InputError):
        pp.parse(bad)


# --- item 14: st: index names are unique, the built-in names unchanged --------------------------------------------


def test_st_index_names_do_not_collide():
    names = {store.index_name(m, "none") for m in ("st:/m/a_b", "st:/m_a/b", "st:/m/a/b")}
    assert len(names) == 3
    assert all(n.startswith("st__m_a_b-") for n in names)
    assert [store.index_name(m, "none") for m in ("baseline", "minilm", "regularized-ft")] == [
        "baseline",
        "minilm",
        "regularized-ft",
    ]


# --- item 14: options validated alike, listening, the in-memory index, the embedding cache ------------------------


@pytest.mark.parametrize("value", ["nan", "-1"])
def test_finetune_refuses_the_reg_cos_values_train_refuses(value, tmp_path, capsys):
    argv = ["finetune", "--from", "baseline", "--out", str(tmp_path / "o"), "--data-dir", str(tmp_path)]
    err = refused([*argv, "--reg-cos", value], capsys)
    assert "--reg-cos" in err and not (tmp_path / "o").exists()


def test_serve_on_a_port_in_use_is_bad_input_not_missing_weights(tmp_path, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        err = refused(["serve", "--indexes", str(tmp_path), "--port", str(port)], capsys)
    assert f"127.0.0.1:{port}" in err and len(err.strip().splitlines()) == 1


def test_serve_on_a_host_that_does_not_resolve_is_bad_input(tmp_path, capsys):
    err = refused(["serve", "--indexes", str(tmp_path), "--host", "no-such-host.invalid", "--port", "8765"], capsys)
    assert "no-such-host.invalid" in err


@pytest.mark.parametrize("command", ["serve", "demo"])
def test_an_empty_host_is_refused(command, tmp_path, capsys):
    extra = ["--indexes", str(tmp_path)] if command == "serve" else ["--out", str(tmp_path / "demo")]
    err = refused([command, *extra, "--host", ""], capsys)
    assert "0.0.0.0" in err


def test_index_in_memory_needs_no_queries_nor_qrels(tiny_beir, tmp_path, capsys):
    (tiny_beir / "tiny" / "queries.jsonl").unlink()
    (tiny_beir / "tiny" / "qrels" / "test.tsv").unlink()
    argv = ["index", "--model", "bm25", "--dataset", "tiny", "--data-dir", str(tiny_beir), "--out", str(tmp_path)]
    assert main([*argv, "--no-progress"]) == 0, capsys.readouterr().err
    assert (tmp_path / "bm25" / "manifest.json").is_file()


def test_a_cached_embedding_with_nan_is_encoded_again(shared_tiny_beir, tiny_checkpoints, tmp_path, monkeypatch):
    from cone.data.loaders import load_beir
    from cone.encoders.registry import load_encoder
    from cone.indexing.dense import CACHE_ENV, build_dense

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    encoder, dataset = load_encoder("baseline", tiny_checkpoints), load_beir(shared_tiny_beir, "tiny")
    build_dense(encoder, dataset, tmp_path / "a", progress=False)
    (cached,) = (tmp_path / "cache").glob("*.npy")
    good = np.load(cached)
    poisoned = good.copy()
    poisoned[3, 5] = np.nan
    np.save(cached, poisoned)
    build_dense(encoder, dataset, tmp_path / "b", progress=False)
    assert np.array_equal(np.load(cached), good)


# --- item 9: ports, finetune's seed and --out -------------------------------------------------------------------


@pytest.mark.parametrize("port", ["-1", "70000"])
def test_serve_refuses_a_port_out_of_range(port, tmp_path, capsys):
    assert "--port" in refused(["serve", "--indexes", str(tmp_path), "--port", port], capsys)


def test_demo_refuses_a_port_out_of_range_before_any_work(tmp_path, capsys):
    err = refused(["demo", "--out", str(tmp_path / "demo"), "--port", "70000", "--quick"], capsys)
    assert "--port" in err and not (tmp_path / "demo").exists()
    assert "==" not in capsys.readouterr().out


def test_finetune_refuses_a_negative_seed_and_writes_nothing(tmp_path, capsys):
    argv = ["finetune", "--from", "baseline", "--out", str(tmp_path / "o"), "--data-dir", str(tmp_path)]
    err = refused([*argv, "--seed", "-1"], capsys)
    assert "--seed" in err and not (tmp_path / "o").exists()


def test_finetune_refuses_an_out_that_is_a_file(tiny_checkpoints, tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    argv = ["finetune", "--from", str(tiny_checkpoints / "baseline"), "--out", str(tmp_path / "file")]
    err = refused([*argv, "--data-dir", str(tmp_path)], capsys)
    assert "--out" in err and (tmp_path / "file").read_text() == "x"
