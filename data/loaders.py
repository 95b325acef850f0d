"""BEIR (corpus / queries / qrels as plain dicts, as BEIR has them) and STS pair loaders.

A malformed line is an error naming the file and the line number.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import ErrorDetails

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
        fingerprint = CorpusFingerprint()
        for doc_id, doc in self.corpus.items():
            fingerprint.add(doc_id, doc)
        return fingerprint.hexdigest()


class CorpusFingerprint:
    """A hash of a set of documents: the sum of each document's hash, so the order they come in (sorted ids in
    memory, file order in a stream) does not change it."""

    def __init__(self) -> None:
        self._sum = 0

    def add(self, doc_id: str, doc: dict[str, str]) -> None:
        digest = hashlib.sha256(f"{doc_id}\x00{doc['title']}\x00{doc['text']}\x01".encode()).digest()
        self._sum = (self._sum + int.from_bytes(digest[:16])) % 2**128

    def hexdigest(self) -> str:
        return f"{self._sum:032x}"[:16]


def _text(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:  # JSON's "\ud800": valid JSON, but no character any text can hold
        raise ValueError(f"holds a lone surrogate (\\u{ord(value[exc.start]):x}), not text") from None
    return value


Text = Annotated[str, AfterValidator(_text)]
BeirId = Text | int  # BEIR ids: strings, or integers in some dumps (never booleans)


class JsonRecord(BaseModel):
    """One JSONL line's object, as JSON means its types (strict: true / false are not numbers, a count is never a
    boolean); keys not declared are ignored."""

    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")


R = TypeVar("R", bound=JsonRecord)


class BeirRecord(JsonRecord):
    """A queries.jsonl line."""

    id: BeirId = Field(alias="_id")
    text: Text


class CorpusRecord(BeirRecord):
    """A corpus.jsonl line."""

    title: Text | None = None


_TYPE_NAMES = {"string_type": "str", "int_type": "int"}  # pydantic's error for a value not of the type


def _refusal(errors: list[ErrorDetails], record_type: type[JsonRecord], where: str) -> InputError:
    """The first thing wrong with a record, as the one line naming the key, what it holds and what it should."""
    if any(e["type"] in ("missing", "model_type") for e in errors):
        required = [f.alias or name for name, f in record_type.model_fields.items() if f.is_required()]
        return InputError(f"{where}: expected a JSON object{' with ' if required else ''}{', '.join(required)}")
    key = errors[0]["loc"][0]
    of_key = [e for e in errors if e["loc"][0] == key]
    if refused := [e for e in of_key if e["type"] == "value_error"]:
        return InputError(f"{where}: {key!r} {refused[0]['ctx']['error']}")
    value, expected = of_key[0]["input"], " or ".join(_TYPE_NAMES.get(e["type"], e["msg"]) for e in of_key)
    return InputError(f"{where}: {key!r} is {type(value).__name__} {str(value)[:30]!r}, expected {expected}")


def parse_jsonl_line(raw: bytes, where: str, record_type: type[R]) -> R | None:
    """One line of a JSONL file as a ``record_type`` (None if blank); a bad line is an error naming ``where``."""
    try:
        line = raw.decode("utf-8")
        record = json.loads(line) if line.strip() else None
    except UnicodeDecodeError as exc:
        raise InputError(f"{where}: not valid UTF-8 (byte {exc.start + 1} of the line)") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: not valid JSON ({exc.msg})") from None
    if record is None:
        return None
    try:
        return record_type.model_validate(record)
    except ValidationError as exc:
        raise _refusal(exc.errors(), record_type, where) from None


def iter_jsonl(path: Path, record_type: type[R]) -> Iterator[R]:
    """The records of a JSONL file, one per non-blank line, read as a stream."""
    if not path.is_file():
        raise InputError(f"{path}: not found (fetch it with `cone data fetch` or pass --data-dir)")
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if (record := parse_jsonl_line(raw, f"{path}:{number}", record_type)) is not None:
                yield record


def read_jsonl(path: Path, record_type: type[R]) -> list[R]:
    """The records of a JSONL file, one per non-blank line; a bad line is an error naming the file and the line."""
    return list(iter_jsonl(path, record_type))


LM_TEXT = "lmtext"  # the data dir's folder of LM training text (.txt, a sentence or document a line)


def lm_text_files(root: Path, needed_for: str) -> list[Path]:
    """The LM training text's files under the data dir; none is an error saying what needed them."""
    files = sorted((Path(root) / LM_TEXT).glob("*.txt"))
    if not files:
        raise InputError(
            f"{needed_for} needs LM text: no {LM_TEXT}/*.txt under {root} (pass --data-dir or set {DATA_DIR_ENV})"
        )
    return files


