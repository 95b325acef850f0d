"""The project's GPT as a sentence-transformers input module: texts in, token embeddings (its final hidden
states) out; sentence-transformers' ``Pooling`` and ``encode``, losses and trainer do the rest. Every cone LM
encodes through it: the pre-trained checkpoints (``cone.encoders.registry``) and the fine-tuned ones.

Saved, the module's folder is a cone checkpoint (fp16 safetensors, config.json, tokenizer.json, token counts),
so a fine-tuned encoder is also a checkpoint that ``cone geometry checkpoint`` reads; sentence-transformers adds
its modules.json and the pooling folder beside it.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.base.modules import InputModule, Module
from sentence_transformers.sentence_transformer.modules import Pooling
from sentence_transformers.util import import_from_string
from tokenizers import Tokenizer

from cone.errors import ModelUnavailable
from cone.models.checkpoint import CONFIG, load_checkpoint, load_token_counts, save_checkpoint
from cone.models.gpt import GPT
from cone.models.tokenizer import padded_batch

MODULE_TYPE = f"{__name__}.GPTTokenEmbeddings"  # how modules.json names the class
ST_CONFIG = "config_sentence_transformers.json"  # prompts, similarity function, truncation: kept on reload
ST_SETTINGS = ("prompts", "default_prompt_name", "similarity_fn_name", "truncate_dim")
FINETUNE_FIX = "cone finetune --from CHECKPOINT --out DIR"
# The features key of the token-table rows of each token, no position added: what the LMs' layer ``emb`` pools
# (the table reg_cos acts on). Their hidden state 0 (``all_layer_embeddings[0]``) is tokens + positions.
TOKEN_TABLE = "token_table_embeddings"


class GPTTokenEmbeddings(InputModule):
    """Padded token ids -> the GPT's final hidden states as ``token_embeddings``, every hidden state as
    ``all_layer_embeddings`` (as a Transformer module gives them with ``output_hidden_states``). ``tokens_seen``
    counts the real (unpadded) tokens of every training forward pass: the fine-tune's token accounting.

    Module options (never saved): ``token_table`` adds the token-table rows as ``TOKEN_TABLE``; ``blocks`` False
    skips the blocks (no hidden states): for pooling the token table alone."""

    save_in_root = True

    def __init__(
        self,
        gpt: GPT,
        tokenizer: Tokenizer,
        token_counts: torch.Tensor,
        meta: dict,
        token_table: bool = False,
        blocks: bool = True,
    ) -> None:
        super().__init__()
        self.gpt, self.tokenizer, self.token_counts, self.meta = gpt, tokenizer, token_counts, meta
        self.token_table, self.blocks = token_table, blocks
        self.max_len = gpt.cfg.block_size
        self.pad_id = gpt.cfg.pad_id
        self.tokens_seen = 0
        self.dropout = 0.0  # set by the fine-tune (SimCSE needs it); never saved: inference runs without

    def get_embedding_dimension(self) -> int:
        return self.gpt.cfg.n_embd

    def with_outputs(self, token_table: bool, blocks: bool) -> GPTTokenEmbeddings:
        """The same weights and tokenizer (shared, not copied) with other module options."""
        return GPTTokenEmbeddings(self.gpt, self.tokenizer, self.token_counts, self.meta, token_table, blocks)

    def preprocess(self, inputs, prompt: str | None = None, **kwargs) -> dict[str, torch.Tensor]:
        texts = [prompt + text for text in inputs] if prompt else list(inputs)
        ids, mask = padded_batch(self.tokenizer, texts, self.max_len, self.pad_id)
        return {"input_ids": ids, "attention_mask": mask}

    def forward(self, features: dict, **kwargs) -> dict:
        ids, mask = features["input_ids"], features["attention_mask"]
        if self.training:
            self.tokens_seen += int(mask.sum())
        if self.token_table:
            features[TOKEN_TABLE] = self.gpt.wte(ids)
        if self.blocks:
            states = self.gpt.hidden_states(ids, mask.bool(), self.dropout)
            features["token_embeddings"], features["all_layer_embeddings"] = states[-1], states
        return features

    def save(self, output_path: str, *args, **kwargs) -> None:
        meta = {k: v for k, v in self.meta.items() if k != "model"}
        save_checkpoint(Path(output_path), self.gpt, self.tokenizer, self.token_counts, meta)

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", **kwargs) -> GPTTokenEmbeddings:
        folder = Path(model_name_or_path) / subfolder
        gpt, tokenizer, meta = load_checkpoint(folder)
        return cls(gpt, tokenizer, load_token_counts(folder), meta)


def sentence_model(checkpoint: Path) -> SentenceTransformer:
    """A cone checkpoint as a sentence-transformers model: GPT token embeddings + mean Pooling (the padding-masked
    mean of the final states)."""
    module = GPTTokenEmbeddings.load(str(checkpoint))
    pooling = Pooling(module.get_embedding_dimension(), pooling_mode="mean")
    return SentenceTransformer(modules=[module, pooling], device="cpu")


def is_gpt_sentence_model(path: Path) -> bool:
    modules = Path(path) / "modules.json"
    try:
        return modules.is_file() and any(m.get("type") == MODULE_TYPE for m in json.loads(modules.read_text()))
    except (ValueError, AttributeError, OSError):
        return False


def load_sentence_model(path: Path) -> SentenceTransformer:
    """A saved fine-tuned GPT encoder, composed from its modules.json by public calls: this module's class for
    its own type, sentence-transformers' modules for theirs. Any other type is refused: importing it would run
    code a folder's config names, which sentence-transformers allows only under ``trust_remote_code``."""
    folder = Path(path)
    if not (folder / CONFIG).is_file():
        raise ModelUnavailable(str(path), f"{path} has no {CONFIG}", FINETUNE_FIX)
    modules = [_module(folder, entry) for entry in _read_json(folder / "modules.json", list)]
    settings = _read_json(folder / ST_CONFIG, dict) if (folder / ST_CONFIG).is_file() else {}
    return SentenceTransformer(modules=modules, device="cpu", **{k: settings.get(k) for k in ST_SETTINGS})


