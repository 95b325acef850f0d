"""Encoder runtimes, in one run: docs/s of every backend x quantization against sentence-transformers' own torch
`encode` on the same SciFact documents (interleaved rounds, median), how far each one's vectors are from fp32
torch per role (the documents, and as many SciFact queries: a model with a prompt per role, e5's "query: " and
"passage: ", is given each), and the precision OpenVINO actually runs each matrix product in (which kernels int8
reaches on this CPU).

The quality cost on the full SciFact and STS-B comes from the eval:
    cone eval --models minilm --backend torch,openvino --quantize none,bf16,int8 --out docs/eval-backends

Usage: python benchmarks/backend_bench.py [--model minilm|e5|...] [--docs 500] [--rounds 3] [--data-dir DIR]
       [--json | --record OUT]
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path

import numpy as np
from record import run_benchmark  # this script's folder is on the path: the one runner and record

from cone.cpu import cpu_flags
from cone.data.loaders import data_dir, doc_text, load_beir
from cone.encoders.base import BACKENDS, DOCUMENT, QUERY, SUPPORTED, TORCH, Runtime
from cone.encoders.registry import load_encoder
from cone.errors import ConeError, ModelUnavailable

REFERENCE = "sentence-transformers torch encode"
ISA_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8")


def docs_per_s(encode, texts: list[str]) -> float:
    start = time.perf_counter()
    encode(texts)
    return len(texts) / (time.perf_counter() - start)


def min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)).min())


def matmul_precisions(encoder) -> dict[str, int]:
    """How many of OpenVINO's compiled matrix products run in each precision (u8/i8 = int8 kernels)."""
    compiled = getattr(encoder.model.transformers_model, "request", None)
    if compiled is None or not hasattr(compiled, "get_runtime_model"):
        return {}
    found = Counter()
    for op in compiled.get_runtime_model().get_ops():
        info = op.get_rt_info()
        if info["layerType"].astype(str) in ("FullyConnected", "MatMul"):
            found[info["runtimePrecision"].astype(str)] += 1
    return dict(found)


def load_variants(model: str, root: Path) -> tuple[dict, dict[str, str]]:
    """Every runtime cone offers, loaded (exported on first use); the unavailable ones with their reason."""
    loaded, skipped = {}, {}
    for backend in BACKENDS:
        for quantize in SUPPORTED[backend]:
            runtime = Runtime(backend, quantize)
            try:
                loaded[runtime.tag] = load_encoder(model, runtime=runtime, data_root=root)
            except ModelUnavailable as exc:
                skipped[runtime.tag] = exc.reason
            except ConeError as exc:
                skipped[runtime.tag] = str(exc)
    return loaded, skipped


def measure(args: argparse.Namespace) -> dict:
    """Every runtime's speed and closeness to fp32 torch (per role), as the JSON record."""
    root = data_dir(args.data_dir)
    ds = load_beir(root, "scifact")
    texts = [doc_text(ds.corpus[d]) for d in sorted(ds.corpus)[: args.docs]]
    queries = [ds.queries[q] for q in sorted(ds.queries)[: args.docs]]
    variants, skipped = load_variants(args.model, root)
    torch_encoder = variants[TORCH.tag]
    reference_model = torch_encoder.model  # the very SentenceTransformer inside cone's torch encoder
    prompt = torch_encoder.prompt(DOCUMENT)  # the same text as cone's documents: the same work
    runs = {
        REFERENCE: lambda t: reference_model.encode(t, prompt=prompt, batch_size=args.batch_size, convert_to_numpy=True)
    }
    runs |= {f"cone {tag}": (lambda t, e=e: e.encode(t, batch_size=args.batch_size)) for tag, e in variants.items()}
    for encode in runs.values():
        encode(texts[:16])  # warm-up: first-call compilation and allocation
    speeds: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.rounds):  # interleaved, so the machine's noise hits every variant alike
        for name, encode in runs.items():
            speeds[name].append(docs_per_s(encode, texts))
    sample = {DOCUMENT: texts, QUERY: queries}
    fp32 = by_role(torch_encoder, sample, args.batch_size)
    rows = []
    base = float(np.median(speeds[REFERENCE]))
    for name, values in speeds.items():
        row = {"variant": name, "docs_per_s": float(np.median(values)), "ratio": float(np.median(values)) / base}
        encoder = variants.get(name.removeprefix("cone "))
        if encoder is not None:
            vectors = by_role(encoder, sample, args.batch_size)
            row |= {
                "min_cos_vs_fp32": min_cosine(vectors[DOCUMENT], fp32[DOCUMENT]),
                "min_cos_vs_fp32_query": min_cosine(vectors[QUERY], fp32[QUERY]),
                "max_abs_diff": float(np.abs(vectors[DOCUMENT] - fp32[DOCUMENT]).max()),
            }
            row["matmul_precisions"] = matmul_precisions(encoder) if encoder.runtime.backend == "openvino" else {}
        rows.append(row)
    flags = cpu_flags()
    return {
        "model": args.model,
        "docs": len(texts),
        "queries": len(queries),
        "prompts": {role: torch_encoder.prompt(role) for role in (QUERY, DOCUMENT)},
        "rounds": args.rounds,
        "cpu_flags": [f for f in ISA_FLAGS if f in flags],
        "rows": rows,
        "unavailable": skipped,
    }


def by_role(encoder, sample: dict[str, list[str]], batch_size: int) -> dict[str, np.ndarray]:
    """Each role's texts encoded as that role (with the model's prompt for it, where it has one)."""
    return {role: encoder.encode(texts, batch_size=batch_size, role=role) for role, texts in sample.items()}


def show(result: dict) -> str:
    lines = [
        f"{result['model']}: {result['docs']} SciFact documents, median of {result['rounds']} interleaved rounds",
        f"CPU: {', '.join(result['cpu_flags'])}",
    ]
    for row in result["rows"]:
        extra = ""
        if "min_cos_vs_fp32" in row:
            cosines = f"{row['min_cos_vs_fp32']:.5f} docs"
            if "min_cos_vs_fp32_query" in row:  # records before issue 49 measured the documents alone
                cosines += f", {row['min_cos_vs_fp32_query']:.5f} queries"
            extra = f"  min cos vs fp32 {cosines}  matmuls {row['matmul_precisions'] or '-'}"
        lines.append(f"  {row['variant']:36s} {row['docs_per_s']:7.1f} docs/s  {row['ratio']:5.2f}x{extra}")
    lines += [f"  {'cone ' + tag:36s} unavailable: {reason}" for tag, reason in result["unavailable"].items()]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="minilm", help="a registry name (minilm, e5, mpnet, ...) or st:PATH")
    parser.add_argument("--docs", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--data-dir", type=Path, default=None)
    run_benchmark(parser, measure, show)


if __name__ == "__main__":
    main()
