"""One index, as ``cone index`` builds it: the encoder of the spec loaded (on a Ray cluster where asked), what the
store cannot build refused before any encoding, the corpus encoded, corrected and indexed into the folder the spec
names (in memory, or streamed a shard at a time)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cone.data.loaders import dataset_folder, load_corpus
from cone.encoders.cluster import RayOptions, encoder_for
from cone.indexing.dense import build_dense
from cone.indexing.factory import check_buildable
from cone.indexing.lexical import build_bm25
from cone.indexing.spec import IndexSpec
from cone.indexing.streaming import StreamOptions, build_dense_streaming, check_streamable


@dataclass(frozen=True)
class BuildSource:
    """Where a build finds what it needs: the data dir and dataset, the LMs' checkpoints, a Ray cluster."""

    data_root: Path
    dataset: str
    checkpoints: Path | None = None
    ray: RayOptions | None = None


def build_index(
    spec: IndexSpec, source: BuildSource, indexes: Path, stream: StreamOptions | None, progress: bool
) -> Path:
    """The index of ``spec`` over the dataset's corpus, written (atomically) into its folder under ``indexes``;
    ``stream``: built a shard at a time. The folder."""
    if spec.lexical:
        return build_bm25(load_corpus(source.data_root, source.dataset), indexes / spec.folder_name(), progress)
    encoder = encoder_for(spec.model, source.checkpoints, spec.layer, spec.runtime, source.data_root, source.ray)
    check = check_streamable if stream is not None else check_buildable
    check(spec.index_type, encoder.dim, spec.search_params)  # before any encoding
    out = indexes / spec.folder_name()
    if stream is not None:
        folder = dataset_folder(source.data_root, source.dataset)
        return build_dense_streaming(
            encoder, folder, out, spec.index_type, spec.postprocess, spec.search_params, stream, progress
        )
    dataset = load_corpus(source.data_root, source.dataset)  # an index needs no queries nor qrels
    return build_dense(encoder, dataset, out, spec.postprocess, spec.index_type, progress, spec.search_params)
