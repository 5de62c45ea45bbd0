"""Mutual-information proxies for template collapse, from in-batch cross-scoring (any backend's
``Policy.score``; the trainer calls ``diagnostics`` every ``mi_every`` iterations).

``loglik[i, k, j] = log p(Z_ik | X_j)``: the reasoning Z_ik (sample k of prompt i) scored under
every prompt X_j of the batch, summed over Z's tokens; ``lengths[i, k] = |Z_ik|`` (0 = no
reasoning: that entry is left out of every mean).

- matched_ik = L[i,k,i] / |Z|, marginal_ik = (logsumexp_j L[i,k,j] - log P) / |Z| (per token);
  the ``_seq`` variants skip the division.
- MI-Est = mean(matched) - mean(marginal); H(Z|X) = -mean(matched); H(Z) = -mean(marginal), so
  H(Z) = MI + H(Z|X) exactly; MI <= log P.
- Retrieval-Acc / Recall@k: is column i among the top k of L[i,k,:]? With s columns strictly above
  i and t others tied with it, a hit counts min(1, max(0, (k - s) / (t + 1))): ties broken uniformly
  at random, in expectation, so a fully collapsed batch scores exactly 1/P.
- MI-ZScore = mean((matched - marginal) / (sigma + eps)), sigma the population std of marginal;
  ``MIZScoreEMA`` smooths sigma across calls.
- RAGEN's released code (``mi_metrics_code``) divides each log-likelihood by its length first and
  then takes the log-mean-exp: marginal_ik = logsumexp_j (L[i,k,j] / |Z|) - log P. Both families are
  logged (``mi/`` and ``mi_code/``); the paper's plotted values come from the second.
Differences kept on purpose: ties in retrieval count as expected under a uniform tie-break (the
code's argmax takes the first column), and identical prompts are merged into one column (the code
keeps them apart and counts any of them as a hit), so chance is 1/P over distinct prompts.
The caller merges token-identical prompts into one column before building ``loglik``
(``cross_loglik`` does).
"""

from __future__ import annotations

import random

import numpy as np

from ragen_envs.agent import vision
from ragen_envs.agent.backends.base import TokenPrompt

STD_EPS = 1e-3  # added to sigma in the z-scores (RAGEN's std_eps)


def _per_entry(loglik, lengths):
    L = np.asarray(loglik, dtype=float)
    n = np.asarray(lengths, dtype=float)
    if L.ndim != 3 or L.shape[0] != L.shape[2] or n.shape != L.shape[:2]:
        raise ValueError(f"loglik must be P x G x P and lengths P x G, got {L.shape} and {n.shape}")
    P = L.shape[0]
    valid = n > 0
    if not valid.any():
        raise ValueError("every reasoning is empty: nothing to score")
    idx = np.arange(P)
    matched_seq = L[idx, :, idx]  # (P, G): L[i, k, i]
    top = L.max(axis=2, keepdims=True)
    marginal_seq = (top[..., 0] + np.log(np.exp(L - top).sum(axis=2))) - np.log(P)
    safe = np.where(valid, n, 1.0)
    return L, valid, matched_seq, marginal_seq, matched_seq / safe, marginal_seq / safe


def _recall(L: np.ndarray, valid: np.ndarray, k: int) -> float:
    P = L.shape[0]
    own = L[np.arange(P), :, np.arange(P)][..., None]  # (P, G, 1)
    above = (L > own).sum(axis=2)
    ties = (L == own).sum(axis=2) - 1  # others tied with column i
    hits = np.clip((k - above) / (ties + 1), 0.0, 1.0)
    return float(hits[valid].mean())


