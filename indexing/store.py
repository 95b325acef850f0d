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
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from cone import __version__
from cone.data.loaders import Corpus
from cone.encoders.base import LOCAL, TORCH, Runtime
from cone.errors import DamagedIndex, InputError
from cone.indexing import postprocess
from cone.jsontypes import is_number, of_type, type_names

MANIFEST = "manifest.json"
DOCS = "docs.jsonl"
OFFSETS = "docs.offsets"  # little-endian uint64: where each line of docs.jsonl starts, then the file's size
SNIPPET_CHARS = 300
KINDS = ("dense", "bm25")
PAIR_STATS = ("mean", "std", "p1", "p50", "p99")  # of random_pair_cosines, beside n_pairs and the histogram
FORMAT = 1  # of manifest.json; a manifest of another format is refused, not guessed at


def index_name(
    model: str, postprocess: str, layer: str | int = "last", factory: str = "Flat", runtime: Runtime = TORCH
) -> str:
    """Folder name of an index: model[-runtime][-layerL][-postprocess][-factory], safe for a filesystem."""
    parts = [model.replace(":", "_").replace("/", "_")]
    if runtime != TORCH:
        parts.append(runtime.tag)
    if layer != "last":
        parts.append(f"layer{layer}")
    if postprocess != "none":
        # abtt:3 -> abtt3, cone:0.99 -> cone0.99, rogue:2:30 -> rogue2x30; stages joined by -
        parts.append("-".join(stage.replace(":", "", 1).replace(":", "x") for stage in postprocess.split("+")))
    if factory != "Flat":
        parts.append(re.sub(r"[^A-Za-z0-9_.]+", "_", factory))
    return "-".join(parts)


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Manifest:
    """What an index folder holds and how it was built: read once per load, checked on reading."""

    kind: str  # "dense" | "bm25"
    model: str
    dataset: str
    corpus_fingerprint: str
    n_docs: int
    encoder_fingerprint: str  # an index built by other weights is refused
    metric: str  # "inner_product" (cosines: vectors are unit norm) | "bm25"
    normalized: bool = False
    postprocess: str = "none"
    index_factory: str | None = None
    search_params: str = ""
    dim: int | None = None
    layer: str | int = "last"
    postprocess_params: dict | None = None  # name -> shape of each fitted array
    geometry_raw: dict | None = None  # the instruments on the encoder's raw corpus vectors
    geometry: dict | None = None  # ... and on the indexed (corrected) vectors
    random_pair_cosines: dict | None = None  # spread and histogram of random document pairs' cosines
    backend: str = "torch"  # what ran the encoder's forward pass (cone.encoders.base.Runtime) ...
    quantize: str = "none"  # ... and at which precision: queries must be encoded the same way
    encoded_on: str = LOCAL  # where the corpus was encoded: this process, or a Ray cluster (cone index --ray)
    fit_sample: int | None = None  # streamed builds: the vectors that fitted the correction, instruments and FAISS
    cone_version: str = __version__
    created: str = field(default_factory=now)
    format: int = FORMAT

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: object, source: Path) -> Manifest:
        """Validate every key the loaders and the service read; a bad manifest is one DamagedIndex naming the key."""
        if not isinstance(data, dict):
            raise DamagedIndex(f"{source}: manifest is not a JSON object")
        if data.get("format", FORMAT) != FORMAT:
            raise DamagedIndex(
                f"{source}: manifest format {str(data['format'])[:20]!r} is not the {FORMAT} this cone {__version__} "
                "reads; rebuild the index"
            )
        _check_key(data, "kind", MANIFEST_KEYS["kind"], source, required=True)
        for key, kinds in MANIFEST_KEYS.items():
            _check_key(data, key, kinds, source, required=key in REQUIRED[data["kind"]])
        if data["kind"] == "dense":
            for key in ("geometry", "geometry_raw"):
                _check_numbers(data[key], f"{key!r}", source)
            _check_pair_cosines(data["random_pair_cosines"], source)
            try:
                postprocess.parse(data["postprocess"])
                Runtime(data.get("backend", "torch"), data.get("quantize", "none"))
            except InputError as exc:
                raise DamagedIndex(f"{source}: manifest: {exc}") from None
        else:
            extra = [k for k in VECTORS_ONLY if data.get(k) is not None]
            extra += [k for k, plain in (("backend", "torch"), ("quantize", "none")) if data.get(k, plain) != plain]
            if extra or data.get("postprocess", "none") != "none" or data.get("layer", "last") != "last":
                raise DamagedIndex(f"{source}: a bm25 manifest with {(extra or ['a postprocess'])[0]!r} (vectors only)")
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)

    @property
    def runtime(self) -> Runtime:
        return Runtime(self.backend, self.quantize)

    def check_expected(
        self, folder: Path, model: str | None, corpus_fingerprint: str | None, runtime: Runtime | None = None
    ) -> None:
        """Refuse an index built for another model, on another corpus or by another runtime than the caller's."""
        if model is not None and self.model != model:
            raise DamagedIndex(f"{folder}: index was built for model {self.model!r}, not {model!r}")
        if runtime is not None and self.runtime != runtime:
            raise DamagedIndex(f"{folder}: corpus encoded by {self.runtime.tag}, not {runtime.tag}")
        if corpus_fingerprint is not None and self.corpus_fingerprint != corpus_fingerprint:
            raise DamagedIndex(f"{folder}: index was built on another corpus (fingerprint {self.corpus_fingerprint})")


