"""RAGEN's reward normalization (``agent_proxy.reward_normalization``): episode returns rescaled before the
filter and the advantages see them (its ``_normalize_episode_rewards``; the rollout's logged rewards
stay the env's).

Grouping: ``state`` normalises within each prompt group (the G samples of one initial state), ``batch``
over the whole batch, ``inductive`` within each env of a mix. Method: ``identity`` (off), ``mean``
(R - mean), ``mean_std`` ((R - mean) / (std + 1e-6), all 0 where the std is at most 1e-6) or
``asym_clip`` (mean_std clipped to [-1, 3]); the std is the sample std (ddof 1), as torch.std. As in
RAGEN, nothing changes when every group has a single member.
"""

from __future__ import annotations

import numpy as np

EPS = 1e-6  # RAGEN's


def normalized(returns: np.ndarray, envs: list[str], grouping: str = "state", method: str = "identity") -> np.ndarray:
    """``returns`` (P x G: all ranks' groups in order) normalised; ``envs``: each group's env id."""
    returns = np.asarray(returns, dtype=float)
    if method == "identity":
        return returns
    P, G = returns.shape
    if grouping == "state":
        tags = np.repeat(np.arange(P), G)
    elif grouping == "batch":
        tags = np.zeros(P * G, dtype=int)
    elif grouping == "inductive":
        tags = np.repeat(np.unique(envs, return_inverse=True)[1], G)
    else:
        raise ValueError(f"reward_normalization_grouping must be state, batch or inductive, got {grouping!r}")
    flat, out = returns.reshape(-1), returns.reshape(-1).copy()
    if len(np.unique(tags)) == len(flat):  # every group has one member: RAGEN leaves them be
        return returns
    for tag in np.unique(tags):
        sel = tags == tag
        out[sel] = _method(flat[sel], method)
    return out.reshape(P, G)


def _method(x: np.ndarray, method: str) -> np.ndarray:
    centred = x - x.mean()
    if method == "mean":
        return centred
    std = x.std(ddof=1) if len(x) > 1 else float("nan")
    scaled = centred / (std + EPS) if std > EPS else np.zeros_like(x)  # nan > EPS is False: zeros
    if method == "mean_std":
        return scaled
    if method == "asym_clip":
        return np.clip(scaled, -1.0, 3.0)
    raise ValueError(f"reward_normalization_method must be identity, mean, mean_std or asym_clip, got {method!r}")
