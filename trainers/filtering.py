"""SNR-aware filtering: keep the prompt groups whose reward variance carries the task signal.

For prompt group i with G rollout returns R_i1..R_iG, the reward variance is the sample variance
RV_i = 1/(G-1) sum_g (R_ig - mean_i)^2 (``metric="std"`` ranks by its square root instead, as
RAGEN's released code does). Groups are ranked by RV, highest first (ties: lower index first).

- ``top_p``: the fewest groups whose RV adds up to at least ``value`` (rho) times the total RV
  (within a relative 1e-9 for rounding). When the total is 0 nothing is kept: the batch is skipped.
- ``top_k``: ceil(rho * P) groups whatever the distribution.
- ``none``: every group.
``include_zero=False`` removes zero-variance groups before ranking (DAPO's dynamic sampling is
``strategy="none", include_zero=False``).
"""

from __future__ import annotations

import math

import numpy as np

STRATEGIES = ("none", "top_p", "top_k")
METRICS = ("variance", "std")
# Std(RV) / Mean(RV) at or below this predicts that filtering will not help (the paper: ~0.33).
LOW_RV_RATIO = 0.33


def reward_variance(returns, metric: str = "variance") -> np.ndarray:
    """Per-group RV (sample variance, or its square root for ``metric="std"``) of a P x G array."""
    returns = np.asarray(returns, dtype=float)
    if returns.ndim != 2 or returns.shape[1] < 2:
        raise ValueError(f"returns must be a P x G array with G >= 2, got shape {returns.shape}")
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
    var = returns.var(axis=1, ddof=1)
    return var if metric == "variance" else np.sqrt(var)


def select_groups(returns, strategy: str = "top_p", value: float = 0.9, metric: str = "variance",
                  include_zero: bool = True) -> np.ndarray:
    """Sorted indices of the kept rows of ``returns`` (P x G); empty when nothing is kept."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    if strategy != "none" and not 0 < value <= 1:
        raise ValueError(f"value (rho) must be in (0, 1] for {strategy}, got {value!r}")
    rv = reward_variance(returns, metric)
    candidates = np.arange(len(rv)) if include_zero else np.flatnonzero(rv > 0)
    if strategy == "none":
        return candidates
    order = candidates[np.argsort(-rv[candidates], kind="stable")]
    if strategy == "top_k":
        return np.sort(order[:math.ceil(value * len(rv))])
    total = rv.sum()
    if total <= 0:
        return np.array([], dtype=int)
    reached = np.cumsum(rv[order]) >= value * total * (1 - 1e-9)
    return np.sort(order[:int(np.argmax(reached)) + 1])


def filter_stats(returns, kept, metric: str = "variance") -> dict[str, float]:
    """What to log about one filtering step."""
    returns = np.asarray(returns, dtype=float)
    rv = reward_variance(returns, "variance")
    mean, std = float(rv.mean()), float(rv.std())
    return {
        "filter/kept_groups": float(len(kept)),
        "filter/kept_ratio": len(kept) / len(rv),
        "filter/zero_variance_groups": float((rv == 0).sum()),
        "filter/rv_mean": mean,
        "filter/rv_std": std,
        "filter/rv_std_over_mean": std / mean if mean > 0 else 0.0,
        "filter/in_group_reward_std": float(returns.std(axis=1, ddof=1).mean()),
        "filter/skipped": float(len(kept) == 0),
    }
