"""Reward-variance statistics of prompt groups, from any run's returns: how the per-group reward spread is
distributed, how many groups carry no signal at all, Std(RV)/Mean(RV) (RAGEN-2's predictor of whether
SNR-aware filtering helps), and what each filter rule would keep. Plain numpy functions on a flat list of
episode returns and their group ids (the G episodes of a group share one prompt, or initial state):

    from ragen_envs.diagnose.rewards import filter_preview, reward_stats
    stats = reward_stats(returns, group_ids)   # e.g. returns [1, 0, 1, 1], group_ids [7, 7, 9, 9]
    for row in filter_preview(returns, group_ids):
        print(row["rule"], row["kept"], row["rv_share"])

RV is a group's sample variance of returns (ddof 1), as in the paper's text and ``filter/rv_*`` of the
trainer's metrics. The filter rules are the trainer's own (``ragen_envs.diagnose.filtering``), so a
preview with ``TrainerConfig(...).filtering`` keeps the groups that run would keep.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ragen_envs.diagnose.filtering import (LOW_RV_RATIO, FilterConfig, reward_std, reward_variance, rv_spread,
                                           select_groups)

QUANTILES = (0, 25, 50, 75, 100)  # of the per-group reward std, in percent
# filter_preview's rules when none are given: RAGEN's top-p 0.9 over the stds (the cpu-quick preset) and over
# their softmax (ragen2-main, the paper's main runs), the best quarter of the groups, and min-p at half the best
PREVIEW_RULES = (FilterConfig("top_p", 0.9), FilterConfig("top_p", 0.9, "softmax"), FilterConfig("top_k", 0.25),
                 FilterConfig("min_p", 0.5))


def group_returns(returns, group_ids) -> np.ndarray:
    """The P x G array of returns: row i holds the returns of the i-th distinct group id, in the order the
    ids first appear (the trainer's row order when episodes come group by group), each row in input order.
    Every group must have the same number G >= 2 of returns: groups of unequal size raise a ValueError
    naming the sizes (nothing is padded: a padded value would change the group's variance), and so do groups
    of one sample (a sample variance needs two)."""
    return _grouped(returns, group_ids)[1]


def reward_stats(returns, group_ids) -> dict:
    """Reward-variance statistics of the groups (``group_returns`` says how returns are grouped):

    - ``groups``, ``group_size``: P and G; ``group_ids``: the ids in row order;
    - ``reward_std``: each group's sample std of returns (ddof 1), in row order;
    - ``reward_std_quantiles``: its 0/25/50/75/100 % quantiles (keys 0, 25, 50, 75, 100);
    - ``zero_variance_share``: the share of groups whose returns are all equal (no signal for the update);
    - ``rv_mean``, ``rv_std``: Mean(RV) and Std(RV) across groups (ddof 0, as the trainer logs them);
    - ``rv_std_over_mean``: Std(RV)/Mean(RV), 0.0 when no group has any variance;
    - ``filter_predicted_to_help``: the paper's reading, True when the ratio is above ``LOW_RV_RATIO``
      (0.33): reward variance then differs across prompts, so keeping the high-variance ones pays;
    - ``reading``: that reading in a sentence.
    """
    ids, table = _grouped(returns, group_ids)
    std = reward_std(table)
    spread = rv_spread(table)
    ratio = spread["rv_std_over_mean"]
    if spread["rv_mean"] == 0:
        reading = "no group's returns vary: the batch carries no signal for any filter to pick"
    elif ratio <= LOW_RV_RATIO:
        reading = (f"Std(RV)/Mean(RV) = {ratio:.2f} <= {LOW_RV_RATIO}: reward variance is flat across prompts, "
                   "so filtering is not predicted to help")
    else:
        reading = (f"Std(RV)/Mean(RV) = {ratio:.2f} > {LOW_RV_RATIO}: reward variance differs across prompts, "
                   "so filtering is predicted to help")
    return {
        "groups": len(ids),
        "group_size": table.shape[1],
        "group_ids": ids,
        "reward_std": std.tolist(),
        "reward_std_quantiles": dict(zip(QUANTILES, np.percentile(std, QUANTILES).tolist())),
        "zero_variance_share": float((table == table[:, :1]).all(axis=1).mean()),
        **spread,
        "filter_predicted_to_help": ratio > LOW_RV_RATIO,
        "reading": reading,
    }


def filter_preview(returns, group_ids,
                   filtering: FilterConfig | Sequence[FilterConfig] = PREVIEW_RULES) -> list[dict]:
    """What each filter rule would keep of these groups, one dict per rule (``filtering``: one
    ``FilterConfig``, such as a run's ``TrainerConfig.filtering``, or several; ``PREVIEW_RULES`` by default):

    - ``rule``: a short label, such as ``top_p 0.9 softmax``; ``filtering``: the FilterConfig itself;
    - ``kept``: the ids of the groups kept, in row order (empty: the trainer would skip the batch);
    - ``kept_share``: their share of the groups;
    - ``rv_share``: their share of the summed reward variance RV of all groups (0.0 when no group has any).

    Prompt-level rules on a reward metric (std, variance, mean, sum) only: a trajectory-level rule keeps
    parts of groups, and the entropy and length metrics need the policy's tokens, not returns.
    """
    ids, table = _grouped(returns, group_ids)
    rules = [filtering] if isinstance(filtering, FilterConfig) else list(filtering)
    rv = reward_variance(table)
    rows = []
    for rule in rules:
        if rule.level != "prompt":
            raise ValueError(f"filter_preview previews the prompt-level filter (which groups are kept); "
                             f"got level {rule.level!r}")
        kept = select_groups(table, rule, rng=np.random.default_rng(0))  # one draw of a random control
        rows.append({"rule": _label(rule), "filtering": rule, "kept": [ids[i] for i in kept],
                     "kept_share": len(kept) / len(ids),
                     "rv_share": float(rv[kept].sum() / rv.sum()) if rv.sum() > 0 else 0.0})
    return rows


def _label(rule: FilterConfig) -> str:
    """``top_p 0.9 linear``, ``top_k 0.25``: the rule and its value, then whatever differs from the defaults."""
    parts = [rule.strategy] if rule.strategy == "none" else [rule.strategy, f"{rule.value:g}"]
    if rule.strategy == "top_p":
        parts.append(rule.prob_mode)
    default = FilterConfig()
    parts += [rule.metric] if rule.metric != default.metric else []
    parts += [rule.order] if rule.order != default.order else []
    parts += ["without zero"] if not rule.include_zero else []
    parts += [f"skip {rule.skip:g}"] if rule.skip else []
    return " ".join(parts)


def _grouped(returns, group_ids) -> tuple[list, np.ndarray]:
    """(the group ids in row order, the P x G returns): see ``group_returns``."""
    returns = np.asarray(returns, dtype=float)
    if returns.ndim != 1:
        raise ValueError(f"returns must be a flat sequence (one per episode), got shape {returns.shape}")
    ids = [g.item() if isinstance(g, np.generic) else g for g in group_ids]
    if len(ids) != len(returns) or not ids:
        raise ValueError(f"one group id per return is needed, got {len(returns)} returns and {len(ids)} ids")
    rows: dict = {}
    for g, r in zip(ids, returns):
        rows.setdefault(g, []).append(r)
    by_size: dict[int, list] = {}
    for g, row in rows.items():
        by_size.setdefault(len(row), []).append(g)
    if len(by_size) > 1:
        sizes = "; ".join(f"{n} returns: groups {gs}" for n, gs in sorted(by_size.items()))
        raise ValueError(f"groups must all have the same size G (the filter compares groups of G samples), "
                         f"got {sizes}")
    if 1 in by_size:
        raise ValueError("a group of one sample has no reward variance (a sample variance needs G >= 2); "
                         "every group here has one return")
    return list(rows), np.array(list(rows.values()))
