"""Bytes per document of every file of every index in a folder of indexes, read from disk.

Usage: python benchmarks/index_sizes.py INDEX_DIR [--json | --record OUT]
For each index (a folder with a manifest): its documents, dimension, factory and each file's bytes, total and per
document, and the same by part (a file, or the files of a folder two levels down: a Lance table's data,
_indices). docs/scaling.md scales these per-document figures to 100 M documents.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from record import run_benchmark  # this script's folder is on the path: the one runner and record

from cone.errors import InputError
from cone.indexing.manifest import MANIFEST, read_manifest


def sizes(folder: Path) -> dict:
    manifest = read_manifest(folder)
    n_docs = manifest.n_docs
    files = {
        path.relative_to(folder).as_posix(): path.stat().st_size
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != MANIFEST
    }
    parts: dict[str, int] = {}
    for name, size in files.items():  # a Lance table's files grouped by their folder: data, _indices, _versions
        part = "/".join(name.split("/")[:2])
        parts[part] = parts.get(part, 0) + size
    return {
        "n_docs": n_docs,
        "dim": manifest.dim,
        "index_factory": manifest.index_factory,
        "stream": (folder / "index.ivfdata").is_file(),
        "bytes": files,
        "bytes_per_doc": {name: size / n_docs for name, size in files.items()},
        "parts": parts,
        "parts_per_doc": {name: size / n_docs for name, size in parts.items()},
    }


def measure(args: argparse.Namespace) -> dict:
    folders = sorted(p for p in args.indexes.iterdir() if (p / MANIFEST).is_file())
    if not folders:
        raise InputError(f"no index in {args.indexes}")
    return {folder.name: sizes(folder) for folder in folders}


def show(found: dict) -> str:
    lines = []
    for name, index in found.items():
        lines.append(f"{name}: {index['n_docs']:,} documents, d = {index['dim']}, {index['index_factory']}")
        for part, per_doc in index["parts_per_doc"].items():
            lines.append(f"  {part:28s} {index['parts'][part]:>12,} B  {per_doc:10.1f} B per document")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("indexes", type=Path, help="a folder of indexes (cone index --out)")
    run_benchmark(parser, measure, show)


if __name__ == "__main__":
    main()
