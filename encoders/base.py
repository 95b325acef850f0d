"""The one interface every model sits behind: name, dimension, encode(texts) -> (N, d) float32."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from cone.errors import InputError, ModelUnavailable

# Which space of a model: "last" (the model's own output), the number of a hidden state (1 = after the first
# block, ...; 0 = what enters the first block), or "emb": the input embeddings, named apart per family because the
# published figures are pooled so: for a Transformer its embedding module's output (= hidden state 0); for the cone
# LMs the rows of the token table alone, no positions (the table reg_cos acts on; their 0 adds the positions).
Layer = str | int

BACKENDS = ("torch", "onnx", "openvino")
QUANTIZATIONS = ("none", "bf16", "int8")
# What each backend does here. torch: the reference, fp32 only. onnx: dynamic int8 (no calibration), through
# sentence-transformers' export helper. openvino: bf16 inference (CPUs with native bf16) and static int8
# calibrated on sentences (sentence-transformers' helper over optimum-intel / NNCF).
SUPPORTED = {"torch": ("none",), "onnx": ("none", "int8"), "openvino": ("none", "bf16", "int8")}


@dataclass(frozen=True)
class Runtime:
    """How an encoder's forward pass runs. Part of its fingerprint and of an index's manifest, so that queries
    are encoded exactly as the corpus was."""

    backend: str = "torch"
    quantize: str = "none"

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise InputError(f"unknown backend {self.backend!r}; choose from {', '.join(BACKENDS)}")
        if self.quantize not in QUANTIZATIONS:
            raise InputError(f"unknown quantization {self.quantize!r}; choose from {', '.join(QUANTIZATIONS)}")
        if self.quantize not in SUPPORTED[self.backend]:
            offered = ", ".join(SUPPORTED[self.backend])
            raise InputError(f"--quantize {self.quantize} is not available with --backend {self.backend} ({offered})")

    @property
    def tag(self) -> str:
        """torch, openvino, openvino-int8, ...: in index names, labels and messages."""
        return self.backend if self.quantize == "none" else f"{self.backend}-{self.quantize}"


TORCH = Runtime()

# What a text is to the model: a query (a search, or either side of a similarity pair), or a document of the corpus.
# Models trained with a prefix per role (E5's "query: "/"passage: ") are given it; the others encode both alike.
QUERY, DOCUMENT = "query", "document"
ROLES = (QUERY, DOCUMENT)
LOCAL = "local"


@dataclass(frozen=True)
class Placement:
    """Where an encoder's forward passes run: this process (``cluster`` None), or a Ray cluster, described as an
    index's manifest records it (``cone.encoders.cluster``)."""

    cluster: str | None = None

    @property
    def on_cluster(self) -> bool:
        return self.cluster is not None

    @property
    def tag(self) -> str:
        """What a manifest's ``encoded_on`` says: LOCAL or the cluster's description."""
        return self.cluster or LOCAL


IN_PROCESS = Placement()


class Encoder(Protocol):
    name: str
    dim: int
    layer: Layer
    fingerprint: str  # hash of the weights (and the layer): an index built by other weights is refused
    runtime: Runtime  # what runs the forward pass (the LMs: always torch)
    encoded_on: Placement  # this process, or a Ray cluster (cone.encoders.cluster)

    def encode(
        self, texts: list[str], batch_size: int = 64, progress: bool = False, role: str = DOCUMENT
    ) -> np.ndarray: ...


class LayeredEncoder(Encoder, Protocol):
    """An encoder that can pool any of its layers, several in one forward pass."""

    def all_layers(self) -> list[Layer]:
        """What ``--layers all`` means for this model: emb, then every block."""
        ...

    def at_layer(self, layer: Layer) -> LayeredEncoder:
        """The same weights pooled from ``layer`` (validated; InputError if the model has no such layer)."""
        ...

    def encode_layers(
        self, texts: list[str], layers: list[Layer], batch_size: int = 64, progress: bool = False, role: str = DOCUMENT
    ) -> dict[Layer, np.ndarray]: ...


@functools.cache
def _torch_default_threads() -> int:
    """torch's intra-op thread count as the process had it before ``torch_threads`` first changed it."""
    import torch

    return torch.get_num_threads()


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """torch's intra-op threads for the calls this thread makes inside (None: as they are). torch keeps the count per
    thread, and setting it also sets what threads started later begin with; so the way out sets the process's own
    count again (not this thread's count before: two blocks that overlap would leave the lower one for good)."""
    if threads is None:
        yield
        return
    import torch

    default = _torch_default_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(default)


def check_layer(name: str, layer: Layer, n_blocks: int) -> Layer:
    """``layer`` if ``name`` (a model of ``n_blocks`` blocks) has it; else a one-line InputError."""
    if layer in ("last", "emb") or (isinstance(layer, int) and 0 <= layer <= n_blocks):
        return layer
    raise InputError(f"layer {layer!r} of {name}: choose last, emb or 0..{n_blocks}")


def layer_fingerprint(weights: str, layer: Layer) -> str:
    return weights if layer == "last" else f"{weights}-layer{layer}"


def layer_order(layer: Layer) -> float:
    """Depth, for sorting and plotting: emb first, then the blocks, the model's own output last."""
    return -1.0 if layer == "emb" else float("inf") if layer == "last" else float(layer)


def files_fingerprint(paths: list[Path]) -> str:
    """sha256 over the named files' bytes (the weights), in a fixed order."""
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(path.name.encode())
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:16]


# (runtime, checkpoints folder, data root whose LM text calibrates a first int8 export) -> the encoder at "last"
Loader = Callable[[Runtime, Path | None, Path | None], LayeredEncoder]


def _nothing_changes(checkpoints: Path | None) -> None:
    return None


@dataclass(frozen=True)
class EncoderEntry:
    """What cone knows of one named encoder: its line in ``cone.encoders.registry.ENCODERS``."""

    load: Loader
    missing: Callable[[Path | None], ModelUnavailable | None]  # from the files alone, nothing loaded; None if there
    work: float  # blocks x width of its forward pass: the demo builds the fastest first
    torch_only: bool = False  # the project's LMs: no exported graph
    weights: Callable[[Path | None], Path | None] = _nothing_changes  # a weights folder that can change (checkpoints)


def why_unavailable(find: Callable[[], object]) -> ModelUnavailable | None:
    """The ModelUnavailable ``find`` (a look at installed files that raises it) would raise; None if it finds them:
    an entry's ``missing`` for a model whose files one function locates."""
    try:
        find()
    except ModelUnavailable as absent:
        return absent
    return None


MODELS_DIR_ENV = "CONE_MODELS_DIR"


def models_dir() -> Path:
    """cone's cache of model folders it writes from weights installed in another form ($CONE_MODELS_DIR)."""
    return Path(os.environ.get(MODELS_DIR_ENV, Path.home() / ".cache" / "cone" / "models"))


def cached_folder(name: str, write: Callable[[Path], None]) -> Path:
    """``models_dir() / name``, written by ``write(folder)`` on first use: beside its name, then renamed into place,
    so a reader never sees half of one (where two processes race, the first folder stands)."""
    folder = models_dir() / name
    if (folder / "modules.json").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.parent / f".{name}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        write(tmp)
        with contextlib.suppress(OSError):
            os.rename(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder
