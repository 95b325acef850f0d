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


def load_encoder(spec: str, checkpoints: Path = REFERENCE_CHECKPOINTS, layer: str | int = "last") -> Encoder:
    """baseline | regularized | roberta | minilm | st:PATH. Raises ModelUnavailable, never substitutes."""
    if spec in LM_MODELS:
        from encoders.lm import LMEncoder

        path = Path(checkpoints) / spec
        if not (path / "config.json").is_file():
            raise ModelUnavailable(
                spec,
                f"no checkpoint at {path}",
                f"cone train --out {path}" + (" --reg-cos 0" if spec == "baseline" else ""),
            )
        return LMEncoder(spec, path, layer)
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
