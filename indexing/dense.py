"""Dense indexes: encoder -> vectors (cached) -> post-processing -> unit norm -> FAISS (inner product)."""

from __future__ import annotations

import hashlib
import os
import weakref
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np

from cone.data.loaders import RetrievalDataset, doc_text
from cone.encoders.base import LOCAL, Encoder, Layer, LayeredEncoder
from cone.errors import DamagedIndex, InputError
from cone.geometry import histogram, measure, pair_cosines, spread, unit_rows
from cone.indexing import postprocess as pp
from cone.indexing import store
from cone.indexing.index import Queries, SearchResult
from cone.output import native_stdout_silenced

INDEX_FILE = "index.faiss"
PARAMS_FILE = "postprocess.npz"
IVF_DATA = "index.ivfdata"  # a streamed build's inverted lists, on disk
CACHE_ENV = "CONE_CACHE_DIR"
DEFAULT_FACTORY = "Flat"


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV, Path.home() / ".cache" / "cone" / "embeddings"))


def _cache_path(encoder: Encoder, dataset: RetrievalDataset) -> Path:
    # Vectors made on a cluster are cached apart: an index says truly where its vectors were encoded.
    where = "" if encoder.encoded_on == LOCAL else "|ray"
    key = f"{encoder.name}|{encoder.fingerprint}|{dataset.fingerprint()}{where}"
    key = hashlib.sha256(key.encode()).hexdigest()[:20]
    return cache_dir() / f"{key}.npy"


def _cached(encoder: Encoder, dataset: RetrievalDataset) -> np.ndarray | None:
    path = _cache_path(encoder, dataset)
    if path.is_file():
        try:
            vectors = np.load(path)
        except (OSError, ValueError, EOFError):  # a torn or foreign file: encode again
            return None
        if vectors.shape == (len(dataset.corpus), encoder.dim):
            return vectors
    return None


def _save_cached(encoder: Encoder, dataset: RetrievalDataset, vectors: np.ndarray) -> None:
    path = _cache_path(encoder, dataset)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp.npy")
    np.save(tmp, vectors)
    os.replace(tmp, path)


def corpus_texts(dataset: RetrievalDataset) -> list[str]:
    """What is encoded of each document (title + text), in row order (sorted ids)."""
    return [doc_text(dataset.corpus[d]) for d in sorted(dataset.corpus)]


def corpus_vectors(encoder: Encoder, dataset: RetrievalDataset, progress: bool) -> np.ndarray:
    """Raw corpus vectors in row order, cached per (encoder weights and layer, corpus) so that every
    post-processing and factory reuses them."""
    vectors = _cached(encoder, dataset)
    if vectors is None:
        vectors = encoder.encode(corpus_texts(dataset), progress=progress)
        _save_cached(encoder, dataset, vectors)
    return vectors


def cache_corpus_layers(
    encoder: LayeredEncoder, layers: list[Layer], dataset: RetrievalDataset, progress: bool
) -> list[Layer]:
    """Fill the corpus cache of every layer in ``layers`` with one forward pass; the layers it had to encode."""
    absent = [layer for layer in layers if _cached(encoder.at_layer(layer), dataset) is None]
    if absent:
        found = encoder.encode_layers(corpus_texts(dataset), absent, progress=progress)
        for layer, vectors in found.items():
            _save_cached(encoder.at_layer(layer), dataset, vectors)
    return absent


def random_pair_summary(vectors: np.ndarray) -> dict:
    """Spread and histogram of cosines between random distinct documents, as the index scores them."""
    cosines = pair_cosines(vectors)
    return {**spread(cosines), "n_pairs": len(cosines), "histogram": histogram(cosines)}


def set_search_params(index: faiss.Index, params: str) -> None:
    """FAISS search-time settings ("nprobe=32", "efSearch=128"): not part of a factory string, so the
    manifest keeps them and every load applies them."""
    if not params:
        return
    try:
        faiss.ParameterSpace().set_index_parameters(index, params)
    except RuntimeError as exc:
        raise InputError(f"invalid --search-params {params!r}: {str(exc).splitlines()[-1][:160]}") from None


