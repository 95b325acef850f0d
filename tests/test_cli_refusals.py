"""A refusal made while the command line is read is one line and exit 2, as every other refusal (README: "Every
command answers bad input with one line"); ``--help`` still prints the whole usage."""

from __future__ import annotations

import argparse

import pytest

from cone.cli.main import build_parser, main


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command and subcommand of ``cone`` (``()``: cone itself), as the words that name it."""
    found = [path]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += commands(sub, (*path, name))
    return found


COMMANDS = commands(build_parser())


def refusal(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2, err
    return err


@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c) or "cone" for c in COMMANDS])
def test_an_unknown_option_is_one_line_for_every_command(command, capsys):
    err = refusal([*command, "--no-such-option"], capsys)
    assert len(err.splitlines()) == 1 and "usage:" not in err, err
    assert err.startswith("cone") and ": error: " in err, err


@pytest.mark.parametrize("command", [("index",), ("geometry", "vectors")], ids=["index", "geometry vectors"])
def test_help_keeps_the_whole_usage(command, capsys):
    with pytest.raises(SystemExit) as exited:
        main([*command, "--help"])
    out = capsys.readouterr().out
    assert exited.value.code == 0 and out.startswith("usage: cone ") and len(out.splitlines()) > 5


def test_an_index_factory_faiss_cannot_parse_is_refused_before_the_model_loads(monkeypatch, tmp_path, capsys):
    """``--index-factory NOPE`` once passed the command-line check, loaded the model, encoded the corpus and then
    failed with FAISS's C++ function and source location (index_factory.cpp:1228)."""
    monkeypatch.setattr("cone.encoders.cluster.load_encoder", lambda *a, **k: pytest.fail("the model was loaded"))
    err = refusal(["index", "--model", "baseline", "--index-factory", "NOPE", "--out", str(tmp_path / "R")], capsys)
    assert err == (
        "cone index: error: argument --index-factory: invalid --index-factory 'NOPE': could not parse index string "
        "NOPE\n"
    )
    assert not (tmp_path / "R").exists()


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["eval", "--models", "baseline", "--index-factory", "Flat,IVF16,NOPE"], "code description NOPE"),
        (["doctor", "--vectors", "x.npy", "--types", "SQ8,NOPE,BIN"], "could not parse index string NOPE"),
    ],
)
def test_every_factory_option_asks_faiss_s_parser_first(argv, said, capsys):
    err = refusal(argv, capsys)
    assert said in err and ".cpp" not in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("argv", "built_as"),
    [
        (["--store", "lancedb", "--metric", "cosine", "--index-factory", "lance:IVF_PQ"], "lance:IVF_PQ@cosine"),
        (["--metric", "l2", "--index-factory", "usearch:i8"], "usearch:i8@l2"),
        (["--store", "lancedb", "--metric", "dot", "--index-factory", "lance:ivf_pq"], "lance:IVF_PQ@dot"),
        (["--index-factory", "lance:IVF_PQ"], "lance:IVF_PQ@l2"),
        (["--index-factory", "lance:IVF_PQ@cosine", "--metric", "cosine"], "lance:IVF_PQ@cosine"),
    ],
)
def test_metric_is_the_metric_the_index_is_built_by(argv, built_as, monkeypatch, tmp_path):
    """--metric with an --index-factory of LanceDB or USearch once built under the store's default metric: the
    option's parser wrote the default into the type (lance:IVF_PQ@l2) and a type's own @METRIC wins."""
    seen = []
    monkeypatch.setattr("cone.cli.index.build_index", lambda spec, *rest, **kw: seen.append(spec.factory) or tmp_path)
    assert main(["index", "--model", "baseline", "--out", str(tmp_path), *argv]) == 0
    assert seen == [built_as]


def test_a_metric_that_contradicts_the_one_the_index_type_names_is_refused(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr("cone.cli.index.build_index", lambda *a, **k: pytest.fail("built"))
    argv = ["index", "--model", "baseline", "--out", str(tmp_path), "--metric", "l2"]
    assert main([*argv, "--index-factory", "lance:IVF_PQ@cosine"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "--metric l2" in err and "lance:IVF_PQ@cosine" in err, err
