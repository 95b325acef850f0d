"""An index on disk: one folder with manifest.json, the index files, and docs.jsonl.

Builds write a hidden temporary folder and rename it into place, so a reader never sees a
half-written index: an interrupted build leaves the previous index behind, or (killed between the two
renames of the swap) both folders complete, and ``recover`` puts the newer one back under the name.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import uuid
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from cone.data.loaders import Corpus
from cone.errors import DamagedIndex
from cone.indexing import guard
from cone.indexing.factory import release_folder
from cone.indexing.manifest import MANIFEST, BM25Manifest, DenseManifest, write_manifest

DOCS = "docs.jsonl"
OFFSETS = "docs.offsets"  # little-endian uint64: where each line of docs.jsonl starts, then the file's size
SNIPPET_CHARS = 300


LEFTOVER = re.compile(r"^\.(?P<name>.+)\.(?:tmp|old)-[0-9a-f]{8}$")  # .NAME.tmp-<hex>, .NAME.old-<hex>


def _leftovers(target: Path) -> list[Path]:
    """What earlier builds of ``target`` left beside it: .NAME.tmp-* (new, maybe unfinished), .NAME.old-*."""
    found = (LEFTOVER.match(p.name) for p in target.parent.glob(f".{target.name}.*"))
    return sorted(target.parent / m.group(0) for m in found if m and m.group("name") == target.name)


def recover(target: Path) -> str | None:
    """Put a complete index back under ``target`` if a build was killed between the two renames of its swap.

    A folder holding a manifest is complete (the manifest is written last, atomically). The newest build
    (.tmp-) wins over the index it was replacing (.old-). Returns what was done, or None if nothing was."""
    target = Path(target)
    if target.exists() or not target.parent.is_dir():
        return None
    complete = [p for p in _leftovers(target) if (p / MANIFEST).is_file()]
    if not complete:
        return None
    try:
        newest = max(complete, key=lambda p: (".tmp-" in p.name, p.stat().st_mtime_ns))
        os.rename(newest, target)
    except FileNotFoundError:  # a builder's own rename got there first: the name holds its index
        return None
    except OSError as exc:  # a read-only volume, say: the index stays unrecovered, the caller is told why
        return f"{target}: missing, and {newest.name} could not be put back ({exc.strerror})"
    return f"{target}: recovered from {newest.name} (a build was interrupted while swapping it in)"


@contextmanager
def atomic_folder(target: Path) -> Iterator[Path]:
    """``_atomic_folder`` under the folder's build lock, a disk's refusal one line (``cone.indexing.guard``)."""
    with guard.disk_errors(target), guard.builder_lock(target), _atomic_folder(target) as tmp:
        yield tmp


@contextmanager
def _atomic_folder(target: Path) -> Iterator[Path]:
    """Yield a temporary folder; on success it replaces ``target``, on failure it is removed.

    A name always holds a complete index: a kill between the two renames below leaves both folders
    complete, and ``recover`` (run by ``list_indexes``, the eval and the next build) puts the newer one back.
    The next build also removes what interrupted builds left. One builder per folder at a time."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    recover(target)
    for stale in _leftovers(target):
        _remove(stale)
    tmp = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        _remove(tmp)
        raise
    old = target.parent / f".{target.name}.old-{uuid.uuid4().hex[:8]}"
    if target.exists():
        os.rename(target, old)
    try:
        os.rename(tmp, target)
    except FileNotFoundError:  # a reader's recover() moved this very folder into place between the renames
        if not (target / MANIFEST).is_file():
            raise
    _remove(old)


def _remove(folder: Path) -> None:
    """Remove an index folder that is going away, after its store released what it owns elsewhere (a table); one
    whose store's server cannot be reached now stays, a leftover that the next build releases and removes."""
    if release_folder(folder):
        shutil.rmtree(folder, ignore_errors=True)


class DocTable:
    """An index's documents in row order (id, title, the first characters of the text), read from disk a row at
    a time through the table of line offsets (8 bytes a document, held in memory): the documents themselves are
    never all in memory at once."""

    def __init__(self, file: Path, offsets: np.ndarray) -> None:
        self.file = file
        self._offsets = offsets  # row r is bytes offsets[r]:offsets[r + 1] of the file
        self._handle = file.open("rb")
        self._closer = weakref.finalize(self, self._handle.close)  # closed with the table, or by close()

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, row: int) -> dict[str, str]:
        if not 0 <= row < len(self):
            raise IndexError(f"row {row} of a {len(self)}-document table")
        start, end = int(self._offsets[row]), int(self._offsets[row + 1])
        try:  # pread: no shared file position, so the service's threads can read at once
            line = os.pread(self._handle.fileno(), end - start, start)
            if len(line) != end - start:  # the file shrank under the table (truncated, or rewritten in place)
                raise ValueError(f"{len(line)} of its {end - start} bytes are left")
            return _doc_record(line)
        except (OSError, ValueError) as exc:
            raise DamagedIndex(f"{self.file}: document row {row} is corrupt ({exc})") from None

    def close(self) -> None:
        """Close the file now (reading a row after it is a DamagedIndex); a table dropped unclosed closes too."""
        self._closer()

    def doc_id(self, row: int) -> str:
        return self[row]["id"]

    @property
    def ids(self) -> list[str]:
        """Every id in row order: reads the whole table (the eval's small corpora)."""
        return [self.doc_id(row) for row in range(len(self))]


