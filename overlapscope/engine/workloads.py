"""Built-in workloads with data synthesised in-process (no downloads).

``gpt``: a GPT-style decoder (token + position embeddings, pre-norm blocks of causal
self-attention and a 4x MLP, final norm, untied head); units ``blocks.0 .. blocks.{L-1}``.
``mlp``: a stack of ``Linear + GELU`` layers with a regression head; units ``layers.*``.
Each model's ``forward(inputs, targets)`` returns the mean loss over its local batch.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from overlapscope.config import ModelConfig, ModelKind


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.out = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab, cfg.dim)
        self.pos = nn.Embedding(cfg.seq_len, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg.dim, cfg.heads) for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab, bias=False)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


class MLPLayer(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.linear = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.gelu(self.linear(x))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(MLPLayer(cfg.dim) for _ in range(cfg.layers))
        self.head = nn.Linear(cfg.dim, cfg.dim)

    def forward(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return F.mse_loss(self.head(x).float(), targets)


def build_model(cfg: ModelConfig, seed: int) -> tuple[nn.Module, list[str]]:
    """The model (identical on every rank for a seed) and its unit names."""
    torch.manual_seed(seed)
    match cfg.kind:
        case ModelKind.GPT:
            return GPT(cfg), [f"blocks.{i}" for i in range(cfg.layers)]
        case ModelKind.MLP:
            return MLP(cfg), [f"layers.{i}" for i in range(cfg.layers)]
    raise ValueError(f"unknown model kind {cfg.kind!r}")


def global_batch(
    cfg: ModelConfig, batch: int, step: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole step's batch, the same on every rank (each rank then takes its rows)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    match cfg.kind:
        case ModelKind.GPT:
            tokens = torch.randint(0, cfg.vocab, (batch, cfg.seq_len + 1), generator=g)
            return tokens[:, :-1], tokens[:, 1:]
        case ModelKind.MLP:
            x = torch.randn(batch, cfg.seq_len, cfg.dim, generator=g)
            y = torch.randn(batch, cfg.seq_len, cfg.dim, generator=g) / math.sqrt(cfg.dim)
            return x, y
    raise ValueError(f"unknown model kind {cfg.kind!r}")


def local_rows(t: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Rank ``rank``'s contiguous share of a global batch (batch must divide evenly)."""
    per = t.shape[0] // world_size
    return t[rank * per : (rank + 1) * per]
