"""Options and argument types that several subcommands share, written once."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from cone.data.loaders import DATA_DIR_ENV
from cone.encoders.auto import AUTO, auto_help, choose_runtime, follows_the_cpu
from cone.encoders.base import BACKENDS, QUANTIZATIONS, SUPPORTED, Runtime
from cone.encoders.cluster import ACTORS_START_S, RayOptions, connected
from cone.errors import InputError
from cone.indexing.codes import IndexType, parse_search_params
from cone.indexing.spec import parse_factory_list, parse_index_type
from cone.models.checkpoint import CHECKPOINTS_ENV


def add_data_dir_option(parser: argparse.ArgumentParser, what: str = "datasets folder") -> None:
    parser.add_argument(
        "--data-dir", type=Path, default=None, help=f"{what} (default ${DATA_DIR_ENV} or ../shared/datasets)"
    )


def add_dataset_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dataset",
        default="scifact",
        help="BEIR dataset: a folder under the data dir, or the path of any BEIR folder (default scifact)",
    )


def add_checkpoints_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--checkpoints",
        type=Path,
        default=None,
        help=f"folder holding the baseline/ and regularized/ checkpoints (default ${CHECKPOINTS_ENV}, "
        "else the reference checkpoints installed with cone)",
    )


def add_store_config_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--pg-dsn",
        default=None,
        help="the Postgres of --store pgvector, as a libpq DSN or URI (default $CONE_PG_DSN; without either, an "
        "embedded Postgres with pgvector in $CONE_PG_DATA or OUT/.pgdata, started and stopped by cone). Written "
        "nowhere: manifests and messages name its host, port and database only",
    )


def store_config(args: argparse.Namespace) -> dict[str, str]:
    """The stores' settings a command was given (cone.indexing.factory.configure_stores)."""
    return {"pg_dsn": args.pg_dsn} if getattr(args, "pg_dsn", None) else {}


def add_progress_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")


LAYER_HELP = "last (the model's own output) | emb (its input embeddings) | N (after block N)"


def layer(text: str) -> str | int:
    """last | emb | the number of a hidden state (0 = input embeddings, 1 = after the first block, ...)."""
    if text in ("last", "emb"):
        return text
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected last, emb or a layer number 0, 1, ..., got {text!r}")
    return int(text)


def layer_list(text: str) -> list[str | int] | str:
    """``all`` or a comma list of layers (emb,1,2,...)."""
    return "all" if text.strip() == "all" else list(dict.fromkeys(layer(item) for item in comma_list(text)))


def comma_list(text: str) -> list[str]:
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list")
    return items


def unique_list(text: str) -> list[str]:
    """A comma list whose items are all different (a model named twice would be compared with itself)."""
    items = comma_list(text)
    repeated = sorted({item for item in items if items.count(item) > 1})
    if repeated:
        raise argparse.ArgumentTypeError(f"{repeated[0]!r} is named twice")
    return items


def _parse(text: str, kind: type, what: str) -> int | float:
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None