MANIFEST_KEYS: dict[str, tuple[type, ...]] = {
    "kind": (str,),
    "model": (str,),
    "dataset": (str,),
    "corpus_fingerprint": (str,),
    "n_docs": (int,),
    "encoder_fingerprint": (str,),
    "metric": (str,),
    "normalized": (bool,),
    "postprocess": (str,),
    "index_factory": (str, type(None)),
    "search_params": (str,),
    "dim": (int, type(None)),
    "layer": (str, int),
    "postprocess_params": (dict, type(None)),
    "geometry_raw": (dict, type(None)),
    "geometry": (dict, type(None)),
    "random_pair_cosines": (dict, type(None)),
    "backend": (str,),
    "quantize": (str,),
    "encoded_on": (str,),
    "fit_sample": (int, type(None)),
    "cone_version": (str,),
    "created": (str,),
    "format": (int,),
}
VECTORS_ONLY = (
    "dim",
    "index_factory",
    "postprocess_params",
    "geometry_raw",
    "geometry",
    "random_pair_cosines",
    "fit_sample",
)
_BASE = {"kind", "model", "dataset", "corpus_fingerprint", "n_docs", "encoder_fingerprint", "metric"}
REQUIRED = {
    "bm25": _BASE,
    "dense": _BASE | {"dim", "postprocess", "index_factory", "geometry_raw", "geometry", "random_pair_cosines"},
}


def _check_key(data: dict, key: str, kinds: tuple[type, ...], source: Path, required: bool) -> None:
    if key not in data or (data[key] is None and required):
        if required:
            raise DamagedIndex(f"{source}: manifest lacks {key!r}")
        return
    value = data[key]
    if not of_type(value, kinds):
        raise DamagedIndex(f"{source}: manifest's {key!r} is {str(value)[:40]!r}, not {type_names(kinds)}")
    if key == "kind" and value not in KINDS:
        raise DamagedIndex(f"{source}: manifest's 'kind' is {value!r}, not one of {', '.join(KINDS)}")
    if key in ("n_docs", "dim", "fit_sample") and value is not None and value < 1:
        raise DamagedIndex(f"{source}: manifest's {key!r} is {value}")
    if key == "layer" and value not in ("last", "emb") and not (isinstance(value, int) and value >= 0):
        raise DamagedIndex(f"{source}: manifest's 'layer' is {str(value)[:20]!r}, not last, emb or a layer number")


def _check_numbers(values: dict, what: str, source: Path) -> None:
    bad = [k for k, v in values.items() if not is_number(v)]
    if bad:
        raise DamagedIndex(f"{source}: manifest's {what} has a non-numeric {bad[0]!r}")


def _check_pair_cosines(summary: dict, source: Path) -> None:
    what = "'random_pair_cosines'"
    histogram = summary.get("histogram")
    stats = {k: summary.get(k) for k in PAIR_STATS}
    _check_numbers(stats, what, source)
    if not of_type(summary.get("n_pairs"), (int,)) or set(summary) != {*PAIR_STATS, "n_pairs", "histogram"}:
        raise DamagedIndex(f"{source}: manifest's {what} needs {', '.join(PAIR_STATS)}, n_pairs and histogram")
    if not isinstance(histogram, dict) or set(histogram) != {"edges", "counts"}:
        raise DamagedIndex(f"{source}: manifest's {what} lacks its histogram (edges and counts)")
    edges, counts = histogram.get("edges"), histogram.get("counts")
    if not (isinstance(edges, list) and isinstance(counts, list) and len(edges) == len(counts) + 1 > 1):
        raise DamagedIndex(f"{source}: manifest's {what} histogram needs edges one longer than counts")
    _check_numbers(dict(enumerate(edges)), f"{what} histogram edges", source)
    if not all(of_type(c, (int,)) and c >= 0 for c in counts):
        raise DamagedIndex(f"{source}: manifest's {what} histogram counts are not counts")


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
    """Yield a temporary folder; on success it replaces ``target``, on failure it is removed.

    A name always holds a complete index: a kill between the two renames below leaves both folders
    complete, and ``recover`` (run by ``list_indexes``, the eval and the next build) puts the newer one back.
    The next build also removes what interrupted builds left. One builder per folder at a time."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    recover(target)
    for stale in _leftovers(target):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = target.parent / f".{target.name}.old-{uuid.uuid4().hex[:8]}"
    if target.exists():
        os.rename(target, old)
    try:
        os.rename(tmp, target)
    except FileNotFoundError:  # a reader's recover() moved this very folder into place between the renames
        if not (target / MANIFEST).is_file():
            raise
    shutil.rmtree(old, ignore_errors=True)


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
        self._offsets.write(struct.pack("<Q", self._position))
        self._docs.close()
        self._offsets.close()


def write_docs(folder: Path, doc_ids: list[str], corpus: Corpus) -> None:
    writer = DocWriter(folder)
    for doc_id in doc_ids:
        writer.add(doc_id, corpus[doc_id]["title"], corpus[doc_id]["text"])
    writer.close()


def write_manifest(folder: Path, manifest: Manifest) -> None:
    """Written last and atomically: a folder with a manifest is a complete index."""
    tmp = folder / f"{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest.to_dict(), indent=2))
    os.replace(tmp, folder / MANIFEST)


def read_manifest(folder: Path) -> Manifest:
    file = Path(folder) / MANIFEST
    if not file.is_file():
        raise DamagedIndex(f"{folder}: not an index (no {MANIFEST})")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DamagedIndex(f"{file}: corrupt manifest ({getattr(exc, 'msg', exc)})") from None
    except OSError as exc:
        raise DamagedIndex(f"{file}: unreadable manifest ({exc.strerror})") from None
    return Manifest.from_dict(data, file)


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