def _skip_polysemous_training(index: faiss.Index, search_params: str) -> None:
    """A factory's PQ (``PQ32``, ``IVF256,PQ32``) defaults to polysemous training, which only renumbers the
    centroids so that Hamming distances between codes approximate theirs; it changes no code's distance and
    so no search result, unless a search uses the Hamming filter (``ht=`` in the search params). It was 93%
    of a PQ32 build on SciFact (26 s of 28 s), so it is skipped where nothing reads it."""
    if "ht" in {setting.split("=")[0].strip() for setting in search_params.split(",")}:
        return
    inner = faiss.downcast_index(index)
    if isinstance(inner, faiss.IndexPreTransform):
        inner = faiss.downcast_index(inner.index)
    if getattr(inner, "do_polysemous_training", False):
        inner.do_polysemous_training = False


def build_faiss(vectors: np.ndarray, factory: str, search_params: str = "") -> faiss.Index:
    try:
        index = faiss.index_factory(vectors.shape[1], factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as exc:
        raise InputError(f"invalid --index-factory {factory!r}: {str(exc).splitlines()[-1][:160]}") from None
    _skip_polysemous_training(index, search_params)
    try:
        if not index.is_trained:
            index.train(vectors)
        index.add(vectors)
    except RuntimeError as exc:  # e.g. fewer training vectors than the factory's centroids
        reason = str(exc).splitlines()[-1].split("Error: ")[-1][:200]
        raise InputError(f"--index-factory {factory!r} on {len(vectors):,} vectors: {reason}") from None
    set_search_params(index, search_params)
    return index


@dataclass(frozen=True)
class CorrectedCorpus:
    """One post-processing of one encoder's corpus vectors: its fit, the unit rows every factory indexes, and
    their measurements. Computed once per spec, so a sweep's factories share it."""

    postprocess: str
    params: dict[str, np.ndarray]
    vectors: np.ndarray
    geometry_raw: dict
    geometry: dict
    random_pair_cosines: dict


def correct_vectors(raw: np.ndarray, postprocess: str) -> CorrectedCorpus:
    """Fit ``postprocess`` on ``raw`` (all the corpus's vectors, or a streamed build's sample) and apply it."""
    postprocess = pp.parse(postprocess)
    params = pp.fit(raw, postprocess)
    corrected = pp.apply(raw, params)
    vectors = unit_rows(corrected)
    return CorrectedCorpus(postprocess, params, vectors, measure(raw), measure(corrected), random_pair_summary(vectors))


def correct_corpus(
    encoder: Encoder, dataset: RetrievalDataset, postprocess: str = "none", progress: bool = True
) -> CorrectedCorpus:
    """Fit ``postprocess`` on the (cached) raw corpus vectors and apply it."""
    pp.parse(postprocess)  # a bad spec is refused before encoding
    return correct_vectors(corpus_vectors(encoder, dataset, progress), postprocess)


@dataclass(frozen=True)
class CorpusIdentity:
    """Which documents an index holds: the manifest's dataset, corpus_fingerprint and n_docs."""

    dataset: str
    fingerprint: str
    n_docs: int


def dense_manifest(
    encoder: Encoder,
    corpus: CorpusIdentity,
    corrected: CorrectedCorpus,
    factory: str,
    search_params: str,
    fit_sample: int | None = None,
) -> store.Manifest:
    return store.Manifest(
        kind="dense",
        model=encoder.name,
        dataset=corpus.dataset,
        corpus_fingerprint=corpus.fingerprint,
        n_docs=corpus.n_docs,
        encoder_fingerprint=encoder.fingerprint,
        metric="inner_product",
        normalized=True,
        postprocess=corrected.postprocess,
        index_factory=factory,
        search_params=search_params,
        dim=encoder.dim,
        layer=encoder.layer,
        postprocess_params={k: list(v.shape) for k, v in corrected.params.items()},
        geometry_raw=corrected.geometry_raw,
        geometry=corrected.geometry,
        random_pair_cosines=corrected.random_pair_cosines,
        backend=encoder.runtime.backend,
        quantize=encoder.runtime.quantize,
        encoded_on=encoder.encoded_on,
        fit_sample=fit_sample,
    )


def build_dense(
    encoder: Encoder,
    dataset: RetrievalDataset,
    out: Path,
    postprocess: str | CorrectedCorpus = "none",
    factory: str = DEFAULT_FACTORY,
    progress: bool = True,
    search_params: str = "",
) -> Path:
    """Build (or replace, atomically) the index folder ``out``; ``postprocess`` is a spec or its correction
    already computed by ``correct_corpus``."""
    corpus = (
        postprocess
        if isinstance(postprocess, CorrectedCorpus)
        else correct_corpus(encoder, dataset, postprocess, progress)
    )
    doc_ids = sorted(dataset.corpus)
    index = build_faiss(corpus.vectors, factory, search_params)
    identity = CorpusIdentity(dataset.name, dataset.fingerprint(), len(doc_ids))
    manifest = dense_manifest(encoder, identity, corpus, factory, search_params)
    with store.atomic_folder(out) as tmp:
        faiss.write_index(index, str(tmp / INDEX_FILE))
        np.savez(tmp / PARAMS_FILE, **corpus.params)
        store.write_docs(tmp, doc_ids, dataset.corpus)
        store.write_manifest(tmp, manifest)
    return out


class DenseIndex:
    """A loaded, validated dense index; ``search`` encodes queries exactly as the corpus was."""

    def __init__(self, folder: Path, encoder: Encoder, manifest: store.Manifest | None = None) -> None:
        self.folder = Path(folder)
        self.manifest = manifest or store.read_manifest(self.folder)
        self._lists: tuple[int, int] | None = None  # a streamed index's lists file: descriptor, size at load
        self._check_encoder(encoder)
        try:
            self.faiss_index = self._read_faiss()
            with np.load(self.folder / PARAMS_FILE) as npz:
                self.params = {k: npz[k] for k in npz.files}
        except (RuntimeError, OSError, ValueError, EOFError) as exc:
            raise DamagedIndex(f"{self.folder}: corrupt index files ({str(exc).splitlines()[0][:160]})") from None
        try:
            set_search_params(self.faiss_index, self.manifest.search_params)
        except InputError as exc:
            raise DamagedIndex(f"{self.folder}: manifest's search_params: {exc}") from None
        self._check_params()
        if self.faiss_index.d != encoder.dim or self.faiss_index.ntotal != self.manifest.n_docs:
            raise DamagedIndex(
                f"{self.folder}: index holds {self.faiss_index.ntotal} x {self.faiss_index.d}, manifest says "
                f"{self.manifest.n_docs} x {encoder.dim}"
            )
        self.docs = store.read_docs(self.folder, self.manifest.n_docs)
        self.encoder = encoder

    def _read_faiss(self) -> faiss.Index:
        """A streamed build's inverted lists stay on disk: opened read-only (the service's volume may be) from
        beside the index file, never from the path the build recorded (another index's, if the folder moved)."""
        path = str(self.folder / INDEX_FILE)
        if self.manifest.fit_sample is None:  # built in memory: one file
            return faiss.read_index(path)
        if not (self.folder / IVF_DATA).is_file():
            raise DamagedIndex(f"{self.folder}: a streamed index without its lists ({IVF_DATA})")
        # FAISS maps the lists file: one truncated under it would make a search touching a page past its new end
        # a SIGBUS, fatal to the process. A descriptor held open sees that file (even renamed or unlinked), so
        # each search first checks its size against the size at load (``_check_lists``).
        lists = self.folder / IVF_DATA
        fd = os.open(lists, os.O_RDONLY)
        self._lists = (fd, os.fstat(fd).st_size)
        self._lists_closer = weakref.finalize(self, os.close, fd)
        with native_stdout_silenced():  # FAISS says where it found the lists, with a C printf
            index = faiss.read_index(path, faiss.IO_FLAG_ONDISK_SAME_DIR | faiss.IO_FLAG_READ_ONLY)
        if os.stat(lists).st_ino != os.fstat(fd).st_ino:  # replaced between the two opens: not the file mapped
            raise DamagedIndex(f"{self.folder}: {IVF_DATA} was replaced while the index was loading")
        return index

    def _check_lists(self) -> None:
        """Refuse to search lists whose file changed size since the load: the mapping would fault."""
        if self._lists is None:
            return
        fd, size = self._lists
        try:
            now = os.fstat(fd).st_size
        except OSError as exc:  # closed (close()), or the file system failed
            raise DamagedIndex(f"{self.folder / IVF_DATA}: unreadable ({exc.strerror})") from None
        if now != size:
            raise DamagedIndex(
                f"{self.folder / IVF_DATA}: {now:,} bytes, {size:,} when loaded (changed under the index)"
            )

    def close(self) -> None:
        """Close the document table and the lists file now; searching after it is a DamagedIndex."""
        self.docs.close()
        if self._lists is not None:
            self._lists_closer()
            self._lists = (-1, self._lists[1])

    def _check_params(self) -> None:
        """The fitted correction on disk must be the one the manifest names, array by array."""
        shapes = {k: list(v.shape) for k, v in self.params.items()}
        wrong_dim = any(shape[0] != self.manifest.dim for shape in shapes.values())
        named = sorted(shapes) == pp.param_names(self.manifest.postprocess)
        if wrong_dim or not named or shapes != (self.manifest.postprocess_params or {}):
            raise DamagedIndex(f"{self.folder}: {PARAMS_FILE} does not hold the {self.manifest.postprocess!r} fit")

    def _check_encoder(self, encoder: Encoder) -> None:
        if self.manifest.kind != "dense":
            raise DamagedIndex(f"{self.folder}: a {self.manifest.kind} index, not a dense one")
        built, asked = self.manifest.runtime, encoder.runtime
        if built != asked:
            raise DamagedIndex(
                f"{self.folder}: corpus encoded by {built.tag}, queries would be by {asked.tag}; the index refuses "
                f"them (use --backend {built.backend} --quantize {built.quantize}, or rebuild)"
            )
        if self.manifest.encoder_fingerprint != encoder.fingerprint:
            why = (
                ""
                if asked.backend == "torch"
                else f" or at another precision ({built.tag} runs bf16 only on CPUs with it)"
            )
            raise DamagedIndex(
                f"{self.folder}: index was built with other weights of {encoder.name!r}{why}; rebuild it"
            )
        if self.manifest.dim != encoder.dim:
            raise DamagedIndex(f"{self.folder}: index dimension {self.manifest.dim} != encoder dimension {encoder.dim}")

    def embed(self, queries: Queries, progress: bool = False) -> np.ndarray:
        """Texts (or the encoder's raw vectors of them) -> the index's space: the corpus-fitted correction,
        then unit norm."""
        raw = queries if isinstance(queries, np.ndarray) else self.encoder.encode(list(queries), progress=progress)
        if raw.ndim != 2 or raw.shape[1] != self.encoder.dim:
            raise InputError(f"query vectors of shape {raw.shape} for a {self.encoder.dim}-dim index")
        return unit_rows(pp.apply(raw, self.params))

    def doc_vectors(self) -> np.ndarray:
        """The indexed (corrected, unit-norm) document vectors, in row order."""
        self._check_lists()
        try:
            return self.faiss_index.reconstruct_n(0, self.faiss_index.ntotal)
        except RuntimeError:
            raise InputError(
                f"{self.folder}: this FAISS index type cannot return its vectors; use a Flat index"
            ) from None

    def search(self, queries: Queries, k: int, progress: bool = False) -> SearchResult:
        """The top ``k`` documents of each query by cosine."""
        k = max(1, min(k, len(self.docs)))
        vectors = self.embed(queries, progress)
        self._check_lists()  # last, just before FAISS reads the lists
        scores, rows = self.faiss_index.search(vectors, k)
        return SearchResult(scores, rows, self.docs)
