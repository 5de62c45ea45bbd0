"""Advantages and losses of PPO, GRPO, DAPO and Dr. GRPO, on token tensors.

Shapes: B sequences x T target positions; ``mask`` is 1 on tokens the model generated (prompt,
observation and other environment tokens are 0 and never contribute to a loss).

Loss aggregation (``loss_type``, TRL's names):
- ``"grpo"``: mean over each sequence's tokens, then over sequences (GRPO's length normalisation);
- ``"dapo"`` / ``"bnpo"``: sum over all tokens of the batch / number of tokens (token level, also PPO);
- ``"dr_grpo"``: sum over all tokens / (number of sequences x max response length), a constant;
- ``"seq_sum"``: sum over each sequence's tokens, mean over sequences (verl's "seq-mean-token-sum",
  what RAGEN's Dr. GRPO runs use).
``aggregate`` takes the normalisers of the whole minibatch, so gradient accumulation over
micro-batches adds up to exactly the minibatch loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from trainers.config import LOSS_TYPES


# -- advantages ----------------------------------------------------------------------------------
def group_advantages(returns: torch.Tensor, groups: torch.Tensor, scale: str = "group",
                     eps: float = 1e-6) -> torch.Tensor:
    """GRPO-family advantages per sequence: R - mean of its group, divided by the group's std
    (``scale="group"``, GRPO and DAPO), the batch's std (``"batch"``) or nothing (``"none"``,
    Dr. GRPO). Stds are the unbiased sample std, as torch.std."""
    adv = torch.empty_like(returns, dtype=torch.float64)
    returns64 = returns.double()
    for g in groups.unique():
        sel = groups == g
        group = returns64[sel]
        # a group of equal returns carries no signal: exactly 0 (a float mean need not give back the value)
        centred = group - group.mean() if bool((group != group[0]).any()) else torch.zeros_like(group)
        if scale == "group":
            centred = centred / (group.std() + eps) if len(group) > 1 else centred * 0
        adv[sel] = centred
    if scale == "batch":
        adv = adv / (returns64.std() + eps)
    elif scale not in ("group", "none"):
        raise ValueError(f"scale_rewards must be 'group', 'batch' or 'none', got {scale!r}")
    return adv.to(returns.dtype if returns.is_floating_point() else torch.float32)


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0,
        lam: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-level GAE that skips non-generated tokens: across a masked position the next value and
    the running advantage are carried unchanged, so a turn's last token bootstraps from the next
    turn's first generated token. Returns (advantages, returns), zero where ``mask`` is 0."""
    B, T = rewards.shape
    adv = torch.zeros_like(values)
    next_value = torch.zeros(B, dtype=values.dtype)
    running = torch.zeros(B, dtype=values.dtype)
    for t in reversed(range(T)):
        m = mask[:, t].to(values.dtype)
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        new_running = delta + gamma * lam * running
        running = m * new_running + (1 - m) * running
        next_value = m * values[:, t] + (1 - m) * next_value
        adv[:, t] = m * running
    returns = (adv + values) * mask
    return adv, returns


def bi_level_gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0,
                 lam: float = 1.0, high_level_gamma: float = 0.95) -> tuple[torch.Tensor, torch.Tensor]:
    """RAGEN's two-level GAE (its ``compute_bi_level_gae_advantage_return``). The turn ends are the
    tokens that carry a reward (RAGEN's code; its docstring says each turn's end, the same tokens with
    turn scores whose rewards are not 0). Turn level: GAE over the ends alone, discount
    ``high_level_gamma``, each end bootstrapping from the next end's value; an end's return G is its
    advantage plus its value. Token level: GAE within each turn (``gamma``), the end taking G as its
    reward and nothing after it. Without turn scores the one end is the last token: token GAE.
    Where RAGEN fails on a row with no reward (an index past the end), this runs token GAE with a
    terminal value of 0. Returns (advantages, returns), zero where ``mask`` is 0; not whitened."""
    adv, ret = torch.zeros_like(values), torch.zeros_like(values)
    for b in range(rewards.shape[0]):
        r, v = rewards[b].to(values.dtype), values[b]
        ends = r.nonzero()[:, 0].tolist()
        target = r.clone()  # each end's reward becomes its turn-level return
        running = 0.0
        for n in reversed(range(len(ends))):
            t = ends[n]
            next_value = v[ends[n + 1]] if n + 1 < len(ends) else 0.0
            running = r[t] + high_level_gamma * next_value - v[t] + high_level_gamma * lam * running
            target[t] = running + v[t]
        valid = mask[b].nonzero()[:, 0].tolist()
        running = 0.0
        for n in reversed(range(len(valid))):
            t = valid[n]
            end = t in ends or n + 1 == len(valid)
            next_value = 0.0 if end else v[valid[n + 1]]
            running = target[t] + gamma * next_value - v[t] + (0.0 if end else gamma * lam * running)
            adv[b, t], ret[b, t] = running, running + v[t]
    return adv, ret


def whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / std over the masked entries (population std); 0 elsewhere."""
    m = mask.bool()
    values = x[m]
    out = torch.zeros_like(x)
    out[m] = (values - values.mean()) / (values.std(unbiased=False) + eps)
    return out


# -- losses --------------------------------------------------------------------------------------
@dataclass
class Normalizer:
    """The minibatch quantities ``aggregate`` divides by."""

    sequences: int  # sequences with at least one generated token
    tokens: int  # generated tokens
    max_length: int  # Dr. GRPO's constant per sequence (max response length)


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, loss_type: str, norm: Normalizer) -> torch.Tensor:
    """This micro-batch's share of the minibatch loss (see the module docstring)."""
    m = mask.to(per_token.dtype)
    if loss_type == "grpo":
        lengths = m.sum(-1).clamp(min=1)
        return ((per_token * m).sum(-1) / lengths).sum() / max(norm.sequences, 1)
    if loss_type in ("dapo", "bnpo"):
        return (per_token * m).sum() / max(norm.tokens, 1)
    if loss_type == "dr_grpo":
        return (per_token * m).sum() / max(norm.sequences * norm.max_length, 1)
    if loss_type == "seq_sum":
        return (per_token * m).sum() / max(norm.sequences, 1)
    raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")


def clipped_policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                        eps_low: float, eps_high: float, dual_clip: float | None = None
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per token: -min(rho A, clip(rho, 1 - eps_low, 1 + eps_high) A), and whether it was clipped.
    ``dual_clip`` c (verl's clip_ratio_c): where A < 0 the loss is also capped at -c A, so a huge ratio
    on a bad token cannot blow the step up."""
    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * advantages
    loss = -torch.min(unclipped, clipped)
    if dual_clip is not None:
        loss = torch.where(advantages < 0, torch.minimum(loss, -dual_clip * advantages), loss)
    return loss, (clipped < unclipped).float()


def clipped_value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
                       clip: float) -> torch.Tensor:
    """Per token: 0.5 * max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2)."""
    clipped = old_values + torch.clamp(values - old_values, -clip, clip)
    return 0.5 * torch.max((values - returns) ** 2, (clipped - returns) ** 2)


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str = "low_var_kl") -> torch.Tensor:
    """Per-token estimate of KL(pi || ref) from samples of pi, verl's four (``core_algos.kl_penalty``):
    ``low_var_kl``, k3 = exp(ref - logp) - (ref - logp) - 1 (always >= 0; clamped to 10, as verl does, so one
    token far from the reference cannot swamp the batch); ``kl``, k1 = logp - ref (unbiased, but negative on
    some tokens); ``abs``, |logp - ref|; ``mse``, k2 = (logp - ref)^2 / 2."""
    diff = ref_logp - logp
    if kind == "low_var_kl":
        return torch.clamp(torch.exp(diff) - diff - 1, min=-10, max=10)
    if kind == "abs":
        return diff.abs()
    return 0.5 * diff ** 2 if kind == "mse" else -diff


def adaptive_kl_coef(coef: float, current_kl: float, target: float, horizon: int, n_steps: int) -> float:
    """verl's AdaptiveKLController (Ziegler et al., 2019) after one batch of ``n_steps`` sequences: the
    coefficient times 1 + clip(current_kl / target - 1, -0.2, 0.2) * n_steps / horizon, so it grows while the
    policy's KL to the reference is above the target and shrinks while below."""
    error = min(max(current_kl / target - 1, -0.2), 0.2)
    return coef * (1 + error * n_steps / horizon)


class Target(NamedTuple):
    """What a sample trains towards: its per-token (T-1,) advantages and, with a critic (GAE), the returns
    its values regress to (None without one)."""
    advantages: torch.Tensor
    returns: torch.Tensor | None


