"""A small GPT-style decoder (pre-LayerNorm, causal attention, tied weights), nanoGPT-shaped.

The embedding table ``wte`` is also the output layer, so every token's row receives the
cross-entropy gradient as a negative at every position: the cause of the cone.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from cone.errors import InputError


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 16_392
    n_embd: int = 256
    n_layer: int = 4
    n_head: int = 4
    block_size: int = 128
    pad_id: int = 0

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not isinstance(value, int) or isinstance(value, bool) or value < (0 if name == "pad_id" else 1):
                raise InputError(
                    f"model setting {name} must be a {'non-negative' if name == 'pad_id' else 'positive'} "
                    f"integer, got {value!r}"
                )
        if self.n_embd % self.n_head:
            raise InputError(f"n_embd {self.n_embd} is not divisible by n_head {self.n_head}")
        if self.pad_id >= self.vocab_size:
            raise InputError(f"pad_id {self.pad_id} is outside the vocabulary of {self.vocab_size}")

    def to_dict(self) -> dict:
        return asdict(self)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)

    def forward(self, x: torch.Tensor, key_padding: torch.Tensor | None) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        if key_padding is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            mask = causal[None, None] & key_padding[:, None, None, :]
            mask = mask | torch.eye(t, dtype=torch.bool, device=x.device)  # a pad row still sees itself
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.n_embd, 4 * cfg.n_embd), nn.GELU(), nn.Linear(4 * cfg.n_embd, cfg.n_embd)
        )

    def forward(self, x: torch.Tensor, key_padding: torch.Tensor | None) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), key_padding)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def hidden_states(
        self, idx: torch.Tensor, key_padding: torch.Tensor | None = None, dropout: float = 0.0
    ) -> list[torch.Tensor]:
        """[input embeddings (token + position), after block 1, ..., final LayerNorm output].

        ``dropout`` (in training mode only) drops units of the input embeddings and of each block's output: the
        noise SimCSE's two views of one sentence differ by. Pre-training uses none."""
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = F.dropout(self.wte(idx) + self.wpe(pos), dropout, self.training)
        states = [x]
        for block in self.blocks:
            x = F.dropout(block(x, key_padding), dropout, self.training)
            states.append(x)
        states[-1] = self.ln_f(x)
        return states

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Final hidden states (B, T, C); logits are ``hidden @ wte.weight.T`` (tied)."""
        return self.hidden_states(idx)[-1]

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden @ self.wte.weight.T
