"""Encoding on a Ray cluster: the corpus becomes a Ray Dataset, ``map_batches`` runs it through a pool of
actors that each load the encoder once, and the vectors come back to this process in corpus order.

Only ``--ray`` imports this module, and only its functions import Ray: without the option nothing about
Ray is loaded. Every node must have cone installed and the encoder's files at the same paths (the shipped
checkpoints and the pip-installed MiniLM are; an ``st:PATH`` or ``--checkpoints`` folder must be copied).
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from cone.data.loaders import doc_text
from cone.encoders.base import TORCH, Layer, LayeredEncoder, Runtime
from cone.encoders.registry import load_encoder
from cone.errors import ClusterError, ConeError, InputError

CONNECT_SECONDS = 5
BLOCK_BYTES = 1 << 20  # of corpus text read by Ray: 1 MiB (≈ 600 SciFact documents), a few batches each


@dataclass(frozen=True)
class EncoderRecipe:
    """How an actor loads the same encoder as this process: by name, never by shipping the weights."""

    spec: str
    checkpoints: Path | None = None
    runtime: Runtime = TORCH
    data_root: Path | None = None

    def load(self) -> LayeredEncoder:
        return load_encoder(self.spec, self.checkpoints, "last", self.runtime, self.data_root)


@dataclass(frozen=True)
class RayOptions:
    """``--ray [ADDRESS]``: a running cluster's address, or None to start a local one for the command."""

    address: str | None = None
    actors: int = 2  # encoders loaded at once, one CPU each
    batch_size: int = 256  # texts per map_batches call

    def __post_init__(self) -> None:
        if self.actors < 1 or self.batch_size < 1:
            raise InputError(f"--ray-actors and --ray-batch-size must be at least 1 ({self.actors}, {self.batch_size})")

    @property
    def description(self) -> str:
        """What the manifest records of how its vectors were made."""
        where = self.address or "local cluster"
        return f"ray ({where}, {self.actors} actors, batch {self.batch_size})"


class _EncodeBatch:
    """One per actor: the encoder is loaded in the constructor, so once per actor and not per batch."""

    def __init__(self, recipe: EncoderRecipe, layers: list[Layer]) -> None:
        self.encoder = recipe.load()
        self.layers = layers

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        texts = [str(t) for t in batch["text"]] if "text" in batch else [_line_text(line) for line in batch["line"]]
        found = self.encoder.encode_layers(texts, self.layers)
        return {**batch, **{f"layer{i}": found[layer] for i, layer in enumerate(self.layers)}}


def _actor_class(recipe: EncoderRecipe, layers: list[Layer]) -> type:
    """The actor class with its recipe inside: constructor arguments would sit in the object store, and Ray
    warns on every restartable actor whose arguments do."""

    class EncodeBatch(_EncodeBatch):
        def __init__(self) -> None:
            super().__init__(recipe, layers)

    return EncodeBatch


def _line_text(line: str) -> str:
    """The text of one corpus.jsonl line; the driver validates the same line again when it writes the table."""
    try:
        record = json.loads(line)
        return doc_text({"title": record.get("title") or "", "text": record["text"]})
    except (ValueError, KeyError, TypeError, AttributeError):
        raise InputError(f"corpus line {line[:60]!r}: expected a JSON object with a text") from None


