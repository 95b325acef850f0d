"""This machine's CPU as /proc/cpuinfo describes it, read once (nothing where there is no such file)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
# The flags that decide which kernels run: vector width, native bf16 and int8 dot products, AMX tiles. A benchmark's
# record and ``--backend auto``'s measurement name a CPU by its model name and these.
SPEED_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8", "amx_tile")


@cache
def _cpuinfo_lines() -> tuple[str, ...]:
    try:
        return tuple(CPUINFO.read_text().splitlines())
    except OSError:
        return ()


def _field(line: str) -> tuple[str, str]:
    key, _, value = line.partition(":")
    return key.strip(), value.strip()


def cpu_flags() -> frozenset[str]:
    """The instruction-set flags (avx512_bf16, amx_bf16, avx512_vnni, ...)."""
    return frozenset(
        word for line in _cpuinfo_lines() if _field(line)[0] == "flags" for word in _field(line)[1].split()
    )


def speed_flags() -> list[str]:
    """Of SPEED_FLAGS, those this CPU has, in SPEED_FLAGS' order."""
    flags = cpu_flags()
    return [flag for flag in SPEED_FLAGS if flag in flags]


def cpu_name() -> str:
    """The model name, for benchmark reports; "unknown CPU" where none is given."""
    return next((_field(line)[1] for line in _cpuinfo_lines() if _field(line)[0] == "model name"), "unknown CPU")


def bf16_is_fast() -> bool:
    """bf16 pays only where the CPU has native bf16 (AVX512-BF16 or AMX); elsewhere it is emulated and many times
    slower than fp32 (benchmarks/train_speed.py measures it; docs/benchmarks.md)."""
    return not cpu_flags().isdisjoint({"avx512_bf16", "amx_bf16"})
