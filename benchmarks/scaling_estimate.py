"""docs/scaling.md's arithmetic: what 100 M documents would cost, from the committed benchmark records.

Usage: python benchmarks/scaling_estimate.py BLOCK [--records docs/benchmarks] | --json
BLOCK: inputs, encoding, faiss, sizes, serving, build-memory, lance (the page's blocks, printed as it shows
them); --json: every input and result by name. Nothing here was run at 100 M: each input is a
record's figure (named beside it), the rest is the arithmetic printed. tests/test_benchmark_records.py holds the
page's blocks equal to this script's output.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from record import print_from_records, read_record  # this script's folder is on the path: the records' schema

from cone.indexing.streaming import StreamOptions
from cone.output import markdown_table
from cone.output import thousands as fig  # a figure as the docs print it

DOCS = 100_000_000
D = 384  # MiniLM's width: the model the estimate encodes with
LISTS = 65_536
NPROBE = 32
SAMPLE = 2_000_000
SHARD = 1_000_000
KMEANS_ITERATIONS = 25  # FAISS's default
MEASURED_IVF = ("IVF4096,Flat", 4096, 256)  # the 1 M benchmark's IVF build whose time gives the rate: lists, d
DEFAULT_SHARD = StreamOptions().shard_size
LIST_HEADER_BYTES = 24  # per list per shard, while FAISS merges the shards' lists (merge_ondisk)
FACTORIES = ("Flat", "IVF65536,Flat", "HNSW32", "IVF65536,SQ8", "IVF65536,PQ64", "IVF65536,PQ32")


def result_of(folder: Path, name: str) -> dict:
    return read_record(folder, name)["result"]


def inputs(folder: Path) -> dict:
    """The measured figures the estimate rests on, each from its record."""
    minilm = result_of(folder, "ray-minilm")
    backends = {row["variant"]: row for row in result_of(folder, "backends")["rows"]}
    ann_record = read_record(folder, "ann-1m")
    ann = {row["factory"]: row for row in ann_record["result"]["ann"]["rows"]}
    sizes = result_of(folder, "index-sizes")
    streamed = next((index for index in sizes.values() if index["stream"]), None)
    if streamed is None:
        raise KeyError("a streamed index in index-sizes")
    stream = result_of(folder, "stream-1m")
    return {
        "minilm_docs_per_s_local": minilm["docs_per_s"]["local"],
        "minilm_cores": minilm["cores"],
        "minilm_docs_per_s_per_core": minilm["docs_per_s"]["local"] / minilm["cores"],
        "ray_minilm": minilm["ray_vs_local"],
        "ray_baseline": result_of(folder, "ray-baseline")["ray_vs_local"],
        "ray_baseline_streamed": result_of(folder, "ray-stream")["ray_vs_local"],
        "int8_speedup": backends["cone openvino-int8"]["docs_per_s"] / backends["cone torch"]["docs_per_s"],
        "ivf_build_s": ann[f"{MEASURED_IVF[0]} (nprobe=8)"]["build_s"],
        "ivf_build_points": ann_record["result"]["ann"]["n"],
        "ivf_build_cores": ann_record["cores"],
        "list_bytes_per_vector": streamed["bytes_per_doc"]["index.ivfdata"],
        "list_dim": streamed["dim"],
        "doc_table_bytes": streamed["bytes_per_doc"]["docs.jsonl"] + streamed["bytes_per_doc"]["docs.offsets"],
        "stream_build_anonymous_ratio": stream["ratios"]["build_peak_anonymous"],
        "stream_serve_rss_mib": stream["streamed"]["serve"]["rss_mib"],
    }


def estimate(folder: Path) -> dict:
    """Every figure the page prints, by name."""
    measured = inputs(folder)
    torch_core_h = DOCS / measured["minilm_docs_per_s_per_core"] / 3600
    int8_core_h = torch_core_h / measured["int8_speedup"]
    streamed_ratio = measured["ray_minilm"] * measured["ray_baseline_streamed"] / measured["ray_baseline"]
    _, lists, dim = MEASURED_IVF
    # The build is k-means (its iterations over every point: FAISS trains on all of them up to 256 a list) and one
    # more pass assigning every point: a lower bound on the machine's rate, so the hours below are an upper bound.
    flops = 2 * measured["ivf_build_points"] * lists * dim * (KMEANS_ITERATIONS + 1) / measured["ivf_build_s"]
    train_s = 2 * SAMPLE * LISTS * D * KMEANS_ITERATIONS / flops
    assign_s = 2 * DOCS * LISTS * D / flops
    per_list = DOCS / LISTS
    probed = NPROBE * per_list
    bytes_per_doc = factory_bytes(measured["doc_table_bytes"])
    return {
        "lance": lance_sizes(folder),
        "inputs": measured,
        "torch_core_h": torch_core_h,
        "torch_ray_core_h": torch_core_h / measured["ray_minilm"],
        "int8_core_h": int8_core_h,
        "int8_ray_core_h": int8_core_h / measured["ray_minilm"],
        "int8_ray_hours_16x32": int8_core_h / measured["ray_minilm"] / (16 * 32),
        "int8_ray_hours_8x16": int8_core_h / measured["ray_minilm"] / (8 * 16),
        "torch_ray_hours_16x32": torch_core_h / measured["ray_minilm"] / (16 * 32),
        "int8_one_machine_days": int8_core_h / measured["minilm_cores"] / 24,
        "torch_one_machine_days": torch_core_h / measured["minilm_cores"] / 24,
        "streamed_ray_minilm": streamed_ratio,
        "int8_streamed_ray_core_h": int8_core_h / streamed_ratio,
        "int8_streamed_ray_hours_16x32": int8_core_h / streamed_ratio / (16 * 32),
        "kmeans_flops": flops,
        "train_core_h": train_s * measured["ivf_build_cores"] / 3600,
        "assign_core_h": assign_s * measured["ivf_build_cores"] / 3600,
        "bytes_per_doc": bytes_per_doc,
        "gb_at_100m": {name: DOCS * size / 1e9 for name, size in bytes_per_doc.items()},
        "probed_vectors": probed,
        "mb_per_query": {name: probed * bytes_per_doc[name] / 1e6 for name in ("IVF65536,Flat", "IVF65536,SQ8")},
        "sample_gb": 3 * SAMPLE * D * 4 / 1e9,
        "shard_gb": SHARD * D * 4 / 1e9,
        "list_headers_gb": DOCS / SHARD * LISTS * LIST_HEADER_BYTES / 1e9,
        "list_headers_gb_default_shards": DOCS / DEFAULT_SHARD * LISTS * LIST_HEADER_BYTES / 1e9,
    }


def lance_sizes(folder: Path) -> dict[str, dict]:
    """Per document: the Lance table (its float vectors, row and id) and the Lance index beside it, with FAISS's
    Flat file of the same vectors for comparison, at d = D; measured on the record's corpus (its n_docs), so the
    fixed parts (codebooks, centroids) count in the index's bytes."""
    found = {}
    for name, index in result_of(folder, "index-sizes").items():
        parts, factory = index["parts_per_doc"], index["index_factory"]
        if index["dim"] != D:
            continue
        if factory.startswith("lance:"):
            vectors, index_b = parts["vectors.lance/data"], parts.get("vectors.lance/_indices", 0.0)
        elif factory == "Flat":
            vectors, index_b = parts["index.faiss"], 0.0
        else:
            continue
        found[name] = {"factory": factory, "vectors_per_doc": vectors, "index_per_doc": index_b}
    return found


