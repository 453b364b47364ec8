"""A small language model written as a user would: a custom RMSNorm, a rotary embedding, an
attention with a padding mask and position ids, a gated MLP with a hand-written activation
(an autograd.Function), decoder blocks. ``build(bug=...)`` plants one bug in one layer:

- ``"batch"``: RMSNorm's mean is taken over the whole batch, not each token (observations);
- ``"grad"``: the activation's hand-written backward drops a term (gradients).
"""

from __future__ import annotations

import torch
from torch import nn


class SiLUFn(torch.autograd.Function):
    """x * sigmoid(x) with a hand-written backward."""

    @staticmethod
    def forward(ctx, x, wrong=False):
        ctx.save_for_backward(x)
        ctx.wrong = wrong
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        if ctx.wrong:
            return grad * s, None  # the x * s * (1 - s) term dropped
        return grad * (s + x * s * (1 - s)), None


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6, bug=False):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim) + 0.1 * torch.randn(dim))
        self.eps = eps
        self.bug = bug

    def forward(self, x):
        ms = x.pow(2).mean() if self.bug else x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(ms + self.eps) * self.weight


class Rotary(nn.Module):
    def __init__(self, dim, base=10000.0):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / base ** (torch.arange(0, dim, 2).float() / dim), persistent=False)

    def forward(self, q, k, position_ids):
        freqs = position_ids[..., None].float() * self.inv_freq  # B, T, D/2
        cos, sin = freqs.cos()[:, None], freqs.sin()[:, None]  # B, 1, T, D/2

        def rotate(x):
            a, b = x.chunk(2, dim=-1)
            return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)

        return rotate(q), rotate(k)


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)
        self.rotary = Rotary(dim // heads)

    def forward(self, x, attention_mask, position_ids):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k = self.rotary(q, k, position_ids)
        scores = q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        allowed = causal & attention_mask[:, None, None, :]
        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
        y = scores.softmax(-1) @ v
        return self.out(y.transpose(1, 2).reshape(b, t, d))


class GatedMLP(nn.Module):
    def __init__(self, dim, hidden, bug=False):
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)
        self.bug = bug

    def forward(self, x):
        return self.down(SiLUFn.apply(self.gate(x), self.bug) * self.up(x))


class Block(nn.Module):
    def __init__(self, dim, heads, bug=None):
        super().__init__()
        self.norm1 = RMSNorm(dim, bug=bug == "batch")
        self.attn = Attention(dim, heads)
        self.norm2 = RMSNorm(dim)
        self.mlp = GatedMLP(dim, 2 * dim, bug=bug == "grad")

    def forward(self, x, attention_mask, position_ids):
        x = x + self.attn(self.norm1(x), attention_mask, position_ids)
        return x + self.mlp(self.norm2(x))


class TinyLM(nn.Module):
    def __init__(self, vocab=50, dim=16, heads=2, layers=2, bug=None):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList([Block(dim, heads, bug if i == 1 else None) for i in range(layers)])
        self.norm = RMSNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, input_ids, attention_mask):
        position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        x = self.embed(input_ids)
        for block in self.blocks:
            x = block(x, attention_mask, position_ids)
        return self.head(self.norm(x))


def build(bug=None):
    return TinyLM(bug=bug)
