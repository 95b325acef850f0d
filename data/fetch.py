"""``cone data fetch``: download the benchmarks from their canonical public sources.

The development machines have no route to these hosts; there the data comes from
../shared/datasets through --data-dir. This command is for users with internet access.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import shutil
import tempfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

from tqdm import tqdm

from cone.errors import ConeError
from data.loaders import add_data_dir_option, data_dir

SOURCES = {
    "scifact": "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/scifact.zip",
    "stsb": "https://sbert.net/datasets/stsbenchmark.tsv.gz",
}
TIMEOUT_S = 30


def download(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            total = int(response.headers.get("Content-Length") or 0) or None
            buffer = io.BytesIO()
            with tqdm(total=total, unit="B", unit_scale=True, desc=url.rsplit("/", 1)[-1]) as bar:
                for block in iter(lambda: response.read(1 << 16), b""):
                    buffer.write(block)
                    bar.update(len(block))
            return buffer.getvalue()
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise ConeError(f"cannot download {url}: {getattr(exc, 'reason', exc)}") from None


def install_scifact(payload: bytes, root: Path) -> Path:
    with tempfile.TemporaryDirectory(dir=root) as tmp, zipfile.ZipFile(io.BytesIO(payload)) as archive:
        archive.extractall(tmp)
        target = root / "scifact"
        if target.exists():
            shutil.rmtree(target)
        shutil.move(str(Path(tmp) / "scifact"), target)
    return target


def install_stsb(payload: bytes, root: Path) -> Path:
    target = root / "stsb"
    target.mkdir(parents=True, exist_ok=True)
    rows = csv.DictReader(io.StringIO(gzip.decompress(payload).decode("utf-8")), delimiter="\t", quoting=csv.QUOTE_NONE)
    writers, files = {}, []
    for row in rows:
        split = row["split"]
        if split not in writers:
            handle = (target / f"{split}.csv").open("w", encoding="utf-8", newline="")
            files.append(handle)
            writers[split] = csv.writer(handle)
            writers[split].writerow(["sentence1", "sentence2", "score"])
        writers[split].writerow([row["sentence1"], row["sentence2"], row["score"]])
    for handle in files:
        handle.close()
    return target


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "data",
        help="download the benchmark datasets",
        description="Download the benchmark datasets from their canonical sources.",
    )
    sub = p.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    fetch = sub.add_parser("fetch", help="download scifact (BEIR) or stsb into the data dir")
    fetch.add_argument("dataset", choices=sorted(SOURCES))
    add_data_dir_option(fetch, "target folder")
    fetch.set_defaults(handler=run_fetch)


def run_fetch(args: argparse.Namespace) -> int:
    root = data_dir(args.data_dir)
    root.mkdir(parents=True, exist_ok=True)
    payload = download(SOURCES[args.dataset])
    install = install_scifact if args.dataset == "scifact" else install_stsb
    print(f"{args.dataset} written to {install(payload, root)}")
    return 0
