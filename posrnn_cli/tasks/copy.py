"""Copy memory (000 App. C.1)."""

from __future__ import annotations

import torch

from .base import Batch, Task


class CopyTask(Task):
    """Copy memory: ``x_1…x_L``, then T blank steps, then L query steps; target ``x_1…x_L``."""

    name = "copy"

    @property
    def blank_id(self) -> int:
        return self.V + 1

    @property
    def n_input_ids(self) -> int:
        return self.V + 2

    @property
    def max_steps(self) -> int:
        return 2 * self.L + self.cfg.delay

    @property
    def output_start(self) -> int:
        return self.L + self.cfg.delay

    def sample(self, n, gen, device) -> Batch:
        L, T = self.L, self.cfg.delay
        x = torch.randint(self.V, (n, L), generator=gen, device=device)  # (B L)
        inputs = torch.cat([x, torch.full((n, T), self.blank_id, device=device), torch.full_like(x, self.query_id)], 1)
        out_index = torch.arange(L + T, 2 * L + T, device=device).expand(n, L)
        return Batch(inputs=inputs, targets=x, out_index=out_index, key=x)
