"""The recurrent view of a core, from its one-step update (gradient stability, the papers' 001
§3.3/002 §3: ∂h_T/∂z_1 is taken through the step itself).

A core that mixes this in defines ``state_dim`` (the width of its flattened state z) and
``step(z, x)`` for one input x (B, in_dim): ``(output (B, H), z')``, or z' alone where the state is
the output (``state_is_output = True``: minGRU, the RG-LRU). The view is then

* ``initial_state(x1)``: z_1, one step from the zero state;
* ``state_after(x_prefix)``: z_P after a prefix of P ≥ 1 inputs (z_1 for P = 1);
* ``output_from_state(z1, x_rest)``: the core's output at the last step T from z_1 and the inputs
  of steps 2 … T (at least one).
"""

from __future__ import annotations

from torch import Tensor


class SteppedView:
    state_is_output: bool = False

    def _advance(self, z: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
        out = self.step(z, x)
        return (out, out) if self.state_is_output else out

    def initial_state(self, x1: Tensor) -> Tensor:
        """z_1 from the zero state and the first input: (B, in_dim) → (B, state_dim)."""
        return self._advance(x1.new_zeros(x1.shape[0], self.state_dim), x1)[1]

    def state_after(self, x_prefix: Tensor) -> Tensor:
        """z_P after a prefix of P ≥ 1 inputs: (B, P, in_dim) → (B, state_dim); z_1 for P = 1."""
        z = self.initial_state(x_prefix[:, 0])
        for t in range(1, x_prefix.shape[1]):
            z = self._advance(z, x_prefix[:, t])[1]
        return z

    def output_from_state(self, z1: Tensor, x_rest: Tensor) -> Tensor:
        """The output at the last step T from z_1 and the inputs of steps 2 … T: (B, T−1 ≥ 1, in_dim) → (B, H)."""
        if x_rest.shape[1] < 1:
            raise ValueError("output_from_state needs at least one step after z_1 (x_rest of shape (B, T−1 ≥ 1, "
                             "in_dim))")
        z = z1
        for t in range(x_rest.shape[1]):
            y, z = self._advance(z, x_rest[:, t])
        return y
