"""Index types by name, and the one place FAISS indexes are made, trained, filled, written and read.

A type is a FAISS factory string (``Flat``, ``SQ8``, ``PQ32``, ``HNSW32``, ``IVF1024,Flat``, ``RaBitQ``,
``IVF64,RaBitQ``, ...) or a 1-bit code: ``BIN`` (the sign of each coordinate, searched by Hamming distance) and
``BIN+rescore:R`` (Hamming's top R rescored by the float query against the stored float32 vectors: the recipe
sentence-transformers documents for binary quantization). ``lance:TYPE`` names a LanceDB store and its index type
(cone.indexing.lance: ``lance:FLAT``, ``lance:IVF_PQ``, ``lance:IVF_HNSW_SQ``, ``lance:IVF_RQ``). Specs and search
parameters are checked here, before FAISS sees them: some strings FAISS accepts build an index that fails every
search (``IVF0``), scores nothing (``SQ0``), crashes the process (``HNSW1``) or never finishes (``NSG4``).
"""

from __future__ import annotations

import os
import re
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import faiss
import numpy as np

from cone.errors import DamagedIndex, InputError
from cone.indexing import lance
from cone.indexing.guard import DISK_ERRORS
from cone.indexing.lance import LanceCodes
from cone.output import native_stdout_silenced

INDEX_FILE = "index.faiss"
BINARY_FILE = "index.faissbin"  # a FAISS binary index of the codes
RESCORE_FILE = "rescore.npy"  # BIN+rescore's float32 unit vectors, in row order
IVF_DATA = "index.ivfdata"  # a streamed build's inverted lists, on disk
DEFAULT_FACTORY = "Flat"
BINARY = re.compile(r"^BIN(?:\+rescore:(?P<depth>\d+))?$")
SCALAR_BITS = ("4", "6", "8")  # SQ4, SQ6, SQ8 (and SQfp16, SQbf16, SQ8_direct...)
MIN_DEGREE = {"HNSW": 2, "NSG": 8}  # below these FAISS crashes (HNSW0 SIGABRT, HNSW1 SIGSEGV) or hangs (NSG<8)
# Each must be a count > 0: FAISS's, then LanceDB's (cone.indexing.lance).
COUNTED_PARAMS = ("nprobe", "efSearch", "qb", "ht", "max_codes", "k_factor", "nprobes", "ef", "refine_factor")
QUERY_BITS = range(1, 9)  # RaBitQ's query quantization (qb)


@dataclass(frozen=True)
class IndexType:
    """A parsed, checked ``--index-factory``."""

    factory: str
    rescore: int | None = None  # BIN+rescore:R

    @property
    def binary(self) -> bool:
        return self.factory.startswith("BIN")

    @property
    def store(self) -> str:
        """Where the vectors live: "faiss" (an index file) or "lancedb" (a Lance table)."""
        return "lancedb" if self.factory.startswith(lance.PREFIX) else "faiss"

    @property
    def ivf_lists(self) -> int | None:
        found = re.match(r"^(?:[^,]*,)?IVF(\d+)", self.factory)
        return int(found.group(1)) if found else None


def _refuse(factory: str, why: str) -> InputError:
    return InputError(f"invalid --index-factory {factory!r}: {why}")


# A factory's leading stages that take the next comma item as their own: "IVF256,Flat" is one index type.
_FACTORY_PREFIX = re.compile(r"^(IVF\d+(_HNSW\d+)?|IMI\d+x\d+|OPQ\d+(_\d+)?|PCAR?\d+|RR\d+|L2norm)$")


def parse_factory_list(text: str) -> list[str]:
    """Comma- (or ;-) separated index types, each checked: Flat,SQ8,IVF256,Flat,BIN -> [..., 'IVF256,Flat', 'BIN'];
    Flat first if absent (the exact reference every other factory is measured against)."""
    factories: list[str] = []
    if ";" in text:
        factories = [t.strip() for t in text.split(";") if t.strip()]
    for token in [] if factories else [t.strip() for t in text.split(",") if t.strip()]:
        if factories and _FACTORY_PREFIX.match(factories[-1].split(",")[-1]):
            factories[-1] += f",{token}"
        else:
            factories.append(token)
    if not factories:
        raise InputError("expected a comma-separated list of index types")
    factories = [parse_factory(factory).factory for factory in factories]
    if DEFAULT_FACTORY not in factories:
        factories.insert(0, DEFAULT_FACTORY)
    return factories