def advantages(layout, chosen: list[int], kind: str, values: list | None = None, gamma: float = 1.0,
               lam: float = 1.0, scale_rewards: str = "group", high_level_gamma: float | None = None,
               penalty: dict[int, torch.Tensor] | None = None) -> dict[int, Target]:
    """Per chosen sample index (``layout``: a ``batch.Layout``): its ``Target``, the (T-1,) advantages and,
    for GAE, returns. ``kind="gae"`` (PPO) runs over a trajectory's segments joined in order, so a segment cut
    by the context cap bootstraps from the next one's values and gets the rewards after it; the
    advantages are then whitened over the chosen tokens. ``kind="group"`` gives one advantage per
    trajectory (counted once however many segments it has) to every generated token of its samples.
    ``values``: the per-micro-batch no-grad passes (``batch.OldPass``), whose ``values`` GAE reads;
    ``high_level_gamma``: with GAE, ``bi_level_gae`` with this turn-level discount instead. ``penalty``: per
    chosen sample, (T-1,) amounts taken off its token rewards first (the in-reward KL, verl's
    ``apply_kl_penalty``): GAE sees each token's reward less its amount; group advantages each trajectory's
    return less the sum over its tokens (verl's outcome advantages sum the token rewards)."""
    if not chosen:
        return {}
    samples = layout.samples
    if kind == "gae":
        advs, rets = {}, {}
        by_trajectory: dict[int, list[int]] = {}
        for i in chosen:
            by_trajectory.setdefault(samples[i].trajectory, []).append(i)
        for parts in by_trajectory.values():
            joined = (torch.cat([layout.rewards(i) - (penalty[i] if penalty else 0) for i in parts])[None],
                      torch.cat([layout.stat(values, "values", i) for i in parts])[None],
                      torch.cat([layout.mask(i) for i in parts])[None])
            a, r = gae(*joined, gamma, lam) if high_level_gamma is None else \
                bi_level_gae(*joined, gamma, lam, high_level_gamma)
            offset = 0
            for i in parts:
                n = layout.mask(i).numel()
                advs[i], rets[i] = a[0, offset:offset + n], r[0, offset:offset + n]
                offset += n
        white = whiten(torch.cat([advs[i] for i in chosen]), torch.cat([layout.mask(i) for i in chosen]))
        result, offset = {}, 0
        for i in chosen:
            n = advs[i].numel()
            result[i] = Target(white[offset:offset + n], rets[i])
            offset += n
        return result
    first = {}
    for i in chosen:
        first.setdefault(samples[i].trajectory, samples[i])
    taken = {}  # a trajectory's penalty, over all its samples (segments)
    for i in chosen if penalty else ():
        taken[samples[i].trajectory] = taken.get(samples[i].trajectory, 0.0) + float(penalty[i].sum())
    returns = torch.tensor([s.episode_return - taken.get(t, 0.0) for t, s in first.items()], dtype=torch.float64)
    groups = torch.tensor([s.group for s in first.values()])
    per_trajectory = dict(zip(first, group_advantages(returns, groups, scale_rewards).tolist()))
    return {i: Target(per_trajectory[samples[i].trajectory] * layout.mask(i), None) for i in chosen}


def scaled(targets: dict[int, Target], factor: dict[int, float]) -> dict[int, Target]:
    """``targets`` (of ``advantages``) with sample i's advantages multiplied by ``factor[i]``; returns unchanged."""
    return {i: t if factor[i] == 1.0 else t._replace(advantages=t.advantages * factor[i]) for i, t in targets.items()}


def loss_terms(config, mask: torch.Tensor, norm: Normalizer, logp: torch.Tensor, entropy: torch.Tensor,
               old_logp: torch.Tensor, advantages: torch.Tensor, ref_logp: torch.Tensor | None = None,
               values: torch.Tensor | None = None, old_values: torch.Tensor | None = None,
               returns: torch.Tensor | None = None) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """One micro-batch's share of each term of the minibatch loss, weighted as in the loss, and the
    logged parts, for ``config`` (a ``TrainerConfig``): ``task``, the clipped policy loss; ``entropy``,
    minus ``entropy_coef`` x entropy (when the coefficient is not 0); ``kl``, ``beta`` x KL to the
    reference (``ref_logp``; when beta > 0); ``value``, with a critic, ``vf_coef`` x the clipped value
    loss (``values``, ``old_values``, ``returns``). All (B, T-1) tensors, aggregated by
    ``config.loss_type`` (the value loss per token). The loss is the terms' sum (``total_loss``)."""
    policy_tok, clipped = clipped_policy_loss(logp, old_logp, advantages, config.epsilon, config.epsilon_high,
                                              config.dual_clip)
    terms = {"task": aggregate(policy_tok, mask, config.loss_type, norm)}
    parts = {"loss/policy": terms["task"].item(), "loss/clip_frac": aggregate(clipped, mask, "dapo", norm).item(),
             "loss/approx_kl": aggregate(old_logp - logp.detach(), mask, "dapo", norm).item()}
    if config.beta > 0:
        kl = aggregate(kl_estimate(logp, ref_logp, config.kl_loss_type), mask, config.loss_type, norm)
        terms["kl"] = config.beta * kl
        parts["loss/kl"] = kl.item()
    ent = aggregate(entropy, mask, config.loss_type, norm)
    parts["loss/entropy"] = ent.item()
    if config.entropy_coef:
        terms["entropy"] = -config.entropy_coef * ent
    if values is not None and returns is not None:
        vloss = aggregate(clipped_value_loss(values, old_values, returns, config.cliprange_value), mask, "dapo", norm)
        terms["value"] = config.vf_coef * vloss
        parts["loss/value"] = vloss.item()
    return terms, parts


def total_loss(config, *args, **kwargs) -> tuple[torch.Tensor, dict[str, float]]:
    """The micro-batch's share of the minibatch loss, the sum of its ``loss_terms``, and the parts."""
    terms, parts = loss_terms(config, *args, **kwargs)
    loss = sum(terms.values())
    parts["loss/total"] = loss.item()
    return loss, parts
