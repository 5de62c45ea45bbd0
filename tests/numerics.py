"""Comparing what two computations trained, robust to float rounding by design.

Two code paths that compute the same update (a skipped no-grad pass and a computed one, DDP and FSDP,
the synchronous and the asynchronous runner) agree only up to float32 rounding: reductions run in
another order, a ratio exp(logp - old_logp) is 1 + 1e-7 instead of 1. Weights after AdamW are the
wrong thing to compare: for a gradient entry near Adam's eps (1e-8), the step lr * g / (|g| + eps)
turns a 1e-10 rounding difference into a 1e-4 change of that weight. So the tests compare the
gradients each optimizer step received, whose rounding differences stay relative to their size.
"""

import torch

# float32 rounds at 6e-8 per operation; a few thousand summands and a few layers keep the relative
# difference of two orderings near 1e-6. 1e-4 leaves 100x room, and any real bug (a wrong old
# log-prob, a missed all-reduce, a dropped sample) moves the gradient by O(1) of its norm.
GRAD_RTOL = 1e-4


def record_gradients(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The gradient every ``optimizer.step()`` is about to apply, flattened over all parameters in
    order (a sharded DTensor gradient is gathered whole: a collective, called on every rank)."""
    steps = []

    def hook(opt, args, kwargs):
        parts = []
        for group in opt.param_groups:
            for p in group["params"]:
                g = p.grad if p.grad is not None else torch.zeros_like(p)
                g = g.full_tensor() if hasattr(g, "full_tensor") else g
                parts.append(g.detach().reshape(-1).double().clone())
        steps.append(torch.cat(parts))

    optimizer.register_step_pre_hook(hook)
    return steps


def relative_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    """||a - b|| / ||a||: how far apart two gradients are, in units of the first one's size."""
    return float((a - b).norm() / a.norm())


def assert_same_gradients(a: list[torch.Tensor], b: list[torch.Tensor], rtol: float = GRAD_RTOL) -> None:
    assert len(a) == len(b) >= 1, (len(a), len(b))
    for step, (x, y) in enumerate(zip(a, b)):
        assert x.norm() > 0, f"step {step}: a zero gradient proves nothing"
        assert relative_difference(x, y) <= rtol, f"step {step}: gradients differ by {relative_difference(x, y):.2e}"
