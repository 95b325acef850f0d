"""Encoding on a Ray cluster: the corpus becomes a Ray Dataset, ``map_batches`` runs it through a pool of
actors that each load the encoder once, and the vectors come back to this process in corpus order.

cli/index.py, cli/options.py, eval/harness.py and eval/plan.py import this module at their top (for its
options, recipe and encoder types, and ``connected``), so every command loads it; Ray itself is imported only
inside the functions that use it, so without ``--ray`` nothing about Ray is loaded. The corpus file is cut and
read by ``cone.data.ranges``. Every node must have cone installed and the encoder's files at the same
paths (the shipped checkpoints and the pip-installed MiniLM are; an ``st:PATH`` or ``--checkpoints`` folder must be
copied).
"""

from __future__ import annotations

import gc
import logging
import os
import re
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from cone.data.loaders import corpus_line, doc_text
from cone.data.ranges import plan_ranges, range_lines
from cone.encoders.base import DOCUMENT, TORCH, Layer, LayeredEncoder, Placement, Runtime
from cone.encoders.registry import load_encoder
from cone.errors import ClusterError, ConeError, InputError

CONNECT_SECONDS = 5
ACTORS_START_S = 600  # for the pool's actors to be placed and load their encoders (a model per actor)
BLOCK_BYTES = 1 << 20  # of corpus text read by Ray at most: 1 MiB (≈ 600 SciFact documents), a few batches each


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
        if "text" in batch:
            texts = [str(t) for t in batch["text"]]
        else:  # corpus lines: parsed as the local build parses them (a bad line is the same one-line error)
            docs = [corpus_line(bytes(line), where) for line, where in zip(batch["line"], batch["where"], strict=True)]
            texts = [doc_text(doc) for _, doc in docs]
        found = self.encoder.encode_layers(texts, self.layers)
        return {**batch, **{f"layer{i}": found[layer] for i, layer in enumerate(self.layers)}}


def _actor_class(recipe: EncoderRecipe, layers: list[Layer]) -> type:
    """The actor class with its recipe inside: constructor arguments would sit in the object store, and Ray
    warns on every restartable actor whose arguments do."""

    class EncodeBatch(_EncodeBatch):
        def __init__(self) -> None:
            super().__init__(recipe, layers)

    return EncodeBatch


@contextmanager
def connected(options: RayOptions) -> Iterator[None]:
    """Ray, connected to ``options.address`` or to a local cluster started here (and stopped after); a
    connection made already (by a caller, a test) is used as it is."""
    try:
        import ray
        import ray.data
    except ImportError:
        raise InputError("--ray needs Ray with Ray Data: pip install 'cone[ray]'") from None
    _configure(ray)
    if ray.is_initialized():
        yield
        return
    if options.address:
        _check_reachable(options.address)
    else:
        # A local cluster's workers would start 15 niceness steps below the command (Ray's default): beside any other
        # load they starve (issue 43). They run at the command's own priority; a setting of the user's wins.
        os.environ.setdefault("RAY_worker_niceness", "0")
    try:
        ray.init(address=options.address, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = options.address or "a local cluster"
        raise ClusterError(f"cannot start or reach {where}: {str(exc).splitlines()[0][:200]}") from None
    try:
        if options.address is None:
            _check_local_cpus(ray, options.actors)
        yield
    finally:
        ray.shutdown()


def _check_local_cpus(ray: object, actors: int) -> None:
    """A local cluster cannot grow: a pool bigger than its CPUs would wait ACTORS_START_S to fail."""
    cpus = int(ray.cluster_resources().get("CPU", 0))
    if cpus < actors:
        raise ClusterError(f"--ray-actors {actors} needs {actors} CPUs (one each); the local cluster has {cpus}")


def _check_reachable(address: str) -> None:
    """Ray retries an unreachable head for minutes; a head that does not even accept a connection is said at once."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # "auto" and other forms Ray resolves itself
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_SECONDS).close()
    except OSError as exc:
        raise ClusterError(f"cannot reach the Ray cluster at {address}: {exc.strerror or exc}") from None


def _configure(ray: object) -> None:
    """Ray Data's own progress bars and execution logs off: the command shows one bar of its own; and blocks
    small enough that a single corpus file is spread over every actor."""
    # First: turning the bars off is itself a warning; and a failed batch is told by cone, once, in one line.
    logging.getLogger("ray.data").setLevel(logging.CRITICAL)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.print_on_execution_start = False
    context.target_max_block_size = BLOCK_BYTES
    context.raise_original_map_exception = True  # an actor's own error (a bad corpus line) as itself


def _encoded(
    dataset: object, recipe: EncoderRecipe, layers: list[Layer], options: RayOptions, batch_size: int
) -> object:
    """The encoding stage. A dead actor is restarted and its batch retried (Ray Data's defaults for an actor
    pool); an error an actor raises itself (a model its node lacks, a bad line) fails the build. Ray Data hands an actor
    no fewer than ``batch_size`` rows at once (it joins smaller blocks): a small corpus is given a smaller
    batch, so that its blocks are not joined into one actor's work."""
    import ray

    # One task in flight per actor: a task queued behind another stays with its actor, so at the end one actor
    # would still work through its queue while the other idles; one at a time, each batch goes to the actor free.
    return dataset.map_batches(
        _actor_class(recipe, layers),
        batch_size=batch_size,
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=options.actors, max_tasks_in_flight_per_actor=1),
        num_cpus=1,
    )


