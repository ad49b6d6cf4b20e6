"""Delayed addition (003 App. A.1)."""

from __future__ import annotations

import torch

from .base import Batch, Task, phase_layout


class DelayedAddTask(Task):
    """Delayed addition: input phase ``x_1…x_L``; in the output phase the model is fed fresh
    random tokens ``y_j`` (instead of the query) and must emit ``(x_{L+1−j} + y_j) mod V``."""

    name = "delayed-add"

    @property
    def output_start(self) -> int:
        return self.L

    def space_size(self) -> float:
        return self.V ** min(2 * self.L, 64)

    def sample(self, n, gen, device) -> Batch:
        x = torch.randint(self.V, (n, self.L), generator=gen, device=device)  # (B L)
        y = torch.randint(self.V, (n, self.L), generator=gen, device=device)  # (B L)
        inputs, out_index, _ = phase_layout(x, None, self.query_id, feed=y)
        targets = (x.flip(1) + y) % self.V
        return Batch(inputs=inputs, targets=targets, out_index=out_index, key=torch.cat([x, y], 1))
