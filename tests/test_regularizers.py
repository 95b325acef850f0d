"""The anti-collapse terms of ``cone train --reg``: their values where the answer is known, their gradients, and
the command line that chooses them."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from cone.cli import build_parser, main
from cone.cli.train import _regularizers
from cone.errors import InputError
from cone.geometry.regularizer import TERMS, reg_cos, regularizer_terms, sample_rows
from cone.models.checkpoint import read_config, read_log
from cone.models.train import DEFAULT_LAMBDAS, parse_regularizers, train

from tiny import TINY, tiny_cfg, train_cut_at


def _tables(n: int = 512, d: int = 64) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "isotropic": torch.randn(n, d, generator=g),
        # every row = one shared mean + small noise: the cone
        "cone": torch.ones(d) + 0.3 * torch.randn(n, d, generator=g),
        # rows in a random 2-D plane: rank collapse (the mean stays at 0)
        "rank_collapse": torch.randn(n, 2, generator=g) @ torch.randn(2, d, generator=g)
        + 0.01 * torch.randn(n, d, generator=g),
        # one factor shared by every column: full rank, centered, but the columns are ~0.8 correlated
        "redundant": torch.randn(n, 1, generator=g) + 0.5 * torch.randn(n, d, generator=g),
    }


def _term(name: str, table: torch.Tensor) -> float:
    return float(TERMS[name](table, torch.Generator().manual_seed(1)))


# Which failure each term sees (value far from the isotropic table's) and which it is blind to, by construction:
# a cone moves the mean, not the spread or the correlations; a redundant table moves the correlations, not the
# mean; rank collapse moves the correlations and the spread of each direction.
SEES = {
    "reg_cos": {"cone"},
    "center": {"cone"},
    "vicreg_var": {"rank_collapse"},
    "vicreg_cov": {"rank_collapse", "redundant"},
    "barlow": {"rank_collapse", "redundant"},
    "sigreg": {"cone", "rank_collapse", "redundant"},
    "uniformity": {"cone", "rank_collapse", "redundant"},
}


def test_every_term_is_in_the_table_of_what_it_sees():
    assert set(SEES) == set(TERMS)


@pytest.mark.parametrize("name", sorted(TERMS))
def test_each_term_sees_the_failures_it_targets_and_not_the_others(name):
    tables = _tables()
    healthy = _term(name, tables["isotropic"])
    for failure in ("cone", "rank_collapse", "redundant"):
        shift = abs(_term(name, tables[failure]) - healthy)
        if failure in SEES[name]:
            assert shift > 0.05, (name, failure, shift)
        else:
            assert shift < 0.01, (name, failure, shift)


def test_known_values():
    tables = _tables()
    # isotropic: mean cosine 0, no mean, no redundancy beyond sampling (E[r^2] = 1/n), uniformity ~ -2t
    assert abs(_term("reg_cos", tables["isotropic"])) < 0.01
    assert _term("barlow", tables["isotropic"]) == pytest.approx(1 / 512, rel=0.2)
    assert _term("uniformity", tables["isotropic"]) == pytest.approx(-4.0, abs=0.2)
    # a table of copies: every cosine 1, all of the second moment in the mean, uniformity's maximum 0
    copies = torch.ones(64, 8) * torch.arange(1.0, 9.0)
    for name, expected in (("reg_cos", 1.0), ("center", 1.0), ("uniformity", 0.0)):
        assert _term(name, copies) == pytest.approx(expected, abs=1e-5)
    # the redundant table's columns share one factor: correlation 1 / (1 + 0.5^2) = 0.8, squared 0.64
    assert _term("barlow", tables["redundant"]) == pytest.approx(0.64, abs=0.05)


@pytest.mark.parametrize("name", sorted(TERMS))
def test_every_term_ignores_the_tables_scale(name):
    table = _tables()["cone"]
    assert _term(name, 7.0 * table) == pytest.approx(_term(name, table), rel=1e-4, abs=1e-6)


@pytest.mark.parametrize("name", sorted(TERMS))
def test_gradients_match_finite_differences(name):
    table = torch.randn(12, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(3)) + 0.5
    table.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda w: TERMS[name](w, torch.Generator().manual_seed(1)), (table,))


@pytest.mark.parametrize("name", sorted(TERMS))
def test_descending_a_term_lowers_it_on_the_failure_it_targets(name):
    failure = sorted(SEES[name])[0]
    table = _tables(n=256, d=32)[failure].clone().requires_grad_(True)
    opt = torch.optim.Adam([table], lr=0.05)
    before = _term(name, table.detach())
    for step in range(30):
        loss = regularizer_terms(table, [name], 128, torch.Generator().manual_seed(step))[name]
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert _term(name, table.detach()) < before - 0.05 * abs(before)


def test_reg_cos_is_the_shared_sample_term():
    weight = torch.randn(300, 16)
    shared = regularizer_terms(weight, ["reg_cos"], 64, torch.Generator().manual_seed(5))["reg_cos"]
    assert float(shared) == pytest.approx(float(reg_cos(weight, 64, torch.Generator().manual_seed(5))), abs=1e-7)
    assert sample_rows(weight, 1000).shape == (300, 16)  # fewer rows than asked: all of them


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("reg_cos", {"reg_cos": DEFAULT_LAMBDAS["reg_cos"]}),
        ("barlow:0.5,center:2", {"barlow": 0.5, "center": 2.0}),
        ("none", {}),
    ],
)
def test_parse_regularizers(spec, expected):
    assert parse_regularizers(spec) == expected


@pytest.mark.parametrize(
    "spec, message",
    [
        ("cosine:1", "unknown regularizer 'cosine'"),
        ("barlow:1,barlow:2", "named twice"),
        ("barlow:x", "must be a number"),
        ("barlow:-1", ">= 0"),
        ("barlow:nan", ">= 0"),
    ],
)
def test_bad_regularizer_specs_are_named(spec, message):
    with pytest.raises(InputError, match=message):
        parse_regularizers(spec)


def test_the_command_line_maps_reg_onto_the_config(capsys):
    def regularizers(*argv: str) -> dict:
        return _regularizers(build_parser().parse_args(["train", "--out", "x", *argv]))

    assert regularizers("--reg", "reg_cos:1,sigreg:2") == {"reg_cos": 1.0, "reg": {"sigreg": 2.0}}
    assert regularizers("--reg", "none") == {"reg_cos": 0.0, "reg": {}}
    for argv, message in (
        (["--reg", "barlow:1", "--reg-cos", "3"], "not allowed with"),
        (["--reg", "cosine:1"], "unknown regularizer 'cosine'"),
    ):
        with pytest.raises(SystemExit) as exc:
            build_parser().parse_args(["train", "--out", "x", *argv])
        assert exc.value.code == 2 and message in capsys.readouterr().err.splitlines()[-1]


def test_a_mix_of_terms_trains_logs_each_term_and_resumes_exactly(tiny_corpus, tmp_path, monkeypatch):
    cfg = replace(tiny_cfg(0.0, tokens=8 * 16 * 12), reg={"barlow": 1.0, "sigreg": 1.0, "center": 1.0})
    straight = train(tmp_path / "straight", [tiny_corpus], cfg, TINY, progress=False)
    log = read_log(straight)
    assert set(log[-1]["reg"]) == {"barlow", "sigreg", "center"} and all(v > 0 for v in log[-1]["reg"].values())
    assert {"top_pc_share", "uniformity"} <= set(log[-1])
    assert read_config(straight)["train"]["reg"] == cfg.reg
    train_cut_at(8, tmp_path / "cut", tiny_corpus, cfg, TINY, monkeypatch)
    resumed = train(tmp_path / "cut", [tiny_corpus], cfg, TINY, resume=True, progress=False)
    assert json.dumps(read_log(resumed)[-1]["reg"]) == json.dumps(log[-1]["reg"])
    assert read_log(resumed)[-1]["val_loss"] == log[-1]["val_loss"]


def test_train_command_refuses_a_bad_reg_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["train", "--out", str(tmp_path / "o"), "--reg", "barlow:x"])
    err = capsys.readouterr().err.splitlines()
    assert exc.value.code == 2 and err[-1].endswith("λ of barlow must be a number, got 'x'")
    assert not (tmp_path / "o").exists()


def _benchmark(name: str) -> dict:
    """The script's names, loaded as `python benchmarks/NAME.py` would: its folder first on the path (the scripts
    import record.py, their runner, from beside them)."""
    import runpy
    import sys
    from pathlib import Path

    folder = str(Path(__file__).resolve().parents[1] / "benchmarks")
    sys.path.insert(0, folder)
    try:
        return runpy.run_path(f"{folder}/{name}.py", run_name="test")
    finally:
        sys.path.remove(folder)


@pytest.fixture(scope="module")
def tiny_runs(tiny_corpus, tmp_path_factory):
    """Two seeds each of λ = 0, reg_cos and barlow, as regularizer_runs.sh names them."""
    root = tmp_path_factory.mktemp("reg-runs")
    for name, reg_cos_lambda, reg in (("none", 0.0, {}), ("reg_cos", 3.0, {}), ("barlow", 0.0, {"barlow": 1.0})):
        for seed in (0, 1):
            cfg = replace(tiny_cfg(reg_cos_lambda, tokens=8 * 16 * 6, eval_interval=3), reg=reg, seed=seed)
            train(root / f"{name}-seed{seed}", [tiny_corpus], cfg, TINY, progress=False)
    return root


def test_the_regularizers_table_pairs_seeds_and_regenerates_from_its_json(tiny_runs, tmp_path, capsys, monkeypatch):
    table_script = _benchmark("regularizers_table")
    rows = table_script["collect"](tiny_runs, None)
    assert {(r["name"], r["seed"]) for r in rows} == {(n, s) for n in ("none", "reg_cos", "barlow") for s in (0, 1)}
    table = table_script["summary"](rows)
    assert table["barlow"]["reg"] == "barlow:1" and table["reg_cos"]["reg"] == "reg_cos:3"
    none_loss = [r["val_loss"] for r in rows if r["name"] == "none"]
    assert table["none"]["val_loss"]["mean"] == pytest.approx(sum(none_loss) / 2)
    tests = table_script["comparisons"](rows)
    # barlow against both baselines, reg_cos against λ = 0: every metric, paired over the 2 shared seeds
    assert {(c["name"], c["vs"]) for c in tests} == {("barlow", "none"), ("barlow", "reg_cos"), ("reg_cos", "none")}
    assert all(c["seeds"] == [0, 1] and 0 <= c["p_adjusted"] <= 1 for c in tests)

    import sys

    saved = tmp_path / "runs.json"
    for argv in ([str(tiny_runs), "--write-json", str(saved)], ["--from-json", str(saved), "--figures", str(tmp_path)]):
        monkeypatch.setattr(sys, "argv", ["regularizers_table.py", *argv])
        table_script["main"]()
    first, second = capsys.readouterr().out.split("| regularizer | seeds |")[1:]
    assert first == second  # the committed rows give the same table as the checkpoints
    assert (tmp_path / "cone-map.png").stat().st_size > 0 and (tmp_path / "instruments-vs-tokens.png").is_file()
    # the seed-spread table of λ = 0 against reg_cos reads the same committed rows
    monkeypatch.setattr(sys, "argv", ["seed_spread.py", "--from-json", str(saved), "--json"])
    _benchmark("seed_spread")["main"]()
    spread = json.loads(capsys.readouterr().out)
    assert spread["seeds"] == {"0.0": 2, "3.0": 2}
    assert spread["val_loss"]["lambda_0"]["values"] == pytest.approx(none_loss)


def test_the_sweep_rule_picks_the_largest_lambda_under_the_cost():
    chosen = _benchmark("sweep_table")["chosen_lambdas"]
    records = {
        "none": {"val_loss": 7.0},
        "barlow:0.1": {"val_loss": 7.01},
        "barlow:1": {"val_loss": 7.05},  # +0.71%
        "barlow:10": {"val_loss": 7.2},  # +2.9%
        "center:0.1": {"val_loss": 7.1},  # +1.4%: nothing qualifies
    }
    assert chosen(records, 1.0) == {"barlow": 1.0, "center": None}


def test_the_default_lambdas_are_what_the_rule_picks_from_the_committed_sweep():
    from pathlib import Path

    sweep = _benchmark("sweep_table")
    records = sweep["final_records"](Path(__file__).resolve().parents[1] / "docs" / "regularizers" / "sweep")
    chosen = sweep["chosen_lambdas"](records, 1.0)
    assert chosen == {name: lam for name, lam in DEFAULT_LAMBDAS.items() if name != "reg_cos"}


@pytest.mark.parametrize(("sweep", "page"), [("regularizers/sweep", "regularizers.md"), ("sweep", "training.md")])
def test_a_sweep_table_on_a_page_is_what_the_committed_sweep_logs_give(monkeypatch, capsys, sweep, page):
    """The page's sweep table is sweep_table.py's output on the committed runs, line for line."""
    import sys

    docs = Path(__file__).resolve().parents[1] / "docs"
    monkeypatch.setattr(sys, "argv", ["sweep_table.py", str(docs / sweep)])
    _benchmark("sweep_table")["main"]()
    table = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    lines = (docs / page).read_text().splitlines()
    start = lines.index(table[0])  # the block under the page's generated marker: the same rows in the same order
    assert lines[start - 1].startswith("<!-- generated:") and len(table) == 2 + len(list((docs / sweep).iterdir()))
    assert lines[start : start + len(table) + 1] == [*table, ""]


def test_the_committed_regularizer_tables_are_what_their_committed_runs_give(monkeypatch, capsys):
    """docs/regularizers/table.json and seed-spread.json (the figures the docs cite) regenerate from runs.json."""
    import sys

    docs = Path(__file__).resolve().parents[1] / "docs" / "regularizers"
    for script, saved in (("regularizers_table", "table.json"), ("seed_spread", "seed-spread.json")):
        monkeypatch.setattr(sys, "argv", [f"{script}.py", "--from-json", str(docs / "runs.json"), "--json"])
        _benchmark(script)["main"]()
        assert json.loads(capsys.readouterr().out) == json.loads((docs / saved).read_text()), saved
    monkeypatch.setattr(sys, "argv", ["regularizers_table.py", "--from-json", str(docs / "runs.json")])
    _benchmark("regularizers_table")["main"]()
    printed = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    page = set((docs.parent / "regularizers.md").read_text().splitlines())
    assert len(printed) > 100 and [line for line in printed if line not in page] == []  # the page's table, as printed


@pytest.mark.parametrize(
    ("rows", "table", "against", "page"),
    [
        pytest.param(  # 28 comparisons' permutation tests and bootstraps: the longest of the two
            "regularizers/finetune.json",
            "regularizers/finetune-table.json",
            "reg_cos",
            "regularizers.md",
            marks=pytest.mark.slow,
        ),
        ("eval-finetune/seeds.json", "eval-finetune/seeds-table.json", "baseline", "results.md"),
    ],
)
def test_a_committed_finetune_table_is_what_its_committed_rows_give(data_dir, capsys, rows, table, against, page):
    """The fine-tune tables the docs cite (docs/regularizers.md against reg_cos, results.md section 5 against the
    baseline) regenerate from their committed rows, the STS gold scores read from the data dir."""
    docs = Path(__file__).resolve().parents[1] / "docs"
    argv = ["--from-json", str(docs / rows), "--against", against, "--data-dir", str(data_dir), "--json"]
    script = _benchmark("finetune_table")
    script["main"](argv)
    computed = json.loads(capsys.readouterr().out)
    assert computed == json.loads((docs / table).read_text())
    # The page's tables as the script prints them without --json (its main prints these same rows and tests as
    # markdown), from what was just computed: the tests' permutations and bootstraps run once, not twice.
    script["print_markdown"](computed["rows"], computed["comparisons"])
    printed = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    lines = set((docs / page).read_text().splitlines())
    assert len(printed) > 15 and [line for line in printed if line not in lines] == []  # the page's tables, as printed
