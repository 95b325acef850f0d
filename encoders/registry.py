"""Model names -> encoders, in one table (``ENCODERS``): the project's LMs and their fine-tuned encoders, roberta,
minilm, e5, mpnet; and st:PATH for any sentence-transformers folder.

An encoder is one entry: how to tell from its files alone whether it can load (``missing``), how to load it run by a
runtime (``load``), whether it runs on a runtime other than torch, how much work it is to encode a corpus (the demo
builds the fastest first), and which folder of weights can change under a served index (the service reloads then).
Adding an encoder is one module that makes its ``EncoderEntry`` and one line of ``ENCODERS``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from cone.encoders import e5, minilm, mpnet, roberta
from cone.encoders.base import TORCH, EncoderEntry, Layer, LayeredEncoder, Runtime
from cone.errors import InputError, ModelUnavailable
from cone.models.checkpoint import FINETUNED_MODELS, LM_MODELS, checkpoints_dir

ST_PREFIX = "st:"


def _checkpoint(name: str) -> Callable[[Path | None], Path]:
    return lambda checkpoints: checkpoints_dir(checkpoints) / name


def _checkpoint_missing(name: str, checkpoints: Path | None) -> ModelUnavailable | None:
    path = checkpoints_dir(checkpoints) / name
    if (path / "config.json").is_file() and (name in LM_MODELS or (path / "modules.json").is_file()):
        return None
    if name in FINETUNED_MODELS:
        return ModelUnavailable(name, f"no checkpoint at {path}", f"cone finetune --from {name[:-3]} --out {path}")
    fix = f"cone train --out {path}" + (" --reg-cos 0" if name == "baseline" else "")
    return ModelUnavailable(name, f"no checkpoint at {path}", fix)


def _language_model(name: str) -> EncoderEntry:
    def load(runtime: Runtime, checkpoints: Path | None, data_root: Path | None) -> LayeredEncoder:
        from cone.encoders.st import language_model

        return language_model(name, checkpoints_dir(checkpoints) / name)

    return EncoderEntry(
        load, lambda c: _checkpoint_missing(name, c), work=4 * 256, torch_only=True, weights=_checkpoint(name)
    )


def _fine_tuned(name: str) -> EncoderEntry:
    def load(runtime: Runtime, checkpoints: Path | None, data_root: Path | None) -> LayeredEncoder:
        from cone.encoders.st import sentence_transformer_dir

        return sentence_transformer_dir(name, checkpoints_dir(checkpoints) / name, runtime, data_root)

    # A fine-tuned LM runs on torch only too; sentence_transformer_dir says so with the reason.
    return EncoderEntry(load, lambda c: _checkpoint_missing(name, c), work=4 * 256 + 1, weights=_checkpoint(name))


ENCODERS: dict[str, EncoderEntry] = {
    **{name: _language_model(name) for name in LM_MODELS},
    **{name: _fine_tuned(name) for name in FINETUNED_MODELS},
    "roberta": roberta.ENTRY,
    "minilm": minilm.ENTRY,
    "e5": e5.ENTRY,
    "mpnet": mpnet.ENTRY,
}


ENCODER_NAMES = tuple(ENCODERS)  # what --model's help and the default --models list; a test may add to ENCODERS


def _st_entry(spec: str) -> EncoderEntry:
    def load(runtime: Runtime, checkpoints: Path | None, data_root: Path | None) -> LayeredEncoder:
        from cone.encoders.st import sentence_transformer_dir

        folder = Path(spec[len(ST_PREFIX) :])
        if (folder / "token_counts.safetensors").is_file() and not (folder / "modules.json").is_file():
            raise InputError(
                f"{spec}: a cone language-model checkpoint, not a sentence-transformers folder (name it in "
                f"--checkpoints as baseline/ or regularized/, or make an encoder of it: cone finetune --from "
                f"{folder} --out DIR)"
            )
        return sentence_transformer_dir(spec, folder, runtime, data_root)

    return EncoderEntry(load, lambda c: None, work=float("inf"), weights=lambda c: Path(spec[len(ST_PREFIX) :]))


def entry(spec: str, names: tuple[str, ...] | None = None) -> EncoderEntry:
    """The entry of ``spec`` (a name of ``ENCODERS`` or st:PATH); a one-line InputError for any other name, naming
    ``names`` (the encoders', or the longer list of a caller that takes other names beside them)."""
    if spec.startswith(ST_PREFIX):
        return _st_entry(spec)
    if spec not in ENCODERS:
        raise InputError(f"unknown model {spec!r}; choose from {', '.join(names or tuple(ENCODERS))} or st:PATH")
    return ENCODERS[spec]


def check_model_name(spec: str, names: tuple[str, ...] | None = None) -> None:
    """Refuse a name that is not st:PATH nor one of ``names`` (default: the encoders')."""
    if spec not in (names or ()):
        entry(spec, names)


def missing(spec: str, checkpoints: Path | None = None) -> ModelUnavailable | None:
    """Why a named model's weights are absent, from its files alone (nothing loaded); None if they look present
    (or ``spec`` is not an encoder: bm25 needs no weights).

    A model that passes may still fail to load (e.g. corrupt weights); ``load_encoder`` says so then.
    """
    if spec not in ENCODERS:
        return None
    return ENCODERS[spec].missing(checkpoints)


def load_encoder(
    spec: str,
    checkpoints: Path | None = None,
    layer: Layer = "last",
    runtime: Runtime = TORCH,
    data_root: Path | None = None,
) -> LayeredEncoder:
    """A named encoder or st:PATH, pooled from ``layer``, its forward pass run by ``runtime``. Raises
    ModelUnavailable, never substitutes.

    ``checkpoints``: the folder of the LMs (default ``checkpoints_dir()``: $CONE_CHECKPOINTS or the shipped ones).
    ``data_root``: the data dir whose LM text calibrates a first int8 export (default ``data_dir()``).
    """
    found = entry(spec)
    if found.torch_only and runtime != TORCH:
        raise InputError(f"{spec} runs on torch only (--backend {runtime.backend}: not for the project's LMs)")
    if (absent := found.missing(checkpoints)) is not None:
        raise absent
    return found.load(runtime, checkpoints, data_root).at_layer(layer)


def build_rank(spec: str) -> tuple[float, int]:
    """The work of encoding a corpus with ``spec`` (the demo builds the fastest first; st:PATH, unknown, last), then
    its place in ``ENCODERS`` (equal work: the table's order, baseline before regularized)."""
    order = list(ENCODERS)
    return entry(spec).work, order.index(spec) if spec in ENCODERS else len(order)


def changing_weights(spec: str, checkpoints: Path | None) -> Path | None:
    """The folder of ``spec``'s weights where it can change under a served index (a checkpoint, st:PATH); None
    for weights installed as a package."""
    return entry(spec).weights(checkpoints) if spec.startswith(ST_PREFIX) or spec in ENCODERS else None


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
