"""Model names -> encoders. ``bm25`` is lexical and lives in ``indexing.lexical``."""

from __future__ import annotations

from pathlib import Path

from cone.errors import ConeError
from encoders.base import Encoder, ModelUnavailable

REFERENCE_CHECKPOINTS = Path(__file__).resolve().parents[1] / "checkpoints"
LM_MODELS = ("baseline", "regularized")
MODEL_NAMES = (*LM_MODELS, "roberta", "minilm", "bm25")


def add_checkpoints_option(parser) -> None:
    """The --checkpoints option of every command that may load the project's language models."""
    parser.add_argument(
        "--checkpoints",
        type=Path,
        default=REFERENCE_CHECKPOINTS,
        help="folder holding the baseline/ and regularized/ checkpoints (default: the committed ones)",
    )


def _checkpoint_missing(spec: str, checkpoints: Path) -> ModelUnavailable | None:
    path = Path(checkpoints) / spec
    if (path / "config.json").is_file():
        return None
    fix = f"cone train --out {path}" + (" --reg-cos 0" if spec == "baseline" else "")
    return ModelUnavailable(spec, f"no checkpoint at {path}", fix)


def missing(spec: str, checkpoints: Path = REFERENCE_CHECKPOINTS) -> ModelUnavailable | None:
    """Why a named model's weights are absent, from its files alone (nothing loaded); None if they look present.

    A model that passes may still fail to load (e.g. corrupt weights); ``load_encoder`` says so then.
    """
    if spec in LM_MODELS:
        return _checkpoint_missing(spec, checkpoints)
    if spec == "roberta":
        from encoders.st import roberta_missing

        return roberta_missing()
    if spec == "minilm":
        from encoders.st import minilm_missing

        return minilm_missing()
    return None


def load_encoder(spec: str, checkpoints: Path = REFERENCE_CHECKPOINTS, layer: str | int = "last") -> Encoder:
    """baseline | regularized | roberta | minilm | st:PATH. Raises ModelUnavailable, never substitutes."""
    if spec in LM_MODELS:
        from encoders.lm import LMEncoder

        if (absent := _checkpoint_missing(spec, checkpoints)) is not None:
            raise absent
        return LMEncoder(spec, Path(checkpoints) / spec, layer)
    if layer != "last":
        raise ConeError(f"--layer applies only to {', '.join(LM_MODELS)}")
    if spec == "roberta":
        from encoders.st import roberta

        return roberta()
    if spec == "minilm":
        from encoders.st import minilm

        return minilm()
    if spec.startswith("st:"):
        from encoders.st import sentence_transformer_dir

        return sentence_transformer_dir(spec, Path(spec[3:]))
    raise ConeError(f"unknown model {spec!r}; choose from {', '.join(MODEL_NAMES)} or st:PATH")
