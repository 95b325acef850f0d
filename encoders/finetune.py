"""From language model to search model: one contrastive recipe for every starting checkpoint, trained by
sentence-transformers' trainer and losses over the GPT wrapped as their input module.

Data, from the data dir only and never a test split: SciFact **train** qrels (claim -> cited abstract,
MultipleNegativesRankingLoss with in-batch negatives), STS-B **train** (CoSENTLoss on the gold scores) and
unsupervised SimCSE pairs (an LM-text sentence and itself; dropout makes the two views differ; MNRL).
"""

from __future__ import annotations

import json
import math
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from cone.data.loaders import doc_text, lm_text_files, load_beir, load_sts
from cone.errors import InputError, Interrupted, ModelUnavailable
from cone.geometry import measure
from cone.geometry.regularizer import reg_cos
from cone.models.corpus import read_documents, split

if TYPE_CHECKING:  # the module imports sentence-transformers: `cone --help` need not
    from cone.encoders.gpt_module import GPTTokenEmbeddings

SOURCES = ("scifact", "sts", "simcse")
LOG = "finetune_log.jsonl"
PROBE_SENTENCES = 1000  # STS-B dev sentences whose space the log measures (dev: never trained on, never tested)


@dataclass(frozen=True)
class FinetuneConfig:
    """Everything that decides a fine-tune's result; saved in the output's config.json under "finetune"."""

    sources: tuple[str, ...] = SOURCES
    max_steps: int = 600
    batch_size: int = 32
    lr: float = 1e-4
    warmup_ratio: float = 0.1
    seed: int = 0
    dropout: float = 0.1  # SimCSE's noise; also regularizes the supervised losses
    simcse_sentences: int = 10_000
    reg_cos: float = 0.0  # λ of reg_cos on each batch's sentence embeddings (0: off)
    eval_steps: int = 100
    bf16: bool = False
    source_checkpoint: str = ""
    data_dir: str = ""

    def __post_init__(self) -> None:
        unknown = [s for s in self.sources if s not in SOURCES]
        if unknown or not self.sources:
            raise InputError(f"--mix: unknown or no source {unknown[:1] or ''}; choose from {', '.join(SOURCES)}")
        if not 0.0 <= self.dropout < 1.0:
            raise InputError(f"--dropout must be in [0, 1), got {self.dropout}")


def _normal(text: str) -> str:
    return " ".join(text.lower().split())


def measured_split_texts(root: Path) -> set[str]:
    """Every text of the splits that are measured, never trained on (normalized): STS-B dev and test sentences
    and the SciFact test claims. lmtext shares sentences with STS-B (both draw on the MSR paraphrase corpus:
    238 of STS-B test's sentences are lmtext lines), and two SciFact claims occur in both train and test."""
    texts = set()
    for name in ("dev", "test"):
        if (root / "stsb" / f"{name}.csv").is_file():
            pairs = load_sts(root / "stsb" / f"{name}.csv")
            texts |= {_normal(t) for t in pairs.sentence1 + pairs.sentence2}
    if (root / "scifact" / "qrels" / "test.tsv").is_file():
        test = load_beir(root, "scifact", split="test")
        texts |= {_normal(test.queries[q]) for q in test.qrels if q in test.queries}
    return texts


def training_pairs(root: Path, cfg: FinetuneConfig) -> dict[str, dict[str, list]]:
    """Each source's columns (anchor, positive[, score]), in a fixed order: train splits only, and no text that
    a measured split holds (``measured_split_texts``)."""
    held_out = measured_split_texts(root)
    found: dict[str, dict[str, list]] = {}
    if "scifact" in cfg.sources:
        train = load_beir(root, "scifact", split="train")
        judged = [(q, d) for q in sorted(train.qrels) for d, grade in sorted(train.qrels[q].items()) if grade > 0]
        pairs = [
            (train.queries[q], doc_text(train.corpus[d]))
            for q, d in judged
            if q in train.queries and d in train.corpus and _normal(train.queries[q]) not in held_out
        ]
        found["scifact"] = {"anchor": [a for a, _ in pairs], "positive": [p for _, p in pairs]}
    if "sts" in cfg.sources:
        sts = load_sts(root / "stsb" / "train.csv")
        top = max(sts.scores)
        found["sts"] = {
            "sentence1": sts.sentence1,
            "sentence2": sts.sentence2,
            "score": [s / top for s in sts.scores],
        }
    if "simcse" in cfg.sources:
        files = lm_text_files(root, "SimCSE")
        # The LM's training split only (its validation split stays held out for the heading test), minus
        # every measured sentence.
        train_docs = split(read_documents(files))[0]
        sentences = [s for s in train_docs if len(s.split()) >= 4 and _normal(s) not in held_out]
        rng = np.random.default_rng(cfg.seed)
        picked = rng.permutation(len(sentences))[: cfg.simcse_sentences]
        found["simcse"] = {"anchor": [sentences[i] for i in picked], "positive": [sentences[i] for i in picked]}
    return found


class WithRegCos(torch.nn.Module):
    """A sentence-transformers loss plus λ · reg_cos of the batch's first column's sentence embeddings: the
    regularizer applied where retrieval happens, the sentence space. One forward pass per column, shared by both
    terms (the inner loss takes the embeddings through its public ``compute_loss_from_embeddings``)."""

    def __init__(self, model, inner: torch.nn.Module, weight: float) -> None:
        super().__init__()
        self.model, self.inner, self.weight = model, inner, weight

    def forward(self, sentence_features, labels):
        embeddings = [self.model(features)["sentence_embedding"] for features in sentence_features]
        loss = self.inner.compute_loss_from_embeddings(embeddings, labels)
        return loss + self.weight * reg_cos(embeddings[0], n=len(embeddings[0]))


