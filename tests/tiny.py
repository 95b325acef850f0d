"""Tiny model and training settings shared by the tests: a few seconds of training on two cores."""

from __future__ import annotations

import threading

import numpy as np

from cone.models.gpt import GPTConfig
from cone.models.train import TrainConfig


def unit_rows(n: int, d: int, seed: int = 0, offset: float = 0.0) -> np.ndarray:
    """n random unit rows of d (shifted by ``offset`` before normalizing: a cone's shared direction, all ones)."""
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32) + offset
    return x / np.linalg.norm(x, axis=1, keepdims=True)


TINY = GPTConfig(vocab_size=300, n_embd=32, n_layer=2, n_head=2, block_size=16)


def tiny_cfg(reg: float, tokens: int = 8 * 16 * 24, eval_interval: int = 6) -> TrainConfig:
    return TrainConfig(
        tokens=tokens,
        batch_size=8,
        lr=1e-2,
        min_lr=1e-3,
        warmup_steps=2,
        reg_cos=reg,
        reg_rows=128,
        eval_interval=eval_interval,
        eval_batches=2,
        bf16=False,
        block_size=16,
    )


def folder_name(model: str, postprocess: str = "none", layer="last", factory: str = "Flat", runtime=None) -> str:
    """The folder cone names that index (cone.indexing.spec.IndexSpec.folder_name)."""
    from cone.encoders.base import TORCH
    from cone.indexing.spec import IndexSpec, parse_index_type

    return IndexSpec(model, parse_index_type(factory), postprocess, layer, runtime or TORCH).folder_name()


def build_tiny_indexes(root, beir_root, checkpoints, dense: list[tuple[str, str]]):
    """Index folders over the tiny BEIR dataset: ``dense`` (model, post-processing) pairs, then bm25."""
    from cone.data.loaders import load_beir
    from cone.encoders.registry import load_encoder
    from cone.indexing.dense import build_dense
    from cone.indexing.lexical import build_bm25

    ds = load_beir(beir_root, "tiny")
    for model, spec in dense:
        build_dense(load_encoder(model, checkpoints), ds, root / folder_name(model, spec), spec, progress=False)
    build_bm25(ds, root / "bm25", progress=False)
    return root


def hold_after_first_batch(monkeypatch, model: str) -> threading.Event:
    """``model``'s encoder returns its first batch, then waits for the returned event before each next one: a
    build that stays in progress as long as a test needs (no sleeps in the code under test)."""
    from cone.encoders.st import SentenceTransformerEncoder

    release, calls = threading.Event(), []
    original = SentenceTransformerEncoder.encode

    def held(self, texts, *args, **kwargs):
        if self.name == model:
            calls.append(len(texts))
            if len(calls) > 1:
                assert release.wait(120), f"{model}'s build was never released"
        return original(self, texts, *args, **kwargs)

    monkeypatch.setattr(SentenceTransformerEncoder, "encode", held)
    return release


def train_cut_at(step: int, out, corpus, cfg: TrainConfig, model_cfg: GPTConfig, monkeypatch) -> None:
    """Train into ``out`` as Ctrl-C at ``step`` leaves it (the checkpoint that KeyboardInterrupt saves)."""
    import pytest

    from cone.models import train as train_module

    real_step = train_module.train_step

    def interrupt(model, opt, cfg, x, at):
        if at == step:
            raise KeyboardInterrupt
        return real_step(model, opt, cfg, x, at)

    monkeypatch.setattr(train_module, "train_step", interrupt)
    with pytest.raises(KeyboardInterrupt):
        train_module.train(out, [corpus], cfg, model_cfg, progress=False)
    monkeypatch.setattr(train_module, "train_step", real_step)
