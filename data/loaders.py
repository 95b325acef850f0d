"""BEIR (corpus / queries / qrels as plain dicts, as BEIR has them) and STS pair loaders.

A malformed line is an error naming the file and the line number.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from cone.errors import InputError

DATA_DIR_ENV = "CONE_DATA_DIR"
DEFAULT_DATA_DIR = Path("../shared/datasets")

Corpus = dict[str, dict[str, str]]  # doc id -> {"title": ..., "text": ...}


def doc_text(doc: dict[str, str]) -> str:
    """The text a model sees of a corpus document: title, then body."""
    return f"{doc['title']} {doc['text']}".strip()


def data_dir(explicit: Path | None = None) -> Path:
    """--data-dir if given, else $CONE_DATA_DIR, else ../shared/datasets."""
    if explicit is not None:
        return Path(explicit)
    return Path(os.environ.get(DATA_DIR_ENV, DEFAULT_DATA_DIR))


@dataclass
class RetrievalDataset:
    name: str
    corpus: Corpus
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]  # query id -> {doc id: relevance}

    def fingerprint(self) -> str:
        """A hash of the corpus ids and texts: an index built on other documents is refused."""
        h = hashlib.sha256()
        for doc_id in sorted(self.corpus):
            doc = self.corpus[doc_id]
            h.update(f"{doc_id}\x00{doc['title']}\x00{doc['text']}\x01".encode())
        return h.hexdigest()[:16]


def read_jsonl(path: Path, required: tuple[str, ...] = ()) -> list[dict]:
    """JSON objects, one per non-blank line; a malformed line is an error naming the file and line."""
    if not path.is_file():
        raise InputError(f"{path}: not found (fetch it with `cone data fetch` or pass --data-dir)")
    records = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
            if not isinstance(record, dict) or any(k not in record for k in required):
                raise InputError(f"{path}:{number}: expected a JSON object with {', '.join(required)}")
            records.append(record)
    return records


def _qrels(path: Path) -> dict[str, dict[str, int]]:
    if not path.is_file():
        raise InputError(f"{path}: not found")
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8") as handle:
        header = handle.readline().strip().split("\t")
        if header[:2] != ["query-id", "corpus-id"]:
            raise InputError(f"{path}:1: expected the header 'query-id<TAB>corpus-id<TAB>score'")
        for number, line in enumerate(handle, start=2):
            if not line.strip():
                continue
            parts = line.rstrip("\n").split("\t")
            try:
                qid, did, score = parts[0], parts[1], int(parts[2])
            except (IndexError, ValueError):
                raise InputError(f"{path}:{number}: expected query-id, corpus-id and an integer score") from None
            qrels.setdefault(qid, {})[did] = score
    return qrels


def load_beir(root: Path, name: str = "scifact", split: str = "test") -> RetrievalDataset:
    """A BEIR dataset folder: corpus.jsonl, queries.jsonl, qrels/{split}.tsv."""
    folder = Path(root) / name
    if not folder.is_dir():
        raise InputError(f"dataset {name!r} not found under {root} (run `cone data fetch {name} --data-dir {root}`)")
    corpus = {
        str(r["_id"]): {"title": str(r.get("title") or ""), "text": str(r["text"])}
        for r in read_jsonl(folder / "corpus.jsonl", ("_id", "text"))
    }
    queries = {str(r["_id"]): str(r["text"]) for r in read_jsonl(folder / "queries.jsonl", ("_id", "text"))}
    qrels = _qrels(folder / "qrels" / f"{split}.tsv")
    qrels = {q: docs for q, docs in qrels.items() if q in queries}
    return RetrievalDataset(name=name, corpus=corpus, queries=queries, qrels=qrels)


@dataclass
class StsPairs:
    sentence1: list[str]
    sentence2: list[str]
    scores: list[float]


def load_sts(path: Path) -> StsPairs:
    """A CSV with header sentence1,sentence2,score (STS-B as in ../shared/datasets/stsb)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: not found (fetch it with `cone data fetch stsb` or pass --data-dir)")
    pairs = StsPairs([], [], [])
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle)
        if next(reader, None) != ["sentence1", "sentence2", "score"]:
            raise InputError(f"{path}:1: expected the header sentence1,sentence2,score")
        for number, row in enumerate(reader, start=2):
            try:
                s1, s2, score = row
                pairs.scores.append(float(score))
            except ValueError:
                raise InputError(f"{path}:{number}: expected sentence1,sentence2,numeric score") from None
            pairs.sentence1.append(s1)
            pairs.sentence2.append(s2)
    if not pairs.scores:
        raise InputError(f"{path}: no pairs")
    return pairs