def mi_metrics(loglik, lengths) -> dict[str, float]:
    """The MI proxies of one batch as the paper writes them (see the module docstring): retrieval_acc,
    retrieval_chance, retrieval_above_chance, recall_at_k / recall_chance_at_k / recall_above_chance_at_k
    (k = 2, 4, 8), mi_est, mi_seq_est, mi_zscore, mi_zscore_seq, marginal_std, marginal_std_seq,
    conditional_entropy, reasoning_entropy and their _seq forms."""
    L, valid, matched_seq, marginal_seq, matched, marginal = _per_entry(loglik, lengths)
    P = L.shape[0]
    sigma, sigma_seq = marginal[valid].std(), marginal_seq[valid].std()
    out = {
        "retrieval_acc": _recall(L, valid, 1),
        "retrieval_chance": 1.0 / P,
        "mi_est": float(matched[valid].mean() - marginal[valid].mean()),
        "mi_seq_est": float(matched_seq[valid].mean() - marginal_seq[valid].mean()),
        "mi_zscore": float(((matched - marginal)[valid] / (sigma + STD_EPS)).mean()),
        "mi_zscore_seq": float(((matched_seq - marginal_seq)[valid] / (sigma_seq + STD_EPS)).mean()),
        "marginal_std": float(sigma),
        "marginal_std_seq": float(sigma_seq),
        "conditional_entropy": float(-matched[valid].mean()),
        "reasoning_entropy": float(-marginal[valid].mean()),
        "conditional_entropy_seq": float(-matched_seq[valid].mean()),
        "reasoning_entropy_seq": float(-marginal_seq[valid].mean()),
    }
    out["retrieval_above_chance"] = out["retrieval_acc"] - out["retrieval_chance"]
    for k in (2, 4, 8):
        out[f"recall_at_{k}"] = _recall(L, valid, k)
        out[f"recall_chance_at_{k}"] = min(k, P) / P
        out[f"recall_above_chance_at_{k}"] = out[f"recall_at_{k}"] - out[f"recall_chance_at_{k}"]
    return out


def _per_token_first(loglik, lengths):
    """RAGEN's released code: each log-likelihood divided by its reasoning's length before the
    log-mean-exp over prompts. Returns (valid, matched, marginal)."""
    L, valid, *_ = _per_entry(loglik, lengths)
    n = np.where(valid, np.asarray(lengths, dtype=float), 1.0)[..., None]
    per_token = L / n
    P = L.shape[0]
    matched = per_token[np.arange(P), :, np.arange(P)]
    top = per_token.max(axis=2, keepdims=True)
    marginal = top[..., 0] + np.log(np.exp(per_token - top).sum(axis=2)) - np.log(P)
    return valid, matched, marginal


def mi_metrics_code(loglik, lengths) -> dict[str, float]:
    """The MI proxies as RAGEN's released code computes them (``_per_token_first``): mi_est,
    conditional_entropy, reasoning_entropy, mi_zscore, marginal_std. The paper's plotted MI values come
    from this form; it differs from ``mi_metrics``' (log-mean-exp of sums, then per token) by a large
    factor when reasoning lengths vary. Retrieval is the same in both (one length per row)."""
    valid, matched, marginal = _per_token_first(loglik, lengths)
    sigma = marginal[valid].std()
    return {
        "mi_est": float(matched[valid].mean() - marginal[valid].mean()),
        "conditional_entropy": float(-matched[valid].mean()),
        "reasoning_entropy": float(-marginal[valid].mean()),
        "mi_zscore": float(((matched - marginal)[valid] / (sigma + STD_EPS)).mean()),
        "marginal_std": float(sigma),
    }


class MIZScoreEMA:
    """MI-ZScore with sigma smoothed across calls: sigma_ema <- decay * sigma_ema + (1 - decay) * sigma
    (the first sigma initialises it). ``variant="code"`` uses the released code's per-token-first form."""

    def __init__(self, decay: float = 0.9, eps: float = STD_EPS, variant: str = "paper"):
        if variant not in ("paper", "code"):
            raise ValueError(f"variant must be 'paper' or 'code', got {variant!r}")
        self.decay, self.eps, self.variant = decay, eps, variant
        self.sigma: float | None = None

    def update(self, loglik, lengths) -> float:
        """This batch's MI-ZScore with the smoothed sigma (``loglik``, ``lengths`` as for ``mi_metrics``)."""
        if self.variant == "code":
            valid, matched, marginal = _per_token_first(loglik, lengths)
        else:
            _, valid, _, _, matched, marginal = _per_entry(loglik, lengths)
        sigma = float(marginal[valid].std())
        self.sigma = sigma if self.sigma is None else self.decay * self.sigma + (1 - self.decay) * sigma
        return float(((matched - marginal)[valid] / (self.sigma + self.eps)).mean())

    def state_dict(self) -> dict:
        """The smoothed sigma, to save with a checkpoint."""
        return {"sigma": self.sigma}

    def load_state_dict(self, state: dict) -> None:
        """Resume from ``state_dict()``'s output."""
        self.sigma = state["sigma"]