@contextmanager
def connected(options: RayOptions) -> Iterator[None]:
    """Ray, connected to ``options.address`` or to a local cluster started here (and stopped after); a
    connection made already (by a caller, a test) is used as it is."""
    try:
        import ray
    except ImportError:
        raise InputError("--ray needs Ray: pip install 'cone[ray]'") from None
    _quiet(ray)
    if ray.is_initialized():
        yield
        return
    if options.address:
        _check_reachable(options.address)
    try:
        ray.init(address=options.address, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = options.address or "a local cluster"
        raise ClusterError(f"cannot start or reach {where}: {str(exc).splitlines()[0][:200]}") from None
    try:
        yield
    finally:
        ray.shutdown()


def _check_reachable(address: str) -> None:
    """Ray retries an unreachable head for minutes; a head that does not even accept a connection is said at once."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # "auto" and other forms Ray resolves itself
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_SECONDS).close()
    except OSError as exc:
        raise ClusterError(f"cannot reach the Ray cluster at {address}: {exc.strerror or exc}") from None


def _quiet(ray: object) -> None:
    """Ray Data's own progress bars and execution logs off: the command shows one bar of its own; and blocks
    small enough that a single corpus file is spread over every actor."""
    logging.getLogger("ray.data").setLevel(logging.ERROR)  # first: turning the bars off is itself a warning
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.print_on_execution_start = False
    context.target_max_block_size = BLOCK_BYTES


def _encoded(dataset: object, recipe: EncoderRecipe, layers: list[Layer], options: RayOptions) -> object:
    """The encoding stage. A dead actor is restarted and its batch retried (Ray Data's defaults for an actor
    pool); an error an actor raises itself (a model its node lacks) fails the build."""
    import ray

    return dataset.map_batches(
        _actor_class(recipe, layers),
        batch_size=options.batch_size,
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=options.actors),
        num_cpus=1,
    )


def _batches(dataset: object) -> Iterator[dict[str, np.ndarray]]:
    """The pipeline's output in input order; a failure past Ray's retries is one ClusterError (or the
    ConeError an actor raised, such as a model its node does not have)."""
    import ray

    dataset.context.execution_options.preserve_order = True
    try:
        yield from dataset.iter_batches(batch_size=None, batch_format="numpy")
    except ray.exceptions.RayError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, ConeError):
            raise cause from None
        raise ClusterError(f"encoding failed on the cluster: {str(exc).strip().splitlines()[-1][:240]}") from None


def encode_texts(
    recipe: EncoderRecipe,
    texts: list[str],
    layers: list[Layer],
    options: RayOptions,
    progress: bool = False,
) -> dict[Layer, np.ndarray]:
    """``encoder.encode_layers(texts, layers)``, run on the cluster; every row checked present exactly once."""
    import pyarrow as pa
    import ray

    out = {layer: None for layer in layers}
    seen = np.zeros(len(texts), dtype=bool)
    with connected(options):
        # Sorted by length, as the local encoders sort, so a batch pads little; rows say where each goes back.
        order = np.argsort([len(t) for t in texts], kind="stable")
        ordered = pa.array([texts[i] for i in order], pa.string())
        table = pa.table({"row": order, "text": ordered})
        blocks = [table.slice(start, options.batch_size) for start in range(0, len(texts), options.batch_size)]
        dataset = _encoded(ray.data.from_arrow(blocks), recipe, layers, options)
        with tqdm(total=len(texts), desc=f"encode {recipe.spec} on ray", unit="doc", disable=not progress) as bar:
            for batch in _batches(dataset):
                rows = batch["row"]
                for i, layer in enumerate(layers):
                    if out[layer] is None:
                        out[layer] = np.empty((len(texts), batch[f"layer{i}"].shape[1]), dtype=np.float32)
                    out[layer][rows] = batch[f"layer{i}"]
                seen[rows] = True
                bar.update(len(rows))
    _check_complete(int(seen.sum()), len(texts))
    return out


def encode_corpus_lines(
    recipe: EncoderRecipe, corpus_file: Path, layer: Layer, options: RayOptions, on_batch: Callable[[int], None]
) -> Iterator[tuple[list[str], np.ndarray]]:
    """The non-blank lines of a corpus.jsonl, read by Ray, and their vectors, in file order, batch by batch.
    ``on_batch(n)`` is told each batch's size (progress)."""
    import ray

    with connected(options):
        # Reading takes no CPU of its own: the actors hold every CPU of a small cluster, and a read task waiting
        # for one would wait forever.
        lines = ray.data.read_text(str(corpus_file), drop_empty_lines=True, num_cpus=0)
        dataset = lines.rename_columns({"text": "line"})
        for batch in _batches(_encoded(dataset, recipe, [layer], options)):
            lines = [str(line) for line in batch["line"]]
            on_batch(len(lines))
            yield lines, batch["layer0"]


def _check_complete(got: int, expected: int) -> None:
    if got != expected:
        raise ClusterError(f"the cluster returned {got:,} of {expected:,} vectors; no index was written")


class RayEncoder:
    """A local encoder's identity (name, weights, layer, runtime: what the index and its queries are checked
    against) with its encoding run on the cluster. Use it inside ``connected`` so calls share one connection."""

    def __init__(self, local: LayeredEncoder, recipe: EncoderRecipe, options: RayOptions) -> None:
        self.local, self.recipe, self.options = local, recipe, options
        self.name, self.dim, self.layer = local.name, local.dim, local.layer
        self.fingerprint, self.runtime = local.fingerprint, local.runtime
        self.encoded_on = options.description

    def all_layers(self) -> list[Layer]:
        return self.local.all_layers()

    def at_layer(self, layer: Layer) -> RayEncoder:
        return RayEncoder(self.local.at_layer(layer), self.recipe, self.options)

    def encode_layers(
        self, texts: list[str], layers: list[Layer], batch_size: int = 64, progress: bool = False
    ) -> dict[Layer, np.ndarray]:
        return encode_texts(self.recipe, texts, layers, self.options, progress)

    def encode(self, texts: list[str], batch_size: int = 64, progress: bool = False) -> np.ndarray:
        return self.encode_layers(texts, [self.layer], batch_size, progress)[self.layer]
