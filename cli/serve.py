"""``cone serve``: the search service over a folder of indexes."""

from __future__ import annotations

import argparse
import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn, TypeVar

from cone.cli.options import (
    add_checkpoints_option,
    add_store_config_option,
    host,
    non_negative_float,
    port,
    positive_int,
)
from cone.errors import InputError
from cone.service.batching import DEFAULT_BATCHING, DEFAULT_MAX_BATCH, DEFAULT_WINDOW_MS, BatchSettings
from cone.service.connections import (
    DEFAULT_REQUEST_TIMEOUT,
    MAX_CONNECTIONS_ENV,
    REQUEST_TIMEOUT_ENV,
    accept_backlog,
    default_max_connections,
)
from cone.service.progress import BuildProgress
from cone.service.schemas import MAX_BODY_BYTES

MAX_BODY_ENV = "CONE_MAX_BODY_BYTES"
T = TypeVar("T")
DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8000


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "serve",
        help="serve /search, /compare, /histogram and the side-by-side page over every index",
        description="Load every index in INDEX_DIR (a corrupt or mismatched one is reported unavailable, the "
        "others serve) and start the FastAPI service. OpenAPI docs at /docs; the page at /.",
    )
    p.add_argument("--indexes", type=Path, required=True, help="folder of indexes (INDEX_DIR)")
    add_listen_options(p)
    p.add_argument(
        "--max-body-bytes",
        type=positive_int,
        default=None,
        help=f"largest request body; a bigger one is answered 413 unread "
        f"(default ${MAX_BODY_ENV} or {MAX_BODY_BYTES:,})",
    )
    p.add_argument(
        "--batch-window-ms",
        type=non_negative_float,
        default=DEFAULT_WINDOW_MS,
        help="how long the first search of a batch waits for concurrent ones, to encode and search them in one "
        f"call (default {DEFAULT_WINDOW_MS:g}; 0: no waiting, but searches that arrive while a batch runs still "
        "form the next one)",
    )
    p.add_argument(
        "--max-batch",
        type=positive_int,
        default=DEFAULT_MAX_BATCH,
        help=f"most searches in one batch; a full one runs at once; 1: no batching (default {DEFAULT_MAX_BATCH})",
    )
    p.add_argument(
        "--parallel-batches",
        type=positive_int,
        default=1,
        help="batches of one torch encoder that run at once, the cores shared out between them as torch threads "
        "(default 1: one batch on torch's own threads; an exported model runs one batch at a time)",
    )
    p.add_argument(
        "--request-timeout",
        type=positive_float,
        default=None,
        help="seconds a connection has to send a whole request (after connecting, or after its previous answer); "
        f"past it, 408 and closed (default ${REQUEST_TIMEOUT_ENV} or {DEFAULT_REQUEST_TIMEOUT:g})",
    )
    p.add_argument(
        "--max-connections",
        type=positive_int,
        default=None,
        help="connections held at once; at the cap new ones wait in the listen queue, and past three quarters of "
        f"it an idle connection has 1 s to begin a request (default ${MAX_CONNECTIONS_ENV} or a quarter of the "
        "process's open-file limit, at most 1,000)",
    )
    p.add_argument(
        "--no-docs",
        action="store_true",
        help="do not serve /docs and /redoc (their pages load Swagger UI and ReDoc from a public CDN)",
    )
    add_checkpoints_option(p)
    add_store_config_option(p)
    p.set_defaults(handler=run_serve)


def add_listen_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host",
        type=host,
        default=DEFAULT_HOST,
        help=f"address to bind (default {DEFAULT_HOST}: this machine only; 0.0.0.0: every IPv4 interface)",
    )
    parser.add_argument("--port", type=port, default=DEFAULT_PORT, help=f"1-65535 (default {DEFAULT_PORT})")


def check_listen(host: str, port: int) -> None:
    """Refuse, before any work, an address that does not resolve or a port that cannot be bound (in use, or
    privileged): one InputError. (uvicorn would log the failure and exit 3, the code of missing weights.)"""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as exc:
        raise InputError(f"--host {host!r}: cannot be resolved ({getattr(exc, 'strerror', None) or exc})") from None
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            sock.bind(address)
        except OSError as exc:
            raise InputError(f"cannot listen on {host}:{port} ({exc.strerror})") from None


