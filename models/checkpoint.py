"""Checkpoints: a folder of safetensors weights (fp16), config.json, tokenizer.json,
token_counts.safetensors (how often each id occurred in training) and the training log.
``resume.pt`` (fp32 master weights + optimizer) is written beside them for --resume only.
"""

from __future__ import annotations

import importlib.resources
import json
import os
import re
from dataclasses import fields
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import ErrorDetails
from safetensors import SafetensorError
from safetensors.torch import load_file, save
from tokenizers import Tokenizer

from cone.errors import InputError
from cone.models.gpt import GPT, GPTConfig
from cone.models.tokenizer import load_tokenizer

CHECKPOINTS_ENV = "CONE_CHECKPOINTS"
LM_MODELS = ("baseline", "regularized")
FINETUNED_MODELS = tuple(f"{name}-ft" for name in LM_MODELS)  # `cone finetune` of each, one seed, shipped too
WEIGHTS = "model.safetensors"
CONFIG = "config.json"
TOKENIZER = "tokenizer.json"
TOKEN_COUNTS = "token_counts.safetensors"
LOG = "train_log.jsonl"
RESUME = "resume.pt"
FORMAT = 1  # of config.json; written by save_checkpoint, absent in the first checkpoints (read as 1)


def checkpoints_dir(explicit: Path | None = None) -> Path:
    """--checkpoints if given, else $CONE_CHECKPOINTS, else the reference checkpoints installed with cone
    (package data of ``cone.checkpoints``: the repository's checkpoints/ folder in a development install)."""
    if explicit is not None:
        return Path(explicit)
    if os.environ.get(CHECKPOINTS_ENV):
        return Path(os.environ[CHECKPOINTS_ENV])
    return Path(str(importlib.resources.files("cone.checkpoints")))


def resolve_checkpoint(path: Path, checkpoints: Path | None = None) -> Path:
    """A checkpoint folder as given, or a reference model's name (baseline, regularized) in ``checkpoints_dir``."""
    if not Path(path).exists() and str(path) in LM_MODELS:
        return checkpoints_dir(checkpoints) / str(path)
    return Path(path)


def read_log(path: Path) -> list[dict]:
    """The records ``cone train`` appended to ``path``/train_log.jsonl, one per evaluation step."""
    return [json.loads(line) for line in (Path(path) / LOG).read_text().splitlines() if line.strip()]


