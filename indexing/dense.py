"""Dense indexes: encoder -> vectors (cached) -> post-processing -> unit norm -> a store's index (FAISS, LanceDB,
USearch: cone.indexing.factory)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np
from tqdm import tqdm

from cone.data.loaders import RetrievalDataset, doc_text
from cone.encoders.base import QUERY, Encoder, Layer, LayeredEncoder
from cone.errors import DamagedIndex, InputError
from cone.geometry import histogram, measure, pair_cosines, spread, unit_rows
from cone.geometry.summary import Geometry, PairCosines
from cone.indexing import postprocess as pp
from cone.indexing import store
from cone.indexing.codes import IndexType
from cone.indexing.factory import Codes, build_codes, read_codes
from cone.indexing.index import Queries, SearchResult
from cone.indexing.manifest import DenseManifest, read_manifest
from cone.indexing.spec import EXACT, IndexSpec

PARAMS_FILE = "postprocess.npz"
CACHE_ENV = "CONE_CACHE_DIR"
COUNTED_BATCH = 64  # documents per encode call when each is counted: the encoders' own batch size
# Queries per encode call. sentence-transformers sorts a call's texts by length before it cuts them into batches,
# so a few requests gathered by the service (or a query set) are padded only to their neighbour's length: random
# batches of 16 SciFact queries cost the least in batches of 8, on torch's threads and on one (recorded by
# benchmarks/query_batch.py: docs/benchmarks/query-batch-*.json, docs/benchmarks.md).
QUERY_BATCH = 8


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV, Path.home() / ".cache" / "cone" / "embeddings"))


def _cache_path(encoder: Encoder, dataset: RetrievalDataset) -> Path:
    # Vectors made on a cluster are cached apart: an index says truly where its vectors were encoded.
    where = "|ray" if encoder.encoded_on.on_cluster else ""
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
        # A NaN or inf (a torn write, another process's file) is no cached result: encoded again, and replaced.
        if vectors.shape == (len(dataset.corpus), encoder.dim) and np.isfinite(vectors).all():
            return vectors
    return None


def _save_cached(encoder: Encoder, dataset: RetrievalDataset, vectors: np.ndarray) -> None:
    path = _cache_path(encoder, dataset)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp.npy")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(tmp, vectors)
        os.replace(tmp, path)
    except OSError as exc:  # a full or read-only disk: no partial file left, one line naming the cache
        with suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise InputError(
            f"{path}: cannot write the embedding cache ({exc.strerror or exc}); free space or set ${CACHE_ENV}"
        ) from None


def corpus_texts(dataset: RetrievalDataset) -> list[str]:
    """What is encoded of each document (title + text), in row order (sorted ids)."""
    return [doc_text(dataset.corpus[d]) for d in sorted(dataset.corpus)]


def corpus_vectors(
    encoder: Encoder, dataset: RetrievalDataset, progress: bool, on_encoded: Callable[[int], None] | None = None
) -> np.ndarray:
    """Raw corpus vectors in row order, cached per (encoder weights and layer, corpus) so that every
    post-processing and factory reuses them. ``on_encoded(n)``: told each batch of documents encoded (it may
    raise to stop the encoding: nothing is cached then)."""
    vectors = _cached(encoder, dataset)
    if vectors is None:
        texts = corpus_texts(dataset)
        if on_encoded is None:
            vectors = encoder.encode(texts, progress=progress)
        else:
            vectors = _encode_counted(encoder, texts, progress, on_encoded)
        _save_cached(encoder, dataset, vectors)
    return vectors


def _encode_counted(
    encoder: Encoder, texts: list[str], progress: bool, on_encoded: Callable[[int], None]
) -> np.ndarray:
    """``encoder.encode`` one batch at a time, shortest texts first (the batches it makes itself, padding
    little), each counted as it comes back."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    vectors = np.empty((len(texts), encoder.dim), dtype=np.float32)
    with tqdm(total=len(texts), desc=f"encode {encoder.name}", unit="doc", disable=not progress) as bar:
        for start in range(0, len(texts), COUNTED_BATCH):
            rows = order[start : start + COUNTED_BATCH]
            vectors[rows] = encoder.encode([texts[i] for i in rows], batch_size=COUNTED_BATCH)
            bar.update(len(rows))
            on_encoded(len(rows))
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


def random_pair_summary(vectors: np.ndarray) -> PairCosines:
    """Spread and histogram of cosines between random distinct documents, as the index scores them."""
    cosines = pair_cosines(vectors)
    return PairCosines(**spread(cosines), n_pairs=len(cosines), histogram=histogram(cosines))


@dataclass(frozen=True)
class CorrectedCorpus:
    """One post-processing of one encoder's corpus vectors: its fit, the unit rows every factory indexes, and
    their measurements. Computed once per spec, so a sweep's factories share it."""

    postprocess: str
    params: dict[str, np.ndarray]
    vectors: np.ndarray
    geometry_raw: Geometry
    geometry: Geometry
    random_pair_cosines: PairCosines


def correct_vectors(raw: np.ndarray, postprocess: str) -> CorrectedCorpus:
    """Fit ``postprocess`` on ``raw`` (all the corpus's vectors, or a streamed build's sample) and apply it."""
    postprocess = pp.parse(postprocess)
    params = pp.fit(raw, postprocess)
    corrected = pp.apply(raw, params)
    vectors = unit_rows(corrected)
    geometry_raw, geometry = measure(raw), measure(corrected)
    return CorrectedCorpus(postprocess, params, vectors, geometry_raw, geometry, random_pair_summary(vectors))


