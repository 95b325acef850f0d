"""The ``cone`` command: each package contributes its own subcommands."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from cone import __version__, demo
from cone.errors import ConeError
from data import fetch as data_fetch
from eval import cli as eval_cli
from geometry import GeometryInputError
from geometry import cli as geometry_cli
from indexing import cli as indexing_cli
from models import cli as models_cli
from service import cli as service_cli


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cone",
        description="Measure the geometry of embedding spaces and what it does to semantic search.",
    )
    parser.add_argument("--version", action="version", version=f"cone {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    data_fetch.register(commands)
    geometry_cli.register(commands)
    models_cli.register(commands)
    indexing_cli.register(commands)
    eval_cli.register(commands)
    service_cli.register(commands)
    demo.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except (ConeError, GeometryInputError) as exc:
        print(f"cone: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("cone: interrupted", file=sys.stderr)
        return 130
