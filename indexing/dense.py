"""Dense indexes: encoder -> vectors (cached) -> post-processing -> L2 norm -> FAISS (inner product)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import faiss
import numpy as np

from cone.errors import ConeError
from data.loaders import RetrievalDataset
from encoders.base import Encoder
from geometry import histogram, measure, pair_cosines, spread
from indexing import postprocess as pp
from indexing import store

INDEX_FILE = "index.faiss"
PARAMS_FILE = "postprocess.npz"
CACHE_ENV = "CONE_CACHE_DIR"
DEFAULT_FACTORY = "Flat"


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV, Path.home() / ".cache" / "cone" / "embeddings"))


def doc_text(doc: dict[str, str]) -> str:
    return f"{doc['title']} {doc['text']}".strip()


def corpus_vectors(encoder: Encoder, dataset: RetrievalDataset, doc_ids: list[str], progress: bool) -> np.ndarray:
    """Raw corpus vectors, cached per (encoder weights, corpus) so other post-processings reuse them."""
    key = hashlib.sha256(f"{encoder.name}|{encoder.fingerprint}|{dataset.fingerprint()}".encode()).hexdigest()[:20]
    path = cache_dir() / f"{key}.npy"
    if path.is_file():
        vectors = np.load(path)
        if vectors.shape == (len(doc_ids), encoder.dim):
            return vectors
    vectors = encoder.encode([doc_text(dataset.corpus[d]) for d in doc_ids], progress=progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp.npy")
    np.save(tmp, vectors)
    os.replace(tmp, path)
    return vectors


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
        raise ConeError(f"invalid --search-params {params!r}: {str(exc).splitlines()[-1][:160]}") from None


def build_faiss(vectors: np.ndarray, factory: str) -> faiss.Index:
    try:
        index = faiss.index_factory(vectors.shape[1], factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as exc:
        raise ConeError(f"invalid --index-factory {factory!r}: {str(exc).splitlines()[-1][:160]}") from None
    if not index.is_trained:
        index.train(vectors)
    index.add(vectors)
    return index


def build_dense(
    encoder: Encoder,
    dataset: RetrievalDataset,
    out: Path,
    postprocess: str = "none",
    factory: str = DEFAULT_FACTORY,
    progress: bool = True,
    search_params: str = "",
) -> Path:
    """Build (or replace, atomically) the index folder ``out``."""
    postprocess = pp.parse(postprocess)
    doc_ids = sorted(dataset.corpus)
    raw = corpus_vectors(encoder, dataset, doc_ids, progress)
    params = pp.fit(raw, postprocess)
    corrected = pp.apply(raw, params)
    vectors = pp.l2_normalize(corrected)
    index = build_faiss(vectors, factory)
    set_search_params(index, search_params)
    with store.atomic_folder(out) as tmp:
        faiss.write_index(index, str(tmp / INDEX_FILE))
        np.savez(tmp / PARAMS_FILE, **params)
        store.write_docs(tmp, doc_ids, dataset.corpus)
        store.write_manifest(
            tmp,
            store.base_manifest(
                kind="dense",
                model=encoder.name,
                encoder_fingerprint=encoder.fingerprint,
                dim=encoder.dim,
                metric="inner_product",
                normalized=True,
                postprocess=postprocess,
                postprocess_params={k: list(v.shape) for k, v in params.items()},
                index_factory=factory,
                search_params=search_params,
                dataset=dataset.name,
                corpus_fingerprint=dataset.fingerprint(),
                n_docs=len(doc_ids),
                layer=getattr(encoder, "layer", "last"),
                geometry_raw=measure(raw),
                geometry=measure(corrected),
                random_pair_cosines=random_pair_summary(vectors),
            ),
        )
    return out


class DenseIndex:
    """A loaded, validated dense index; ``search`` encodes queries exactly as the corpus was."""

    kind = "dense"

    def __init__(
        self, folder: Path, encoder: Encoder, model: str | None = None, corpus_fingerprint: str | None = None
    ) -> None:
        folder = Path(folder)
        self.folder = folder
        self.manifest = store.read_manifest(folder)
        store.check_expected(self.manifest, folder, model, corpus_fingerprint)
        if self.manifest["encoder_fingerprint"] != encoder.fingerprint:
            raise ConeError(f"{folder}: index was built with other weights of {encoder.name!r}; rebuild it")
        if self.manifest["dim"] != encoder.dim:
            raise ConeError(f"{folder}: index dimension {self.manifest['dim']} != encoder dimension {encoder.dim}")
        try:
            self.index = faiss.read_index(str(folder / INDEX_FILE))
            with np.load(folder / PARAMS_FILE) as npz:
                self.params = {k: npz[k] for k in npz.files}
        except (RuntimeError, OSError, ValueError) as exc:
            raise ConeError(f"{folder}: corrupt index files ({str(exc).splitlines()[0][:160]})") from None
        set_search_params(self.index, self.manifest.get("search_params", ""))
        if self.index.d != encoder.dim or self.index.ntotal != self.manifest["n_docs"]:
            raise ConeError(
                f"{folder}: index holds {self.index.ntotal} x {self.index.d}, manifest says "
                f"{self.manifest['n_docs']} x {encoder.dim}"
            )
        self.docs = store.read_docs(folder, self.manifest["n_docs"])
        self.encoder = encoder

    def correct(self, raw: np.ndarray) -> np.ndarray:
        """Raw encoder vectors -> the index's space: the corpus-fitted correction, then unit norm."""
        return pp.l2_normalize(pp.apply(raw, self.params))

    def embed_queries(self, queries: list[str], progress: bool = False) -> np.ndarray:
        return self.correct(self.encoder.encode(queries, progress=progress))

    def doc_vectors(self) -> np.ndarray:
        """The indexed (corrected, unit-norm) document vectors, in row order."""
        try:
            return self.index.reconstruct_n(0, self.index.ntotal)
        except RuntimeError:
            raise ConeError(
                f"{self.folder}: this FAISS index type cannot return its vectors; use a Flat index"
            ) from None

    def search(self, queries: list[str], k: int, progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(scores, row indices), each (len(queries), k); scores are cosines."""
        return self.index.search(self.embed_queries(queries, progress), k)