def factory_bytes(doc_table: float) -> dict[str, float]:
    """Bytes per document of each factory's codes at d = 384 (FAISS's layouts), and of the document table."""
    return {
        "Flat": 4 * D,
        "IVF65536,Flat": 4 * D + 8,
        "HNSW32": 4 * D + 2 * 32 * 4,  # level-0 links; the upper levels add a little more
        "IVF65536,SQ8": D + 8,
        "IVF65536,PQ64": 64 + 8,
        "IVF65536,PQ32": 32 + 8,
        "document table": doc_table,
    }


def block_inputs(cost: dict) -> str:
    measured = cost["inputs"]
    rows = [
        (
            "MiniLM (d = 384), torch fp32, one process",
            f"{fig(measured['minilm_docs_per_s_local'], 1)} docs/s on "
            f"{measured['minilm_cores']} cores = **{fig(measured['minilm_docs_per_s_per_core'], 1)} docs/s per core**",
            "ray-minilm",
        ),
        ("the same through Ray (1 actor per core)", f"**{measured['ray_minilm']:.2f}×**", "ray-minilm"),
        (
            "baseline LM through Ray, in memory / streamed",
            f"{measured['ray_baseline']:.2f}× / {measured['ray_baseline_streamed']:.2f}×",
            "ray-baseline, ray-stream",
        ),
        ("OpenVINO int8 ÷ cone's own torch fp32 encoder (MiniLM)", f"**{measured['int8_speedup']:.2f}×**", "backends"),
        (
            f"{MEASURED_IVF[0]} build on {fig(measured['ivf_build_points'])} × {MEASURED_IVF[2]}"
            " (k-means, then the adds)",
            f"{fig(measured['ivf_build_s'], 1)} s on {measured['ivf_build_cores']} cores",
            "ann-1m",
        ),
        (
            f"inverted-list bytes per vector, IVF…,Flat (d = {measured['list_dim']})",
            fig(measured["list_bytes_per_vector"], 1),
            "index-sizes",
        ),
        (
            "document table bytes per document (id, title, snippet; offset)",
            fig(measured["doc_table_bytes"], 1),
            "index-sizes",
        ),
        (
            "streamed ÷ in-memory build, anonymous peak (1 M documents)",
            f"{measured['stream_build_anonymous_ratio']:.3f}×",
            "stream-1m",
        ),
        (
            "`cone serve` over the streamed million, resident",
            f"{fig(measured['stream_serve_rss_mib'])} MiB",
            "stream-1m",
        ),
    ]
    cells = [[what, value, ", ".join(f"`{one}.json`" for one in names.split(", "))] for what, value, names in rows]
    return markdown_table(["input", "value", "record"], cells)


