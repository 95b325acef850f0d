"""The entry layer: the ``cone`` command and its subcommands. It imports the libraries; none imports it."""

from cone.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