def parse_factory(factory: str) -> IndexType:
    """Check a spec's every count and degree; the strings FAISS would crash or hang on never reach it."""
    factory = factory.strip()
    if not factory:
        raise _refuse(factory, "empty")
    if factory.lower().startswith(lance.PREFIX):
        return IndexType(lance.PREFIX + lance.type_of(factory))
    binary = BINARY.match(factory)
    if binary:
        depth = binary.group("depth")
        if depth is not None and int(depth) < 1:
            raise _refuse(factory, "the rescoring depth R must be at least 1")
        return IndexType(factory, int(depth) if depth else None)
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
    unparsed = _faiss_cannot_parse(factory)
    if unparsed is not None:
        raise _refuse(factory, unparsed)
    return IndexType(factory)


@cache
def _faiss_cannot_parse(factory: str) -> str | None:
    """FAISS's own reason when its factory parser does not know ``factory`` (``NOPE``, ``IVF16,NOPE``), else None,
    without the vectors' dimension: only "could not parse" is decided here, whatever depends on the dimension
    (PQ33 on d = 384) is FAISS's to say once the model's is known. The parser runs on a copy whose list counts are 1
    (``IVF65536`` and ``IMI2x16`` allocate their lists when made)."""
    probe = re.sub(r"IMI\d+x\d+", "IMI2x1", re.sub(r"IVF\d+", "IVF1", factory))
    try:
        faiss.index_factory(8, probe, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as exc:
        reason = faiss_reason(exc)
        return reason.replace(probe, factory) if "could not parse" in reason else None
    return None


def faiss_reason(exc: RuntimeError) -> str:
    """FAISS's message without the C++ function and source location in front of it ("Error in ... at
    /project/faiss/index_factory.cpp:1228: could not parse index string NOPE" -> "could not parse index string
    NOPE"): the user's words are the reason, FAISS's source file is not."""
    last = str(exc).strip().splitlines()[-1]
    return re.sub(r"^Error in .*? at \S+:\d+: (?:Error: '.*?' failed: )?", "", last)[:200]


STORES = ("faiss", "lancedb")


def for_store(factory: str, store: str | None) -> str:
    """``--index-factory`` under ``--store``: lancedb makes the default Flat ``lance:FLAT``; a type of the other
    store is refused (None: the store the type names)."""
    kind = parse_factory(factory)
    if store is None or kind.store == store:
        return kind.factory
    if store == "lancedb" and kind.factory == DEFAULT_FACTORY:
        return lance.PREFIX + "FLAT"
    types = ", ".join(lance.PREFIX + t for t in lance.TYPES) if store == "lancedb" else "a FAISS factory string"
    raise InputError(f"--index-factory {factory!r} is a {kind.store} type, not one of --store {store} ({types})")


def store_types(store: str) -> tuple[str, ...]:
    """The index types ``cone eval --store`` adds for a store: every LanceDB type; FAISS's are --index-factory's."""
    return tuple(lance.PREFIX + t for t in lance.TYPES) if store == "lancedb" else ()


def parse_search_params(params: str) -> dict[str, str]:
    """``name=value,...`` with every known count > 0; FAISS checks the names it knows when they are set."""
    settings: dict[str, str] = {}
    for setting in filter(None, (s.strip() for s in params.split(","))):
        name, sep, value = setting.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise InputError(f"invalid --search-params {params!r}: {setting!r} is not name=value")
        name, value = name.strip(), value.strip()
        if name in COUNTED_PARAMS and not (value.isdigit() and int(value) > 0):
            raise InputError(f"invalid --search-params {params!r}: {name} must be a whole number > 0, not {value!r}")
        if name == "qb" and int(value) not in QUERY_BITS:
            raise InputError(f"invalid --search-params {params!r}: qb (RaBitQ's query bits) is 1 to 8, not {value}")
        settings[name] = value
    return settings


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


def make_faiss(dim: int, factory: str, search_params: str = "") -> faiss.Index:
    """An empty float index of a checked FAISS factory string (inner product: the vectors are unit rows)."""
    kind = parse_factory(factory)
    if kind.binary:
        raise _refuse(factory, "1-bit codes are not a FAISS factory string here")
    if kind.store != "faiss":
        raise _refuse(factory, "a LanceDB index type, not a FAISS factory string")
    parse_search_params(search_params)
    try:
        index = faiss.index_factory(dim, kind.factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as exc:
        raise _refuse(factory, f"{faiss_reason(exc)} (d = {dim})") from None
    _skip_polysemous_training(index, search_params)
    return index


def train_faiss(index: faiss.Index, sample: np.ndarray, factory: str) -> None:
    """Train on ``sample`` (all the vectors, or a streamed build's sample); too few vectors is refused with the
    numbers, before FAISS's clustering would fail or warn."""
    lists = parse_factory(factory).ivf_lists
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
        return self.index.search(queries, k)

    def vectors(self) -> np.ndarray:
        try:
            return self.index.reconstruct_n(0, self.index.ntotal)
        except RuntimeError:
            raise InputError("this FAISS index type cannot return its vectors; use a Flat index") from None

    def write(self, folder: Path) -> None:
        write_faiss(faiss.write_index, self.index, folder / INDEX_FILE)

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
    return max((entries.at(i).offset + entries.at(i).capacity * width for i in range(lists.nlist)), default=0)


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

    def write(self, folder: Path) -> None:
        write_faiss(faiss.write_index_binary, self.index, folder / BINARY_FILE)
        if self.floats is not None:
            np.save(folder / RESCORE_FILE, self.floats)

    @property
    def params(self) -> dict[str, int | str | None]:
        return {}


Codes = FloatCodes | BinaryCodes | LanceCodes


def build_codes(vectors: np.ndarray, factory: str, search_params: str = "", ids: list[str] | None = None) -> Codes:
    """The index of ``factory`` over ``vectors`` (unit rows), trained, filled and with its search parameters;
    ``ids``: the documents' ids in row order, kept beside the vectors where the store keeps them (LanceDB)."""
    kind = parse_factory(factory)
    if kind.store == "lancedb":
        return LanceCodes.build(vectors, kind.factory, parse_search_params(search_params), ids)
    if kind.binary:
        codes = BinaryCodes.build(vectors, kind)
        set_search_params(codes.index, search_params)  # a BIN index takes none: refused here
        return codes
    index = make_faiss(vectors.shape[1], factory, search_params)
    train_faiss(index, vectors, factory)
    try:
        index.add(vectors)
    except RuntimeError as exc:
        raise InputError(f"--index-factory {factory!r}: {faiss_reason(exc)}") from None
    set_search_params(index, search_params)
    return FloatCodes(index)


def read_codes(
    folder: Path, factory: str, dim: int, search_params: str, on_disk: bool, params: dict | None = None
) -> Codes:
    """What ``Codes.write`` wrote; ``on_disk``: a streamed build's inverted lists stay on disk, opened read-only
    (the service's volume may be) from beside the index file, never from the path the build recorded (another
    index's, if the folder moved); ``params``: the manifest's index_params (a LanceDB index's search settings).
    Raises DamagedIndex for unreadable files."""
    kind = parse_factory(factory)
    if kind.store == "lancedb":
        return LanceCodes.read(folder, kind.factory, dim, params or {})
    try:
        if kind.binary:
            floats = np.load(folder / RESCORE_FILE) if kind.rescore else None
            if floats is not None and (floats.dtype != np.float32 or floats.ndim != 2 or floats.shape[1] != dim):
                raise DamagedIndex(f"{folder}: {RESCORE_FILE} does not hold {dim}-dim float32 vectors")
            codes: Codes = BinaryCodes(faiss.read_index_binary(str(folder / BINARY_FILE)), dim, kind.rescore, floats)
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
    try:
        set_search_params(codes.index, search_params)
    except InputError as exc:
        raise DamagedIndex(f"{folder}: manifest's search_params: {exc}") from None
    return codes
