"""A template-collapse monitor for anyone's training loop: call ``update`` with a batch's prompts and
reasonings (text) every few steps; it cross-scores them with the policy, keeps the MI-ZScore EMAs across
calls and warns when the collapse signature appears.

The warning rule (template collapse: the reasoning stops depending on the input while it stays as
varied as before, so entropy alone does not show it): at an update, with the monitored variant's
MI-ZScore-EMA ``z`` and H(Z|X) ``h``,

- ``z`` is below ``(1 - drop)`` times the largest ``z`` of the last ``window`` updates (this one
  included; at least two updates, that largest value positive), and
- ``h`` is within ``entropy_band`` (relative) of the first H(Z|X) the monitor saw.

Defaults: drop 0.5, window 10, entropy_band 0.2, the released code's variant (as the trainer logs).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from ragen_envs.agent.parsing import THINK_OPEN
from ragen_envs.diagnose.mi import MIZScoreEMA, mi_metrics, mi_metrics_code
from ragen_envs.diagnose.texts import MAX_PAIRS, score_texts


def _reward_spread(rewards, groups) -> dict[str, float]:
    """Within-group reward std summarised over groups: ``reward/std_mean`` (mean of the sample stds,
    ddof 1 as ``ragen_envs.diagnose.rewards``; 0 for a group of one) and ``reward/zero_std_share`` (share
    of groups whose rewards are all equal: no learning signal)."""
    rewards, groups = np.asarray(rewards, dtype=float), list(groups)
    rows = [rewards[[g == group for g in groups]] for group in dict.fromkeys(groups)]
    stds = np.array([row.std(ddof=1) if len(row) > 1 else 0.0 for row in rows])
    return {"reward/std_mean": float(stds.mean()), "reward/zero_std_share": float(np.mean(stds <= 1e-12))}


class CollapseMonitor:
    """Stateful MI diagnosis of template collapse across a training run (see the module docstring).

    Args:
        policy: any backend's policy (``ragen_envs.agent.backends.make_policy``); it only scores.
        tokenizer: its fast tokenizer (None: ``policy.tokenizer``).
        max_pairs, seed, opener: as for ``score_texts`` (the seed moves on with each update).
        decay: the MI-ZScore EMAs' decay.
        variant: which MI-ZScore-EMA and H(Z|X) the warning watches: "code" (the released code's, the
            trainer's default) or "paper".
        drop, window, entropy_band: the warning rule's thresholds.
    """

    def __init__(self, policy, tokenizer=None, max_pairs: int = MAX_PAIRS, seed: int = 0, opener: str = THINK_OPEN,
                 decay: float = 0.9, variant: str = "code", drop: float = 0.5, window: int = 10,
                 entropy_band: float = 0.2):
        if variant not in ("paper", "code"):
            raise ValueError(f"variant must be 'paper' or 'code', got {variant!r}")
        if window < 2:
            raise ValueError(f"window must be at least 2 updates, got {window}")
        self.policy, self.tokenizer, self.max_pairs, self.seed, self.opener = policy, tokenizer, max_pairs, seed, opener
        self.variant, self.drop, self.entropy_band = variant, drop, entropy_band
        self.emas = {"mi": MIZScoreEMA(decay, variant="paper"), "mi_code": MIZScoreEMA(decay, variant="code")}
        self.recent: deque[float] = deque(maxlen=window)  # the watched MI-ZScore-EMA of the last updates
        self.first_entropy: float | None = None
        self.updates = 0
        self.events: list[dict] = []  # {"step", "warning"} of each warning raised

    def update(self, step: int, prompts: list[str], reasonings: list[str], rewards=None, group_ids=None) -> dict:
        """Diagnose one batch of episodes; returns its metrics.

        ``prompts[n]``, ``reasonings[n]`` (``read_reasoning`` of the reply; "" = none), ``rewards[n]`` and
        ``group_ids[n]`` describe episode n; episodes with one group id share one prompt X (None: episodes
        are grouped by prompt text). The metrics: every proxy of ``mi_metrics`` as ``mi/<name>`` and of
        ``mi_metrics_code`` as ``mi_code/<name>`` (H(Z|X) is ``conditional_entropy``, H(Z)
        ``reasoning_entropy``, Retrieval-Acc ``retrieval_acc`` beside ``retrieval_chance``), the
        MI-ZScore-EMAs ``mi/mi_zscore_ema`` and ``mi_code/mi_zscore_ema``, ``reward/std_mean`` and
        ``reward/zero_std_share`` when rewards are given, and ``warning``: the early-warning text or None
        (also kept in ``events`` with the step). Fewer than two groups with a reasoning: no MI metrics."""
        groups = list(prompts) if group_ids is None else list(group_ids)
        if not len(prompts) == len(reasonings) == len(groups):
            raise ValueError("prompts, reasonings and group_ids must have one entry per episode")
        out: dict = {"step": step, "warning": None}
        if rewards is not None:
            out.update(_reward_spread(rewards, groups))
        order = list(dict.fromkeys(groups))
        firsts = {g: prompts[groups.index(g)] for g in order}
        by_group = [[z for z, g in zip(reasonings, groups) if g == group] for group in order]
        if sum(any(zs) for zs in by_group) < 2:
            return out
        loglik, lengths = score_texts(self.policy, self.tokenizer, [firsts[g] for g in order], by_group,
                                      self.max_pairs, self.seed + self.updates, self.opener)
        self.updates += 1
        out.update({f"mi/{k}": v for k, v in mi_metrics(loglik, lengths).items()})
        out.update({f"mi_code/{k}": v for k, v in mi_metrics_code(loglik, lengths).items()})
        for prefix, ema in self.emas.items():
            out[f"{prefix}/mi_zscore_ema"] = ema.update(loglik, lengths)
        out["warning"] = self.observe(step, out)
        return out

    def observe(self, step: int, metrics: dict) -> str | None:
        """Apply the warning rule to metrics scored elsewhere (e.g. a trainer's logged ``mi/`` and
        ``mi_code/`` proxies with their ``mi_zscore_ema``): returns the warning or None, and keeps it in
        ``events``. ``update`` calls it; call it yourself only for batches ``update`` did not score."""
        warning = self._warn(metrics)
        if warning:
            self.events.append({"step": step, "warning": warning})
        return warning

    def state_dict(self) -> dict:
        """What the monitor has learnt of the run (the EMAs, the recent MI-ZScores, the first H(Z|X), the
        update count, the warnings), as plain values: save it with a checkpoint, so that a resumed run
        warns as an uninterrupted one would."""
        return {"emas": {name: ema.state_dict() for name, ema in self.emas.items()}, "recent": list(self.recent),
                "first_entropy": self.first_entropy, "updates": self.updates,
                "events": [dict(e) for e in self.events]}

    def load_state_dict(self, state: dict) -> None:
        """Take up where ``state_dict`` left off (the thresholds and window stay this monitor's own)."""
        for name, ema in self.emas.items():
            ema.load_state_dict(state["emas"][name])
        self.recent.clear()
        self.recent.extend(state["recent"])
        self.first_entropy, self.updates = state["first_entropy"], state["updates"]
        self.events = [dict(e) for e in state["events"]]

    def _warn(self, metrics: dict) -> str | None:
        """The early warning of this update (the module docstring's rule), or None."""
        prefix = "mi_code" if self.variant == "code" else "mi"
        z, h = metrics[f"{prefix}/mi_zscore_ema"], metrics[f"{prefix}/conditional_entropy"]
        self.recent.append(z)
        if self.first_entropy is None:
            self.first_entropy = h
        top = max(self.recent)
        falling = len(self.recent) >= 2 and top > 0 and z < (1 - self.drop) * top
        holding = abs(h - self.first_entropy) <= self.entropy_band * abs(self.first_entropy)
        if not (falling and holding):
            return None
        return (f"template collapse? MI-ZScore-EMA {z:.3f} fell below {1 - self.drop:.0%} of its max {top:.3f} "
                f"over the last {len(self.recent)} updates while H(Z|X) {h:.3f} held within "
                f"{self.entropy_band:.0%} of its first value {self.first_entropy:.3f}")