def cross_loglik(policy, prompts: list[list[int]], reasonings: list[list[list[int]]], progress=None):
    """Score every reasoning under every prompt: returns (loglik, lengths) for ``mi_metrics``.

    ``prompts[i]`` is X_i (token ids; a ``TokenPrompt`` with images), ``reasonings[i][k]`` the ids of
    Z_ik. Identical prompts (ids and images) are merged into one column first: their rows are pooled,
    and rows are padded with empty (length-0) entries so the array stays rectangular. Each distinct
    prompt is scored once against all distinct reasonings with ``policy.score``, which computes the
    prompt's prefix once (and, in the transformers backend, only what it does not share with the prompt
    scored before it). ``progress(done, total)``, if given, hears of each column before it is scored.
    """
    columns: dict[tuple, list[list[int]]] = {}
    shown: dict[tuple, list] = {}  # a column's images
    for prompt, zs in zip(prompts, reasonings):
        key = (tuple(prompt), vision.digests(getattr(prompt, "images", ())))
        columns.setdefault(key, []).extend(zs)
        shown[key] = getattr(prompt, "images", [])
    keys = list(columns)
    width = max(len(zs) for zs in columns.values())
    rows = [zs + [[]] * (width - len(zs)) for zs in columns.values()]
    flat = [tuple(z) for row in rows for z in row]
    lengths = np.array([[len(z) for z in row] for row in rows])
    # A reasoning drawn twice (the trajectory scope draws with replacement) is scored once.
    unique = list(dict.fromkeys(flat))
    where = {z: n for n, z in enumerate(unique)}
    loglik = np.zeros((len(keys), width, len(keys)))
    # In sorted order, prompts that share a prefix come one after another: the backend reuses it.
    try:
        for n, j in enumerate(sorted(range(len(keys)), key=lambda j: keys[j])):
            if progress is not None:
                progress(n, len(keys))
            prompt = TokenPrompt(keys[j][0], shown[keys[j]])
            sums = [s.sum() for s in policy.score(prompt, [list(z) for z in unique])]
            loglik[:, :, j] = np.array([sums[where[z]] for z in flat]).reshape(len(keys), width)
    finally:
        policy.reset_cache()
    return loglik, lengths


# -- which (prompt, reasoning) pairs are scored --------------------------------------------------
def reasoning_stats(trajectories) -> dict[str, float]:
    """How much reasoning a batch has: the share of turns with a <think> block, their mean length,
    and the share of episodes whose first turn has none."""
    out = {}
    turns = [turn for t in trajectories for turn in t.turns]
    if turns:
        with_reasoning = [len(turn.reasoning_ids) for turn in turns if turn.reasoning_ids]
        out["valid_thinking_rate"] = len(with_reasoning) / len(turns)
        out["reasoning_tokens"] = float(np.mean(with_reasoning)) if with_reasoning else 0.0
    firsts = [t.turns[0] for t in trajectories if t.turns]
    out["empty_reasoning_rate"] = sum(not turn.reasoning_ids for turn in firsts) / len(firsts) if firsts else 1.0
    return out


def draw(items: list, limit: int, rng) -> list:
    """At most ``limit`` of ``items`` (0: all), drawn without replacement with ``rng`` (a
    ``random.Random``) when there are more, as RAGEN caps its scored pairs; else all, in order."""
    return rng.sample(items, limit) if limit and len(items) > limit else items


def first_turn_pairs(trajectories, limit: int, rng) -> dict[int, list]:
    """First-turn scope: group -> the first turns with reasoning of its episodes (X_i is the group's
    first prompt, Z_ik those turns' reasonings), ``limit`` turns drawn without replacement (0: all)."""
    valid = draw([(t.group, t.turns[0]) for t in trajectories if t.turns and t.turns[0].reasoning_ids], limit, rng)
    by_group: dict[int, list] = {}
    for group, turn in sorted(valid, key=lambda pair: pair[0]):
        by_group.setdefault(group, []).append(turn)
    return by_group


