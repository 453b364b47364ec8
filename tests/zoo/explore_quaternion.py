"""Broken at structured inputs (a reported and fixed bug of a public 3-D library, reduced): a
rotation matrix to quaternion conversion takes sqrt(max(0, c)) of four candidates, and for the
identity and the 180-degree rotations some candidates are exactly zero: an infinite derivative
meets the zero, and the gradients are NaN. Standard-normal matrices never make a candidate
exactly zero; ``--explore``'s identity matrices do."""

import torch
from torch import nn

LAYOUTS = ["4,3,3:BUU"]
EXPECT_FAIL: set[str] = set()
EXPECT_FAIL_EXPLORED = {"finite"}


def _sqrt_positive_part(x: torch.Tensor) -> torch.Tensor:
    return torch.sqrt(torch.maximum(x, torch.zeros_like(x)))


class MatrixToQuaternion(nn.Module):
    def forward(self, m: torch.Tensor) -> torch.Tensor:
        m00, m11, m22 = m[..., 0, 0], m[..., 1, 1], m[..., 2, 2]
        w = 0.5 * _sqrt_positive_part(1 + m00 + m11 + m22)
        x = 0.5 * _sqrt_positive_part(1 + m00 - m11 - m22)
        y = 0.5 * _sqrt_positive_part(1 - m00 + m11 - m22)
        z = 0.5 * _sqrt_positive_part(1 - m00 - m11 + m22)
        x = torch.copysign(x, m[..., 2, 1] - m[..., 1, 2])
        y = torch.copysign(y, m[..., 0, 2] - m[..., 2, 0])
        z = torch.copysign(z, m[..., 1, 0] - m[..., 0, 1])
        return torch.stack([w, x, y, z], dim=-1)


LAYER = MatrixToQuaternion
