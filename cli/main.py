"""The ``cone`` command: every subcommand's parser, and the one place that prints errors and picks exit codes."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from cone import __version__
from cone.cli import data, demo, doctor, eval, finetune, geometry, index, serve, train
from cone.cli.options import store_config
from cone.errors import EXIT_CODES, ConeError, Interrupted
from cone.indexing.factory import configure_stores

EPILOG = "exit codes: " + "; ".join(f"{code} {meaning}" for code, meaning in EXIT_CODES.items())


class Parser(argparse.ArgumentParser):
    """argparse whose refusal is one line, as every other refusal of cone's (no usage block before it: ``--help``
    prints that in full). Every subcommand's parser is one too (argparse makes them of their parent's class)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="cone",
        description="Measure the geometry of embedding spaces and what it does to semantic search.",
        epilog=EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"cone {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in (data, geometry, train, finetune, index, eval, doctor, serve, demo):
        command.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_stores(store_config(args))
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        return report(Interrupted())
    except ConeError as exc:
        code = report(exc)
        if isinstance(exc, Interrupted) and exc.still_running:
            leave_now(code)
        return code


def leave_now(code: int) -> NoReturn:
    """Exit without the interpreter's shutdown. With another thread inside FAISS, torch or OpenVINO, the libraries'
    exit handlers run under it and end in std::terminate (exit 134, "terminate called without an active
    exception"), after the line that says what was kept."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def report(exc: ConeError) -> int:
    message = str(exc)
    print(f"cone: {exc.label}" + (f": {message}" if message else ""), file=sys.stderr)
    return exc.exit_code
