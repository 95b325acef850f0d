"""The language-model training text: SciFact abstracts plus lmtext, or any .txt/.jsonl by path.

Never the evaluation queries, never STS-B: the held-out benchmarks stay held out.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from cone.data.loaders import DATA_DIR_ENV, JsonRecord, Text, lm_text_files, read_jsonl, read_text
from cone.errors import InputError

VALIDATION_SHARE = 0.02  # of documents, chosen by hash so the split never depends on order


def default_corpus_files(root: Path) -> list[Path]:
    corpus = root / "scifact" / "corpus.jsonl"
    if not corpus.is_file():
        raise InputError(f"default training corpus not found: no {corpus}; pass --data-dir or set {DATA_DIR_ENV}")
    return [corpus, *lm_text_files(root, "the default training corpus")]


class _TitledText(JsonRecord):
    """A training .jsonl line: a BEIR corpus record, or any object with a title or a text."""

    title: Text | None = None
    text: Text | None = None


def _jsonl_documents(path: Path) -> list[str]:
    docs = []
    for record in read_jsonl(path, _TitledText):
        text = " ".join(part.strip() for part in (record.title, record.text) if part)
        if text:
            docs.append(text)
    return docs


def read_documents(files: list[Path]) -> list[str]:
    """One string per document: a JSONL record (title + text) or a non-empty text line."""
    docs: list[str] = []
    for path in files:
        if not path.is_file():
            raise InputError(f"{path}: corpus file not found")
        if path.suffix == ".jsonl":
            docs.extend(_jsonl_documents(path))
        elif path.suffix == ".txt":
            docs.extend(line.strip() for line in read_text(path).splitlines() if line.strip())
        else:
            raise InputError(f"{path}: unsupported corpus format (use .txt or .jsonl)")
    if not docs:
        raise InputError(f"corpus is empty: no text in {', '.join(map(str, files))}")
    return docs


def is_validation(doc: str) -> bool:
    digest = hashlib.blake2b(doc.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 < VALIDATION_SHARE


def split(docs: list[str]) -> tuple[list[str], list[str]]:
    """(train, validation), by a hash of each document's text."""
    train = [d for d in docs if not is_validation(d)]
    val = [d for d in docs if is_validation(d)]
    if not train or not val:
        raise InputError(f"corpus too small to split: {len(docs)} documents (need some for validation)")
    return train, val
