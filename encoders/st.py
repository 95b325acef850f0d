"""Every dense encoder through sentence-transformers: a Transformer (or the cone GPT's module) + mean Pooling."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.base.modules import Module, Transformer
from sentence_transformers.sentence_transformer.modules import Pooling

from cone.encoders.base import (
    DOCUMENT,
    IN_PROCESS,
    QUERY,
    TORCH,
    Layer,
    Runtime,
    check_layer,
    files_fingerprint,
    layer_fingerprint,
)
from cone.encoders.gpt_module import (
    TOKEN_TABLE,
    GPTTokenEmbeddings,
    is_gpt_sentence_model,
    load_sentence_model,
    sentence_model,
)
from cone.errors import InputError, ModelUnavailable
from cone.models.checkpoint import WEIGHTS

# Nothing may be downloaded at run time: a missing model must fail fast, not hang or fetch. Passed to every
# load (instead of setting HF_HUB_OFFLINE for the whole process).
LOCAL_ONLY = {"local_files_only": True}


@contextmanager
def loading_quietly(report: bool = True) -> Iterator[None]:
    """transformers' own "Loading weights" bar off (the command has its bar, or --no-progress); its load report
    (keys unexpected or missing) too where ``report`` is False: for weights whose report is known harmless."""
    from transformers.utils import logging as hf_logging

    bars, verbosity = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    if not report:
        hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def _weight_files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.suffix in {".safetensors", ".bin"} and p.is_file()]


# Where a layer's token states are in the features: a hidden state's number in ``all_layer_embeddings``, or a
# features key (``TOKEN_TABLE``: the cone LMs' ``emb``).
StateSource = int | str


class LayerMeans(Module):
    """A sentence-transformers module: sentence-transformers' mean ``Pooling`` (the one padding-masked mean) of each
    chosen token state of the input module before it, side by side in one (batch, states x dim) vector, so one
    forward pass (with ST's batching and length sorting) yields every layer."""

    config_keys = ["sources"]

    def __init__(self, sources: list[StateSource], dim: int) -> None:
        super().__init__()
        self.sources = sources
        self.pooling = Pooling(dim, pooling_mode="mean")

    def forward(self, features: dict, **kwargs) -> dict:
        def tokens(source: StateSource) -> torch.Tensor:
            return features[source] if isinstance(source, str) else features["all_layer_embeddings"][source]

        pooled = [
            self.pooling({"token_embeddings": tokens(s), "attention_mask": features["attention_mask"]})
            for s in self.sources
        ]
        features["sentence_embedding"] = torch.cat([p["sentence_embedding"] for p in pooled], dim=1)
        return features

    def save(self, output_path: str, *args, **kwargs) -> None:
        self.save_config(output_path)


class SentenceTransformerEncoder:
    """Any sentence-transformers model; ``mean_pooling_of`` builds Transformer + mean Pooling, ``language_model``
    the cone GPT's module + mean Pooling.

    ``layer`` "last" is the model's own output (its pooling, its normalization); "emb" or a block number is
    the mean of that token state of its input module, before any pooling or normalization module (``emb``:
    ``base.Layer``). ``weights`` is the fingerprint of what runs: the torch weights, or an exported graph under
    ``runtime``."""

    encoded_on = IN_PROCESS

    def __init__(self, name: str, model, weights: str, layer: Layer = "last", runtime: Runtime = TORCH) -> None:
        self.name = name
        self.model = model
        self.runtime = runtime
        self.dim = int(model.get_embedding_dimension())
        self.weights = weights
        if layer != "last" and runtime != TORCH:
            raise InputError(f"{name}: --layer {layer} needs --backend torch (an exported graph gives only its output)")
        self.layer = check_layer(name, layer, self._blocks() if layer != "last" else 0)
        self.fingerprint = layer_fingerprint(weights, self.layer)

    def _input_module(self) -> Transformer | GPTTokenEmbeddings:
        first = self.model[0]
        if isinstance(first, GPTTokenEmbeddings):
            return first
        if not isinstance(first, Transformer) or not hasattr(first.model.config, "num_hidden_layers"):
            raise InputError(f"{self.name}: its first module is not a layered Transformer; only --layer last applies")
        return first

    def _blocks(self) -> int:
        first = self._input_module()
        return first.gpt.cfg.n_layer if isinstance(first, GPTTokenEmbeddings) else first.model.config.num_hidden_layers

    def _source(self, layer: Layer) -> StateSource:
        if layer != "emb":
            return int(layer)
        return TOKEN_TABLE if isinstance(self._input_module(), GPTTokenEmbeddings) else 0

    def _states_module(self, sources: list[StateSource]) -> Transformer | GPTTokenEmbeddings:
        """The input module, sharing its loaded weights, set to give the token states ``sources`` name."""
        first = self._input_module()
        if isinstance(first, GPTTokenEmbeddings):
            return first.with_outputs(TOKEN_TABLE in sources, any(isinstance(s, int) for s in sources))
        first.model.config.output_hidden_states = True  # Transformer then adds all_layer_embeddings
        return first

    def all_layers(self) -> list[Layer]:
        return ["emb", *range(1, self._blocks() + 1)] if self.runtime == TORCH else ["last"]

    def at_layer(self, layer: Layer) -> SentenceTransformerEncoder:
        return SentenceTransformerEncoder(self.name, self.model, self.weights, layer, self.runtime)

    def prompt(self, role: str) -> str | None:
        """The model's own prompt for ``role`` (sentence-transformers' names: ``query``; ``document``, ``passage``
        or ``corpus``), None where it has none."""
        prompts = self.model.prompts or {}
        names = ("query",) if role == QUERY else ("document", "passage", "corpus")
        return next((prompts[name] for name in names if prompts.get(name)), None)

    def _encode_states(
        self, texts: list[str], sources: list[StateSource], batch_size: int, progress: bool, role: str
    ) -> np.ndarray:
        modules = [self._states_module(sources), LayerMeans(sources, self.dim)]
        pooled = SentenceTransformer(modules=modules, device=self.model.device)
        vectors = pooled.encode(
            texts, prompt=self.prompt(role), batch_size=batch_size, show_progress_bar=progress, convert_to_numpy=True
        )
        return np.asarray(vectors, dtype=np.float32).reshape(len(texts), len(sources), -1)

    def encode_layers(
        self, texts: list[str], layers: list[Layer], batch_size: int = 64, progress: bool = False, role: str = DOCUMENT
    ) -> dict[Layer, np.ndarray]:
        layers = [self.at_layer(layer).layer for layer in dict.fromkeys(layers)]  # validated
        out: dict[Layer, np.ndarray] = {}
        if "last" in layers:
            vectors = self.model.encode(
                texts,
                prompt=self.prompt(role),
                batch_size=batch_size,
                show_progress_bar=progress,
                convert_to_numpy=True,
            )
            out["last"] = np.asarray(vectors, dtype=np.float32)
        inner = [layer for layer in layers if layer != "last"]
        if inner:
            sources = [self._source(layer) for layer in inner]
            stacked = self._encode_states(texts, sources, batch_size, progress, role)
            out |= {layer: np.ascontiguousarray(stacked[:, i]) for i, layer in enumerate(inner)}
        return {layer: out[layer] for layer in layers}

    def encode(
        self, texts: list[str], batch_size: int = 64, progress: bool = False, role: str = DOCUMENT
    ) -> np.ndarray:
        return self.encode_layers(texts, [self.layer], batch_size, progress, role)[self.layer]


def _run_by(
    name: str, model: SentenceTransformer, weights: str, runtime: Runtime, calibration_root: Path | None
) -> SentenceTransformerEncoder:
    if runtime == TORCH:
        return SentenceTransformerEncoder(name, model, weights)
    from cone.data.loaders import data_dir
    from cone.encoders.export import run_by

    exported, fingerprint = run_by(model, name, weights, runtime, data_dir(calibration_root))
    return SentenceTransformerEncoder(name, exported, fingerprint, runtime=runtime)


def language_model(name: str, checkpoint: Path) -> SentenceTransformerEncoder:
    """A cone LM checkpoint (baseline, regularized): its GPT module + mean Pooling, run by torch. Its fingerprint
    is that of the weights file alone (the token counts beside it do not change a vector)."""
    return SentenceTransformerEncoder(name, sentence_model(checkpoint), files_fingerprint([checkpoint / WEIGHTS]))


def mean_pooling_of(
    name: str, name_or_path: str, fix: str, runtime: Runtime = TORCH, calibration_root: Path | None = None
) -> SentenceTransformerEncoder:
    """Transformer(name_or_path) + mean Pooling, from a directory or the local HF cache only."""
    try:
        with loading_quietly():
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
    return _run_by(name, model, fingerprint, runtime, calibration_root)


def sentence_transformer_dir(
    name: str, path: Path, runtime: Runtime = TORCH, calibration_root: Path | None = None, report: bool = True
) -> SentenceTransformerEncoder:
    """A saved sentence-transformers model directory, with its own modules (pooling, normalize); ``runtime``
    other than torch exports it once (``cone.encoders.export``; int8 calibrates on ``calibration_root``'s text)."""
    path = Path(path)
    if not (path / "modules.json").is_file() and not (path / "config.json").is_file():
        raise ModelUnavailable(
            name,
            f"{path} is not a sentence-transformers model directory",
            "pass st:DIR with a directory saved by SentenceTransformer.save()",
        )
    if is_gpt_sentence_model(path):  # a `cone finetune` output: the GPT module, no exported graph
        if runtime != TORCH:
            raise InputError(f"{name} runs on torch only (a fine-tuned cone LM has no exported graph)")
        model = load_sentence_model(path)
    else:
        with loading_quietly(report):
            model = SentenceTransformer(str(path), device="cpu", **LOCAL_ONLY)
    return _run_by(name, model, files_fingerprint(_weight_files(path)), runtime, calibration_root)
