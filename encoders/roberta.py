"""roberta-base, mean-pooled (the mission's example of a cone): from a folder or the local Hugging Face cache only;
nothing is downloaded, so on a machine without it the model is reported unavailable with the command that fetches it."""

from __future__ import annotations

import os
from pathlib import Path

from cone.encoders.base import TORCH, EncoderEntry, LayeredEncoder, Runtime
from cone.errors import ModelUnavailable

ROBERTA_HF_NAME = "roberta-base"
ROBERTA_PATH_ENV = "CONE_ROBERTA_PATH"
ROBERTA_FIX = (
    f"on a machine with internet: `huggingface-cli download {ROBERTA_HF_NAME}` (fills the local cache), "
    f"or set {ROBERTA_PATH_ENV}=DIR to a saved roberta-base directory"
)


def roberta(path: str | None = None, runtime: Runtime = TORCH, calibration_root: Path | None = None) -> LayeredEncoder:
    """roberta-base, mean-pooled: from ``path``, $CONE_ROBERTA_PATH, or the local HF cache."""
    from cone.encoders.st import mean_pooling_of

    source = path or os.environ.get(ROBERTA_PATH_ENV) or ROBERTA_HF_NAME
    return mean_pooling_of("roberta", source, ROBERTA_FIX, runtime, calibration_root)


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


ENTRY = EncoderEntry(
    load=lambda runtime, checkpoints, data_root: roberta(runtime=runtime, calibration_root=data_root),
    missing=lambda checkpoints: roberta_missing(),
    work=12 * 768,
)
