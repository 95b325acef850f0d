"""``--backend auto``: the fastest runtime that keeps quality, chosen for this CPU from what was measured, and
never from a figure nobody measured. Resolved before any work into a concrete ``Runtime``: an index's manifest and
name record what was chosen, never "auto". Where no row was recorded for this kind of CPU, the runtimes whose quality
held are timed here on first use, and what was measured is kept per CPU (its model name and speed flags) in cone's
cache, so the next command reads it."""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from cone import cpu
from cone.data.loaders import lm_text_files
from cone.encoders.base import TORCH, Runtime
from cone.errors import InputError, ModelUnavailable

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
    no row was recorded: each CPU of the kind is then measured itself)."""

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
    # No row recorded for a CPU with AVX-512 VNNI but no native bf16 (int8 runs on VNNI, how fast is not known), nor
    # for AVX2 or older: the runtimes are timed on the CPU itself on first use (measured_here).
    CpuKind("AVX-512 VNNI without native bf16", frozenset({"avx512_vnni"}), (), "no row recorded for such a CPU"),
    CpuKind("AVX2 or older, no VNNI, no native bf16", frozenset(), (), "no row recorded for such a CPU"),
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


def _first_that_runs(order: tuple[Runtime, ...], data_root: Path, why: str) -> Choice:
    """The first of ``order`` that held quality and can run here, else torch; ``why`` says where the order is from."""
    refused: dict[str, list[str]] = {}  # why -> the faster runtimes it rules out
    for runtime in (runtime for runtime in order if runtime in HOLDS_QUALITY):
        if (why_not := _cannot_run(runtime, data_root)) is None:
            break
        refused.setdefault(why_not, []).append(runtime.tag)
    else:
        runtime = TORCH
    return Choice(runtime, why + "".join(f"; not {', '.join(tags)}: {reason}" for reason, tags in refused.items()))


def choose_runtime(model: str, data_root: Path) -> Choice:
    """The runtime ``--backend auto`` gives ``model`` on this CPU (``cone.cpu``'s flags): the first of its kind's
    recorded order that held quality and can run here; where no order was recorded, the one measured on this CPU
    (``measured_here``); else torch. ``data_root``: where int8 would calibrate."""
    if not follows_the_cpu(model):
        return Choice(TORCH, f"{model} runs on torch: no other runtime's quality was measured for it")
    kind = cpu_kind(cpu.cpu_flags())
    if kind.fastest_first:
        why = f"the fastest that held quality on {kind.name} and runs here, {kind.measured}"
        return _first_that_runs(kind.fastest_first, data_root, why)
    found = measured_here(model, data_root)
    if isinstance(found, str):
        return Choice(TORCH, f"this CPU is {kind.name}: {kind.measured}; {found}")
    return _first_that_runs(found.fastest_first(), data_root, f"this CPU is {kind.name}, no row recorded: {found}")


# Timing on first use, where no row was recorded. The sample: texts of about a SciFact abstract's length (the corpus
# side's cost), the same on every machine; each runtime encodes a few first (a first call compiles and allocates).
MEASURE_ENV = "CONE_AUTO_MEASURE"  # "0": never time the runtimes here (torch where no row was recorded)
MEASURED_ENV = "CONE_AUTO_MEASURED"  # the file of what was measured, per CPU
SAMPLE_TEXTS, SAMPLE_WORDS, WARMUP_TEXTS, ROUNDS = 64, 160, 8, 2


def measured_file() -> Path:
    return Path(os.environ.get(MEASURED_ENV, Path.home() / ".cache" / "cone" / "auto-runtimes.json"))


def cpu_key() -> str:
    """This CPU as the measurements are kept: its model name and speed flags."""
    return f"{cpu.cpu_name()} [{' '.join(cpu.speed_flags())}]"


@dataclass(frozen=True)
class Measured:
    """Documents per second of each runtime timed on this CPU, and how."""

    docs_per_s: dict[str, float]  # by runtime tag; torch's always
    model: str
    texts: int
    when: str
    load: float  # the 1-minute load average before: other work on the CPU slows every runtime, not all alike
    now: bool  # measured by this command (else read from measured_file())

    def fastest_first(self) -> tuple[Runtime, ...]:
        """The runtimes measured faster than torch, fastest first."""
        faster = [tag for tag, rate in self.docs_per_s.items() if rate > self.docs_per_s[TORCH.tag]]
        held = {runtime.tag: runtime for runtime in HOLDS_QUALITY}
        return tuple(held[tag] for tag in sorted(faster, key=lambda tag: -self.docs_per_s[tag]) if tag in held)

    def __str__(self) -> str:
        rates = ", ".join(f"{tag} {rate:.1f}" for tag, rate in sorted(self.docs_per_s.items(), key=lambda i: -i[1]))
        how = "measured now" if self.now else f"measured on {self.when}"
        where = f"{self.model}, {self.texts} texts, load {self.load:.1f}; kept in {measured_file()}"
        return f"{how} ({where}), documents/s: {rates}"


def sample_texts() -> list[str]:
    """The texts every runtime is timed on: this module's words in a seeded order, the same on every machine."""
    words, rng = __doc__.split(), random.Random(0)
    return [" ".join(rng.choices(words, k=SAMPLE_WORDS)) for _ in range(SAMPLE_TEXTS)]


def measure_rates(model: str, runtimes: list[Runtime], data_root: Path) -> dict[Runtime, float]:
    """Documents per second of ``model`` on each of ``runtimes`` that loads (the best of ROUNDS over
    ``sample_texts()``); ModelUnavailable where torch's does not load, which every rate is measured against."""
    from cone.encoders.registry import load_encoder  # loads the encoders: only when measuring

    texts, rates = sample_texts(), {}
    for runtime in runtimes:
        try:
            encoder = load_encoder(model, runtime=runtime, data_root=data_root)
        except ModelUnavailable:
            if runtime == TORCH:
                raise
            continue  # an export that failed here is not a candidate
        encoder.encode(texts[:WARMUP_TEXTS], batch_size=WARMUP_TEXTS)
        seconds = []
        for _ in range(ROUNDS):
            start = time.perf_counter()
            encoder.encode(texts)
            seconds.append(time.perf_counter() - start)
        rates[runtime] = len(texts) / min(seconds)
    return rates


def _read_measured() -> dict:
    """What was measured, per CPU; nothing where the file is absent or unreadable (it is then measured again)."""
    try:
        found = json.loads(measured_file().read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def measured_here(model: str, data_root: Path) -> Measured | str:
    """This CPU's measurement: read from measured_file(), else taken now and kept there; or why there is none."""
    entry = _read_measured().get(cpu_key())
    if isinstance(entry, dict):
        try:
            rates, timed, texts, when, load = (entry[key] for key in ("docs_per_s", "model", "texts", "when", "load"))
            rates = {tag: float(rate) for tag, rate in rates.items()}
            if TORCH.tag in rates:  # every rate is read against torch's
                return Measured(rates, str(timed), int(texts), str(when), float(load), False)
        except (KeyError, TypeError, ValueError, AttributeError):
            pass  # a damaged entry is measured again
    if os.environ.get(MEASURE_ENV) == "0":
        return f"not measured here ({MEASURE_ENV}=0)"
    # bf16 without native bf16 is emulated, many times slower (cone.cpu.bf16_is_fast): not worth its export
    candidates = [r for r in HOLDS_QUALITY if _cannot_run(r, data_root) is None]
    candidates = [r for r in candidates if r.quantize != "bf16" or cpu.bf16_is_fast()]
    when, load = datetime.now(UTC).isoformat(timespec="seconds"), os.getloadavg()[0]
    try:
        rates = measure_rates(model, [TORCH, *candidates], data_root)
    except ModelUnavailable as exc:
        return f"not measured: {exc}"
    found = Measured({r.tag: round(rate, 2) for r, rate in rates.items()}, model, SAMPLE_TEXTS, when, load, True)
    _keep(found)
    return found


def _keep(found: Measured) -> None:
    """Add this CPU's measurement to measured_file() (written whole, then renamed: never half a file)."""
    entries = _read_measured()
    entries[cpu_key()] = {key: value for key, value in asdict(found).items() if key != "now"}
    file = measured_file()
    file.parent.mkdir(parents=True, exist_ok=True)
    partial = file.with_name(f".{file.name}.{os.getpid()}")
    partial.write_text(json.dumps(entries, indent=1) + "\n")
    os.replace(partial, file)


def auto_help() -> str:
    """What ``auto`` picks on each kind of CPU, for --help."""
    per_kind = "; ".join(
        f"{kind.fastest_first[0].tag} on {kind.name}" if kind.fastest_first else f"measured on {kind.name}"
        for kind in CPU_KINDS
    )
    return (
        f"auto: for minilm and st:PATH, the fastest runtime measured on this kind of CPU among those whose nDCG@10 "
        f"and STS-B ρ stayed within {QUALITY_TOLERANCE} of torch's (docs/benchmarks.md): {per_kind}; the next "
        "fastest where that one cannot run (OpenVINO not installed, no LM text for int8 to calibrate on), torch at "
        f"last. 'measured': timed on this CPU on first use ({SAMPLE_TEXTS} texts, plus a first export), printed, and "
        f"kept per CPU model and flags in ${MEASURED_ENV} (default ~/.cache/cone/auto-runtimes.json); "
        f"${MEASURE_ENV}=0: torch there instead. The LMs, their fine-tuned encoders and roberta always run on torch "
        "(no other runtime's quality was measured for them)"
    )
