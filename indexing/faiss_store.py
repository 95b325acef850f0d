"""FAISS as a store: the one place FAISS indexes are made, trained, filled, written and read.

A type is a FAISS factory string (``Flat``, ``SQ8``, ``PQ32``, ``HNSW32``, ``IVF1024,Flat``, ``RaBitQ``,
``IVF64,RaBitQ``, ...) or a 1-bit code: ``BIN`` (the sign of each coordinate, searched by Hamming distance) and
``BIN+rescore:R`` (Hamming's top R rescored by the float query against the stored float32 vectors: the recipe
sentence-transformers documents for binary quantization). Specs and search parameters are checked here, before
FAISS sees them: some strings FAISS accepts build an index that fails every search (``IVF0``), scores nothing
(``SQ0``), crashes the process (``HNSW1``) or never finishes (``NSG4``).

The metric is FAISS's inner product (``dot``, the default, what every index before the metric was recorded
used: on unit rows it is the cosine) or ``l2`` (``PQ32@l2``; squared distances, reported as 1 - d/2, the cosine
again for exact search). They rank exactly alike and differ only where a code's error is scored: under the inner
product, a code's error along the direction every vector shares is multiplied by the query's large component on
it; under L2 it cancels (q - x̂ has none), so PQ32 breaks under a cone with ``dot`` and not with ``l2``
(tests/test_metric_rule.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import weakref
import zlib
from collections.abc import Callable
from functools import cache
from pathlib import Path

import faiss
import numpy as np
from faiss.contrib.ondisk import merge_ondisk

from cone.errors import DamagedIndex, InputError
from cone.indexing.codes import DOT, HAMMING, L2, IndexType, parse_search_params, similarity
from cone.indexing.guard import DISK_ERRORS
from cone.indexing.user_index import RepairRecipe, UserIndex, no_table
from cone.output import native_stdout_silenced

NAME = "faiss"  # --store's name
INDEX_FILE = "index.faiss"
BINARY_FILE = "index.faissbin"  # a FAISS binary index of the codes
RESCORE_FILE = "rescore.npy"  # BIN+rescore's float32 unit vectors, in row order
IVF_DATA = "index.ivfdata"  # a streamed build's inverted lists, on disk
# Each file's size and CRC-32 when written: FAISS's files carry no checksum, so a body of random bytes would load
# and serve garbage. CRC-32 reads ~4 GB/s (zlib), so checking it costs less than a second per GB at every load.
FILE_RECORD = "faiss_files.json"
DEFAULT_FACTORY = "Flat"
BINARY = re.compile(r"^BIN(?:\+rescore:(?P<depth>\d+))?$")
SCALAR_BITS = ("4", "6", "8")  # SQ4, SQ6, SQ8 (and SQfp16, SQbf16, SQ8_direct...)
MIN_DEGREE = {"HNSW": 2, "NSG": 8}  # below these FAISS crashes (HNSW0 SIGABRT, HNSW1 SIGSEGV) or hangs (NSG<8)
FAISS_METRIC = {DOT: faiss.METRIC_INNER_PRODUCT, L2: faiss.METRIC_L2}
METRIC_NAME = {value: name for name, value in FAISS_METRIC.items()}


def _refuse(factory: str, why: str) -> InputError:
    return InputError(f"invalid --index-factory {factory!r}: {why}")


def parse(factory: str, metric: str | None = None) -> IndexType:
    """Check a spec's every count and degree; the strings FAISS would crash or hang on never reach it."""
    if not factory:
        raise _refuse(factory, "empty")
    binary = BINARY.match(factory)
    if binary:
        if metric not in (None, HAMMING):
            raise _refuse(factory, f"1-bit codes are compared by Hamming distance, not {metric}")
        depth = binary.group("depth")
        if depth is not None and int(depth) < 1:
            raise _refuse(factory, "the rescoring depth R must be at least 1")
        return IndexType(factory, NAME, HAMMING, True, int(depth) if depth else None)
    if "BIN" in factory:
        raise _refuse(factory, "1-bit codes are BIN or BIN+rescore:R, alone")
    for part in factory.split(","):
        if any(int(count) == 0 for count in re.findall(r"\d+", part)):
            raise _refuse(factory, f"{part!r} has a count of 0 (every count must be > 0)")
        for name, least in MIN_DEGREE.items():
            degree = re.search(rf"{name}(\d+)", part)
            if degree and int(degree.group(1)) < least:
                raise _refuse(factory, f"{part!r}: {name} needs a degree of at least {least}")
        bits = re.fullmatch(r"SQ(\d+)", part)
        if bits and bits.group(1) not in SCALAR_BITS:
            raise _refuse(factory, f"{part!r}: scalar quantizers have {', '.join(SCALAR_BITS)} bits (or SQfp16)")
    metric = metric or DOT
    if metric not in FAISS_METRIC:
        raise _refuse(factory, f"FAISS searches by {' or '.join(FAISS_METRIC)} (on unit rows dot is the cosine)")
    if factory == DEFAULT_FACTORY and metric != DOT:
        raise _refuse(factory, "Flat is the exact reference, by the inner product; its ranking is any metric's")
    unparsed = _faiss_cannot_parse(factory)
    if unparsed is not None:
        raise _refuse(factory, unparsed)
    return IndexType(factory, NAME, metric, metric == DOT)


