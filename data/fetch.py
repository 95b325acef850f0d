"""Download the benchmarks from their canonical public sources (``cone data fetch``).

The development machines have no route to these hosts; there the data comes from
../shared/datasets through --data-dir. This command is for users with internet access.
"""

from __future__ import annotations

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

from cone.errors import ConeError, InputError

SOURCES = {
    "scifact": "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/scifact.zip",
    "stsb": "https://sbert.net/datasets/stsbenchmark.tsv.gz",
}
TIMEOUT_S = 30


def download(url: str, progress: bool = True) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            total = int(response.headers.get("Content-Length") or 0) or None
            buffer = io.BytesIO()
            name = url.rsplit("/", 1)[-1]
            with tqdm(total=total, unit="B", unit_scale=True, desc=name, disable=not progress) as bar:
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


def fetch(dataset: str, root: Path, progress: bool = True) -> Path:
    """Download ``dataset`` (scifact or stsb) into ``root``; returns the folder written."""
    if dataset not in SOURCES:
        raise InputError(f"unknown dataset {dataset!r}; choose from {', '.join(sorted(SOURCES))}")
    root.mkdir(parents=True, exist_ok=True)
    payload = download(SOURCES[dataset], progress)
    return (install_scifact if dataset == "scifact" else install_stsb)(payload, root)
