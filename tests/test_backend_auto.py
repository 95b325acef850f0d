"""``--backend auto``: the rule per kind of CPU (its flags through ``cone.cpu``, monkeypatched, so every machine runs
the same tests), checked against the committed eval and the benchmark record it cites; what ``cone index`` records
when auto chose; what ``cone demo`` gives each model; --help and the one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cone import cpu
from cone.cli import demo
from cone.cli.main import main
from cone.encoders import auto, export
from cone.encoders.auto import CPU_KINDS, HOLDS_QUALITY, QUALITY_TOLERANCE, choose_runtime, cpu_kind
from cone.encoders.base import TORCH, Runtime
from cone.errors import ModelUnavailable
from cone.indexing.manifest import MANIFEST, read_manifest

ROOT = Path(__file__).resolve().parents[1]
OPENVINO_INT8, OPENVINO_BF16 = Runtime("openvino", "int8"), Runtime("openvino", "bf16")
# Flag sets as /proc/cpuinfo names them: the Xeon the backends were measured on (AMX), a CPU with AVX512-BF16 but no
# AMX (AMD Zen 4), AVX-512 VNNI without bf16 (Intel Cascade Lake), and a plain AVX2 CPU (the AMD EPYC).
AMX = frozenset({"avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8"})
ZEN4 = frozenset({"avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16"})
VNNI = frozenset({"avx2", "fma", "avx512f", "avx512_vnni"})
AVX2 = frozenset({"avx2", "fma"})


@pytest.fixture()
def cpu_with(monkeypatch):
    def set_flags(flags: frozenset[str]) -> None:
        monkeypatch.setattr(cpu, "cpu_flags", lambda: flags)

    return set_flags


@pytest.fixture()
def openvino_here(monkeypatch):
    """OpenVINO taken as installed, so the rule is the same test where it is not."""
    monkeypatch.setattr(export, "backend_missing", lambda name, runtime: None)


@pytest.fixture()
def lm_text(tmp_path) -> Path:
    """A data dir with LM text, which a first int8 export calibrates on."""
    (tmp_path / "lmtext").mkdir()
    (tmp_path / "lmtext" / "a.txt").write_text("a sentence to calibrate on\n")
    return tmp_path


def test_the_runtimes_that_hold_quality_are_those_of_the_committed_eval():
    report = json.loads((ROOT / "docs" / "eval-backends" / "report.json").read_text())
    rows = {r["runtime"]: r["metrics"] for r in report["results"] if r["model"] == "minilm" and r["available"]}
    reference = rows.pop("torch")
    held = {
        tag
        for tag, metrics in rows.items()
        if all(abs(metrics[k] - reference[k]) <= QUALITY_TOLERANCE for k in ("ndcg_at_10", "stsb_spearman"))
    }
    assert held == {runtime.tag for runtime in HOLDS_QUALITY}
    assert {runtime.tag for kind in CPU_KINDS for runtime in kind.fastest_first} <= set(rows)  # each one evaluated


def _measured_rates(name: str = "backends") -> tuple[dict[Runtime, float], dict]:
    """docs/s of each of cone's runtimes in a committed record docs/benchmarks.md's speed tables are printed from."""
    record = json.loads((ROOT / "docs" / "benchmarks" / f"{name}.json").read_text())
    runtimes = {runtime.tag: runtime for runtime in (TORCH, Runtime("openvino"), OPENVINO_BF16, OPENVINO_INT8)}
    rates = {
        runtimes[tag]: row["docs_per_s"]
        for row in record["result"]["rows"]
        if (tag := row["variant"].removeprefix("cone ")) in runtimes
    }
    return rates, record


def test_the_order_on_cpus_with_native_bf16_is_the_measured_one():
    rates, record = _measured_rates()
    assert "amx_bf16" in record["flags"]  # measured on a CPU of that kind
    faster = sorted((r for r in rates if rates[r] > rates[TORCH]), key=lambda r: -rates[r])
    assert faster == list(cpu_kind(AMX).fastest_first) == [OPENVINO_INT8, OPENVINO_BF16, Runtime("openvino")]
    rates, record = _measured_rates("backends-avx512bf16")
    assert "avx512_bf16" in record["flags"] and not {"amx_bf16", "amx_int8"} & set(record["flags"])
    faster = sorted((r for r in rates if rates[r] > rates[TORCH]), key=lambda r: -rates[r])
    assert faster == list(cpu_kind(ZEN4).fastest_first) == [OPENVINO_INT8, OPENVINO_BF16, Runtime("openvino")]
    assert all(not cpu_kind(flags).fastest_first for flags in (VNNI, AVX2))  # nothing measured there


@pytest.mark.parametrize(
    ("flags", "chosen", "said"),
    [
        (AMX, OPENVINO_INT8, "the fastest that held quality on AMX"),
        (ZEN4, OPENVINO_INT8, "the fastest that held quality on AVX512-BF16 without AMX"),
        (VNNI, TORCH, "AVX-512 VNNI without native bf16: no row recorded for such a CPU; not measured here"),
        (AVX2, TORCH, "AVX2 or older, no VNNI, no native bf16: no row recorded for such a CPU; not measured here"),
        (frozenset(), TORCH, "no row recorded"),  # no /proc/cpuinfo
    ],
)
def test_auto_picks_by_the_cpu(flags, chosen, said, cpu_with, openvino_here, lm_text):
    cpu_with(flags)
    for model in ("minilm", "st:/some/model"):
        choice = choose_runtime(model, lm_text)
        assert choice.runtime == chosen and said in choice.why


# e5 too: its OpenVINO graphs agree with torch per role (docs/benchmarks/backends-e5.json), but auto follows quality
# measured on SciFact and STS-B (docs/eval-backends holds MiniLM's alone), and no such eval of e5 per runtime exists.
@pytest.mark.parametrize("model", ["baseline", "regularized", "baseline-ft", "regularized-ft", "roberta", "bm25", "e5"])
def test_the_lms_their_encoders_and_roberta_stay_on_torch(model, cpu_with, openvino_here, lm_text):
    cpu_with(AMX)
    choice = choose_runtime(model, lm_text)
    assert choice.runtime == TORCH and "no other runtime's quality was measured" in choice.why


def test_without_openvino_auto_is_torch_and_says_why(cpu_with, lm_text, monkeypatch):
    cpu_with(AMX)
    absent = ModelUnavailable("auto", "the openvino backend needs openvino, which is not installed", "pip install")
    monkeypatch.setattr(export, "backend_missing", lambda name, runtime: absent)
    choice = choose_runtime("minilm", lm_text)
    assert choice.runtime == TORCH
    assert "not openvino-int8, openvino-bf16, openvino: the openvino backend needs openvino" in choice.why


def test_without_lm_text_to_calibrate_int8_auto_takes_the_next_fastest(cpu_with, openvino_here, tmp_path):
    cpu_with(AMX)
    choice = choose_runtime("minilm", tmp_path)
    assert choice.runtime == OPENVINO_BF16 and "not openvino-int8: int8 calibration needs LM text" in choice.why


def test_cone_index_by_default_records_what_auto_chose(tiny_roberta_dir, shared_tiny_beir, tmp_path, cpu_with, capsys):
    cpu_with(AVX2)  # what CI runs on: torch
    argv = ["index", "--model", f"st:{tiny_roberta_dir}", "--dataset", "tiny", "--data-dir", str(shared_tiny_beir)]
    assert main([*argv, "--out", str(tmp_path), "--no-progress"]) == 0  # no --backend: auto
    assert "--backend auto runs st:" in capsys.readouterr().err
    (folder,) = tmp_path.iterdir()
    manifest = read_manifest(folder)
    assert (manifest.backend, manifest.quantize) == ("torch", "none") and not folder.name.endswith("-torch")
    assert "auto" not in (folder / MANIFEST).read_text()


def test_help_says_what_auto_picks(capsys):
    for command in ("index", "demo", "doctor"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split()).replace("- ", "-")  # argparse wraps lines at hyphens
        assert "openvino-int8 on AMX" in text and "openvino-int8 on AVX512-BF16 without AMX" in text, command
        assert "measured on AVX2 or older, no VNNI, no native bf16" in text, command
        assert "timed on this CPU on first use" in text and "CONE_AUTO_MEASURE=0" in text, command
        assert "roberta always run on torch" in text, command


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["--backend", "tensorrt"], "argument --backend: invalid choice: 'tensorrt'"),
        (["--quantize", "int8"], "--backend auto chooses the precision too"),
        (["--backend", "auto", "--quantize", "bf16"], "--backend auto chooses the precision too"),
    ],
)
def test_bad_runtime_options_are_one_line(extra, fragment, shared_tiny_beir, tmp_path, capsys):
    argv = ["index", "--model", "minilm", "--data-dir", str(shared_tiny_beir), "--out", str(tmp_path), *extra]
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and fragment in err.splitlines()[-1] and "Traceback" not in err
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(("backend", "minilm"), [([], OPENVINO_INT8), (["--backend", "torch"], TORCH)])
def test_the_demo_gives_each_model_its_runtime(backend, minilm, cpu_with, openvino_here, tiny_beir, monkeypatch):
    """What `cone demo` builds and evaluates, on an AMX CPU: MiniLM as auto chose, the LMs on torch; with --backend
    torch, everything on torch."""
    cpu_with(AMX)
    (tiny_beir / "lmtext").mkdir()
    (tiny_beir / "lmtext" / "a.txt").write_text("a sentence to calibrate on\n")
    plans = []
    monkeypatch.setattr(demo.Demo, "build", lambda self, models, builds: plans.append(self.plan))
    monkeypatch.setattr(demo.Demo, "show_instruments", lambda self: None)
    monkeypatch.setattr(demo.Demo, "evaluate", lambda self: None)
    argv = ["demo", "--models", "minilm,baseline,bm25", "--dataset", "tiny", "--data-dir", str(tiny_beir)]
    assert main([*argv, "--out", str(tiny_beir / "out"), "--no-serve", "--no-progress", *backend]) == 0
    (plan,) = plans
    runtimes = [plan.model_runtimes(plan.plain[m]) for m in ("minilm", "baseline", "bm25")]
    assert runtimes == [(minilm,), (TORCH,), (TORCH,)]
    assert plan.data_root == tiny_beir  # where int8 calibrates


# --backend auto on a CPU without a recorded row: the runtimes timed here on first use (the timing stubbed: speed is
# never measured in a test), the choice kept per CPU in the measurements' file.
OPENVINO = Runtime("openvino")


@pytest.fixture()
def measuring(monkeypatch, tmp_path, cpu_with, openvino_here):
    """A CPU of no recorded kind (VNNI without bf16) named "Test Xeon", measuring on (conftest turns it off), its
    file in tmp_path; ``rates`` stands in for the timing and ``calls`` says what was timed."""
    monkeypatch.delenv(auto.MEASURE_ENV, raising=False)
    monkeypatch.setenv(auto.MEASURED_ENV, str(tmp_path / "auto.json"))
    monkeypatch.setattr(cpu, "cpu_name", lambda: "Test Xeon")
    cpu_with(VNNI)

    class Timing:
        rates: dict[Runtime, float] = {}
        calls: list[list[Runtime]] = []

        @staticmethod
        def measure(model, runtimes, data_root):
            Timing.calls.append(list(runtimes))
            return {runtime: Timing.rates[runtime] for runtime in runtimes}

    monkeypatch.setattr(auto, "measure_rates", Timing.measure)
    return Timing


@pytest.mark.parametrize(
    ("rates", "lm", "chosen"),
    [
        ({TORCH: 100.0, OPENVINO: 150.0, OPENVINO_INT8: 300.0}, True, OPENVINO_INT8),  # the fastest
        ({TORCH: 100.0, OPENVINO: 150.0, OPENVINO_INT8: 300.0}, False, OPENVINO),  # int8 cannot calibrate: not timed
        ({TORCH: 200.0, OPENVINO: 150.0, OPENVINO_INT8: 190.0}, True, TORCH),  # none beat torch
    ],
)
def test_a_cpu_without_a_row_measures_the_runtimes_that_held_quality(measuring, rates, lm, chosen, lm_text, tmp_path):
    measuring.rates = rates
    choice = choose_runtime("minilm", lm_text if lm else tmp_path / "no-lm-text")
    timed = [TORCH, OPENVINO, OPENVINO_INT8] if lm else [TORCH, OPENVINO]  # no bf16: emulated on this CPU
    assert measuring.calls == [timed]
    assert choice.runtime == chosen and "no row recorded: measured now (minilm, 64 texts, load " in choice.why
    assert f"{timed[-1].tag} {rates[timed[-1]]:.1f}" in choice.why and f"torch {rates[TORCH]:.1f}" in choice.why


def test_the_measurement_is_kept_per_cpu_and_read_back(measuring, lm_text, cpu_with, monkeypatch):
    measuring.rates = {TORCH: 100.0, OPENVINO: 150.0, OPENVINO_INT8: 300.0}
    first = choose_runtime("minilm", lm_text)
    kept = json.loads(auto.measured_file().read_text())
    assert list(kept) == ["Test Xeon [avx2 fma avx512f avx512_vnni]"]
    assert kept["Test Xeon [avx2 fma avx512f avx512_vnni]"]["docs_per_s"] == {
        "torch": 100.0, "openvino": 150.0, "openvino-int8": 300.0
    }  # fmt: skip
    again = choose_runtime("st:/some/model", lm_text)  # read back, for any model that follows the CPU
    assert len(measuring.calls) == 1 and again.runtime == first.runtime == OPENVINO_INT8
    assert "measured on 20" in again.why and "measured now" not in again.why
    cpu_with(AVX2)  # another CPU: measured itself, beside the first
    measuring.rates = {TORCH: 100.0, OPENVINO: 90.0, OPENVINO_INT8: 80.0}
    assert choose_runtime("minilm", lm_text).runtime == TORCH and len(measuring.calls) == 2
    assert set(json.loads(auto.measured_file().read_text())) == {
        "Test Xeon [avx2 fma avx512f avx512_vnni]", "Test Xeon [avx2 fma]"
    }  # fmt: skip
    monkeypatch.setattr(cpu, "cpu_name", lambda: "Other Xeon")  # same flags, another model: measured again
    choose_runtime("minilm", lm_text)
    assert len(measuring.calls) == 3


def test_a_damaged_measurement_file_is_measured_again(measuring, lm_text):
    measuring.rates = {TORCH: 100.0, OPENVINO: 150.0, OPENVINO_INT8: 300.0}
    auto.measured_file().write_text('{"Test Xeon [avx2 fma avx512f avx512_vnni]": {"docs_per_s": 3}')
    assert choose_runtime("minilm", lm_text).runtime == OPENVINO_INT8 and len(measuring.calls) == 1
    auto.measured_file().write_text('{"Test Xeon [avx2 fma avx512f avx512_vnni]": {"docs_per_s": 3}}')
    assert choose_runtime("minilm", lm_text).runtime == OPENVINO_INT8 and len(measuring.calls) == 2
    auto.measured_file().write_text(
        '{"Test Xeon [avx2 fma avx512f avx512_vnni]": {"docs_per_s": {"openvino": 9},'
        ' "model": "minilm", "texts": 64, "when": "x", "load": 0}}'
    )  # no torch's rate
    assert choose_runtime("minilm", lm_text).runtime == OPENVINO_INT8 and len(measuring.calls) == 3
    assert "openvino-int8" in json.loads(auto.measured_file().read_text())[auto.cpu_key()]["docs_per_s"]


@pytest.mark.parametrize("flags", [AMX, ZEN4])
def test_recorded_rows_stay_the_default_and_nothing_is_timed(measuring, flags, cpu_with, lm_text):
    cpu_with(flags)
    assert choose_runtime("minilm", lm_text).runtime == OPENVINO_INT8
    assert measuring.calls == [] and not auto.measured_file().exists()


def test_measuring_off_or_torch_unavailable_is_torch_and_nothing_is_kept(measuring, lm_text, monkeypatch):
    monkeypatch.setenv(auto.MEASURE_ENV, "0")
    choice = choose_runtime("minilm", lm_text)
    assert choice.runtime == TORCH and "not measured here (CONE_AUTO_MEASURE=0)" in choice.why
    monkeypatch.delenv(auto.MEASURE_ENV)

    def unavailable(model, runtimes, data_root):
        raise ModelUnavailable("minilm", "its weights are not here", "cone data fetch")

    monkeypatch.setattr(auto, "measure_rates", unavailable)
    choice = choose_runtime("minilm", lm_text)
    assert choice.runtime == TORCH and "not measured: " in choice.why and "weights are not here" in choice.why
    assert measuring.calls == [] and not auto.measured_file().exists()


def test_the_timing_encodes_the_sample_on_each_runtime_that_loads(tiny_roberta_dir, tmp_path):
    """What measure_rates returns (not how fast: a rate above zero for each runtime timed)."""
    rates = auto.measure_rates(f"st:{tiny_roberta_dir}", [TORCH], tmp_path)
    assert list(rates) == [TORCH] and rates[TORCH] > 0
    texts = auto.sample_texts()
    assert texts == auto.sample_texts() and len(texts) == auto.SAMPLE_TEXTS  # the same sample every time