def block_encoding(cost: dict) -> str:
    measured = cost["inputs"]
    torch_h, int8_h, ray = fig(cost["torch_core_h"]), fig(cost["int8_core_h"]), f"{measured['ray_minilm']:.2f}"
    return "\n".join(
        [
            f"torch fp32:     {DOCS:.0e} docs / {measured['minilm_docs_per_s_per_core']:.1f} docs/s/core"
            f" = {torch_h} core-h",
            f" through Ray:   {torch_h} / {ray} = {fig(cost['torch_ray_core_h'])} core-h",
            f"OpenVINO int8:  {torch_h} / {measured['int8_speedup']:.2f} = {int8_h} core-h",
            f" through Ray:   {int8_h} / {ray} = {fig(cost['int8_ray_core_h'])} core-h",
            f"  on 16 x 32 cores: {cost['int8_ray_hours_16x32']:.1f} h; on 8 x 16: {cost['int8_ray_hours_8x16']:.1f} h"
            f" (torch fp32 through Ray on 16 x 32: {cost['torch_ray_hours_16x32']:.1f} h)",
            f"one {measured['minilm_cores']}-core machine, no Ray: int8 {cost['int8_one_machine_days']:.0f} days, "
            f"fp32 {cost['torch_one_machine_days']:.0f} days",
            f"streamed Ray, MiniLM (not measured): {ray} x {measured['ray_baseline_streamed']:.2f} / "
            f"{measured['ray_baseline']:.2f} = {cost['streamed_ray_minilm']:.2f}x",
            f" int8 through streamed Ray: {int8_h} / {cost['streamed_ray_minilm']:.2f} = "
            f"{fig(cost['int8_streamed_ray_core_h'])} core-h"
            f" = {cost['int8_streamed_ray_hours_16x32']:.1f} h on 16 x 32",
        ]
    )