def positive_float(text: str) -> float:
    value = non_negative_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def _from_env(name: str, parse: Callable[[str], T], default: T) -> T:
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        return parse(text)
    except argparse.ArgumentTypeError as exc:
        raise InputError(f"${name}: {exc}") from None


def body_limit_from_env() -> int:
    try:
        return positive_int(os.environ.get(MAX_BODY_ENV, str(MAX_BODY_BYTES)))
    except argparse.ArgumentTypeError as exc:
        raise InputError(f"${MAX_BODY_ENV}: {exc}") from None


def serve(
    indexes: Path,
    host: str,
    port: int,
    checkpoints: Path | None,
    max_body_bytes: int | None = None,
    batching: BatchSettings = DEFAULT_BATCHING,
    request_timeout: float | None = None,
    max_connections: int | None = None,
    docs: bool = True,
    builds: BuildProgress | None = None,
) -> None:
    """Serve until Ctrl-C; ``builds``: the models a background builder is still making (``cone demo``)."""
    import uvicorn

    from cone.service.app import create_app
    from cone.service.connections import guarded_protocol
    from cone.service.registry import freeze_libraries

    limit = max_body_bytes or body_limit_from_env()
    timeout = request_timeout or _from_env(REQUEST_TIMEOUT_ENV, positive_float, DEFAULT_REQUEST_TIMEOUT)
    connections = max_connections or _from_env(MAX_CONNECTIONS_ENV, positive_int, default_max_connections())
    check_listen(host, port)
    where = f" (API docs: http://{host}:{port}/docs)" if docs else ""
    print(f"cone: serving {indexes} at http://{host}:{port}/{where}", flush=True)
    freeze_libraries()
    app = create_app(indexes, checkpoints, max_body_bytes=limit, batching=batching, docs=docs, builds=builds)
    http = guarded_protocol(timeout, connections)
    try:
        # asyncio's own loop, never uvloop (loop="auto" takes it where installed): the connection queue pauses
        # asyncio's Server (cone.service.connections.AcceptGate), and under uvloop would fall back to refusals.
        uvicorn.run(app, host=host, port=port, log_level="warning", http=http, backlog=accept_backlog(), loop="asyncio")
    except SystemExit as exc:  # uvicorn's startup failure (exit 3): the port taken since check_listen, say
        if exc.code == TERMINATED:
            raise
        if exc.code:
            raise InputError(f"the service could not start on {host}:{port} (uvicorn exit {exc.code})") from None


TERMINATED = 128 + signal.SIGTERM  # the exit status a shell gives a process that SIGTERM ended


def exit_on_sigterm(signum: int, frame: object) -> NoReturn:
    """SIGTERM as an exit. uvicorn shuts down gracefully on SIGTERM, then raises it again with the handler it found
    back in place: the default one would end the process without the interpreter's exit handlers, and pgserver's
    handler, which stops the embedded Postgres this process started (or takes this process off its list of users),
    would never run: the server left running, and never stopped by a later cone process either."""
    raise SystemExit(TERMINATED)


def run_serve(args: argparse.Namespace) -> int:
    if not args.indexes.is_dir():
        raise InputError(f"{args.indexes}: no such folder of indexes (build them with `cone index` or `cone demo`)")
    batching = BatchSettings(args.batch_window_ms, args.max_batch, args.parallel_batches)
    previous = signal.signal(signal.SIGTERM, exit_on_sigterm)  # the command runs in the main thread
    try:
        serve(
            args.indexes,
            args.host,
            args.port,
            args.checkpoints,
            args.max_body_bytes,
            batching,
            args.request_timeout,
            args.max_connections,
            docs=not args.no_docs,
        )
    finally:  # a caller of main() in its own process (a test) keeps its own handler
        signal.signal(signal.SIGTERM, previous)
    return 0
