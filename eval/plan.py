"""What one eval runs: the typed options of ``run_eval`` and ``evaluate_and_report``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cone.encoders.base import TORCH, Layer, Runtime
from cone.encoders.cluster import RayOptions
from cone.indexing import postprocess as pp
from cone.indexing.codes import IndexType
from cone.indexing.factory import settings_taken
from cone.indexing.spec import EXACT, IndexSpec, model_spec

ALL_LAYERS = "all"  # ``layers``: emb and every block of each dense model


@dataclass(frozen=True)
class EvalPlan:
    """Every (model, runtime, layer, post-processing, factory) row one eval gives, and where it finds and keeps
    what it needs. Lists given are kept as tuples, in order, each item once.

    ``indexes``: the index folder to reuse and fill. ``layers``: which space of each dense model ("last": its own
    output; "emb"; a block number), or ``ALL_LAYERS``. ``factories``: index types (cone.indexing.spec), each besides
    the exact Flat a row compared with it; ``search_params`` apply to every factory but Flat, each setting to the
    types that take it. ``runtimes``: what runs
    each dense model's forward pass (the LMs run on torch only, and say so in their rows); ``runtime_of``: a model's
    one runtime in their place (`cone demo --backend auto` chooses per model). ``checkpoints``: the
    folder of the LMs; ``data_root``: the data dir whose LM text calibrates a first int8 export. ``ray``: encode
    with a Ray cluster's actors (the caller holds the connection: ``cone.encoders.cluster.connected``). ``plain``:
    each model's spec, read once from its name (``cone.indexing.spec.model_spec``: bm25's lexical index, or an
    encoder's exact index)."""

    models: tuple[str, ...]
    indexes: Path
    postprocesses: tuple[str, ...] = ("none",)
    layers: tuple[Layer, ...] | str = ("last",)
    factories: tuple[IndexType, ...] = (EXACT,)
    search_params: str = ""
    runtimes: tuple[Runtime, ...] = (TORCH,)
    runtime_of: Mapping[str, Runtime] = field(default_factory=dict)
    checkpoints: Path | None = None
    data_root: Path | None = None
    ray: RayOptions | None = field(default=None)
    progress: bool = True
    plain: Mapping[str, IndexSpec] = field(init=False, repr=False, compare=False)  # each model's, parsed once

    def __post_init__(self) -> None:
        object.__setattr__(self, "postprocesses", tuple(pp.parse(p) for p in self.postprocesses))  # before any work
        for name in ("models", "postprocesses", "factories", "runtimes"):
            object.__setattr__(self, name, tuple(dict.fromkeys(getattr(self, name))))
        if self.layers != ALL_LAYERS:
            object.__setattr__(self, "layers", tuple(dict.fromkeys(self.layers)))
        object.__setattr__(self, "plain", {model: model_spec(model) for model in self.models})

    def model_runtimes(self, plain: IndexSpec) -> tuple[Runtime, ...]:
        """The runtimes of a model's rows (``plain``: its spec, as ``plain`` holds it): the lexical index encodes
        nothing (its spec's own runtime, torch by convention); a model of ``runtime_of`` its own; any other
        ``runtimes``."""
        if plain.lexical:
            return (plain.runtime,)
        return (self.runtime_of[plain.model],) if plain.model in self.runtime_of else self.runtimes

    def specs(self, exact: IndexSpec, dim: int) -> list[IndexSpec]:
        """The rows of one correction of one model's vectors: ``exact`` (the Flat index, their reference) first,
        then each other type with the search settings its store takes (``--search-params nprobe=64`` reaches
        IVF64,PQ32, not PQ32)."""
        others = [kind for kind in self.factories if kind != EXACT]
        return [exact, *(exact.with_type(kind, settings_taken(kind, self.search_params, dim)) for kind in others)]
