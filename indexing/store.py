"""An index on disk: one folder with manifest.json, the index files, and docs.jsonl.

Builds write a hidden temporary folder and rename it into place, so a reader never sees a
half-written index: an interrupted build leaves the previous index (or nothing) behind.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from cone import __version__
from cone.errors import ConeError

MANIFEST = "manifest.json"
DOCS = "docs.jsonl"
SNIPPET_CHARS = 300


def index_name(model: str, postprocess: str, layer: str | int = "last") -> str:
    """Folder name of an index: model[-layerL][-postprocess], safe for a filesystem."""
    parts = [model.replace(":", "_").replace("/", "_")]
    if layer != "last":
        parts.append(f"layer{layer}")
    if postprocess != "none":
        parts.append(postprocess.replace(":", ""))
    return "-".join(parts)


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def base_manifest(**fields) -> dict:
    return {"cone_version": __version__, "created": now(), **fields}


@contextmanager
def atomic_folder(target: Path):
    """Yield a temporary folder; on success it replaces ``target``, on failure it is removed."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = target.parent / f".{target.name}.old-{uuid.uuid4().hex[:8]}"
    if target.exists():
        os.rename(target, old)
    os.rename(tmp, target)
    shutil.rmtree(old, ignore_errors=True)


def write_docs(folder: Path, doc_ids: list[str], corpus: dict[str, dict[str, str]]) -> None:
    with (folder / DOCS).open("w", encoding="utf-8") as handle:
        for doc_id in doc_ids:
            doc = corpus[doc_id]
            record = {"id": doc_id, "title": doc["title"], "snippet": doc["text"][:SNIPPET_CHARS]}
            handle.write(json.dumps(record) + "\n")


def write_manifest(folder: Path, manifest: dict) -> None:
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2))


def read_manifest(folder: Path) -> dict:
    file = Path(folder) / MANIFEST
    if not file.is_file():
        raise ConeError(f"{folder}: not an index (no {MANIFEST})")
    try:
        manifest = json.loads(file.read_text())
    except json.JSONDecodeError as exc:
        raise ConeError(f"{file}: corrupt manifest ({exc.msg})") from None
    for key in ("kind", "model", "n_docs", "corpus_fingerprint"):
        if key not in manifest:
            raise ConeError(f"{file}: manifest lacks {key!r}")
    return manifest


def read_docs(folder: Path, n_docs: int) -> list[dict]:
    file = Path(folder) / DOCS
    try:
        docs = [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines() if line]
    except (OSError, json.JSONDecodeError) as exc:
        raise ConeError(f"{file}: missing or corrupt document list ({exc})") from None
    if len(docs) != n_docs:
        raise ConeError(f"{file}: {len(docs)} documents but the manifest says {n_docs}")
    return docs


def check_expected(manifest: dict, folder: Path, model: str | None, corpus_fingerprint: str | None) -> None:
    if model is not None and manifest["model"] != model:
        raise ConeError(f"{folder}: index was built for model {manifest['model']!r}, not {model!r}")
    if corpus_fingerprint is not None and manifest["corpus_fingerprint"] != corpus_fingerprint:
        raise ConeError(f"{folder}: index was built on another corpus (fingerprint {manifest['corpus_fingerprint']})")


def list_indexes(root: Path) -> list[Path]:
    """Every index folder under ``root`` (hidden temporary folders excluded)."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