def _read_json(file: Path, kind: type) -> list | dict:
    try:
        found = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelUnavailable(str(file.parent), f"{file.name} unreadable: {exc}", FINETUNE_FIX) from None
    if not isinstance(found, kind):
        raise ModelUnavailable(str(file.parent), f"{file.name} is not a JSON {kind.__name__}", FINETUNE_FIX)
    return found


def _module(folder: Path, entry: object) -> torch.nn.Module:
    """One modules.json entry, loaded from its subfolder (which must lie inside ``folder``)."""
    kind = entry.get("type") if isinstance(entry, dict) else None
    sub = entry.get("path", "") if isinstance(entry, dict) else None
    if not isinstance(kind, str) or not isinstance(sub, str) or Path(sub).is_absolute() or ".." in Path(sub).parts:
        raise ModelUnavailable(str(folder), f"modules.json has an entry cone cannot load: {entry!r}", FINETUNE_FIX)
    if kind == MODULE_TYPE:
        return GPTTokenEmbeddings.load(str(folder), subfolder=sub)
    if not kind.startswith("sentence_transformers."):
        raise ModelUnavailable(str(folder), f"its modules.json names {kind!r}, code cone does not run", FINETUNE_FIX)
    try:
        module_class = import_from_string(kind)
    except ImportError:
        module_class = None
    if not (isinstance(module_class, type) and issubclass(module_class, Module)):
        reason = f"its modules.json names {kind!r}, not a sentence-transformers module"
        raise ModelUnavailable(str(folder), reason, FINETUNE_FIX)
    return module_class.load(str(folder), subfolder=sub, local_files_only=True)