def _batches(dataset: object, wait: bool = True) -> Iterator[dict[str, np.ndarray]]:
    """The pipeline's output in input order; with ``wait``, work is handed out once every actor has loaded its
    encoder (the first one up would otherwise take the whole of a small corpus, cut into one share per actor).
    A failure past Ray's retries is one ClusterError, or the ConeError an actor raised on a batch (a bad corpus
    line) as itself."""
    import ray

    dataset.context.execution_options.preserve_order = True
    dataset.context.wait_for_min_actors_s = ACTORS_START_S if wait else 0  # this dataset's, not the process's
    failure = None
    try:
        yield from dataset.iter_batches(batch_size=None, batch_format="numpy")
    except ray.exceptions.RayError as exc:
        failure = _failure(exc)
    if failure is not None:
        gc.collect()  # a failed pool's actors, held by cycles through the traceback, give their CPUs back now
        raise failure


def _failure(exc: BaseException) -> ConeError:
    """What a failed encoding is told as: one line."""
    from ray.exceptions import GetTimeoutError

    if isinstance(exc, GetTimeoutError):
        return ClusterError(
            f"the cluster did not start every encoder actor within {ACTORS_START_S} s: more --ray-actors than "
            "it has free CPUs, or actors dying as they load the encoder (Ray's logs say which)"
        )
    if (own := _cone_error(exc)) is not None:
        own.args = (str(own).splitlines()[0],)  # Ray appends its retry advice to the message
        return own
    # An actor that could not load its encoder (a model its node lacks) ends as a ConeError's "module.Class: words".
    last = re.sub(r"^cone\.errors\.\w+: ", "", str(exc).strip().splitlines()[-1])
    return ClusterError(f"encoding failed on the cluster: {last[:240]}")


def _cone_error(exc: BaseException) -> ConeError | None:
    """The ConeError an actor raised on a batch (a bad corpus line), under Ray's wrappers (one of which is
    itself of the error's class, with the remote traceback for its message). One raised while an actor starts
    does not come back as itself (Ray's ActorDiedError keeps only its text)."""
    from ray.exceptions import RayError

    for _ in range(10):
        if exc is None:
            return None
        if isinstance(exc, ConeError) and not isinstance(exc, RayError):
            return exc
        exc = getattr(exc, "cause", None) or exc.__cause__
    return None


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
        step = _block_rows(len(texts), options)
        blocks = [table.slice(start, step) for start in range(0, len(texts), step)]
        dataset = _encoded(ray.data.from_arrow(blocks), recipe, layers, options, step)
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


