"""The filter's scores that need the trainer: token entropy from its no-grad pass, read through its batch
layout, and response lengths from its trajectories. The selection rules, ``FilterConfig`` and the reward
scores are plain numpy in ``ragen_envs.diagnose.filtering``, shared with the diagnostics."""

from __future__ import annotations

import numpy as np

from ragen_envs.diagnose.filtering import REWARD_METRICS, group_scores, per_group


def scores_for(metric: str, returns, trajectories=(), layout=None, stats=None) -> np.ndarray:
    """This batch's score per group for the filter: a reward metric of the P x G ``returns``; the
    mean response length (``"length"``); or the mean (``"entropy"``) or spread (``"entropy_std"``)
    of each trajectory's mean token entropy over its generated tokens, all its segments, from the
    no-grad pass's ``stats`` read through ``layout`` (a ``batch.Layout``)."""
    if metric in REWARD_METRICS:
        return group_scores(returns, metric)
    groups = np.asarray(returns).shape[0]
    if metric == "length":
        return per_group([sum(len(turn.response_ids) for turn in t.turns) for t in trajectories], groups, "mean")
    total, count = np.zeros(len(trajectories)), np.zeros(len(trajectories))
    for i, sample in enumerate(layout.samples):
        mask = layout.mask(i)
        total[sample.trajectory] += float((layout.stat(stats, "entropy", i) * mask).sum())
        count[sample.trajectory] += float(mask.sum())
    return per_group(total / np.maximum(count, 1), groups, "mean" if metric == "entropy" else "std")