def trajectory_pairs(trajectories, draws: int, rng) -> list[tuple[list[int], list[int]]]:
    """Trajectory scope, as RAGEN draws it: ``draws`` draws with replacement of a trajectory, then one
    of its turns with reasoning: (the turn's prompt up to its reasoning, the reasoning), each draw a
    column of its own. A trajectory without reasoning wastes its draw, as in RAGEN."""
    turns_of = [[turn for turn in t.turns if turn.reasoning_ids] for t in trajectories]
    pairs = []
    for _ in range(min(draws, sum(len(turns) for turns in turns_of))):
        turns = turns_of[rng.randrange(len(turns_of))]
        if turns:
            turn = rng.choice(turns)
            pairs.append((turn.reasoning_prompt_ids, turn.reasoning_ids))
    return pairs


def through_think(prompt: TokenPrompt, think_ids: list[int]) -> TokenPrompt:
    """A first-turn prompt up to and including <think> (``think_ids``; already there when the prompt
    prefilled it): the X under which its reasoning is scored."""
    ids = list(prompt)
    return TokenPrompt(ids if ids[-len(think_ids):] == think_ids else ids + think_ids, prompt.images)


EMA_SCOPES = ("first", "first_code", "traj", "traj_code")  # one MI-ZScore EMA per scope and family


def scope_emas() -> dict[str, "MIZScoreEMA"]:
    """Fresh MI-ZScore EMAs for ``diagnostics``, one per scope and family (each smooths its own sigma)."""
    return {name: MIZScoreEMA(variant="code" if name.endswith("_code") else "paper") for name in EMA_SCOPES}


def pair_rng(seed: int, iteration: int) -> random.Random:
    """The draw of the pairs a run scores at 0-based ``iteration`` (its rollout ``seed``): the trainer's, so
    that a run diagnosed from disk scores the very same pairs."""
    return random.Random(seed * 1_000_003 + iteration)


def diagnostics(policy, trajectories, first_pairs: int, trajectory_draws: int, rng, emas: dict,
                think_ids: list[int], progress=None) -> dict[str, float]:
    """Both scopes' proxies of a batch, each in both families: ``mi/`` (the paper's formulas) and
    ``mi_code/`` (the released code's), ``mi_traj/`` and ``mi_traj_code/`` for the trajectory scope.
    ``emas``: scope name ("first", "first_code", "traj", "traj_code") -> ``MIZScoreEMA``;
    ``think_ids``: the tokens of <think> (``through_think``); ``progress(scope,
    done, total)``, if given, hears of each prompt column scored ("first turn", then "trajectory")."""
    def told(scope: str):
        return None if progress is None else lambda done, total: progress(scope, done, total)

    out = {f"mi/{k}": v for k, v in reasoning_stats(trajectories).items()}

    def families(prefix: str, scope: str, loglik, lengths) -> None:
        out.update({f"{prefix}/{k}": v for k, v in mi_metrics(loglik, lengths).items()})
        out.update({f"{prefix}_code/{k}": v for k, v in mi_metrics_code(loglik, lengths).items()})
        out[f"{prefix}/mi_zscore_ema"] = emas[scope].update(loglik, lengths)
        out[f"{prefix}_code/mi_zscore_ema"] = emas[f"{scope}_code"].update(loglik, lengths)

    by_group = first_turn_pairs(trajectories, first_pairs, rng)
    if len(by_group) > 1:
        prompts = [through_think(TokenPrompt(turns[0].prompt_ids, turns[0].images), think_ids)
                   for turns in by_group.values()]
        reasonings = [[turn.reasoning_ids for turn in turns] for turns in by_group.values()]
        families("mi", "first", *cross_loglik(policy, prompts, reasonings, told("first turn")))
    pairs = trajectory_pairs(trajectories, trajectory_draws, rng)
    if len(pairs) > 1:
        loglik, lengths = cross_loglik(policy, [x for x, _ in pairs], [[z] for _, z in pairs], told("trajectory"))
        if loglik.shape[0] > 1:
            families("mi_traj", "traj", loglik, lengths)
    return out
