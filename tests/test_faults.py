"""Issue 33, faults and bad inputs that still got through: each test names its item and the exact input."""

from __future__ import annotations

import errno
import json
import os
import socket
import stat
from pathlib import Path

import numpy as np
import pytest

from cone.cli import main
from cone.errors import InputError
from cone.indexing import postprocess as pp
from cone.indexing import store

from tiny import folder_name


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
    names = [folder_name("minilm", pp.parse(s)) for s in specs]
    assert len(set(names)) == len(names)
    assert all(set(n) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") for n in names)
    assert folder_name("minilm", "rogue:2:30") == "minilm-rogue2x30"  # earlier builds' names unchanged


@pytest.mark.parametrize("bad", ["cone:1e0", "cone:0.99999999999999999", "rogue:1:0", "rogue:1:1e999", "cone:nan"])
def test_postprocess_refuses_out_of_range_values_in_any_notation(bad):
    with pytest.raises(InputError):
        pp.parse(bad)


# --- item 14: st: index names are unique, the built-in names unchanged --------------------------------------------


def test_st_index_names_do_not_collide():
    names = {folder_name(m, "none") for m in ("st:/m/a_b", "st:/m_a/b", "st:/m/a/b")}
    assert len(names) == 3
    assert all(n.startswith("st__m_a_b-") for n in names)
    assert [folder_name(m, "none") for m in ("baseline", "minilm", "regularized-ft")] == [
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


# --- items 12 and 13: cone train across a kill, and --resume of a damaged checkpoint -----------------------------


class Killed(BaseException):
    """A kill at a chosen point (SIGKILL runs no handler: nothing the code does after it may count)."""


def test_a_kill_between_log_and_checkpoint_then_resume_logs_each_step_once(tiny_corpus, tmp_path, monkeypatch):
    from cone.models import checkpoint as ckpt
    from cone.models.train import train

    from tiny import TINY, tiny_cfg

    cfg, out = tiny_cfg(0.0), tmp_path / "run"
    real_save, calls = ckpt.save_checkpoint, []

    def save_then_die_on_the_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise Killed  # step 12 logged, its checkpoint never written
        real_save(*args, **kwargs)

    monkeypatch.setattr(ckpt, "save_checkpoint", save_then_die_on_the_second)
    with pytest.raises(Killed):
        train(out, [tiny_corpus], cfg, TINY, progress=False)
    monkeypatch.setattr(ckpt, "save_checkpoint", real_save)
    assert [r["step"] for r in ckpt.read_log(out)] == [6, 12]
    train(out, [tiny_corpus], cfg, TINY, resume=True, progress=False)
    assert [r["step"] for r in ckpt.read_log(out)] == [6, 12, 18, 24]


def test_a_killed_save_leaves_nothing_after_resume_and_files_follow_the_umask(tiny_corpus, tmp_path):
    from cone.models import checkpoint as ckpt
    from cone.models.train import train

    from tiny import TINY, tiny_cfg

    out = tmp_path / "run"
    old = os.umask(0o022)
    try:
        train(out, [tiny_corpus], tiny_cfg(0.0, tokens=8 * 16 * 12), TINY, progress=False)
        for name in (ckpt.WEIGHTS, ckpt.TOKEN_COUNTS, ckpt.CONFIG, ckpt.TOKENIZER):
            assert stat.S_IMODE((out / name).stat().st_mode) == 0o644, name
        # what saves killed midway leave: safetensors' own temporary, and ours
        (out / ".tmpAb12Cd").write_bytes(b"\0" * 100)
        (out / f"{ckpt.WEIGHTS}.tmp").write_bytes(b"\0" * 100)
        train(out, [tiny_corpus], tiny_cfg(0.0, tokens=8 * 16 * 12), TINY, resume=True, progress=False)
    finally:
        os.umask(old)
    assert sorted(p.name for p in out.iterdir() if "tmp" in p.name) == []


def test_resume_of_a_finished_checkpoint_with_truncated_weights_is_refused(tiny_corpus, tmp_path):
    from cone.models import checkpoint as ckpt
    from cone.models.train import train

    from tiny import TINY, tiny_cfg

    out, cfg = tmp_path / "run", tiny_cfg(0.0, tokens=8 * 16 * 12)
    train(out, [tiny_corpus], cfg, TINY, progress=False)
    weights = out / ckpt.WEIGHTS
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(InputError, match="model.safetensors"):
        train(out, [tiny_corpus], cfg, TINY, resume=True, progress=False)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


# --- item 9: the rest ---------------------------------------------------------------------------------------------


def _index(data: Path, out: Path, *extra: str) -> list[str]:
    return ["index", "--dataset", "tiny", "--data-dir", str(data), "--out", str(out), "--no-progress", *extra]


@pytest.mark.parametrize("field", ["text", "_id"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_lone_surrogate_in_the_corpus_is_refused_with_its_line(
    tiny_beir, tiny_checkpoints, tmp_path, capsys, field, stream
):
    corpus = tiny_beir / "tiny" / "corpus.jsonl"
    record = {"_id": "dx", "title": "t", "text": "fine"} | {field: "bad \\ud800 here"}
    corpus.write_text(corpus.read_text() + json.dumps(record).replace("\\\\", "\\") + "\n")
    if stream:
        argv = _index(tiny_beir, tmp_path, "--model", "baseline", "--checkpoints", str(tiny_checkpoints))
        argv += ["--stream", "--index-factory", "IVF2,Flat", "--shard-size", "8", "--sample-size", "40"]
    else:
        argv = _index(tiny_beir, tmp_path, "--model", "bm25")
    err = refused(argv, capsys)
    assert "corpus.jsonl:41" in err and "surrogate" in err and field in err


@pytest.mark.parametrize("command", ["index", "demo"])
def test_bm25_over_a_corpus_of_empty_texts_is_one_line(tiny_beir, tmp_path, capsys, command):
    corpus = tiny_beir / "tiny" / "corpus.jsonl"
    docs = [json.loads(line) | {"title": "", "text": ""} for line in corpus.read_text().splitlines()]
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))
    if command == "index":
        argv = _index(tiny_beir, tmp_path, "--model", "bm25")
    else:
        argv = ["demo", "--models", "bm25", "--dataset", "tiny", "--data-dir", str(tiny_beir), "--no-serve"]
        argv += ["--out", str(tmp_path), "--no-progress", "--checkpoints", str(tmp_path / "none")]
    assert "bm25" in refused(argv, capsys)


def test_eval_refuses_qrels_that_name_no_corpus_document(tiny_beir, tmp_path, capsys):
    (tiny_beir / "tiny" / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tnowhere\t1\nq2\td2\t0\n")
    argv = ["eval", "--models", "bm25", "--dataset", "tiny", "--data-dir", str(tiny_beir), "--no-sts"]
    assert "qrel" in refused([*argv, "--out", str(tmp_path / "e"), "--no-progress"], capsys)


def test_eval_refuses_a_model_named_twice_before_any_work(tiny_beir, tmp_path, capsys):
    argv = ["eval", "--models", "baseline,baseline", "--dataset", "tiny", "--data-dir", str(tiny_beir)]
    assert "baseline" in refused([*argv, "--out", str(tmp_path / "e")], capsys)
    assert not (tmp_path / "e").exists()


def test_eval_with_every_model_unavailable_is_one_line(tiny_beir, tmp_path, capsys):
    argv = ["eval", "--models", "baseline,regularized", "--dataset", "tiny", "--data-dir", str(tiny_beir)]
    argv += ["--no-sts", "--checkpoints", str(tmp_path / "none"), "--out", str(tmp_path / "e"), "--no-progress"]
    assert "no model" in refused(argv, capsys)


def test_geometry_vectors_refuses_a_header_claiming_more_than_the_file(tmp_path, capsys):
    path = tmp_path / "huge.npy"
    np.save(path, np.zeros((2, 3), dtype=np.float32))
    raw = path.read_bytes()
    claim = b"(100000000000, 1000000), }"  # the header keeps its length: the padding gives way
    path.write_bytes(raw.replace(b"(2, 3), }" + b" " * (len(claim) - 9), claim, 1))
    assert "huge.npy" in refused(["geometry", "vectors", str(path)], capsys)


@pytest.mark.parametrize("code", [errno.EROFS, errno.ENOSPC])
def test_a_disk_that_refuses_the_index_is_one_line_and_the_old_index_stays(
    tiny_beir, tmp_path, capsys, monkeypatch, code
):
    argv = _index(tiny_beir, tmp_path, "--model", "bm25")
    assert main(argv) == 0
    before = {p.name: p.read_bytes() for p in (tmp_path / "bm25").iterdir() if p.is_file()}

    def refuse(writer, *args):
        writer.add("d0", "", "partial")  # half a table in the build's folder, then the disk says no
        raise OSError(code, os.strerror(code), store.DOCS)

    monkeypatch.setattr(store, "write_docs", refuse)
    err = refused(argv, capsys)
    assert str(tmp_path / "bm25") in err and os.strerror(code) in err
    assert {p.name: p.read_bytes() for p in (tmp_path / "bm25").iterdir() if p.is_file()} == before
    assert [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name] == []


def test_a_second_builder_of_a_folder_is_refused_while_the_first_writes(tiny_beir, tmp_path, capsys):
    with store.atomic_folder(tmp_path / "bm25") as first:
        err = refused(_index(tiny_beir, tmp_path, "--model", "bm25"), capsys)
        assert "another build" in err and first.is_dir()
        (first / "marker").write_text("still mine")
    assert (tmp_path / "bm25" / "marker").read_text() == "still mine"


def test_the_embedding_cache_on_a_full_disk_is_one_line_and_leaves_no_partial(
    shared_tiny_beir, tiny_checkpoints, tmp_path, monkeypatch
):
    from cone.data.loaders import load_beir
    from cone.encoders.registry import load_encoder
    from cone.indexing import dense

    monkeypatch.setenv(dense.CACHE_ENV, str(tmp_path / "cache"))

    def full_disk(file, array, *args, **kwargs):
        Path(file).write_bytes(b"\x93NUMPY partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(dense.np, "save", full_disk)
    encoder, dataset = load_encoder("baseline", tiny_checkpoints), load_beir(shared_tiny_beir, "tiny")
    with pytest.raises(InputError, match=r"cache.*\.npy.*No space left"):
        dense.build_dense(encoder, dataset, tmp_path / "idx", progress=False)
    assert list((tmp_path / "cache").iterdir()) == []


def test_st_naming_a_language_model_checkpoint_is_one_line(shared_tiny_beir, tiny_checkpoints, tmp_path, capsys):
    argv = _index(shared_tiny_beir, tmp_path, "--model", f"st:{tiny_checkpoints / 'baseline'}")
    assert "language-model checkpoint" in refused(argv, capsys)


def test_faiss_failing_to_write_on_a_full_disk_is_one_line_and_the_old_index_stays(
    tiny_beir, tiny_checkpoints, tmp_path, capsys, monkeypatch
):
    """FAISS says a failed write in a RuntimeError (the words are FAISS's own, measured on a full 64 kB tmpfs)."""
    import faiss

    argv = _index(tiny_beir, tmp_path, "--model", "baseline", "--checkpoints", str(tiny_checkpoints))
    assert main(argv) == 0
    before = (tmp_path / "baseline" / "index.faiss").read_bytes()

    def full(index, path):
        raise RuntimeError(
            "Error in void faiss::write_index(const Index*, IOWriter*, int) at index_write.cpp:499: Error: "
            f"'ret == (size * 4)' failed: write error in {path}: 65491 != 1024000 (No space left on device)"
        )

    monkeypatch.setattr(faiss, "write_index", full)
    err = refused(argv, capsys)
    assert "No space left on device" in err and str(tmp_path / "baseline") in err
    assert (tmp_path / "baseline" / "index.faiss").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name] == []