def correct_corpus(
    encoder: Encoder,
    dataset: RetrievalDataset,
    postprocess: str = "none",
    progress: bool = True,
    on_encoded: Callable[[int], None] | None = None,
) -> CorrectedCorpus:
    """Fit ``postprocess`` on the (cached) raw corpus vectors and apply it (``on_encoded``: ``corpus_vectors``)."""
    pp.parse(postprocess)  # a bad spec is refused before encoding
    return correct_vectors(corpus_vectors(encoder, dataset, progress, on_encoded), postprocess)


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
    kind: IndexType,
    search_params: str,
    fit_sample: int | None = None,
    index_params: dict[str, int | str | None] | None = None,
) -> DenseManifest:
    """The manifest of ``encoder``'s corpus under ``kind``: its spec's keys, and what the build measured."""
    spec = IndexSpec(encoder.name, kind, corrected.postprocess, encoder.layer, encoder.runtime, search_params)
    return DenseManifest(
        **spec.manifest_fields(),
        dataset=corpus.dataset,
        corpus_fingerprint=corpus.fingerprint,
        n_docs=corpus.n_docs,
        encoder_fingerprint=encoder.fingerprint,
        metric="inner_product",
        index_params=index_params or {},
        dim=encoder.dim,
        postprocess_params={k: list(v.shape) for k, v in corrected.params.items()},
        geometry_raw=corrected.geometry_raw,
        geometry=corrected.geometry,
        random_pair_cosines=corrected.random_pair_cosines,
        encoded_on=encoder.encoded_on.tag,
        fit_sample=fit_sample,
    )


def build_dense(
    encoder: Encoder,
    dataset: RetrievalDataset,
    out: Path,
    postprocess: str | CorrectedCorpus = "none",
    kind: IndexType = EXACT,
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
    codes = build_codes(corpus.vectors, kind, search_params, doc_ids)
    identity = CorpusIdentity(dataset.name, dataset.fingerprint(), len(doc_ids))
    with store.writing_index(out) as folder:
        codes.write(folder.path)
        np.savez(folder.path / PARAMS_FILE, **corpus.params)
        folder.add_docs(doc_ids, dataset.corpus)
        folder.manifest = dense_manifest(encoder, identity, corpus, kind, search_params, index_params=codes.params)
    return out


class DenseIndex:
    """A loaded, validated dense index; ``search`` encodes queries exactly as the corpus was."""

    def __init__(self, folder: Path, encoder: Encoder, manifest: DenseManifest | None = None) -> None:
        self.folder = Path(folder)
        self.manifest = manifest or read_manifest(self.folder)
        self._check_encoder(encoder)
        m = self.manifest
        on_disk = m.fit_sample is not None
        try:
            self.spec = IndexSpec.of_manifest(m)
        except InputError as exc:
            raise DamagedIndex(f"{self.folder}: manifest's index type: {exc}") from None
        self.index_type = self.spec.index_type
        self.codes: Codes = read_codes(self.folder, self.index_type, m.dim, m.search_params, on_disk, m.index_params)
        try:
            with np.load(self.folder / PARAMS_FILE) as npz:
                self.params = {k: npz[k] for k in npz.files}
        except (OSError, ValueError, EOFError) as exc:
            raise DamagedIndex(f"{self.folder}: corrupt index files ({str(exc).splitlines()[0][:160]})") from None
        self._check_params()
        if self.codes.ntotal != m.n_docs:
            raise DamagedIndex(f"{self.folder}: index holds {self.codes.ntotal} vectors, manifest says {m.n_docs}")
        self.docs = store.read_docs(self.folder, m.n_docs)
        self.encoder = encoder

    @property
    def faiss_index(self) -> faiss.Index | faiss.IndexBinary:
        """The FAISS object (float or binary) behind the codes."""
        return self.codes.index

    def close(self) -> None:
        """Close the document table and the lists file now; searching after it is a DamagedIndex."""
        self.docs.close()
        self.codes.close()

    def _check_params(self) -> None:
        """The fitted correction on disk must be the one the manifest names, array by array."""
        shapes = {k: list(v.shape) for k, v in self.params.items()}
        wrong_dim = any(shape[0] != self.manifest.dim for shape in shapes.values())
        named = sorted(shapes) == pp.param_names(self.manifest.postprocess)
        if wrong_dim or not named or shapes != (self.manifest.postprocess_params or {}):
            raise DamagedIndex(f"{self.folder}: {PARAMS_FILE} does not hold the {self.manifest.postprocess!r} fit")

    def _check_encoder(self, encoder: Encoder) -> None:
        if not isinstance(self.manifest, DenseManifest):
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
        raw = (
            queries
            if isinstance(queries, np.ndarray)
            else self.encoder.encode(list(queries), batch_size=QUERY_BATCH, progress=progress, role=QUERY)
        )
        if raw.ndim != 2 or raw.shape[1] != self.encoder.dim:
            raise InputError(f"query vectors of shape {raw.shape} for a {self.encoder.dim}-dim index")
        return unit_rows(pp.apply(raw, self.params))

    def doc_vectors(self) -> np.ndarray:
        """The indexed (corrected, unit-norm) document vectors, in row order."""
        try:
            return self.codes.vectors()
        except InputError as exc:
            raise InputError(f"{self.folder}: {exc}") from None

    def bytes_per_vector(self) -> float:
        return self.codes.bytes_per_vector()

    def search(self, queries: Queries, k: int, progress: bool = False) -> SearchResult:
        """The top ``k`` documents of each query by cosine."""
        k = max(1, min(k, len(self.docs)))
        scores, rows = self.codes.search(self.embed(queries, progress), k)
        return SearchResult(scores, rows, self.docs)
