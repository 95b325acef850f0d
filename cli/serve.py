"""``cone serve``: the search service over a folder of indexes."""

from __future__ import annotations

import argparse
from pathlib import Path

from cone.cli.options import add_checkpoints_option
from cone.errors import InputError

DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8000


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "serve",
        help="serve /search, /compare, /histogram and the side-by-side page over every index",
        description="Load every index in INDEX_DIR (a corrupt or mismatched one is reported unavailable, the "
        "others serve) and start the FastAPI service. OpenAPI docs at /docs; the page at /.",
    )
    p.add_argument("--indexes", type=Path, required=True, help="folder of indexes (INDEX_DIR)")
    p.add_argument("--host", default=DEFAULT_HOST, help=f"address to bind (default {DEFAULT_HOST}: this machine only)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}")
    add_checkpoints_option(p)
    p.set_defaults(handler=run_serve)


def serve(indexes: Path, host: str, port: int, checkpoints: Path | None) -> None:
    import uvicorn

    from cone.service.app import create_app

    print(f"cone: serving {indexes} at http://{host}:{port}/ (API docs: http://{host}:{port}/docs)", flush=True)
    uvicorn.run(create_app(indexes, checkpoints), host=host, port=port, log_level="warning")


def run_serve(args: argparse.Namespace) -> int:
    if not args.indexes.is_dir():
        raise InputError(f"{args.indexes}: no such folder of indexes (build them with `cone index` or `cone demo`)")
    serve(args.indexes, args.host, args.port, args.checkpoints)
    return 0
