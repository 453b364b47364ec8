"""Correct twin of explore_quaternion: as the library's fix does, the square root is taken only
where the candidate is positive, so a zero candidate has a zero (not NaN) gradient."""

import torch
from torch import nn

LAYOUTS = ["4,3,3:BUU"]
EXPECT_FAIL: set[str] = set()


def _sqrt_positive_part(x: torch.Tensor) -> torch.Tensor:
    positive = x > 0
    return torch.where(positive, torch.sqrt(torch.where(positive, x, torch.ones_like(x))), torch.zeros_like(x))


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
