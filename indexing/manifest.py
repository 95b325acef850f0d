"""What an index folder is: its manifest, one typed model per kind of index (a union discriminated on ``kind``).

Reading is validation: a manifest that does not fit its model is one ``DamagedIndex`` line naming the key, so
the service can list that index as unavailable and serve the others."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, TypeAdapter, ValidationError, field_validator

from cone import __version__
from cone.encoders.base import LOCAL, TORCH, Runtime
from cone.errors import DamagedIndex, InputError
from cone.geometry.summary import Geometry, PairCosines
from cone.indexing import postprocess

MANIFEST = "manifest.json"
FORMAT = 1  # of manifest.json; a manifest of another format is refused, not guessed at


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class _Manifest(BaseModel):
    """What every index folder says of itself. Unknown keys are ignored (the fields read are all checked)."""

    model_config = ConfigDict(frozen=True, strict=True, allow_inf_nan=False, extra="ignore")

    model: str
    dataset: str
    corpus_fingerprint: str
    n_docs: PositiveInt
    encoder_fingerprint: str  # an index built by other weights is refused
    metric: str  # "inner_product" (cosines: vectors are unit norm) | "bm25"
    cone_version: str = __version__
    created: str = Field(default_factory=now)
    format: Literal[1] = FORMAT

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @property
    def runtime(self) -> Runtime:
        return TORCH

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


class DenseManifest(_Manifest):
    """Vectors: encoder -> correction -> unit rows -> an index of ``index_factory`` (cone.indexing.factory)."""

    kind: Literal["dense"] = "dense"
    metric: Literal["inner_product"]
    normalized: bool = True
    postprocess: str = "none"
    index_factory: str
    search_params: str = ""
    # The metric the store searches by (dot, l2, cosine, hamming; cone.indexing.codes), part of what the index is.
    # Absent from manifests written before it was recorded, and then not written: their store's legacy metric
    # (cone.indexing.factory.recorded_type).
    index_metric: Literal["dot", "l2", "cosine", "hamming"] | None = Field(default=None, exclude_if=lambda v: v is None)
    # What the index type chose from N and d, and what every search applies (a LanceDB index's num_partitions,
    # num_sub_vectors, nprobes, refine_factor, ...); empty, and then not written, for FAISS, whose factory string
    # and search_params say it (so folders written before it read and write back the same keys).
    index_params: dict[str, int | str | None] = Field(default_factory=dict, exclude_if=lambda v: not v)
    dim: PositiveInt
    layer: str | int = "last"
    postprocess_params: dict[str, list[int]]  # name -> shape of each fitted array
    geometry_raw: Geometry  # the instruments on the encoder's raw corpus vectors
    geometry: Geometry  # ... and on the indexed (corrected) vectors
    random_pair_cosines: PairCosines  # spread and histogram of random document pairs' cosines
    backend: str = "torch"  # what ran the encoder's forward pass (cone.encoders.base.Runtime) ...
    quantize: str = "none"  # ... and at which precision: queries must be encoded the same way
    encoded_on: str = LOCAL  # where the corpus was encoded: this process, or a Ray cluster (cone index --ray)
    fit_sample: PositiveInt | None = None  # streamed builds: the vectors that fitted the correction and FAISS

    @field_validator("postprocess")
    @classmethod
    def _known_postprocess(cls, spec: str) -> str:
        try:
            return postprocess.parse(spec)
        except InputError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("layer")
    @classmethod
    def _known_layer(cls, layer: str | int) -> str | int:
        if layer not in ("last", "emb") and not (isinstance(layer, int) and layer >= 0):
            raise ValueError("not last, emb or a layer number")
        return layer

    @field_validator("quantize")
    @classmethod
    def _known_runtime(cls, quantize: str, info) -> str:
        try:
            Runtime(info.data.get("backend", "torch"), quantize)
        except InputError as exc:
            raise ValueError(str(exc)) from None
        return quantize

    @property
    def runtime(self) -> Runtime:
        return Runtime(self.backend, self.quantize)


class BM25Manifest(_Manifest):
    """Lexical: bm25s over the same documents. The vector fields exist only at their neutral values (today's
    folders carry them) so that a reader of any manifest can ask for them."""

    kind: Literal["bm25"] = "bm25"
    metric: Literal["bm25"]
    normalized: Literal[False] = False
    postprocess: Literal["none"] = "none"
    index_factory: None = None
    search_params: Literal[""] = ""
    dim: None = None
    layer: Literal["last"] = "last"
    postprocess_params: None = None
    geometry_raw: None = None
    geometry: None = None
    random_pair_cosines: None = None
    backend: Literal["torch"] = "torch"
    quantize: Literal["none"] = "none"
    encoded_on: Literal["local"] = LOCAL
    fit_sample: None = None


Manifest = Annotated[DenseManifest | BM25Manifest, Field(discriminator="kind")]
KINDS = ("dense", "bm25")
_READER: TypeAdapter[DenseManifest | BM25Manifest] = TypeAdapter(Manifest)
# The keys without which a manifest is refused: "kind" (the union's tag) and each model's fields with no default.
REQUIRED = {
    model.model_fields["kind"].default: frozenset(
        {"kind"} | {name for name, field in model.model_fields.items() if field.is_required()}
    )
    for model in (DenseManifest, BM25Manifest)
}


def _shown(value: object) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _explain(error: dict[str, Any]) -> str:
    """One pydantic error as the line a person reads: the key's path, what it holds, what it should."""
    path = [str(p) for p in error["loc"]]
    if path and path[0] in KINDS:  # the union's tag leads the path
        path = path[1:]
    key = ".".join(path)
    kind = error["type"]
    if kind == "union_tag_not_found" or (kind == "missing" and key == "kind"):
        return "manifest lacks 'kind'"
    if kind == "union_tag_invalid":
        return f"manifest's 'kind' is {_shown(error['ctx']['tag'])}, not one of {', '.join(KINDS)}"
    if kind == "missing":
        return f"manifest lacks {key!r}"
    if kind == "literal_error" and key == "format":
        return f"manifest format {_shown(error['input'])} is not the {FORMAT} this cone {__version__} reads; rebuild"
    message = error["msg"].removeprefix("Value error, ")
    return f"manifest's {key!r} is {_shown(error['input'])}: {message}"


def manifest_from_dict(data: object, source: Path) -> DenseManifest | BM25Manifest:
    """Validate every key the loaders and the service read; a bad manifest is one DamagedIndex naming the key."""
    if not isinstance(data, dict):
        raise DamagedIndex(f"{source}: manifest is not a JSON object")
    try:
        return _READER.validate_python(data)
    except ValidationError as exc:
        raise DamagedIndex(f"{source}: {_explain(exc.errors()[0])}") from None


def write_manifest(folder: Path, manifest: DenseManifest | BM25Manifest) -> None:
    """Written last and atomically: a folder with a manifest is a complete index."""
    tmp = folder / f"{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest.to_dict(), indent=2))
    os.replace(tmp, folder / MANIFEST)


def read_manifest(folder: Path) -> DenseManifest | BM25Manifest:
    file = Path(folder) / MANIFEST
    if not file.is_file():
        raise DamagedIndex(f"{folder}: not an index (no {MANIFEST})")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DamagedIndex(f"{file}: corrupt manifest ({getattr(exc, 'msg', exc)})") from None
    except OSError as exc:
        raise DamagedIndex(f"{file}: unreadable manifest ({exc.strerror})") from None
    return manifest_from_dict(data, file)
