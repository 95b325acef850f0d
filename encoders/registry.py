"""Model names -> encoders: the project's LMs and their fine-tuned encoders, roberta, minilm, st:PATH."""

from __future__ import annotations

from pathlib import Path

from cone.encoders.base import TORCH, Layer, LayeredEncoder, Runtime
from cone.errors import InputError, ModelUnavailable
from cone.models.checkpoint import FINETUNED_MODELS, LM_MODELS, checkpoints_dir

ENCODER_NAMES = (*LM_MODELS, *FINETUNED_MODELS, "roberta", "minilm")


def check_model_name(spec: str, names: tuple[str, ...] = ENCODER_NAMES) -> None:
    """Refuse a name that is not st:PATH nor one of ``names``: the encoders', or the longer list of a caller that
    takes other names beside them."""
    if spec not in names and not spec.startswith("st:"):
        raise InputError(f"unknown model {spec!r}; choose from {', '.join(names)} or st:PATH")


def _checkpoint_missing(spec: str, checkpoints: Path | None) -> ModelUnavailable | None:
    path = checkpoints_dir(checkpoints) / spec
    if (path / "config.json").is_file() and (spec in LM_MODELS or (path / "modules.json").is_file()):
        return None
    if spec in FINETUNED_MODELS:
        return ModelUnavailable(spec, f"no checkpoint at {path}", f"cone finetune --from {spec[:-3]} --out {path}")
    fix = f"cone train --out {path}" + (" --reg-cos 0" if spec == "baseline" else "")
    return ModelUnavailable(spec, f"no checkpoint at {path}", fix)


def missing(spec: str, checkpoints: Path | None = None) -> ModelUnavailable | None:
    """Why a named model's weights are absent, from its files alone (nothing loaded); None if they look present.

    A model that passes may still fail to load (e.g. corrupt weights); ``load_encoder`` says so then.
    """
    if spec in LM_MODELS or spec in FINETUNED_MODELS:
        return _checkpoint_missing(spec, checkpoints)
    if spec == "roberta":
        from cone.encoders.st import roberta_missing

        return roberta_missing()
    if spec == "minilm":
        from cone.encoders.st import minilm_missing

        return minilm_missing()
    return None


def load_encoder(
    spec: str,
    checkpoints: Path | None = None,
    layer: Layer = "last",
    runtime: Runtime = TORCH,
    data_root: Path | None = None,
) -> LayeredEncoder:
    """baseline | regularized | roberta | minilm | st:PATH, pooled from ``layer``, its forward pass run by
    ``runtime``. Raises ModelUnavailable, never substitutes.

    ``checkpoints``: the folder of the LMs (default ``checkpoints_dir()``: $CONE_CHECKPOINTS or the shipped ones).
    ``data_root``: the data dir whose LM text calibrates a first int8 export (default ``data_dir()``).
    """
    return _load(spec, checkpoints, runtime, data_root).at_layer(layer)


class Encoders:
    """Encoders by (model, layer, runtime), each loaded once by name (``load_encoder``) or given already loaded
    (``add``): what opens an index provides its encoder from here, so that every index of a model shares one."""

    def __init__(self, checkpoints: Path | None = None, *loaded: LayeredEncoder) -> None:
        self.checkpoints = checkpoints
        self._loaded: dict[tuple[str, Layer, Runtime], LayeredEncoder] = {}
        for encoder in loaded:
            self.add(encoder)

    def add(self, encoder: LayeredEncoder) -> LayeredEncoder:
        """Keep ``encoder`` (unless one of its model, layer and runtime is kept already); the one kept."""
        return self._loaded.setdefault((encoder.name, encoder.layer, encoder.runtime), encoder)

    def get(self, model: str, layer: Layer, runtime: Runtime) -> LayeredEncoder:
        """The encoder kept for ``model`` at ``layer`` run by ``runtime``, loaded now if none is."""
        key = (model, layer, runtime)
        if key not in self._loaded:
            self._loaded[key] = load_encoder(model, self.checkpoints, layer, runtime)
        return self._loaded[key]


def _load(spec: str, checkpoints: Path | None, runtime: Runtime, data_root: Path | None) -> LayeredEncoder:
    check_model_name(spec)
    from cone.encoders import st

    if spec in LM_MODELS:
        if runtime != TORCH:
            raise InputError(f"{spec} runs on torch only (--backend {runtime.backend}: roberta, minilm, st:PATH)")
        if (absent := _checkpoint_missing(spec, checkpoints)) is not None:
            raise absent
        return st.language_model(spec, checkpoints_dir(checkpoints) / spec)
    if spec in FINETUNED_MODELS:
        if (absent := _checkpoint_missing(spec, checkpoints)) is not None:
            raise absent
        return st.sentence_transformer_dir(spec, checkpoints_dir(checkpoints) / spec, runtime, data_root)
    if spec == "roberta":
        return st.roberta(runtime=runtime, calibration_root=data_root)
    if spec == "minilm":
        return st.minilm(runtime, data_root)
    folder = Path(spec[3:])
    if (folder / "token_counts.safetensors").is_file() and not (folder / "modules.json").is_file():
        raise InputError(
            f"{spec}: a cone language-model checkpoint, not a sentence-transformers folder (name it in --checkpoints "
            f"as baseline/ or regularized/, or make an encoder of it: cone finetune --from {folder} --out DIR)"
        )
    return st.sentence_transformer_dir(spec, folder, runtime, data_root)
