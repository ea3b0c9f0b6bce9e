"""A PyTorch GPT with the attribute names of sw.models.gpt, so that state_dict() keys are the
graph's parameter names (tests only; needs torch)."""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class Attention(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.proj = (nn.Linear(d, d) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, t, d = x.shape
        q, k, v = (f(x).view(n, t, self.heads, d // self.heads).transpose(1, 2) for f in (self.q, self.k, self.v))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(o.transpose(1, 2).reshape(n, t, d))


class MLP(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.fc, self.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln_1, self.attn, self.ln_2, self.mlp = nn.LayerNorm(d), Attention(d, heads), nn.LayerNorm(d), MLP(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TorchGPT(nn.Module):
    def __init__(self, layers: int, d: int, heads: int, seq: int, vocab: int) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.h = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f, self.lm_head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1]))
        for b in self.h:
            x = b(x)
        return self.lm_head(self.ln_f(x))

    def loss(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = self.forward(ids)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