def _block_rows(n: int, options: RayOptions) -> int:
    """Rows per block: a batch, or fewer where that leaves an actor idle (a small corpus: every actor a share)."""
    return max(1, min(options.batch_size, -(-n // options.actors)))


def _read_lines(corpus_file: Path, rows: int) -> Callable[[dict[str, np.ndarray]], Iterator[dict[str, np.ndarray]]]:
    """A reading task: byte ranges of the file -> their non-blank lines, each with where it starts (for errors),
    in blocks of ``rows`` lines: an actor's batch each, so the pool shares the work out a batch at a time and the
    last batches of the file end on both actors together, not a whole range's on one."""

    def block(lines: list[bytes], where: list[str]) -> dict[str, np.ndarray]:
        return {"line": np.array(lines, dtype=object), "where": np.array(where, dtype=object)}

    def read(batch: dict[str, np.ndarray]) -> Iterator[dict[str, np.ndarray]]:
        lines, where = [], []
        for start, end in zip(batch["start"], batch["end"], strict=True):
            for offset, line in range_lines(corpus_file, int(start), int(end)):
                lines.append(line)
                where.append(f"{corpus_file} at byte {offset}")
                if len(lines) == rows:
                    yield block(lines, where)
                    lines, where = [], []
        if lines:
            yield block(lines, where)

    return read


def encode_corpus_lines(
    recipe: EncoderRecipe, corpus_file: Path, layer: Layer, options: RayOptions, on_batch: Callable[[int], None]
) -> Iterator[tuple[list[bytes], list[str], np.ndarray]]:
    """The non-blank lines of a corpus.jsonl (with where each starts) and their vectors, in file order, batch by
    batch; ``on_batch(n)`` is told each batch's size (progress).

    The file is read by Ray tasks pinned to this node (the other nodes need not see it), a byte range each, so
    no task holds the corpus; they take no CPU of their own: the actors hold every CPU of a small cluster, and a
    reading task waiting for one would wait forever. One reads at a time (a range takes milliseconds; each
    concurrent one would start a process of its own). A file cut by bytes (a large one) is read while the actors
    load their encoders, not after (issue 43: the reading process's start was on the build's path); only a file
    cut into one share per actor waits for all of them."""
    import ray

    corpus_file = corpus_file.resolve()
    if not corpus_file.is_file():
        raise InputError(f"{corpus_file}: not found")
    with connected(options):
        here = ray.get_runtime_context().get_node_id()
        plan = plan_ranges(corpus_file, options.actors, BLOCK_BYTES)
        wait = plan.lines_each is not None  # a share per actor: handed out once all are up
        if not wait:  # read while the actors load: no wait of Ray Data's to fail on an unplaceable pool
            _check_placeable(options.actors)
        # Where the file was cut by lines, a batch is no larger than a range's lines, so every actor has work.
        batch_size = min(options.batch_size, plan.lines_each or options.batch_size)
        ranges = [{"start": a, "end": b} for a, b in plan.ranges]
        pieces = ray.data.from_items(ranges, override_num_blocks=len(ranges))
        read = pieces.map_batches(
            _read_lines(corpus_file, batch_size),
            batch_size=1,
            batch_format="numpy",
            num_cpus=0,
            concurrency=1,
            label_selector={"ray.io/node-id": here},
        )
        for batch in _batches(_encoded(read, recipe, [layer], options, batch_size), wait):
            lines = [bytes(line) for line in batch["line"]]
            on_batch(len(lines))
            yield lines, [str(w) for w in batch["where"]], batch["layer0"]


def _check_placeable(actors: int) -> None:
    """Refuse, after ACTORS_START_S, a cluster that cannot place ``actors`` actors of one CPU each. A build that
    hands work out before its pool is up (a streamed file cut by bytes) sets Ray Data no wait to time out, and
    would otherwise wait for actors that never come; the group is only a probe, removed at once."""
    import ray
    from ray.exceptions import GetTimeoutError
    from ray.util.placement_group import placement_group, remove_placement_group

    group = placement_group([{"CPU": 1}] * actors)  # PACK, a preference: the actors may spread over nodes
    try:
        ray.get(group.ready(), timeout=ACTORS_START_S)
    except GetTimeoutError:
        raise ClusterError(
            f"the cluster could not place {actors} encoder actors of one CPU each within {ACTORS_START_S} s: more "
            "--ray-actors than it has free CPUs"
        ) from None
    finally:
        remove_placement_group(group)


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
        self.encoded_on = Placement(options.description)

    def all_layers(self) -> list[Layer]:
        return self.local.all_layers()

    def at_layer(self, layer: Layer) -> RayEncoder:
        return RayEncoder(self.local.at_layer(layer), self.recipe, self.options)

    def encode_layers(
        self, texts: list[str], layers: list[Layer], batch_size: int = 64, progress: bool = False, role: str = DOCUMENT
    ) -> dict[Layer, np.ndarray]:
        if role != DOCUMENT:  # queries are few and short: encoded here, not worth a round trip
            return self.local.encode_layers(texts, layers, batch_size, progress, role)
        return encode_texts(self.recipe, texts, layers, self.options, progress)

    def encode(
        self, texts: list[str], batch_size: int = 64, progress: bool = False, role: str = DOCUMENT
    ) -> np.ndarray:
        return self.encode_layers(texts, [self.layer], batch_size, progress, role)[self.layer]


def encoder_for(
    model: str,
    checkpoints: Path | None,
    layer: Layer,
    runtime: Runtime,
    data_root: Path | None,
    ray: RayOptions | None,
) -> LayeredEncoder:
    """``model``'s encoder, loaded here; where ``ray`` is given, its encoding runs on that cluster's actors, each
    loading the same weights by name (the caller holds the connection: ``connected``)."""
    encoder = load_encoder(model, checkpoints, layer, runtime, data_root)
    return encoder if ray is None else RayEncoder(encoder, EncoderRecipe(model, checkpoints, runtime, data_root), ray)