def _losses(model, sources: list[str], weight: float) -> dict:
    from sentence_transformers.sentence_transformer.losses import CoSENTLoss, MultipleNegativesRankingLoss

    ranking = MultipleNegativesRankingLoss(model)
    chosen = {s: CoSENTLoss(model) if s == "sts" else ranking for s in sources}
    return {s: WithRegCos(model, loss, weight) if weight > 0 else loss for s, loss in chosen.items()}


def _probe(root: Path) -> tuple[list[str], list[str], np.ndarray]:
    dev = load_sts(root / "stsb" / "dev.csv")
    n = PROBE_SENTENCES // 2
    return dev.sentence1[:n], dev.sentence2[:n], np.asarray(dev.scores[:n])


def _make_logger(model, module: GPTTokenEmbeddings, root: Path, cfg: FinetuneConfig, log_file, started: float):
    """A trainer callback: at every ``eval_steps`` (and the last step), the STS-B dev Spearman and every
    instrument on the dev sentences' embeddings, one JSON line each, flushed as it goes."""
    from scipy.stats import spearmanr
    from transformers import TrainerCallback

    first, second, gold = _probe(root)

    class GeometryLog(TrainerCallback):
        written = -1

        def on_log(self, args, state, control, logs=None, **kwargs):
            logs = logs or {}
            final = "train_runtime" in logs and self.written != state.global_step
            if "loss" not in logs and not final:
                return
            a = model.encode(first, batch_size=128, convert_to_numpy=True)
            b = model.encode(second, batch_size=128, convert_to_numpy=True)
            cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
            record = {
                "step": state.global_step,
                "tokens": module.tokens_seen,
                "train_loss": float(logs["loss"]) if "loss" in logs else None,  # mean over the last eval_steps
                "lr": logs.get("learning_rate"),
                "sts_dev_spearman": float(spearmanr(cos, gold).statistic),
                **measure(np.concatenate([a, b])).model_dump(exclude_none=True),
                "elapsed_s": time.perf_counter() - started,
            }
            log_file.write(json.dumps(record) + "\n")
            log_file.flush()
            self.written = state.global_step

    return GeometryLog()


def finetune(
    source: Path, out: Path, root: Path, cfg: FinetuneConfig, progress: bool = True,
    on_model: Callable | None = None,
) -> Path:  # fmt: skip
    """Fine-tune the checkpoint ``source`` into a sentence encoder saved at ``out``; Ctrl-C saves what is trained
    so far (Interrupted). ``on_model`` sees the model before training (tests)."""
    try:
        from datasets import Dataset
        from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    except ImportError as exc:
        raise ModelUnavailable("finetune", f"{exc.name} is not installed", "pip install 'cone[finetune]'") from None
    from cone.encoders.gpt_module import sentence_model

    if (out / "modules.json").exists():
        raise InputError(f"{out} already holds a model; choose another --out")
    data = training_pairs(root, cfg)
    torch.manual_seed(cfg.seed)
    model = sentence_model(source)
    module: GPTTokenEmbeddings = model[0]
    module.dropout = cfg.dropout
    if on_model is not None:
        on_model(model)
    args = SentenceTransformerTrainingArguments(
        output_dir=str(out / ".trainer"),
        max_steps=cfg.max_steps,
        per_device_train_batch_size=cfg.batch_size,
        learning_rate=cfg.lr,
        warmup_steps=math.ceil(cfg.warmup_ratio * cfg.max_steps),
        seed=cfg.seed,
        data_seed=cfg.seed,
        bf16=cfg.bf16,
        use_cpu=True,
        logging_steps=cfg.eval_steps,  # each log is a line of OUT/finetune_log.jsonl
        save_strategy="no",
        report_to=[],
        disable_tqdm=not progress,
        batch_sampler="no_duplicates",  # MNRL: a duplicate in the batch would be a false negative
        # Each source in turn: in proportion to size, SciFact's 919 pairs would be a tenth of the batches.
        multi_dataset_batch_sampler="round_robin",
        dataloader_drop_last=True,
    )
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with (out / LOG).open("w", encoding="utf-8") as log_file:
        trainer = SentenceTransformerTrainer(
            model=model,
            args=args,
            train_dataset={name: Dataset.from_dict(columns) for name, columns in data.items()},
            loss=_losses(model, list(data), cfg.reg_cos),
            callbacks=[_make_logger(model, module, root, cfg, log_file, started)],
        )
        try:
            trainer.train()
        except KeyboardInterrupt:
            _save(model, module, out, cfg, trainer.state.global_step, started)
            raise Interrupted(f"the model trained so far is saved in {out}") from None
        except Exception:
            if created:  # no folder holding only a log
                shutil.rmtree(out, ignore_errors=True)
            raise
    _save(model, module, out, cfg, trainer.state.global_step, started)
    return out


def _save(model, module: GPTTokenEmbeddings, out: Path, cfg: FinetuneConfig, steps: int, started: float) -> None:
    module.dropout = 0.0
    module.meta = {
        **module.meta,
        "finetune": {**asdict(cfg), "steps": steps, "tokens_seen": module.tokens_seen,
                     "seconds": round(time.perf_counter() - started, 1)},
    }  # fmt: skip
    model.save(str(out), create_model_card=False)  # a card would quote training pairs: data stays out
    shutil.rmtree(out / ".trainer", ignore_errors=True)
