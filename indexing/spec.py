"""What an index is, parsed once: its type (``IndexType``: store, the store's type string, metric) from text, and
the ``IndexSpec`` (kind, model, runtime, layer, post-processing, type, search settings) that plan, build, manifest,
folder name, report row and service carry whole.

Text becomes a type here and nowhere else: the command line (``cone.cli.options``) and the eval's plan call these
parsers; the layers below take the parsed values. A type is ``TYPE`` or ``TYPE@METRIC``; ``TYPE`` names its store
by prefix (a FAISS factory string, ``lance:TYPE``, ``usearch:CODEC``: cone.indexing.factory's registry). A model's
name becomes a spec here too (``model_spec``): an encoder's exact index, or for ``bm25`` the lexical index, which
is a kind of index, not a model.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace

from cone.encoders.base import TORCH, Layer, Runtime
from cone.encoders.registry import ENCODER_NAMES, check_model_name
from cone.errors import InputError
from cone.indexing import postprocess as pp
from cone.indexing.codes import IndexType, split_metric
from cone.indexing.factory import DEFAULT_FACTORY, DEFAULT_STORE, STORES, store_named
from cone.indexing.manifest import KINDS, BM25Manifest, DenseManifest

# An index's kind, as its manifest's tag names it: vectors in a store, or BM25 over the documents' words. The lexical
# index has one spec (``IndexSpec.bm25``) and goes by its kind's name: its model, folder and row label are bm25.
DENSE, LEXICAL = KINDS
MODEL_NAMES = (*ENCODER_NAMES, LEXICAL)  # what --model and --models name (besides st:PATH): every encoder, and BM25


def _store_of(factory: str) -> str:
    """The store whose prefix ``factory`` starts with (any case); FAISS's factory strings have none."""
    for store in STORES.values():
        if store.prefix and factory.lower().startswith(store.prefix):
            return store.name
    return DEFAULT_STORE


def parse_index_type(text: str, metric: str | None = None) -> IndexType:
    """``TYPE`` or ``TYPE@METRIC``, checked by its store (``metric``: the one to use where the text names none)."""
    factory, named = split_metric(text)
    if not factory:
        raise InputError(f"invalid --index-factory {text!r}: empty")
    return STORES[_store_of(factory)].parse(factory, named or metric)


EXACT = parse_index_type(DEFAULT_FACTORY)  # FAISS's exhaustive inner product: the reference of every other type


def metric_choices(text: str, metrics: list[str]) -> list[IndexType]:
    """``text`` under each of ``metrics`` its store takes (``--metric dot,l2,cosine`` sweeps them like types): a
    type that names its metric, Flat (the exact reference) and a 1-bit code (Hamming) stay as they are; a store
    that takes none of ``metrics`` keeps its default."""
    kind = parse_index_type(text)
    if split_metric(text)[1] is not None or not metrics or kind == EXACT or kind.binary:
        return [kind]
    taken = [m for m in metrics if m in STORES[kind.store].metrics]
    return [parse_index_type(text, m) for m in taken] or [kind]


# A factory's leading stages that take the next comma item as their own: "IVF256,Flat" is one index type.
_FACTORY_PREFIX = re.compile(r"^(IVF\d+(_HNSW\d+)?|IMI\d+x\d+|OPQ\d+(_\d+)?|PCAR?\d+|RR\d+|L2norm)$")


def parse_factory_list(text: str) -> list[str]:
    """Comma- (or ;-) separated index types, each checked: Flat,SQ8,IVF256,Flat,BIN -> [..., 'IVF256,Flat', 'BIN'];
    Flat first if absent (the exact reference every other type is measured against). A type keeps a metric only
    where it names one (``metric_choices`` gives the others theirs)."""
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
    factories = [_as_written(factory) for factory in factories]
    if DEFAULT_FACTORY not in factories:
        factories.insert(0, DEFAULT_FACTORY)
    return factories


def _as_written(text: str) -> str:
    """``text`` as cone spells its type (lance:ivf_pq -> lance:IVF_PQ), with its metric where it names one."""
    kind = parse_index_type(text)
    return kind.spec if split_metric(text)[1] is not None else kind.factory


def for_store(factory: str, store: str | None, metric: str | None = None) -> IndexType:
    """``--index-factory`` under ``--store`` and ``--metric``: another store makes the default Flat its own exact
    type (``lance:FLAT``, ``usearch:exact:f32``); a type of another store is refused (None: the store the type
    names)."""
    kind = parse_index_type(factory)
    if store is None or kind.store == store:
        return parse_index_type(factory, metric)
    chosen = store_named(store)
    if kind.factory == DEFAULT_FACTORY and split_metric(factory)[1] is None:
        return parse_index_type(chosen.exact, metric)
    types = ", ".join(chosen.types()) or "a FAISS factory string"
    raise InputError(f"--index-factory {factory!r} is a {kind.store} type, not one of --store {store} ({types})")


def store_types(store: str) -> tuple[str, ...]:
    """The index types ``cone eval --store`` adds for a store: every type of LanceDB and USearch; FAISS's are
    --index-factory's."""
    return store_named(store).types()


