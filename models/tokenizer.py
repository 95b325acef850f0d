"""Byte-level BPE (Hugging Face ``tokenizers``) with an exact vocabulary size."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from cone.errors import InputError

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
SPECIAL_TOKENS = [PAD, EOS, UNK]


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    """Train byte-level BPE to exactly ``vocab_size`` entries (specials included).

    All 256 byte symbols are in the alphabet whether or not the text uses them, so some
    entries (unused bytes) are never seen in training: the unseen-token test needs them.
    """
    tok = Tokenizer(models.BPE(unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    if tok.get_vocab_size() != vocab_size:
        raise InputError(
            f"the corpus supports only {tok.get_vocab_size()} BPE entries, fewer than --vocab-size {vocab_size}"
        )
    return tok


def load_tokenizer(path: Path) -> Tokenizer:
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception on bad JSON
        raise InputError(f"{path}: not a readable tokenizer.json ({exc})") from None


def padded_batch(
    tokenizer: Tokenizer, texts: list[str], max_len: int, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids (truncated to ``max_len``; an empty text is one pad) padded to the longest, and the mask of
    real tokens: what every sentence encoder of a cone LM feeds it."""
    encoded = [enc.ids[:max_len] or [pad_id] for enc in tokenizer.encode_batch(texts)]
    width = max(len(ids) for ids in encoded)
    ids = torch.full((len(encoded), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(encoded), width), dtype=torch.long)
    for row, seq in enumerate(encoded):
        ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
    return ids, mask