def _atomic(path: Path, write) -> None:
    """``write`` a temporary file beside ``path``, then rename it over ``path``; on a failure it is removed."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _save_tensors(tensors: dict[str, torch.Tensor], path: Path) -> None:
    # safetensors' save_file writes its own .tmpXXXXXX with mode 0600 whatever the umask; plain open() follows it.
    path.write_bytes(save(tensors))


TMP_SUFFIX = ".tmp"
_STALE = re.compile(r"^\.tmp[A-Za-z0-9]{6}$")  # what safetensors' save_file leaves when killed mid-write


def remove_temporaries(out: Path) -> list[Path]:
    """Delete what a save killed midway left in the checkpoint folder ``out`` (NAME.tmp of its files, and
    safetensors' own .tmpXXXXXX); the paths removed."""
    names = {f"{name}{TMP_SUFFIX}" for name in (WEIGHTS, TOKEN_COUNTS, TOKENIZER, CONFIG, RESUME, LOG)}
    stale = [p for p in Path(out).glob("*") if p.is_file() and (p.name in names or _STALE.match(p.name))]
    for path in stale:
        path.unlink(missing_ok=True)
    return stale


def truncate_log(out: Path, step: int) -> None:
    """Keep the log's records up to ``step`` (the checkpoint's): a run killed after logging a step but before
    saving it logs that step again when resumed, and must log it once. A torn last line is dropped."""
    file = Path(out) / LOG
    if not file.is_file():
        return
    kept = []
    for line in file.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and isinstance(record.get("step"), int) and record["step"] <= step:
            kept.append(line + "\n")
    _atomic(file, lambda p: p.write_text("".join(kept), encoding="utf-8"))


def save_checkpoint(
    out: Path,
    model: GPT,
    tokenizer: Tokenizer,
    token_counts: torch.Tensor,
    meta: dict,
    resume_state: dict | None = None,
) -> None:
    """Write every file to a temporary name first, so a kill mid-save leaves the old files."""
    out.mkdir(parents=True, exist_ok=True)
    half = {k: v.detach().to(torch.float16).contiguous() for k, v in model.state_dict().items()}
    _atomic(out / WEIGHTS, lambda p: _save_tensors(half, p))
    _atomic(out / TOKEN_COUNTS, lambda p: _save_tensors({"counts": token_counts.contiguous()}, p))
    _atomic(out / TOKENIZER, lambda p: tokenizer.save(str(p)))
    payload = {"format": FORMAT, "model": model.cfg.to_dict(), **meta}
    _atomic(out / CONFIG, lambda p: p.write_text(json.dumps(payload, indent=2, default=str)))
    if resume_state is not None:
        _atomic(out / RESUME, lambda p: torch.save(resume_state, p))


class _ConfigKeys(BaseModel):
    """The keys of config.json every reader takes, as JSON types (strict: a count is never a boolean); others
    (a fine-tune's record) pass unchecked."""

    model_config = ConfigDict(strict=True, extra="ignore")

    format: Literal[1] = FORMAT
    model: dict[str, Any]
    train: dict[str, Any]
    step: int
    tokens_seen: int
    train_tokens_in_corpus: int
    val_tokens_in_corpus: int
    unseen_token_ids: int


def _explain(error: ErrorDetails) -> str:
    """One pydantic error as what is wrong with config.json: the key, what it holds, what it should."""
    key = ".".join(str(part) for part in error["loc"])
    if error["type"] == "model_type":
        return "not a JSON object"
    if error["type"] == "missing":
        return f"no {key!r}"
    if key == "format":
        return f"format {str(error['input'])[:20]!r} is not the {FORMAT} this cone reads"
    expected = _ConfigKeys.model_fields[key].annotation
    return f"{key!r} is {str(error['input'])[:30]!r}, not {getattr(expected, '__origin__', expected).__name__}"


def _check_config(payload: object) -> None:
    """A ValueError naming the first thing wrong with config.json's ``payload``."""
    try:
        _ConfigKeys.model_validate(payload)
    except ValidationError as exc:
        raise ValueError(_explain(exc.errors()[0])) from None
    absent = [f.name for f in fields(GPTConfig) if f.name not in payload["model"]]
    if absent:  # never a default in place of what the weights were trained with
        raise ValueError(f"no 'model.{absent[0]}'")
    model_config(payload)


def read_config(path: Path) -> dict:
    """config.json, checked against the schema ``save_checkpoint`` writes; a mismatch is one InputError."""
    file = path / CONFIG
    if not file.is_file():
        raise InputError(f"{path}: not a checkpoint (no {CONFIG})")
    try:
        payload = json.loads(file.read_text(encoding="utf-8"))
        _check_config(payload)
    except (ValueError, TypeError, InputError) as exc:  # JSON's and UTF-8's errors are ValueErrors
        raise InputError(f"{file}: corrupt checkpoint config ({exc})") from None
    return payload


def model_config(payload: dict) -> GPTConfig:
    """The model settings a checkpoint's config.json holds; InputError, TypeError or KeyError if they are bad."""
    return GPTConfig(**payload["model"])


def load_weights(model: GPT, file: Path) -> None:
    """Load safetensors into ``model``, refusing missing/extra keys and shape mismatches."""
    try:
        state = load_file(str(file))
    except (SafetensorError, OSError, ValueError) as exc:
        raise InputError(f"{file}: corrupt or unreadable weights ({exc})") from None
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    extra = sorted(set(state) - set(expected))
    if missing or extra:
        raise InputError(f"{file}: weights do not match config (missing {missing[:3]}, unexpected {extra[:3]})")
    for key, tensor in state.items():
        if tuple(tensor.shape) != tuple(expected[key].shape):
            raise InputError(
                f"{file}: {key} has shape {tuple(tensor.shape)} but the config needs {tuple(expected[key].shape)}"
            )
    model.load_state_dict({k: v.float() for k, v in state.items()})


def load_checkpoint(path: Path) -> tuple[GPT, Tokenizer, dict]:
    """The model (fp32, eval mode), its tokenizer and its config payload."""
    path = Path(path)
    if not path.is_dir():
        raise InputError(f"{path}: checkpoint folder not found")
    payload = read_config(path)
    model = GPT(model_config(payload))
    load_weights(model, path / WEIGHTS)
    tokenizer = load_tokenizer(path / TOKENIZER)
    if tokenizer.get_vocab_size() != model.cfg.vocab_size:
        raise InputError(
            f"{path}: tokenizer has {tokenizer.get_vocab_size()} entries, config says {model.cfg.vocab_size}"
        )
    return model.eval(), tokenizer, payload


def load_token_counts(path: Path) -> torch.Tensor:
    file = Path(path) / TOKEN_COUNTS
    try:
        return load_file(str(file))["counts"]
    except (SafetensorError, OSError, KeyError) as exc:
        raise InputError(f"{file}: missing or corrupt token counts ({exc})") from None