# FAISS factory components that need the next one (IVF256 needs its code: IVF256,Flat); the comma is FAISS's own.
def index_factory(text: str) -> str:
    """One index type (cone.indexing.spec), checked when the command line is read, before any work. Kept as
    written: its spec would name the store's default metric (lance:IVF_PQ@l2), which ``--metric`` must not lose
    to (``for_store`` spells it as cone does once the metric is known)."""
    try:
        parse_index_type(text)
        return text
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def checked_search_params(text: str) -> str:
    """``name=value,...`` with every count > 0 (nprobe, efSearch, qb, ...), checked when the command line is read."""
    try:
        parse_search_params(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def factory_list(text: str) -> list[str]:
    """Comma- (or ;-) separated index types (``cone.indexing.spec.parse_factory_list``), checked when the
    command line is read."""
    try:
        return parse_factory_list(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def index_types(text: str) -> dict[str, IndexType]:
    """``factory_list``'s index types, each with its parsed type, by the names they were given."""
    return {name: parse_index_type(name) for name in factory_list(text)}


def positive_int(text: str) -> int:
    value = _parse(text, int, "an integer")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def non_negative_int(text: str) -> int:
    value = _parse(text, int, "an integer")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text}")
    return value


def non_negative_float(text: str) -> float:
    value = _parse(text, float, "a number")
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def port(text: str) -> int:
    """A TCP port to listen on, 1-65535 (refused while parsing: before any work the command would do first)."""
    value = _parse(text, int, "a port number")
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number from 1 to 65535, got {text}")
    return value


def host(text: str) -> str:
    """An address to listen on. An empty one (every interface, to the server) is refused: 0.0.0.0 says so."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            "expected an address (127.0.0.1: this machine only; 0.0.0.0: every IPv4 "
            "interface; :: every IPv6 one), got an empty one"
        )
    return text.strip()


RUNTIME_HELP = (
    "torch (the reference) | openvino | onnx, exported once from the local weights into a cache "
    "($CONE_EXPORT_DIR, default ~/.cache/cone/exports) by sentence-transformers' backends; for roberta, minilm, "
    "st:PATH (the LMs and their fine-tuned encoders run on torch; onnx is reported unavailable where optimum-onnx "
    "cannot be installed beside sentence-transformers 6, as here)"
)
QUANTIZE_HELP = (
    "none (fp32) | bf16 (openvino, CPUs with native bf16) | int8 (openvino: static, calibrated on 300 lmtext "
    "sentences; onnx: dynamic)"
)


def add_runtime_options(parser: argparse.ArgumentParser, default: str = "torch") -> None:
    """One runtime: what encodes the corpus here, recorded in the index, and what must encode its queries.
    ``runtime_for`` reads them."""
    choices = (AUTO, *BACKENDS)
    help_text = f"{RUNTIME_HELP}; {auto_help()}. Default {default}"
    parser.add_argument("--backend", choices=choices, default=default, help=help_text)
    parser.add_argument(
        "--quantize", choices=QUANTIZATIONS, default=None, help=f"{QUANTIZE_HELP}; default none (auto chooses its own)"
    )


def runtime_for(backend: str, quantize: str | None, model: str, data_root: Path) -> Runtime:
    """--backend and --quantize as the concrete runtime that runs ``model``, before any work: ``auto`` resolved for
    this CPU (and said on stderr where it follows the CPU), so what is recorded is what ran. ``data_root``: where a
    first int8 export would calibrate."""
    if backend != AUTO:
        return Runtime(backend, quantize or "none")
    if quantize is not None:
        raise InputError("--backend auto chooses the precision too: leave out --quantize, or name a backend")
    choice = choose_runtime(model, data_root)
    if follows_the_cpu(model):
        print(f"cone: --backend auto runs {model} on {choice.runtime.tag}: {choice.why}", file=sys.stderr, flush=True)
    return choice.runtime


def add_runtime_list_options(parser: argparse.ArgumentParser) -> None:
    """Several runtimes, each a row: every backend with every quantization of the list it offers."""
    parser.add_argument(
        "--backend", type=choice_list(BACKENDS), default=["torch"], help=f"comma list: {RUNTIME_HELP}; default torch"
    )
    parser.add_argument(
        "--quantize",
        type=choice_list(QUANTIZATIONS),
        default=["none"],
        help=f"comma list: {QUANTIZE_HELP}; each backend runs with each it offers. Default none",
    )


def runtimes(backends: list[str], quantizations: list[str]) -> tuple[Runtime, ...]:
    """Every (backend, quantization) pair the backend offers; an InputError if there is none."""
    found = tuple(Runtime(b, q) for b in backends for q in quantizations if q in SUPPORTED[b])
    if not found:
        raise InputError(f"no backend of {', '.join(backends)} offers --quantize {', '.join(quantizations)}")
    return found


def choice_list(choices: tuple[str, ...]) -> Callable[[str], list[str]]:
    """An argparse type: a comma list whose items are all among ``choices``."""

    def parse(text: str) -> list[str]:
        items = list(dict.fromkeys(comma_list(text)))
        bad = [item for item in items if item not in choices]
        if bad:
            raise argparse.ArgumentTypeError(f"{bad[0]!r} is not one of {', '.join(choices)}")
        return items

    return parse


def add_ray_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "Ray cluster",
        "Encode the corpus on a Ray cluster (pip install 'cone[ray]'): the corpus becomes a Ray Dataset, a pool of "
        "actors encodes it (one encoder loaded per actor), the vectors come back in corpus order and the index is "
        "built here as without --ray. Every node needs cone installed and the model's files at the same paths.",
    )
    group.add_argument(
        "--ray",
        nargs="?",
        const="",
        default=None,
        metavar="ADDRESS",
        help="a running cluster (`ray start --head` prints its ADDRESS, e.g. 10.0.0.1:6379); without ADDRESS a "
        "local cluster is started for the command",
    )
    group.add_argument(
        "--ray-actors",
        type=positive_int,
        default=2,
        help=f"encoders at once, one CPU each; the cluster must place them all within {ACTORS_START_S // 60} minutes "
        "(default 2)",
    )
    group.add_argument("--ray-batch-size", type=positive_int, default=256, help="texts per actor call (default 256)")


def ray_options(args: argparse.Namespace) -> RayOptions | None:
    """--ray's options, or None without --ray (and then nothing about Ray is imported)."""
    if args.ray is None:
        return None
    return RayOptions(args.ray or None, args.ray_actors, args.ray_batch_size)


def ray_session(options: RayOptions | None) -> AbstractContextManager[None]:
    """One connection to the cluster for the whole command (nothing without --ray)."""
    return nullcontext() if options is None else connected(options)