def recorded_type(index_factory: str, index_metric: str | None) -> IndexType:
    """The index type a manifest records. A manifest written before the metric was recorded names none: its
    store's legacy metric then (LanceDB's ``dot``, as its index_params also say; FAISS's default, the inner
    product)."""
    factory, _ = split_metric(index_factory)
    store = STORES[_store_of(factory)]
    return store.parse(factory, index_metric or store.legacy_metric)


def model_spec(name: str) -> IndexSpec:
    """The plain spec a model's name stands for (``--model``, ``--models``): the lexical index for ``bm25``, else the
    exact index of that encoder (InputError for a name that is neither, nor st:PATH)."""
    check_model_name(name, MODEL_NAMES)
    return IndexSpec.bm25() if name == LEXICAL else IndexSpec(name)


def model_folder_part(model: str) -> str:
    """A model's part of an index name: the built-in names as they are; st:PATH flattened and followed by a short
    hash of PATH, so that st:/m/a_b, st:/m_a/b and st:/m/a/b name three folders."""
    flat = model.replace(":", "_").replace("/", "_")
    if not model.startswith("st:"):
        return flat
    return f"{flat}-{hashlib.sha256(model[3:].encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


@dataclass(frozen=True)
class IndexSpec:
    """What an index is: its kind (``DENSE``: a model's vectors in a store; ``LEXICAL``: BM25, ``IndexSpec.bm25``),
    the model and what ran it (runtime, layer), the correction fitted on its corpus, the store's index type with its
    metric, and the search settings every search applies. Parsed once where text comes in; it names the index's
    folder, its manifest's identity and its report row."""

    model: str
    index_type: IndexType = field(default=EXACT)
    postprocess: str = "none"
    layer: Layer = "last"
    runtime: Runtime = TORCH
    search_params: str = ""
    kind: str = DENSE

    def __post_init__(self) -> None:
        object.__setattr__(self, "postprocess", pp.parse(self.postprocess))

    @property
    def factory(self) -> str:
        """The index type with its metric as cone writes it (``PQ32``, ``lance:IVF_PQ@l2``)."""
        return self.index_type.spec

    @classmethod
    def bm25(cls) -> IndexSpec:
        """The lexical index: BM25 over the documents' words, no encoder, no vectors, no correction. Its other
        fields keep their neutral values (a report row of it says torch, last, none and Flat, as it always has)."""
        return cls(LEXICAL, kind=LEXICAL)

    @property
    def lexical(self) -> bool:
        return self.kind == LEXICAL

    @property
    def exact(self) -> bool:
        return self.index_type == EXACT

    def with_type(self, index_type: IndexType, search_params: str = "") -> IndexSpec:
        """The same vectors under another index type (the exact type takes no search settings)."""
        return replace(self, index_type=index_type, search_params="" if index_type == EXACT else search_params)

    def folder_name(self) -> str:
        """model[-runtime][-layerL][-postprocess][-type[_metric]], safe for a filesystem: everything that built the
        index, so another type never replaces an index silently."""
        parts = [model_folder_part(self.model)]
        if self.runtime != TORCH:
            parts.append(self.runtime.tag)
        if self.layer != "last":
            parts.append(f"layer{self.layer}")
        if self.postprocess != "none":
            parts.append(pp.folder_part(self.postprocess))  # abtt:3 -> abtt3, cone:0.99 -> cone0.99, ...
        if not self.exact:
            parts.append(re.sub(r"[^A-Za-z0-9_.]+", "_", self.factory))
        return "-".join(parts)

    @property
    def label(self) -> str:
        """model[@runtime][layer]+postprocess [type], as the report's tables and figures name a row."""
        name = self.model if self.runtime == TORCH else f"{self.model}@{self.runtime.tag}"
        name = name if self.layer == "last" else f"{name}[{self.layer}]"
        name = name if self.postprocess == "none" else f"{name}+{self.postprocess}"
        name = name if self.exact else f"{name} [{self.factory}]"
        return f"{name} (synthetic)" if pp.is_synthetic(self.postprocess) else name

    @classmethod
    def of_manifest(cls, manifest: DenseManifest | BM25Manifest) -> IndexSpec:
        """The spec a manifest records (InputError where its type is none cone knows)."""
        if manifest.kind == LEXICAL:
            return cls.bm25()
        return cls(
            manifest.model,
            recorded_type(manifest.index_factory, manifest.index_metric),
            manifest.postprocess,
            manifest.layer,
            manifest.runtime,
            manifest.search_params,
        )

    def mismatch(self, manifest: DenseManifest | BM25Manifest) -> str | None:
        """Why an index folder's manifest is not this spec's index (built otherwise under the same name), or None."""
        try:
            built = IndexSpec.of_manifest(manifest)
        except InputError as exc:
            return f"manifest's index type: {exc}"
        return None if built == self else f"built as {built.label} ({built.search_params or 'no settings'})"

    def manifest_fields(self) -> dict[str, object]:
        """The manifest's keys that say what the index is (the build adds what it measured)."""
        return {
            "model": self.model,
            "postprocess": self.postprocess,
            "index_factory": self.index_type.factory,
            "index_metric": self.index_type.metric,
            "search_params": self.search_params,
            "layer": self.layer,
            "backend": self.runtime.backend,
            "quantize": self.runtime.quantize,
        }
