"""``--backend auto``: the fastest runtime that keeps quality, chosen for this CPU from what was measured, and
never from a figure nobody measured. Resolved before any work into a concrete ``Runtime``: an index's manifest and
name record what was chosen, never "auto"."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cone import cpu
from cone.data.loaders import lm_text_files
from cone.encoders.base import TORCH, Runtime
from cone.errors import InputError

AUTO = "auto"
QUALITY_TOLERANCE = 0.005  # issue 29: nDCG@10 and STS-B ρ each within this of torch's

# The runtimes whose quality held: MiniLM's SciFact nDCG@10 and STS-B ρ each within QUALITY_TOLERANCE of torch's, in
# the committed eval docs/eval-backends/report.json (`cone eval --models minilm --backend torch,openvino --quantize
# none,bf16,int8`: openvino fp32 +0.0000 / +0.0000, bf16 +0.0011 / +0.0001, int8 -0.0036 / -0.0031).
# tests/test_backend_auto.py reads the report and checks this list against it.
HOLDS_QUALITY = (Runtime("openvino"), Runtime("openvino", "bf16"), Runtime("openvino", "int8"))


@dataclass(frozen=True)
class CpuKind:
    """A kind of CPU, and the runtimes measured faster than torch on one of its kind, fastest first (empty where
    none was measured: torch then)."""

    name: str
    flags: frozenset[str]  # a CPU with any of these is of this kind (/proc/cpuinfo's names); empty: any CPU
    fastest_first: tuple[Runtime, ...]
    measured: str  # where the order comes from, or why there is none


# The first kind whose flags this CPU has decides. Each line says where its order comes from.
CPU_KINDS = (
    # docs/benchmarks.md, "Encoder runtimes" (benchmarks/backend_bench.py, MiniLM, 500 SciFact documents): an Intel
    # Xeon with avx512_bf16 and amx_bf16, where openvino int8 ran fastest, then bf16, then fp32, all faster than
    # torch (the speed-ups are AMX's tile units at work). tests/test_backend_auto.py checks this order against the
    # run's record, docs/benchmarks/backends.json.
    CpuKind(
        "AMX",
        frozenset({"amx_bf16", "amx_int8"}),
        (Runtime("openvino", "int8"), Runtime("openvino", "bf16"), Runtime("openvino")),
        "measured on an Intel Xeon with AMX (docs/benchmarks.md, Encoder runtimes)",
    ),
    # AVX512-BF16 without AMX (AMD Zen 4, some Xeons): native bf16 dot products and VNNI, no AMX tiles. The same
    # benchmark on an AMD EPYC of that kind (docs/benchmarks/backends-avx512bf16.json) ran int8 fastest (on VNNI),
    # then bf16, then fp32, all faster than torch; the graphs are the ones whose quality held (their outputs'
    # cosines to fp32 there equal the Xeon's to the third decimal). tests/test_backend_auto.py checks this order.
    CpuKind(
        "AVX512-BF16 without AMX",
        frozenset({"avx512_bf16"}),
        (Runtime("openvino", "int8"), Runtime("openvino", "bf16"), Runtime("openvino")),
        "measured on an AMD EPYC with avx512_bf16 and VNNI, no AMX (docs/benchmarks.md, Encoder runtimes)",
    ),
    # No CPU with AVX-512 VNNI but no native bf16 has been measured: int8 would run on VNNI, but how fast is unknown.
    CpuKind("AVX-512 VNNI without native bf16", frozenset({"avx512_vnni"}), (), "no runtime measured on such a CPU"),
    # Issue 29 asks for AVX2 rows measured on an AVX2 machine; none was available: torch until they are.
    CpuKind("AVX2 or older, no VNNI, no native bf16", frozenset(), (), "no runtime measured on such a CPU"),
)


@dataclass(frozen=True)
class Choice:
    """What ``--backend auto`` runs a model on, and why, in words for a message."""

    runtime: Runtime
    why: str


def follows_the_cpu(model: str) -> bool:
    """MiniLM (whose quality per runtime was measured) and st:PATH sentence-transformers models (issue 29: auto is
    their default). The LMs and their fine-tuned encoders run on torch, and so does RoBERTa: no runtime's quality
    was measured for them."""
    return model == "minilm" or model.startswith("st:")


def cpu_kind(flags: frozenset[str]) -> CpuKind:
    return next(kind for kind in CPU_KINDS if not kind.flags or not kind.flags.isdisjoint(flags))


def _cannot_run(runtime: Runtime, data_root: Path) -> str | None:
    """Why ``runtime`` cannot run here (its packages are absent; a first int8 export has no text to calibrate on)."""
    from cone.encoders.export import backend_missing  # imports sentence-transformers: only when choosing

    if (absent := backend_missing("auto", runtime)) is not None:
        return absent.reason
    if runtime.quantize == "int8":
        try:
            lm_text_files(data_root, "int8 calibration")
        except InputError as exc:
            return str(exc)
    return None


def choose_runtime(model: str, data_root: Path) -> Choice:
    """The runtime ``--backend auto`` gives ``model`` on this CPU (``cone.cpu``'s flags): the first of its kind's
    measured order that held quality and can run here; else torch. ``data_root``: where int8 would calibrate."""
    if not follows_the_cpu(model):
        return Choice(TORCH, f"{model} runs on torch: no other runtime's quality was measured for it")
    kind = cpu_kind(cpu.cpu_flags())
    candidates = [runtime for runtime in kind.fastest_first if runtime in HOLDS_QUALITY]
    if not candidates:
        return Choice(TORCH, f"this CPU is {kind.name}: {kind.measured}")
    refused: dict[str, list[str]] = {}  # why -> the faster runtimes it rules out
    for runtime in candidates:
        if (why_not := _cannot_run(runtime, data_root)) is None:
            break
        refused.setdefault(why_not, []).append(runtime.tag)
    else:
        runtime = TORCH
    why = f"the fastest that held quality on {kind.name} and runs here, {kind.measured}"
    return Choice(runtime, why + "".join(f"; not {', '.join(tags)}: {reason}" for reason, tags in refused.items()))


def auto_help() -> str:
    """What ``auto`` picks on each kind of CPU, for --help."""
    per_kind = "; ".join(
        f"{kind.fastest_first[0].tag} on {kind.name}" if kind.fastest_first else f"torch on {kind.name} (not measured)"
        for kind in CPU_KINDS
    )
    return (
        f"auto: for minilm and st:PATH, the fastest runtime measured on this kind of CPU among those whose nDCG@10 "
        f"and STS-B ρ stayed within {QUALITY_TOLERANCE} of torch's (docs/benchmarks.md): {per_kind}; the next "
        "fastest where that one cannot run (OpenVINO not installed, no LM text for int8 to calibrate on), torch at "
        "last. The LMs, their fine-tuned encoders and roberta always run on torch (no other runtime's quality was "
        "measured for them)"
    )