class DocWriter:
    """Writes the document table a record at a time, with its offsets: a build never holds the whole table."""

    def __init__(self, folder: Path) -> None:
        self._docs = (folder / DOCS).open("wb")
        self._offsets = (folder / OFFSETS).open("wb")
        self._position = 0
        self.count = 0

    def add(self, doc_id: str, title: str, text: str) -> None:
        line = (json.dumps({"id": doc_id, "title": title, "snippet": text[:SNIPPET_CHARS]}) + "\n").encode()
        self._offsets.write(struct.pack("<Q", self._position))
        self._docs.write(line)
        self._position += len(line)
        self.count += 1

    def close(self) -> None:
        if self._docs.closed:
            return
        self._offsets.write(struct.pack("<Q", self._position))
        self._docs.close()
        self._offsets.close()


def write_docs(writer: DocWriter, doc_ids: list[str], corpus: Corpus) -> None:
    for doc_id in doc_ids:
        writer.add(doc_id, corpus[doc_id]["title"], corpus[doc_id]["text"])


class IndexFolder:
    """An index folder while a build writes it (in its temporary place): the index files under ``path``, the
    documents through ``docs`` as they come, and the manifest, which ``writing_index`` writes last."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.docs = DocWriter(path)
        self.manifest: DenseManifest | BM25Manifest | None = None

    def add_docs(self, doc_ids: list[str], corpus: Corpus) -> None:
        write_docs(self.docs, doc_ids, corpus)


@contextmanager
def writing_index(out: Path) -> Iterator[IndexFolder]:
    """The one way an index folder is written, by every builder: atomically (``atomic_folder``), its document
    table closed and its manifest written last, so a folder with a manifest is a complete index."""
    with atomic_folder(out) as tmp:
        folder = IndexFolder(tmp)
        try:
            yield folder
        finally:
            folder.docs.close()
        if folder.manifest is None:
            raise RuntimeError(f"{out}: a build ended without its manifest")  # a defect of the builder
        write_manifest(tmp, folder.manifest)


def _doc_record(line: bytes) -> dict[str, str]:
    record = json.loads(line)
    if not isinstance(record, dict) or not all(isinstance(record.get(k), str) for k in ("id", "title", "snippet")):
        raise ValueError("expected id, title and snippet strings")
    return record


def _line_offsets(file: Path) -> np.ndarray:
    """Offsets of an index written before the table had them (no docs.offsets): one pass over the lines."""
    with file.open("rb") as handle:
        lengths = [len(line) for line in handle]
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.uint64)


def read_docs(folder: Path, n_docs: int) -> DocTable:
    """The table: its offsets read, its records read when asked for; checked for its length and its ends here."""
    file, offsets_file = Path(folder) / DOCS, Path(folder) / OFFSETS
    try:
        size = file.stat().st_size
        # Read, not mapped: a mapped file truncated under a reader is a SIGBUS that kills the process.
        offsets = np.fromfile(offsets_file, dtype="<u8") if offsets_file.is_file() else _line_offsets(file)
        with file.open("rb") as handle:
            _doc_record(handle.readline())
    except (OSError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise DamagedIndex(f"{file}: missing or corrupt document list ({exc})") from None
    if len(offsets) != n_docs + 1 or int(offsets[0]) != 0 or int(offsets[-1]) != size:
        found = max(len(offsets) - 1, 0)
        raise DamagedIndex(f"{file}: {found} documents of {size:,} bytes, but the manifest says {n_docs}")
    return DocTable(file, offsets)


def list_indexes(root: Path) -> tuple[list[Path], list[str]]:
    """Every index folder under ``root`` (hidden temporary folders excluded), after recovering any that an
    interrupted swap left without its name; and a line for each recovery."""
    root = Path(root)
    if not root.is_dir():
        return [], []
    names = {m.group("name") for p in root.iterdir() if (m := LEFTOVER.match(p.name))}
    notes = [note for name in sorted(names) if (note := recover(root / name))]
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")), notes
