"""The gradient probe (RAGEN's gradient analysis): how large each loss term's gradient is, by reward variance.

The paper's cause of template collapse: in groups whose rollouts all score alike the task gradient is
small, while the entropy and KL gradients keep their size, so regularisation dominates. The probe
measures it on the kept batch of an iteration, after the filter and the advantages and before the
update (``Trainer._probe``):
1. ``buckets``: the kept groups split by their reward std (the filter's own signal, ddof 1):
   ``quantile`` (RAGEN's default: ``count`` buckets of equal numbers of groups sorted by std, ties in
   index order, the remainder in the last, fewer buckets when fewer groups were kept; ``bucket_1`` the
   lowest) or ``fixed_rv`` (RAGEN's fixed std intervals [0, 1), [1, 2), ..., [5, inf)), plus ``all``.
2. For each bucket and each loss term (``task``: the clipped policy loss; ``entropy``: -entropy_coef x
   entropy, when the coefficient is not 0; ``kl``: beta x KL, when beta > 0; ``total``: their sum),
   the gradient of that term of the bucket's loss (aggregated over the bucket as one minibatch) from
   zero, over all ranks, and its L2 norm over the policy's parameters. No optimizer step: weights,
   optimizer state and the RNG streams the run draws from are left as they were.
Metrics (RAGEN's names): ``grad_norm/<bucket>/<term>``, ``.../per_sample/<term>`` and
``.../per_token/<term>`` (the norm over the bucket's samples or generated tokens), ``.../sample_count``,
``.../sample_pct``, ``.../group_count``, ``.../reward_std_mean|min|max`` and ``.../loss/<term>``.
A departure: RAGEN runs each bucket through its minibatch loop and averages the minibatches' norms;
here a bucket is one batch, so its norm is that of the bucket's whole gradient, whatever the minibatch
size.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import torch

from trainers.config import BUCKET_MODES, PROBE_TERMS

FIXED_EDGES = (0.0, 1.0, 2.0, 3.0, 4.0, 5.0)  # RAGEN's fixed_rv intervals of the group reward std


def due(iteration: int, every: int) -> bool:
    """RAGEN's schedule, for the 0-based ``iteration``: the 1st, the (1 + every)-th, ... (every 0: never)."""
    return bool(every) and iteration % every == 0


def buckets(stds, mode: str = "quantile", count: int = 6) -> dict[str, np.ndarray]:
    """Positions in ``stds`` (one reward std per kept group) of each bucket: ``all`` first, then
    ``bucket_1``.. from the lowest std (empty buckets left out)."""
    stds = np.asarray(stds, dtype=float)
    out = {"all": np.arange(len(stds))}
    if mode == "fixed_rv":
        for i, low in enumerate(FIXED_EDGES):
            high = FIXED_EDGES[i + 1] if i + 1 < len(FIXED_EDGES) else np.inf
            out[f"bucket_{i + 1}"] = np.flatnonzero((stds >= low) & (stds < high))
    elif mode == "quantile":
        n = min(count, len(stds))
        order = np.argsort(stds, kind="stable")
        size = len(stds) // n if n else 0
        for i in range(n):
            out[f"bucket_{i + 1}"] = order[i * size:(i + 1) * size if i < n - 1 else len(stds)]
    else:
        raise ValueError(f"gradient_analysis_bucket_mode must be one of {BUCKET_MODES}, got {mode!r}")
    return {name: positions for name, positions in out.items() if len(positions)}


def terms(config) -> dict[str, tuple[str, ...]]:
    """Each probed term and the ``algorithms.loss_terms`` it backpropagates."""
    on = {"task": True, "entropy": bool(config.entropy_coef), "kl": config.beta > 0}
    parts = tuple(t for t in PROBE_TERMS if on[t])
    return {**{p: (p,) for p in parts}, "total": parts}


@contextmanager
def rng_kept():
    """The torch RNG streams as they were before the block (a train-mode forward with dropout draws)."""
    cpu = torch.random.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        yield
    finally:
        torch.random.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