def block_faiss(cost: dict) -> str:
    measured = cost["inputs"]
    _, lists, dim = MEASURED_IVF
    return "\n".join(
        [
            f"rate:    2 x {fig(measured['ivf_build_points'])} x {fig(lists)} x {dim} x ({KMEANS_ITERATIONS} + 1)"
            f" / {measured['ivf_build_s']:.1f} s = {cost['kmeans_flops']:.2e} flop/s"
            f" on {measured['ivf_build_cores']} cores",
            f"train {fig(LISTS)} lists on {fig(SAMPLE)} x {D}:   2 x {SAMPLE:.1e} x {fig(LISTS)} x {D}"
            f" x {KMEANS_ITERATIONS} / rate = {cost['train_core_h']:.1f} core-h",
            f"assign {DOCS:.0e} vectors to {fig(LISTS)} lists:  2 x {DOCS:.1e} x {fig(LISTS)} x {D} / rate"
            f" = {cost['assign_core_h']:.1f} core-h",
        ]
    )


def block_sizes(cost: dict) -> str:
    rows = [[name, fig(size), f"{fig(cost['gb_at_100m'][name], 1)} GB"] for name, size in cost["bytes_per_doc"].items()]
    return markdown_table(["factory", "bytes per document", "100 M documents"], rows)


def block_serving(cost: dict) -> str:
    flat, sq8 = cost["mb_per_query"]["IVF65536,Flat"], cost["mb_per_query"]["IVF65536,SQ8"]
    return "\n".join(
        [
            f"one query, nprobe = {NPROBE}: {NPROBE} lists x ({DOCS:.0e} / {fig(LISTS)} = {fig(DOCS / LISTS)} vectors)"
            f" = {fig(cost['probed_vectors'])} vectors",
            f" IVF65536,Flat: {fig(cost['probed_vectors'])} x {fig(cost['bytes_per_doc']['IVF65536,Flat'])} B"
            f" = {flat:.0f} MB"
            f" per query -> at 2 GB/s from disk: {2000 / flat:.0f} queries/s",
            f" IVF65536,SQ8:  {fig(cost['probed_vectors'])} x {fig(cost['bytes_per_doc']['IVF65536,SQ8'])} B"
            f" = {sq8:.0f} MB"
            f" per query -> {2000 / sq8:.0f} queries/s",
        ]
    )


def block_build_memory(cost: dict) -> str:
    return "\n".join(
        [
            f"sample:        3 x {fig(SAMPLE)} x {D} x 4 B                 = {cost['sample_gb']:.1f} GB",
            f"one shard:     {fig(SHARD)} x {D} x 4 B                 = {cost['shard_gb']:.1f} GB",
            f"list headers:  {DOCS // SHARD} shards x {fig(LISTS)} lists x {LIST_HEADER_BYTES} B"
            f"            = {cost['list_headers_gb']:.2f} GB",
            f"               (the default --shard-size {fig(DEFAULT_SHARD)}: {DOCS // DEFAULT_SHARD:,} shards"
            f" = {cost['list_headers_gb_default_shards']:.1f} GB)",
            f"in all, at --shard-size {fig(SHARD)}:"
            f" {cost['sample_gb'] + cost['shard_gb'] + cost['list_headers_gb']:.1f} GB",
        ]
    )


def block_lance(cost: dict) -> str:
    rows = []
    for name, index in cost["lance"].items():
        table_b, index_b = index["vectors_per_doc"], index["index_per_doc"]
        total = f"{DOCS * table_b / 1e9:,.0f} GB" + (f" + {DOCS * index_b / 1e9:,.1f} GB" if index_b else "")
        rows.append([f"{name} (`{index['factory']}`)", fig(table_b, 1), fig(index_b, 1) if index_b else "—", total])
    header = ["index (MiniLM, d = 384)", "table or vectors, B per document", "index, B per document", "at 100 M"]
    return markdown_table(header, rows)


BLOCKS = {
    "inputs": block_inputs,
    "encoding": block_encoding,
    "faiss": block_faiss,
    "sizes": block_sizes,
    "serving": block_serving,
    "build-memory": block_build_memory,
    "lance": block_lance,
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("block", nargs="?", choices=sorted(BLOCKS), help="the page's block to print")
    parser.add_argument("--json", action="store_true", help="every input and result, by name")

    def text(args: argparse.Namespace) -> str:
        if (args.block is None) == (not args.json):
            parser.error("give one BLOCK or --json")
        found = estimate(args.records)
        return json.dumps(found, indent=1) if args.json else BLOCKS[args.block](found)

    print_from_records(parser, text, argv)


if __name__ == "__main__":
    main()
