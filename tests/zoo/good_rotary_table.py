"""Correct: a rotary-embedding table as Hugging Face's LlamaRotaryEmbedding computes it: cos and
sin of the positions times fixed frequencies, under no_grad, with the hidden states read for
their dtype only. No output carries a gradient and none should: the hidden states' values do
not change the outputs and the layer has nothing to learn, so the gradient checks have nothing
to judge (skipped), and nothing fails."""

import torch
from torch import nn

LAYOUTS = ["2,5,8:BTC", "2,5:BT dtype=int64 values=0:64"]
EXPECT_FAIL: set[str] = set()


class RotaryTable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, 8, 2) / 8), persistent=False)

    @torch.no_grad()
    def forward(self, x, position_ids):
        angles = position_ids[..., None].float() * self.inv_freq
        emb = torch.cat((angles, angles), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


LAYER = RotaryTable