@cache
def _faiss_cannot_parse(factory: str) -> str | None:
    """FAISS's own reason when its factory parser does not know ``factory`` (``NOPE``, ``IVF16,NOPE``), else None,
    without the vectors' dimension: only "could not parse" is decided here, whatever depends on the dimension
    (PQ33 on d = 384) is FAISS's to say once the model's is known. The parser runs on a copy whose list counts are 1
    (``IVF65536`` and ``IMI2x16`` allocate their lists when made)."""
    probe = _one_list(factory)
    try:
        faiss.index_factory(8, probe, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as exc:
        reason = faiss_reason(exc)
        return reason.replace(probe, factory) if "could not parse" in reason else None
    return None


def _one_list(factory: str) -> str:
    """``factory`` with its list counts 1 (``IVF65536`` and ``IMI2x16`` allocate their lists when made)."""
    return re.sub(r"IMI\d+x\d+", "IMI2x1", re.sub(r"IVF\d+", "IVF1", factory))


def faiss_reason(exc: RuntimeError) -> str:
    """FAISS's message without the C++ function and source location in front of it ("Error in ... at
    /project/faiss/index_factory.cpp:1228: could not parse index string NOPE" -> "could not parse index string
    NOPE"): the user's words are the reason, FAISS's source file is not."""
    last = str(exc).strip().splitlines()[-1]
    return re.sub(r"^Error in .*? at \S+:\d+: (?:Error: '.*?' failed: )?", "", last)[:200]


def core_index(index: faiss.Index) -> faiss.Index:
    """The index a factory string built, as its own class, past any transform in front (PCA64, OPQ16, ...)."""
    inner = faiss.downcast_index(index)
    if isinstance(inner, faiss.IndexPreTransform):
        inner = faiss.downcast_index(inner.index)
    return inner


def set_search_params(index: faiss.Index, params: str) -> None:
    """FAISS search-time settings ("nprobe=32", "efSearch=128", RaBitQ's "qb=4"): not part of a factory string,
    so the manifest keeps them and every load applies them."""
    settings = parse_search_params(params)
    if isinstance(index, faiss.IndexBinary):
        if settings:
            raise InputError(f"invalid --search-params {params!r}: a BIN index has no search parameters")
        return
    query_bits = settings.pop("qb", None)
    if query_bits is not None:
        rabitq = core_index(index)
        if not hasattr(rabitq, "qb"):
            raise InputError(f"invalid --search-params {params!r}: qb applies to RaBitQ indexes only")
        rabitq.qb = int(query_bits)
    if not settings:
        return
    try:
        faiss.ParameterSpace().set_index_parameters(index, ",".join(f"{k}={v}" for k, v in settings.items()))
    except RuntimeError as exc:
        raise InputError(f"invalid --search-params {params!r}: {faiss_reason(exc)}") from None


def _skip_polysemous_training(index: faiss.Index, search_params: str) -> None:
    """A factory's PQ (``PQ32``, ``IVF256,PQ32``) defaults to polysemous training, which only renumbers the
    centroids so that Hamming distances between codes approximate theirs; it changes no code's distance and
    so no search result, unless a search uses the Hamming filter (``ht=`` in the search params). It was 93%
    of a PQ32 build on SciFact (26 s of 28 s), so it is skipped where nothing reads it."""
    if "ht" in parse_search_params(search_params):
        return
    inner = core_index(index)
    if getattr(inner, "do_polysemous_training", False):
        inner.do_polysemous_training = False


def make_faiss(dim: int, factory: str, search_params: str = "", metric: str = DOT) -> faiss.Index:
    """An empty float index of a checked FAISS factory string, by the inner product (``dot``) or ``l2``."""
    kind = parse(factory, metric)
    if kind.binary:
        raise _refuse(factory, "1-bit codes are not a FAISS factory string here")
    parse_search_params(search_params)
    try:
        index = faiss.index_factory(dim, kind.factory, FAISS_METRIC[kind.metric])
    except RuntimeError as exc:
        raise _refuse(factory, f"{faiss_reason(exc)} (d = {dim})") from None
    _skip_polysemous_training(index, search_params)
    return index


def train_faiss(index: faiss.Index, sample: np.ndarray, factory: str) -> None:
    """Train on ``sample`` (all the vectors, or a streamed build's sample); too few vectors is refused with the
    numbers, before FAISS's clustering would fail or warn."""
    lists = parse(factory).ivf_lists
    if lists is not None and lists > len(sample):
        raise InputError(
            f"--index-factory {factory!r} has {lists:,} inverted lists but only {len(sample):,} vectors to train "
            f"them; use IVF{max(1, len(sample) // 39)} or fewer lists (FAISS wants ~39 vectors per list)"
        )
    if index.is_trained:
        return
    try:
        index.train(sample)
    except RuntimeError as exc:  # e.g. fewer training vectors than a PQ's 256 centroids
        reason = faiss_reason(exc)
        raise InputError(f"--index-factory {factory!r} on {len(sample):,} vectors: {reason}") from None


def write_faiss(write: Callable[[object, str], None], index: object, path: Path) -> None:
    """``faiss.write_index`` (or its binary twin) to ``path``; FAISS reports a failed write as a RuntimeError with
    the system's words in it ("... (No space left on device)"): that is the disk's refusal, an OSError again, so
    the build says it in one line (cone.indexing.guard)."""
    try:
        write(index, str(path))
    except RuntimeError as exc:
        refused = next((code for code in DISK_ERRORS if f"({os.strerror(code)})" in str(exc)), None)
        if refused is None:
            raise
        raise OSError(refused, os.strerror(refused), str(path)) from None


class FloatCodes:
    """A FAISS float index: exact (Flat) or approximate and compressed (SQ, PQ, HNSW, IVF, RaBitQ)."""

    def __init__(self, index: faiss.Index) -> None:
        self.index = index

    @property
    def ntotal(self) -> int:
        return self.index.ntotal

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        scores, rows = self.index.search(queries, k)
        if self.index.metric_type == faiss.METRIC_L2:  # squared L2 distances, nearest first
            scores = np.where(rows >= 0, similarity(scores, L2), -np.inf).astype(np.float32)
        return scores, rows

    def bytes_per_vector(self) -> float:
        """The serialized index less the same index emptied (its codebooks, centroids, graph's fixed part), over n."""
        full = faiss.serialize_index(self.index).size
        empty = faiss.clone_index(self.index)
        empty.reset()
        return (full - faiss.serialize_index(empty).size) / max(1, self.ntotal)

    def vectors(self) -> np.ndarray:
        try:
            return self.index.reconstruct_n(0, self.index.ntotal)
        except RuntimeError:
            raise InputError("this FAISS index type cannot return its vectors; use a Flat index") from None

    def write(self, folder: Path) -> None:
        write_faiss(faiss.write_index, self.index, folder / INDEX_FILE)
        record_files(folder, (INDEX_FILE,))

    @property
    def params(self) -> dict[str, int | str | None]:
        return {}  # everything is in the factory string and the search parameters

    def close(self) -> None:
        """Nothing held beyond memory."""


class OnDiskCodes(FloatCodes):
    """A streamed build's IVF index, its inverted lists mapped from ``index.ivfdata``. A read past the end of a
    mapped file is a SIGBUS, fatal to the whole service. So the file must hold every byte the lists say they
    occupy (``lists_end``: FAISS maps it whole and reads a list's codes and ids at its recorded offset, whatever
    the file's size): a shorter file is a DamagedIndex at load. A descriptor held open sees that file (even
    renamed or unlinked), so every read first checks its size against the size at load, itself checked against
    what the lists need. (A search already past the check when the file shrinks can still fault: the check
    narrows the window to one search's FAISS call.)"""

    def __init__(self, folder: Path) -> None:
        lists = folder / IVF_DATA
        self.lists = lists
        self._fd = os.open(lists, os.O_RDONLY)
        self._closer = weakref.finalize(self, os.close, self._fd)
        self._size = os.fstat(self._fd).st_size
        with native_stdout_silenced():  # FAISS says where it found the lists, with a C printf
            flags = faiss.IO_FLAG_ONDISK_SAME_DIR | faiss.IO_FLAG_READ_ONLY
            super().__init__(faiss.read_index(str(folder / INDEX_FILE), flags))
        if os.stat(lists).st_ino != os.fstat(self._fd).st_ino:  # replaced between the two opens: not the file mapped
            raise DamagedIndex(f"{folder}: {IVF_DATA} was replaced while the index was loading")
        needed = lists_end(self.index)
        if self._size < needed:  # checked before any read: FAISS has mapped the file but not touched it yet
            raise DamagedIndex(f"{lists}: {self._size:,} bytes, but its inverted lists need {needed:,} (truncated)")

    def _check(self) -> None:
        try:
            now = os.fstat(self._fd).st_size
        except OSError as exc:  # closed (close()), or the file system failed
            raise DamagedIndex(f"{self.lists}: unreadable ({exc.strerror})") from None
        if now != self._size:
            raise DamagedIndex(f"{self.lists}: {now:,} bytes, {self._size:,} when loaded (changed under the index)")

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        self._check()  # last, just before FAISS reads the lists
        return super().search(queries, k)

    def vectors(self) -> np.ndarray:
        self._check()
        return super().vectors()

    def bytes_per_vector(self) -> float:
        """The inverted lists' file (codes and ids) over n: what the index keeps per vector on disk."""
        return self._size / max(1, self.ntotal)

    def close(self) -> None:
        """Close the lists file now; reading after it is a DamagedIndex."""
        self._closer()
        self._fd = -1


def lists_end(index: faiss.Index) -> int:
    """The bytes an IVF index's on-disk lists occupy in their file: list ``i`` holds ``capacity`` codes of
    ``code_size`` bytes at its ``offset``, then as many 8-byte ids (FAISS's OnDiskInvertedLists layout, whose
    ``get_ids`` reads at offset + capacity * code_size)."""
    lists = faiss.downcast_InvertedLists(faiss.extract_index_ivf(index).invlists)
    entries, width = lists.lists, lists.code_size + 8  # idx_t: int64
    # A size past the capacity (a damaged index file) reads ids past the capacity's end: that far, then.
    ends = (e.offset + max(e.capacity, e.size) * width for e in (entries.at(i) for i in range(lists.nlist)))
    return max(ends, default=0)


def check_list_ids(index: faiss.Index, where: Path) -> None:
    """Every id an IVF index's lists hold must name a row (0 <= id < ntotal), and the lists hold ntotal ids: ids
    read from a damaged lists file would name documents past the corpus (IndexError at each search). Mapped lists
    are read where they lie, after ``lists_end`` has checked that the file covers them."""
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is None:
        return
    lists, held = ivf.invlists, 0
    for i in range(lists.nlist):
        size = lists.list_size(i)
        held += size
        if size:
            ids = faiss.rev_swig_ptr(lists.get_ids(i), size)
            if ids.min() < 0 or ids.max() >= index.ntotal:
                bad = int(ids.max()) if ids.max() >= index.ntotal else int(ids.min())
                raise DamagedIndex(f"{where}: list {i} holds id {bad:,} of a {index.ntotal:,}-vector index (damaged)")
    if held != index.ntotal:
        raise DamagedIndex(f"{where}: the inverted lists hold {held:,} ids, the index says {index.ntotal:,}")


@cache
def _factory_shape(dim: int, factory: str, metric: int) -> str:
    """The index a factory string builds (``_shape``), with its IVF lists counted as 1 (``IVF65536`` would allocate
    its lists): what a file of that type reads back as."""
    return _shape(faiss.index_factory(dim, _one_list(factory), metric))


def _shape(index: faiss.Index) -> str:
    """The class of the index that keeps the codes, after how many transforms: what a factory string decides and a
    file keeps. (A transform's own class is not: an OPQ matrix reads back as a LinearTransform; and a flat index's
    by-metric class is named as the factory makes it: read_index gives IndexFlatIP for the IndexFlat that "Flat"
    made by the inner product, whose metric is checked on its own.)"""
    outer = faiss.downcast_index(index)  # a view: ``index`` (which may own the C++ object) stays referenced
    transforms = outer.chain.size() if isinstance(outer, faiss.IndexPreTransform) else 0
    core = re.sub(r"^IndexFlat(?:IP|L2)$", "IndexFlat", type(core_index(index)).__name__)
    return f"{core} after {transforms} transform{'s' * (transforms != 1)}" if transforms else core


def check_factory(index: faiss.Index, kind: IndexType, where: Path) -> None:
    """The file holds the type the manifest names (a Flat file under a manifest saying IVF64,Flat is refused, not
    served as the type it is not): the same classes, and an IVF's number of lists."""
    try:
        expected = _factory_shape(index.d, kind.factory, index.metric_type)
    except RuntimeError as exc:
        raise DamagedIndex(f"{where}: manifest's index type {kind.factory!r}: {faiss_reason(exc)}") from None
    found, ivf = _shape(index), faiss.try_extract_index_ivf(index)
    lists = None if ivf is None else int(ivf.nlist)
    if found != expected or (kind.ivf_lists is not None and lists != kind.ivf_lists):
        held = found if lists is None else f"{found} of {lists} lists"
        raise DamagedIndex(f"{where}: the manifest says {kind.factory!r}, {INDEX_FILE} holds {held}")


def _crc32(path: Path) -> int:
    crc = 0
    with open(path, "rb") as file:
        while chunk := file.read(1 << 22):
            crc = zlib.crc32(chunk, crc)
    return crc


def record_files(folder: Path, names: tuple[str, ...]) -> None:
    """Write ``FILE_RECORD``: each of ``names``' size and CRC-32, as just written."""
    files = {name: {"bytes": (folder / name).stat().st_size, "crc32": _crc32(folder / name)} for name in names}
    (folder / FILE_RECORD).write_text(json.dumps({"files": files}, indent=1))


def check_files(folder: Path) -> None:
    """Every file ``FILE_RECORD`` lists has the size and CRC-32 it was written with (before FAISS parses it). A
    folder written before the record was kept has none, and is read as it was."""
    record = folder / FILE_RECORD
    if not record.exists():
        return
    try:
        files = {
            name: (int(f["bytes"]), int(f["crc32"])) for name, f in json.loads(record.read_text())["files"].items()
        }
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise DamagedIndex(f"{folder}: missing or corrupt {FILE_RECORD} ({str(exc)[:160]})") from None
    for name, (size, crc) in files.items():
        try:
            found = (folder / name).stat().st_size
            if found != size:
                raise DamagedIndex(f"{folder}: corrupt index files ({name} is {found:,} bytes, written as {size:,})")
            if _crc32(folder / name) != crc:
                raise DamagedIndex(
                    f"{folder}: corrupt index files ({name} is not the file written: its CRC-32 differs)"
                )
        except FileNotFoundError:
            continue  # the reader says which file its type needs (a streamed index without its lists, ...)
        except OSError as exc:
            raise DamagedIndex(f"{folder}: {name} unreadable ({exc.strerror})") from None


def sign_codes(vectors: np.ndarray) -> np.ndarray:
    """One bit per coordinate (1 where > 0), packed 8 to a byte: sentence-transformers' own ``ubinary``."""
    from sentence_transformers.util.quantization import quantize_embeddings

    return quantize_embeddings(np.ascontiguousarray(vectors, dtype=np.float32), precision="ubinary")


class BinaryCodes:
    """``BIN``: Hamming distance between sign codes, scored as the share of agreeing signs mapped to [-1, 1]
    (1 - 2 h / d). ``BIN+rescore:R``: Hamming's top max(R, k) re-ranked by the exact cosine with the stored
    float32 vectors (so the index keeps d/8 bytes per vector in its codes, and 4d on disk for rescoring)."""

    def __init__(self, index: faiss.IndexBinary, dim: int, rescore: int | None, floats: np.ndarray | None) -> None:
        self.index, self.dim, self.rescore, self.floats = index, dim, rescore, floats

    @classmethod
    def build(cls, vectors: np.ndarray, kind: IndexType) -> BinaryCodes:
        dim = vectors.shape[1]
        index = faiss.IndexBinaryFlat(8 * -(-dim // 8))  # codes are whole bytes: packbits pads with zeros
        index.add(sign_codes(vectors))
        floats = np.ascontiguousarray(vectors, dtype=np.float32) if kind.rescore else None
        return cls(index, dim, kind.rescore, floats)

    @property
    def ntotal(self) -> int:
        return self.index.ntotal

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        depth = min(max(k, self.rescore or 0), self.ntotal)
        hamming, rows = self.index.search(sign_codes(queries), depth)
        if self.floats is None:
            return (1.0 - 2.0 * hamming / self.dim).astype(np.float32), rows
        found = np.maximum(rows, 0)
        cosines = np.einsum("qd,qrd->qr", queries.astype(np.float32), self.floats[found])
        cosines[rows < 0] = -np.inf
        order = np.argsort(-cosines, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(cosines, order, 1), np.take_along_axis(rows, order, 1)

    def vectors(self) -> np.ndarray:
        if self.floats is None:
            raise InputError("a BIN index keeps only sign bits; BIN+rescore:R or Flat keep the vectors")
        return self.floats

    def close(self) -> None:
        """Nothing held beyond memory."""

    def bytes_per_vector(self) -> float:
        return self.index.code_size + (4 * self.dim if self.floats is not None else 0)

    def write(self, folder: Path) -> None:
        write_faiss(faiss.write_index_binary, self.index, folder / BINARY_FILE)
        if self.floats is not None:
            np.save(folder / RESCORE_FILE, self.floats)
        record_files(folder, (BINARY_FILE,) if self.floats is None else (BINARY_FILE, RESCORE_FILE))

    @property
    def params(self) -> dict[str, int | str | None]:
        return {}


class OnDiskWriter:
    """A streamed build's IVF index: trained on the sample, each shard added to a copy of it and written, then
    every shard's lists merged into one file on disk (FAISS's ``merge_ondisk``; ids are the rows)."""

    def __init__(self, folder: Path, final: Path, kind: IndexType, dim: int, search_params: str) -> None:
        self.folder, self.final, self.kind, self.search_params = folder, final, kind, search_params
        self.index = make_faiss(dim, kind.factory, search_params, kind.metric)
        self.parts: list[str] = []
        self.count = 0
        self.scratch = folder / "ivf-parts"  # each shard's lists, until they are merged

    def train(self, sample: np.ndarray) -> None:
        train_faiss(self.index, sample, self.kind.factory)

    def add(self, vectors: np.ndarray, ids: list[str]) -> None:
        part = faiss.clone_index(self.index)
        part.add_with_ids(vectors, np.arange(self.count, self.count + len(vectors), dtype=np.int64))
        self.scratch.mkdir(exist_ok=True)
        self.parts.append(str(self.scratch / f"ivf-{len(self.parts):05d}.index"))
        write_faiss(faiss.write_index, part, Path(self.parts[-1]))
        self.count += len(vectors)

    def finish(self) -> dict[str, int | str | None]:
        with native_stdout_silenced():  # FAISS reports each resize of the file with a C printf
            merge_ondisk(self.index, self.parts, str(self.folder / IVF_DATA))
        shutil.rmtree(self.scratch, ignore_errors=True)
        # The index file names its lists' file: name the one it will have once the build is swapped into place
        # (FAISS also finds it beside the index file if the folder moves: IO_FLAG_ONDISK_SAME_DIR).
        lists = faiss.downcast_InvertedLists(faiss.extract_index_ivf(self.index).invlists)
        lists.filename = str(self.final.resolve() / IVF_DATA)
        set_search_params(self.index, self.search_params)
        write_faiss(faiss.write_index, self.index, self.folder / INDEX_FILE)
        record_files(self.folder, (INDEX_FILE, IVF_DATA))
        return {}  # the factory string, the metric and the search parameters say it all


# A user's own index file (cone doctor --index: cone.indexing.user_index), and its repair.

USER_METRIC = {faiss.METRIC_INNER_PRODUCT: "inner product", faiss.METRIC_L2: "l2"}  # as FAISS's users name them
# Trained transforms a repair retrains on the centered vectors (a transform the user set by hand is kept).
_RETRAINED_TRANSFORMS = ("PCAMatrix", "OPQMatrix", "ITQTransform", "CenteringTransform", "RandomRotationMatrix")


def _read_user(path: Path) -> tuple[object, bool]:
    errors = []
    for read, binary in ((faiss.read_index, False), (faiss.read_index_binary, True)):
        try:
            with native_stdout_silenced():
                return read(str(path)), binary
        except RuntimeError as exc:
            errors.append(faiss_reason(exc))
    raise InputError(f"--index {path}: not a FAISS index file, a Lance folder or a .usearch file ({errors[0]})")


def _innermost(index: faiss.Index) -> faiss.Index:
    """The index that keeps the codes, past every transform chain and id map in front of it."""
    index = faiss.downcast_index(index)
    while isinstance(index, faiss.IndexPreTransform | faiss.IndexIDMap | faiss.IndexIDMap2):
        index = faiss.downcast_index(index.index)
    return index


def _class_name(index: faiss.Index) -> str:
    """``IndexPreTransform(CenteringTransform, NormalizationTransform) > IndexIVFPQ``."""
    if isinstance(index, faiss.IndexBinary):
        return type(index).__name__
    index = faiss.downcast_index(index)
    if isinstance(index, faiss.IndexPreTransform):
        chain = [type(faiss.downcast_VectorTransform(index.chain.at(i))).__name__ for i in range(index.chain.size())]
        return f"IndexPreTransform({', '.join(chain)}) > {_class_name(index.index)}"
    return type(index).__name__


def _user_params(index: faiss.Index) -> dict[str, object]:
    inner = _innermost(index)
    params: dict[str, object] = {}
    for name in ("nlist", "nprobe", "code_size"):
        if hasattr(inner, name):
            params[name] = int(getattr(inner, name))
    pq = getattr(inner, "pq", None)
    if pq is not None:
        params |= {"pq_M": int(pq.M), "pq_nbits": int(pq.nbits)}
        if hasattr(inner, "by_residual"):
            params["by_residual"] = bool(inner.by_residual)
    if hasattr(inner, "hnsw"):
        params |= {"hnsw_M": int(inner.hnsw.nb_neighbors(1)), "efSearch": int(inner.hnsw.efSearch)}
    sq = getattr(inner, "sq", None)
    if sq is not None:
        params["sq_bits"] = int(sq.bits)
    return params


def _user_binary(path: Path, index: faiss.IndexBinary) -> UserIndex:
    def search(queries: np.ndarray, k: int) -> np.ndarray:
        return index.search(sign_codes(queries), k)[1]

    params = {"bits": index.d, "codes": "sign bits of each coordinate (1 where > 0), as sentence-transformers' ubinary"}
    name, d = _class_name(index), index.d
    return UserIndex(NAME, str(path), name, HAMMING, params, d / 8, index.ntotal, d, search, None, index)


def open_user(path: Path, table: str | None) -> UserIndex:
    """A FAISS index file as ``faiss.read_index`` (or ``read_index_binary``) reads it; its ids must be 0..N-1."""
    no_table(path, table)
    index, binary = _read_user(path)
    if binary:
        return _user_binary(path, index)
    id_map = getattr(faiss.downcast_index(index), "id_map", None)
    if id_map is not None and not np.array_equal(faiss.vector_to_array(id_map), np.arange(index.ntotal)):
        raise InputError(f"--index {path}: its ids are not 0..N-1, so they cannot name rows of --vectors")
    flat = isinstance(index, faiss.IndexFlat)  # exact vectors kept as they were added
    vectors = index.reconstruct_n(0, index.ntotal) if flat else None
    code = 4.0 * index.d if flat else float(getattr(_innermost(index), "code_size", 4 * index.d))

    def search(queries: np.ndarray, k: int) -> np.ndarray:
        return index.search(np.ascontiguousarray(queries, dtype=np.float32), k)[1]

    metric = USER_METRIC.get(index.metric_type, f"metric {index.metric_type}")
    params = _user_params(index)
    name, d = _class_name(index), index.d
    return UserIndex(NAME, str(path), name, metric, params, code, index.ntotal, d, search, vectors, index)


def _untrain(index: faiss.Index) -> None:
    """Mark every trained part to be trained again on the centered vectors (a transform the user set by hand,
    such as a LinearTransform of their own, is kept)."""
    index = faiss.downcast_index(index)
    if isinstance(index, faiss.IndexPreTransform):
        for i in range(index.chain.size()):
            transform = faiss.downcast_VectorTransform(index.chain.at(i))
            if type(transform).__name__ in _RETRAINED_TRANSFORMS:
                transform.is_trained = False
        _untrain(index.index)
    if isinstance(index, faiss.IndexIDMap | faiss.IndexIDMap2):
        _untrain(index.index)
    if isinstance(index, faiss.IndexIVF):
        index.quantizer.reset()  # an IVF keeps a filled quantizer as trained centroids
    storage = getattr(index, "storage", None)
    if storage is not None:
        _untrain(storage)
    if getattr(index, "do_polysemous_training", False):
        index.do_polysemous_training = False  # renumbers centroids for Hamming filters; no code or result changes
    if not isinstance(index, faiss.IndexFlat):
        index.is_trained = False


def _has_id_map(index: faiss.Index) -> bool:
    index = faiss.downcast_index(index)
    while isinstance(index, faiss.IndexPreTransform):
        index = faiss.downcast_index(index.index)
    return isinstance(index, faiss.IndexIDMap | faiss.IndexIDMap2)


def _copy(index: faiss.Index) -> faiss.Index:
    """A deep copy through FAISS's own format (clone_index refuses some transforms, CenteringTransform among them)."""
    return faiss.deserialize_index(faiss.serialize_index(index))


def _train_fill_write(fixed: faiss.Index, vectors: np.ndarray, path: Path) -> None:
    """A repair's index trained on ``vectors``, filled with them as row i = id i, written to ``path``."""
    rows = np.ascontiguousarray(vectors, dtype=np.float32)
    with native_stdout_silenced():
        fixed.train(rows)
    if _has_id_map(fixed):  # ids as today's, row i = id i: an id map takes them only with add_with_ids
        fixed.add_with_ids(rows, np.arange(len(rows), dtype=np.int64))
    else:
        fixed.add(rows)
    faiss.write_index(fixed, str(path))


def _centering_writer(inner: faiss.Index, vectors: np.ndarray) -> Callable[[Path], None]:
    """Writes ``inner`` (untrained, empty) behind centering and L2 normalization, trained and filled."""
    d = vectors.shape[1]

    def write(path: Path) -> None:
        fixed = _copy(inner)  # a chain of the user's own gets the repair in front, as one chain
        if not isinstance(fixed, faiss.IndexPreTransform):
            fixed.this.disown()  # the chain owns its index and transforms (a clone's own_fields), as read_index's do
            fixed = faiss.IndexPreTransform(fixed)
            fixed.own_fields = True
        for transform in (faiss.NormalizationTransform(d, 2.0), faiss.CenteringTransform(d)):
            transform.this.disown()
            fixed.prepend_transform(transform)
        _train_fill_write(fixed, vectors, path)

    return write


def _emptied(index: faiss.Index) -> faiss.Index:
    """A copy of the user's index with no vectors, every trained part to be trained again."""
    inner = _copy(index)
    inner.reset()
    _untrain(inner)
    return inner


# Product-quantizer codes, whose error along a shared direction lands on every inner product and cancels under L2
# (tests/test_metric_rule.py); their scoring follows metric_type at each level. (A graph does not: an HNSW switched
# so answers nothing.)
L2_CODES = (faiss.IndexPQ, faiss.IndexIVFPQ)


def _set_metric(index: faiss.Index, metric: int) -> None:
    """``metric`` at every level that scores: the index, a chain's or id map's inner index, an IVF's coarse
    quantizer, a graph's storage (each searches by its own ``metric_type``)."""
    index = faiss.downcast_index(index)
    index.metric_type = metric
    for part in ("index", "quantizer", "storage"):
        inner = getattr(index, part, None)
        if isinstance(inner, faiss.Index):
            _set_metric(inner, metric)


def _l2_writer(inner: faiss.Index, vectors: np.ndarray) -> Callable[[Path], None]:
    """Writes ``inner`` (untrained, empty) under L2, trained and filled as the user's was."""

    def write(path: Path) -> None:
        fixed = _copy(inner)
        _set_metric(fixed, faiss.METRIC_L2)
        _train_fill_write(fixed, vectors, path)

    return write


def user_repairs(index: UserIndex, vectors: np.ndarray) -> list[RepairRecipe]:
    """The user's index structure, emptied and untrained, behind centering and L2 normalization (a binary index
    becomes IndexLSH behind the same centering: the same d/8 bytes, float queries); and, for codes scored by the
    inner product, the same structure under L2, where a code's error along a shared direction cancels
    (tests/test_metric_rule.py) and unit rows rank as they do by the inner product."""
    d, opened = index.dim, lambda p: open_user(p, None)
    if index.metric == HAMMING:
        inner, then = faiss.IndexLSH(d, d, False, False), "IndexLSH(d, d bits: the sign of each centered coordinate)"
        change = "queries go in as float vectors (the index takes their sign bits itself), not packed bits"
    else:
        inner = _emptied(index.handle)
        then, change = f"your {index.kind}, retrained", "none: faiss.read_index loads it; queries go in raw"
    how = (
        f"a new index file: IndexPreTransform(CenteringTransform({d}), NormalizationTransform({d})) in front of "
        f"{then}; --fix OUT.faiss writes it"
    )
    write = _centering_writer(inner, vectors)
    made = [RepairRecipe("center (IndexPreTransform)", how, change, write, opened, None, True)]
    if index.metric == USER_METRIC[faiss.METRIC_INNER_PRODUCT] and isinstance(_innermost(index.handle), L2_CODES):
        how = f"a new index file: your {index.kind} under faiss.METRIC_L2, retrained; --fix OUT.faiss writes it"
        change = "none but the scores: squared L2 distances, smaller is nearer (2 - 2 cos on unit rows)"
        made.append(RepairRecipe("metric l2", how, change, _l2_writer(inner, vectors), opened, None, False, L2))
    return made


class FaissStore:
    """FAISS (cone.indexing.codes.Store): factory strings and 1-bit codes, by the inner product or L2."""

    name = NAME
    prefix = ""
    metrics = (DOT, L2)
    default_metric = DOT
    exact = DEFAULT_FACTORY  # the store's exhaustive search of float32 rows
    legacy_metric = None  # the default: every FAISS index before the metric was recorded used the inner product
    doctor_types = ()  # the doctor sizes FAISS's types by N and d (cone.eval.doctor.default_types)
    open_user = staticmethod(open_user)
    repairs = staticmethod(user_repairs)

    def claims(self, path: Path) -> bool:
        return path.is_file()  # FAISS reads a file by its content, whatever its name

    def parse(self, factory: str, metric: str | None) -> IndexType:
        return parse(factory, metric)

    def types(self) -> tuple[str, ...]:
        return ()  # FAISS's are --index-factory's

    def check(self, kind: IndexType, dim: int, search_params: str) -> None:
        if kind.binary:
            if parse_search_params(search_params):
                raise InputError(f"invalid --search-params {search_params!r}: a BIN index has no search parameters")
            return
        set_search_params(make_faiss(dim, kind.factory, search_params, kind.metric), search_params)

    def build(self, vectors: np.ndarray, kind: IndexType, search_params: str, ids: list[str] | None) -> FloatCodes:
        if kind.binary:
            codes = BinaryCodes.build(vectors, kind)
            set_search_params(codes.index, search_params)  # a BIN index takes none: refused here
            return codes
        index = make_faiss(vectors.shape[1], kind.factory, search_params, kind.metric)
        train_faiss(index, vectors, kind.factory)
        try:
            index.add(vectors)
        except RuntimeError as exc:
            raise InputError(f"--index-factory {kind.factory!r}: {faiss_reason(exc)}") from None
        set_search_params(index, search_params)
        return FloatCodes(index)

    def streamed(self, folder: Path, final: Path, kind: IndexType, dim: int, search_params: str) -> OnDiskWriter:
        """Only inverted lists can live on disk: a plain IVF factory (IVF4096,Flat, IVF4096,SQ8, IVF4096,PQ32,
        optionally after a transform such as PCA64), nothing kept beside the lists (no IDMap, no refinement) and
        lists FAISS can merge onto disk (not the fast-scan ones)."""
        if not kind.binary:
            built = make_faiss(dim, kind.factory, metric=kind.metric)  # kept: it owns what is downcast
            index = core_index(built)
            lists = faiss.downcast_InvertedLists(index.invlists) if isinstance(index, faiss.IndexIVF) else None
            if isinstance(lists, faiss.ArrayInvertedLists):
                return OnDiskWriter(folder, final, kind, dim, search_params)
        raise InputError(
            f"--stream needs a plain IVF factory such as IVF1024,Flat, IVF1024,SQ8 or IVF1024,PQ32, not "
            f"{kind.factory!r}: only inverted lists can stay on disk"
        )

    def read(
        self, folder: Path, kind: IndexType, dim: int, search_params: str, on_disk: bool, params: dict
    ) -> FloatCodes | BinaryCodes:
        """What ``write`` wrote; ``on_disk``: a streamed build's inverted lists stay on disk, opened read-only (the
        service's volume may be) from beside the index file, never from the path the build recorded (another
        index's, if the folder moved). Raises DamagedIndex for unreadable files."""
        check_files(folder)
        try:
            if kind.binary:
                floats = np.load(folder / RESCORE_FILE) if kind.rescore else None
                if floats is not None and (floats.dtype != np.float32 or floats.ndim != 2 or floats.shape[1] != dim):
                    raise DamagedIndex(f"{folder}: {RESCORE_FILE} does not hold {dim}-dim float32 vectors")
                index = faiss.read_index_binary(str(folder / BINARY_FILE))
                codes: FloatCodes | BinaryCodes = BinaryCodes(index, dim, kind.rescore, floats)
                if floats is not None and len(floats) != codes.ntotal:
                    raise DamagedIndex(f"{folder}: {len(floats)} rescoring vectors for {codes.ntotal} codes")
            elif not on_disk:
                codes = FloatCodes(faiss.read_index(str(folder / INDEX_FILE)))
            elif not (folder / IVF_DATA).is_file():
                raise DamagedIndex(f"{folder}: a streamed index without its lists ({IVF_DATA})")
            else:
                codes = OnDiskCodes(folder)
        except (RuntimeError, OSError, ValueError, EOFError) as exc:
            raise DamagedIndex(f"{folder}: corrupt index files ({str(exc).splitlines()[0][:160]})") from None
        expected = 8 * -(-dim // 8) if kind.binary else dim  # binary codes are whole bytes
        if codes.index.d != expected:
            raise DamagedIndex(f"{folder}: index of dimension {codes.index.d}, manifest says {dim}")
        if not kind.binary and METRIC_NAME.get(codes.index.metric_type) != kind.metric:
            found = METRIC_NAME.get(codes.index.metric_type, codes.index.metric_type)
            raise DamagedIndex(f"{folder}: an index by {found}, the manifest says {kind.metric}")
        if not kind.binary:
            check_factory(codes.index, kind, folder)
            check_list_ids(codes.index, folder / (IVF_DATA if on_disk else INDEX_FILE))
        try:
            set_search_params(codes.index, search_params)
        except InputError as exc:
            raise DamagedIndex(f"{folder}: manifest's search_params: {exc}") from None
        return codes
