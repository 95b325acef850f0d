"""``cone data fetch``: download the benchmark datasets (for machines with internet access)."""

from __future__ import annotations

import argparse

from cone.cli.options import add_data_dir_option, add_progress_option
from cone.data.fetch import SOURCES, fetch
from cone.data.loaders import data_dir


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "data",
        help="download the benchmark datasets",
        description="Download the benchmark datasets from their canonical sources.",
    )
    sub = p.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    command = sub.add_parser("fetch", help="download scifact (BEIR) or stsb into the data dir")
    command.add_argument("dataset", choices=sorted(SOURCES))
    add_data_dir_option(command, "target folder")
    add_progress_option(command)
    command.set_defaults(handler=run_fetch)


def run_fetch(args: argparse.Namespace) -> int:
    print(f"{args.dataset} written to {fetch(args.dataset, data_dir(args.data_dir), not args.no_progress)}")
    return 0