def read_text(path: Path) -> str:
    """A UTF-8 text file; an invalid byte is an error naming the file and the line."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        raise InputError(f"{path}:{line}: not valid UTF-8") from None


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    if not path.is_file():
        raise InputError(f"{path}: not found")
    qrels: dict[str, dict[str, int]] = {}
    header, *lines = read_text(path).splitlines() or [""]
    if header.strip().split("\t")[:2] != ["query-id", "corpus-id"]:
        raise InputError(f"{path}:1: expected the header 'query-id<TAB>corpus-id<TAB>score'")
    for number, line in enumerate(lines, start=2):
        if not line.strip():
            continue
        parts = line.split("\t")
        try:
            qid, did, score = parts[0], parts[1], int(parts[2])
        except (IndexError, ValueError):
            raise InputError(f"{path}:{number}: expected query-id, corpus-id and an integer score") from None
        qrels.setdefault(qid, {})[did] = score
    return qrels


def corpus_doc(record: CorpusRecord) -> tuple[str, dict[str, str]]:
    """A corpus.jsonl record -> (doc id, {"title", "text"})."""
    return str(record.id), {"title": record.title or "", "text": record.text}


def corpus_line(raw: bytes, where: str) -> tuple[str, dict[str, str]] | None:
    """One line of a corpus.jsonl -> (doc id, {"title", "text"}), None if blank; a bad line names ``where``."""
    record = parse_jsonl_line(raw, where, CorpusRecord)
    return None if record is None else corpus_doc(record)


def dataset_folder(root: Path, name: str) -> Path:
    """``name`` is a folder under ``root`` (scifact), or the path of any BEIR-format folder (it holds a '/':
    ./mine, /data/nfcorpus)."""
    folder = Path(name) if "/" in name else Path(root) / name
    if not folder.is_dir() and folder != Path(root) / folder.name:
        raise InputError(f"{folder}: no such dataset folder")
    if not folder.is_dir():
        raise InputError(
            f"dataset {folder.name!r} not found under {root} (run `cone data fetch {folder.name} --data-dir {root}`)"
        )
    return folder


def iter_corpus(folder: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """A dataset's documents in file order, read as a stream (for corpora too big to hold)."""
    path = folder / "corpus.jsonl"
    if not path.is_file():
        raise InputError(f"{path}: not found (fetch it with `cone data fetch` or pass --data-dir)")
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if (doc := corpus_line(raw, f"{path}:{number}")) is not None:
                yield doc


def load_beir(root: Path, name: str = "scifact", split: str = "test") -> RetrievalDataset:
    """A BEIR dataset folder (``dataset_folder``): corpus.jsonl, queries.jsonl, qrels/{split}.tsv."""
    dataset = load_corpus(root, name)
    folder = dataset_folder(root, name)
    queries = {str(r.id): r.text for r in read_jsonl(folder / "queries.jsonl", BeirRecord)}
    qrels = read_qrels(folder / "qrels" / f"{split}.tsv")
    dataset.queries, dataset.qrels = queries, {q: docs for q, docs in qrels.items() if q in queries}
    return dataset


def load_corpus(root: Path, name: str = "scifact") -> RetrievalDataset:
    """A BEIR folder's corpus alone (no queries, no qrels): what an index is built from."""
    folder = dataset_folder(root, name)
    corpus = dict(iter_corpus(folder))
    if not corpus:
        raise InputError(f"{folder / 'corpus.jsonl'}: no documents")
    return RetrievalDataset(name=folder.name, corpus=corpus, queries={}, qrels={})


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
    reader = csv.reader(io.StringIO(read_text(path), newline=""))
    if next(reader, None) != ["sentence1", "sentence2", "score"]:
        raise InputError(f"{path}:1: expected the header sentence1,sentence2,score")
    for number, row in enumerate(reader, start=2):
        try:
            s1, s2, score = row
            if not math.isfinite(float(score)):
                raise ValueError
        except ValueError:
            raise InputError(f"{path}:{number}: expected sentence1,sentence2,numeric score") from None
        pairs.scores.append(float(score))
        pairs.sentence1.append(s1)
        pairs.sentence2.append(s2)
    if not pairs.scores:
        raise InputError(f"{path}: no pairs")
    return pairs


def read_documents(path: Path) -> dict[str, dict[str, str]]:
    """A user's documents, {id: {"title", "text"}}: a BEIR folder (its corpus.jsonl), a JSONL file of corpus
    records (``_id``, ``text``, optional ``title``), or a text file of one document a line (ids are line numbers)."""
    path = Path(path)
    if path.is_dir():
        documents = dict(iter_corpus(path))
    elif not path.is_file():
        raise InputError(f"{path}: no such file or folder")
    elif path.suffix == ".jsonl":
        documents = dict(corpus_doc(r) for r in iter_jsonl(path, CorpusRecord))
    else:
        lines = read_text(path).splitlines()
        documents = {str(n): {"title": "", "text": t.strip()} for n, t in enumerate(lines, 1) if t.strip()}
    if not documents:
        raise InputError(f"{path}: no documents")
    return documents
