"""SNR-aware filtering: keep the prompt groups whose score (by default their reward spread) carries the
task signal. The selection rules are those of RAGEN's released code (``ragen/trainer/rollout_filter.py``,
``_select_top_groups``), so a run here filters as the paper's runs did. Pure numpy: the trainer and
``ragen_envs.diagnose.rewards`` (what each rule would keep of any run's returns) share these functions, and
``FilterConfig`` holds their settings (``TrainerConfig.filtering`` is the trainer's).

Scores per prompt group i (``group_scores``), from its G returns R_i1..R_iG:
- ``std`` (the default): the sample standard deviation of the returns. The released code names this
  metric "reward_variance" but ranks by the standard deviation (torch's ``std``, ddof 1).
- ``variance``: the sample variance RV_i = 1/(G-1) sum_g (R_ig - mean_i)^2, as the paper's text writes it.
- ``mean`` / ``sum``: the mean or sum of the returns (the reference's "reward" and "reward_sum").
The trainer can also rank by ``entropy`` / ``entropy_std`` (the group's mean, or std, of per-trajectory
mean token entropy) and ``length`` (mean generated tokens), as the reference's other filters do; those
need the trainer's own pass over the batch (``trainers.filtering.scores_for``).

Selection (``select``), over the groups left after ``include_zero=False`` drops scores of 0 (|s| <= 1e-10):
- ``top_p``, ``prob_mode="linear"``: rho >= 1 keeps every group (zero-score ones included: the no-filter
  baseline). Otherwise groups are taken best first while their summed score is below
  ``rho * total - eps`` (``eps`` = 0.01, absolute) and their own score is positive; if the sum reached the
  threshold those groups are kept, else none (so a batch whose scores are all 0 is skipped).
- ``top_p``, ``prob_mode="softmax"``: p = softmax(scores); the fewest groups whose p adds up to rho.
- ``top_k``: ``max(min(int(rho * P), remaining), 1)`` groups, P counting every group of the batch.
- ``top_k_abs``: ``max(min(int(rho), remaining), 1)`` groups.
- ``min_p``: groups with score >= rho * the best score (``order="smallest"``: <= the lowest / rho).
- ``none``: every remaining group (DAPO's dynamic sampling is ``none`` with ``include_zero=False``).
``order="smallest"`` ranks the lowest scores first (the reference's ablation). Ties keep the lower index.
``control="random"`` is the control arm of a filter contrast: the rule picks its groups as above, then as
many groups are drawn uniformly at random from the whole batch instead (``rng``, a numpy Generator). It
keeps the number of groups, and so the number of update steps, while making which groups random: with it
"these groups" and "fewer updates" can be told apart.
``skip`` (top_k, top_k_abs): pass over the first ``int(skip * P)`` ranked groups before keeping, so
``top_k`` 0.25 with skip 0.5 keeps the third quartile (the paper's stress test: one quartile only).

Two levels (``LEVELS``): ``prompt`` ranks the groups, as above and as the paper's filter does;
``trajectory`` keeps every group and applies the same rules inside each one to its trajectories, each
scored by its part of the group's spread: |R - mean| for ``std``, (R - mean)^2 for ``variance``
(``select_trajectories``; the paper's counter-example, which it finds collapses MI).

The selection functions take the settings either whole, ``select_groups(returns, FilterConfig("top_k", 0.25))``,
or one by one, ``select_groups(returns, "top_k", 0.25)``; not both at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

STRATEGIES = ("none", "top_p", "top_k", "top_k_abs", "min_p")
PROB_MODES = ("linear", "softmax")
ORDERS = ("largest", "smallest")
LEVELS = ("prompt", "trajectory")
CONTROLS = ("none", "random")
REWARD_METRICS = ("std", "variance", "mean", "sum")
METRICS = REWARD_METRICS + ("entropy", "entropy_std", "length")
SELECTION_EPS = 0.01  # the reference's absolute tolerance on the linear top-p threshold
ZERO = 1e-10  # |score| at or below this counts as zero
# Std(RV) / Mean(RV) at or below this predicts that filtering will not help (the paper: ~0.33).
LOW_RV_RATIO = 0.33


def _setting(default, flat: str, help: str):
    """A FilterConfig field: its default, the name TrainerConfig gives it (``flat``: its keyword argument,
    attribute, record key and flag, from before the filter's settings were one object) and its help."""
    return field(default=default, metadata={"flat": flat, "help": help})


@dataclass(frozen=True)
class FilterConfig:
    """The filter's settings: which prompt groups (or trajectories) of a batch the filter keeps, exactly as
    the trainer applies them (``TrainerConfig.filtering`` is one; its flat ``filter*`` names, such as
    ``TrainerConfig(filter="top_p", filter_value=0.5)``, set these fields). The defaults are the trainer's:
    no filtering. A setting the rules do not take raises a ValueError here."""
    strategy: Literal[STRATEGIES] = _setting("none", "filter", "none | top_p | top_k | top_k_abs | min_p")
    value: float = _setting(0.9, "filter_value", "rho: share of the summed score (top_p; >= 1 keeps all), of the "
                            "groups (top_k), a count (top_k_abs), of the best score (min_p)")
    prob_mode: Literal[PROB_MODES] = _setting("linear", "filter_prob_mode",
                                              "top_p over the scores themselves, or their softmax")
    # the last three need the trainer's pass over the batch, not returns alone (trainers.filtering.scores_for)
    metric: Literal[METRICS] = _setting("std", "filter_metric", "group score: std of returns (RAGEN's code) | "
                                        "variance (the paper's text) | mean | sum | entropy | entropy_std | length")
    order: Literal[ORDERS] = _setting("largest", "filter_order", "keep the highest scores, or the lowest (an ablation)")
    include_zero: bool = _setting(True, "include_zero", "False: drop zero-score groups before ranking (RAGEN's "
                                  "rollout_filter_include_zero)")
    level: Literal[LEVELS] = _setting("prompt", "filter_level", "prompt: rank the groups (the paper's filter); "
                                      "trajectory: keep every group and rank the trajectories inside each by "
                                      "|R - mean| (std) or (R - mean)^2 (variance), the paper's counter-example")
    skip: float = _setting(0.0, "filter_skip", "top_k / top_k_abs: pass over this share of the ranked groups first "
                           "(top_k 0.25 with skip 0.5 trains on the third reward-variance quartile only: the paper's "
                           "quartile stress test)")
    control: Literal[CONTROLS] = _setting("none", "filter_control", "random: train on as many groups as the rule "
                                          "keeps, drawn at random from the batch (a filter contrast's control arm: "
                                          "same number of groups and update steps, random groups)")

    def __post_init__(self):
        check(self.strategy, self.value, self.prob_mode, self.order, self.skip)
        check_level(self.level, self.metric)
        if self.control not in CONTROLS:
            raise ValueError(f"filter control must be one of {CONTROLS}, got {self.control!r}")
        if self.control == "random" and self.level != "prompt":
            raise ValueError("the random control draws prompt groups: it needs level 'prompt'")


def reward_variance(returns) -> np.ndarray:
    """Each group's sample variance (ddof 1) of a P x G array of returns: RV, the paper's signal."""
    return _returns(returns).var(axis=1, ddof=1)


def reward_std(returns) -> np.ndarray:
    """Each group's sample standard deviation (ddof 1) of a P x G array of returns: what RAGEN's code ranks."""
    return np.sqrt(reward_variance(returns))


def group_scores(returns, metric: str = "std") -> np.ndarray:
    """Per-group selection scores of a P x G array of returns (``REWARD_METRICS``)."""
    if metric not in REWARD_METRICS:
        raise ValueError(f"a reward metric is one of {REWARD_METRICS}, got {metric!r}")
    returns = _returns(returns)
    if metric in ("std", "variance"):
        return reward_std(returns) if metric == "std" else reward_variance(returns)
    return returns.mean(axis=1) if metric == "mean" else returns.sum(axis=1)


def per_group(values, groups: int, how: str) -> np.ndarray:
    """A score per group from per-trajectory values laid out group by group: their mean or sample std."""
    table = np.asarray(values, dtype=float).reshape(groups, -1)
    return table.mean(axis=1) if how == "mean" else table.std(axis=1, ddof=1)


def select(scores, strategy: str | FilterConfig = "top_p", value: float = 0.9, prob_mode: str = "linear",
           order: str = "largest", include_zero: bool = True, eps: float = SELECTION_EPS,
           skip: float = 0.0, rng: np.random.Generator | None = None) -> np.ndarray:
    """Sorted indices of the kept groups, from one score per group; empty when nothing is kept.
    ``strategy``: the rule's name, or a whole ``FilterConfig`` (its metric and level are not used here).
    ``rng``: the draw of a ``control="random"`` config (required there, unused otherwise)."""
    f = _settings(strategy, value=value, prob_mode=prob_mode, order=order, include_zero=include_zero, skip=skip)
    if f.control == "random":
        if rng is None:
            raise ValueError("the random control draws its groups: pass rng (a numpy Generator)")
        count = len(select(scores, replace(f, control="none"), eps=eps))
        return np.sort(rng.choice(len(scores), size=count, replace=False)).astype(int)
    scores = np.asarray(scores, dtype=float)
    indices = np.arange(len(scores))
    if not f.include_zero:
        indices = indices[np.abs(scores) > ZERO]
    if len(indices) == 0 or f.strategy == "none":
        return indices
    s = scores[indices]
    ranked = np.argsort(-s if f.order == "largest" else s, kind="stable")  # best first, ties by index
    if f.strategy == "top_p":
        if f.value >= 1.0:
            return indices
        if f.prob_mode == "softmax":
            logits = s if f.order == "largest" else -s
            p = np.exp(logits - logits.max())
            p /= p.sum()
            by_p = np.argsort(-p, kind="stable")
            k = min(int(np.searchsorted(np.cumsum(p[by_p]), f.value)) + 1, len(s))
            return np.sort(indices[by_p[:k]])
        threshold = f.value * s.sum() - eps
        total, count = 0.0, 0
        for score in s[ranked]:
            if total >= threshold or score <= 0:
                break
            total += score
            count += 1
        return np.sort(indices[ranked[:count]]) if total >= threshold else indices[:0]
    if f.strategy in ("top_k", "top_k_abs"):
        k = int(f.value * len(scores)) if f.strategy == "top_k" else int(f.value)
        ranked = ranked[int(f.skip * len(scores)):]
        return np.sort(indices[ranked[:max(min(k, len(ranked)), 1)]]) if len(ranked) else indices[:0]
    if f.order == "largest":  # min_p
        keep = s >= s.max() * f.value - ZERO
    else:
        keep = s <= s.min() / (f.value + ZERO) + ZERO
    return indices[keep]


def select_trajectories(returns, strategy: str | FilterConfig = "top_p", value: float = 0.9, metric: str = "std",
                        include_zero: bool = True, prob_mode: str = "linear", order: str = "largest",
                        skip: float = 0.0) -> np.ndarray:
    """The trajectory-level filter: a P x G mask of the kept trajectories, ``select`` run inside each group
    on each trajectory's part of the group's spread (``std``: |R - mean|; ``variance``: its square).
    ``strategy``: the rule's name, or a whole ``FilterConfig`` (its level is taken as ``trajectory``)."""
    f = _settings(strategy, value=value, metric=metric, include_zero=include_zero, prob_mode=prob_mode,
                  order=order, skip=skip)
    check_level("trajectory", f.metric)
    returns = _returns(returns)
    deviation = returns - returns.mean(axis=1, keepdims=True)
    scores = np.abs(deviation) if f.metric == "std" else deviation ** 2
    keep = np.zeros(returns.shape, dtype=bool)
    for g, row in enumerate(scores):
        keep[g, select(row, f)] = True
    return keep


def check(strategy: str, value: float, prob_mode: str = "linear", order: str = "largest",
          skip: float = 0.0) -> None:
    """A ValueError for a setting the selection rules do not take."""
    if strategy not in STRATEGIES:
        raise ValueError(f"filter strategy must be one of {STRATEGIES}, got {strategy!r}")
    if prob_mode not in PROB_MODES:
        raise ValueError(f"filter prob_mode must be one of {PROB_MODES}, got {prob_mode!r}")
    if order not in ORDERS:
        raise ValueError(f"filter order must be one of {ORDERS}, got {order!r}")
    if not value > 0:
        raise ValueError(f"filter value (rho) must be > 0, got {value!r}")
    if strategy == "top_k_abs":
        if not value >= 1:
            raise ValueError(f"top_k_abs keeps int(value) groups: value must be >= 1, got {value!r}")
    elif strategy in ("top_k", "min_p") and not value <= 1:
        raise ValueError(f"filter value (rho) must be in (0, 1] for {strategy}, got {value!r}")
    if skip and strategy not in ("top_k", "top_k_abs"):
        raise ValueError(f"filter skip passes over ranked groups before top_k or top_k_abs keeps some; "
                         f"{strategy} takes no skip, got {skip!r}")
    if not 0 <= skip < 1:
        raise ValueError(f"filter skip is a share of the groups in [0, 1), got {skip!r}")


def check_level(level: str, metric: str) -> None:
    """A ValueError for a level or metric the filter does not take, or a trajectory-level score other than
    a spread."""
    if metric not in METRICS:
        raise ValueError(f"filter metric must be one of {METRICS}, got {metric!r}")
    if level not in LEVELS:
        raise ValueError(f"filter level must be one of {LEVELS}, got {level!r}")
    if level == "trajectory" and metric not in ("std", "variance"):
        raise ValueError(f"the trajectory-level filter scores each trajectory by its part of the group's reward "
                         f"spread: the metric must be std or variance, got {metric!r}")


def select_groups(returns, strategy: str | FilterConfig = "top_p", value: float = 0.9, metric: str = "std",
                  include_zero: bool = True, prob_mode: str = "linear", order: str = "largest",
                  skip: float = 0.0, rng: np.random.Generator | None = None) -> np.ndarray:
    """``select`` on the ``group_scores`` of a P x G array of returns (the prompt-level filter).
    ``strategy``: the rule's name, or a whole ``FilterConfig`` (a reward metric; its level is not used);
    ``rng``: the random control's draw."""
    f = _settings(strategy, value=value, metric=metric, include_zero=include_zero, prob_mode=prob_mode,
                  order=order, skip=skip)
    return select(group_scores(returns, f.metric), f, rng=rng)


def rv_spread(returns) -> dict[str, float]:
    """How reward variance varies across the groups of a P x G array of returns: Mean(RV), Std(RV) (over
    groups, ddof 0) and Std(RV)/Mean(RV), the paper's predictor of the filter's benefit (0 when no group
    has any variance; at or below ``LOW_RV_RATIO`` filtering is not predicted to help)."""
    rv = reward_variance(returns)
    mean, std = float(rv.mean()), float(rv.std())
    return {"rv_mean": mean, "rv_std": std, "rv_std_over_mean": std / mean if mean > 0 else 0.0}


def filter_stats(returns, kept) -> dict[str, float]:
    """What to log about one filtering step."""
    returns = np.asarray(returns, dtype=float)
    rv = reward_variance(returns)
    return {
        "filter/kept_groups": float(len(kept)),
        "filter/kept_ratio": len(kept) / len(rv),
        "filter/zero_variance_groups": float((rv == 0).sum()),
        **{f"filter/{k}": v for k, v in rv_spread(returns).items()},
        "filter/in_group_reward_std": float(returns.std(axis=1, ddof=1).mean()),
        "filter/skipped": float(len(kept) == 0),
    }


def _settings(strategy: str | FilterConfig, **given) -> FilterConfig:
    """The settings of one selection call: the FilterConfig passed, or one made of the settings given one by
    one. Both at once is an error rather than one silently winning."""
    if not isinstance(strategy, FilterConfig):
        return FilterConfig(strategy, **given)
    default = FilterConfig()  # its defaults are the selection functions' own
    also = sorted(k for k, v in given.items() if v != getattr(default, k))
    if also:
        raise TypeError(f"the filter settings are given whole as a FilterConfig and also as {also}: pass one")
    return strategy


def _returns(returns) -> np.ndarray:
    returns = np.asarray(returns, dtype=float)
    if returns.ndim != 2 or returns.shape[1] < 2:
        raise ValueError(f"returns must be a P x G array with G >= 2, got shape {returns.shape}")
    return returns
