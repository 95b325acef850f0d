"""What a query costs to encode by the size of the encode call's batches, on one torch thread and on torch's own.

Random batches of the dataset's test queries, as the service gathers them (16 by default), each encoded in one
``encode`` call whose batch size is varied: sentence-transformers sorts a call's texts by length before it cuts
batches, so smaller batches pad each query only to a neighbour's length, at the price of more forward passes.
cone's queries are encoded in batches of ``cone.indexing.dense.QUERY_BATCH``.

Usage: python benchmarks/query_batch.py --model baseline [--gathered 16] [--record OUT]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
from record import run_benchmark  # this script's folder is on the path: the one runner and record

from cone.cli.options import positive_int
from cone.data.loaders import data_dir, load_beir
from cone.encoders.base import QUERY
from cone.encoders.registry import load_encoder
from cone.errors import InputError

SIZES = (32, 16, 8, 4, 2, 1)


def measure(args: argparse.Namespace) -> dict:
    ds = load_beir(data_dir(args.data_dir), args.dataset)
    queries = [ds.queries[q] for q in sorted(ds.qrels)]
    if args.gathered > len(queries):
        raise InputError(f"--gathered {args.gathered}: {args.dataset} has {len(queries)} test queries")
    encoder = load_encoder(args.model, args.checkpoints)
    rng = np.random.default_rng(0)
    gathered = [list(rng.choice(queries, args.gathered, replace=False)) for _ in range(args.rounds)]
    rows = []
    for threads in dict.fromkeys((torch.get_num_threads(), 1)):
        torch.set_num_threads(threads)
        for size in (s for s in SIZES if s <= args.gathered):
            encoder.encode(gathered[0], batch_size=size, role=QUERY)  # warm-up
            wall, cpu = time.perf_counter(), time.process_time()
            for batch in gathered:
                encoder.encode(batch, batch_size=size, role=QUERY)
            n = args.gathered * args.rounds
            rows.append(
                {
                    "threads": threads,
                    "batch_size": size,
                    "wall_ms_per_query": (time.perf_counter() - wall) / n * 1e3,
                    "cpu_ms_per_query": (time.process_time() - cpu) / n * 1e3,
                }
            )
    return {"model": args.model, "gathered": args.gathered, "rounds": args.rounds, "rows": rows}


def show(found: dict) -> str:
    lines = [f"{found['model']}: {found['rounds']} random batches of {found['gathered']} queries, one encode call each"]
    lines += [
        f"{r['threads']} torch thread(s), batch size {r['batch_size']:>2}: {r['wall_ms_per_query']:.2f} ms a query, "
        f"{r['cpu_ms_per_query']:.2f} ms of CPU"
        for r in found["rows"]
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="baseline")
    parser.add_argument("--checkpoints", type=Path, default=None, help="default: $CONE_CHECKPOINTS or the shipped ones")
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--dataset", default="scifact")
    parser.add_argument("--gathered", type=positive_int, default=16, help="queries a batch of the service holds")
    parser.add_argument("--rounds", type=positive_int, default=20)
    run_benchmark(parser, measure, show)


if __name__ == "__main__":
    main()
