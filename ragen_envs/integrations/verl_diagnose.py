"""verl: RAGEN-2's reward-variance filter and its template-collapse diagnosis on verl's ``DataProto``.

For a verl recipe (a ``RayPPOTrainer`` subclass, as verl's DAPO recipe is). Tested against verl 0.9.1.

**The filter.** ``filter_groups(batch)`` keeps the prompt groups whose returns vary (a group is the rows
sharing ``non_tensor_batch["uid"]``, verl's GRPO grouping; a row's return is its reward summed over
tokens) with this project's selection rules (``ragen_envs.diagnose.filtering``, RAGEN's released code).
Call it where DAPO's dynamic sampling filters: after the rewards are in the batch, before the old
log-probs and the advantages. In verl 0.9.1's ``fit`` the reward tensor is ``rm_scores`` until the
advantage step copies it to ``token_level_scores``; DAPO's recipe sets ``token_level_scores`` right
after the reward. For example::

    from ragen_envs.diagnose import FilterConfig
    from ragen_envs.integrations.verl_diagnose import filter_groups

    batch.batch["token_level_scores"] = reward_tensor          # after the reward, as DAPO's recipe
    batch, stats = filter_groups(batch, FilterConfig("top_p", 0.9))
    metrics.update(stats)
    if stats["filter/skipped"]:                                 # nothing kept: no update this step
        continue
    # then old log-probs, advantages (grouped by uid) and the update as usual

The kept batch is smaller, and varies from step to step: verl splits it across data-parallel ranks
and into mini-batches, so its size must suit them. DAPO's recipe keeps generating until enough groups
pass and then cuts the batch to ``train_batch_size * rollout.n`` rows; do the same (cutting whole
groups: ``balance_batch`` may have spread a uid's rows), or choose mini-batch sizes that divide what
the filter leaves.

**The diagnosis.** ``cross_pairs(batch, tokenizer)`` builds the cross-paired ``DataProto``: every
first-turn reasoning Z_ik of the batch after every prompt X_j. Hand it to your actor's log-prob pass
and ``mi_from_log_probs(pairs, log_probs)`` turns the per-token log-probs into
``loglik[i, k, j] = log p(Z_ik | X_j)`` and the MI proxies, named as this project's trainer logs them::

    pairs = cross_pairs(batch, self.tokenizer)
    out, _ = self._compute_old_log_prob(pairs)                  # verl 0.9.1's RayPPOTrainer
    metrics.update(mi_from_log_probs(pairs, out.batch["old_log_probs"]))

X_j is a group's prompt up to and including ``<think>`` (this project's verl agent loop ends its
prompts with that prefill; ``<think>`` is appended to a prompt without it), Z_ik the tokens of a
sample's first reply strictly inside ``<think>...</think>``, found as the trainer finds them
(``think_span``: by text, so ``</think>`` merged into one token with the next character still counts).
The pairs are scored at temperature 1 (``meta_info["temperature"]``), the model's own distribution.
"""

from __future__ import annotations

import random

import numpy as np

from ragen_envs.agent import chat_encoding
from ragen_envs.agent.parsing import THINK_OPEN
from ragen_envs.agent.trajectory import think_span
from ragen_envs.diagnose.filtering import FilterConfig, filter_stats, select_groups
from ragen_envs.diagnose.mi import draw, mi_metrics, mi_metrics_code
from ragen_envs.diagnose.rewards import group_returns
from ragen_envs.diagnose.texts import MAX_PAIRS

try:
    import torch
    from verl.protocol import DataProto
    from verl.utils.model import compute_position_id_with_mask
except ImportError:  # pragma: no cover - depends on the installed packages
    raise ImportError("ragen_envs.integrations.verl_diagnose needs verl: pip install verl") from None

# per row of a cross-paired batch: the reasoning's group i and sample k, the prompt column j
PAIR_KEYS = ("mi_group", "mi_sample", "mi_prompt")


def filter_groups(batch: DataProto, config: FilterConfig = FilterConfig("top_p", 0.9),
                  reward_key: str = "token_level_scores", rng=None) -> tuple[DataProto, dict]:
    """(the rows of the kept groups in their order, statistics): RAGEN-2's reward-variance filter.

    Groups are the rows sharing ``batch.non_tensor_batch["uid"]``, in any order (``balance_batch`` may
    have shuffled them); each needs the same number of rows (``rollout.n``), at least two. A row's
    return is ``batch.batch[reward_key]`` summed over tokens. ``config`` is the filter's settings, those
    of this project's trainer (``FilterConfig``: top-p 0.9 over the groups' reward std by default; a
    prompt-level rule on a reward metric). ``meta_info["global_token_num"]``, if there, is recomputed for
    the kept rows. The statistics: ``filter/kept_groups``, ``filter/kept_ratio`` (of the groups),
    ``filter/zero_variance_groups`` and ``filter/zero_variance_share``, ``filter/rv_mean``,
    ``filter/rv_std``, ``filter/rv_std_over_mean``, ``filter/in_group_reward_std``, ``filter/kept_rows``
    and ``filter/skipped`` (1.0 when nothing is kept: the returned batch has no rows). ``rng`` (a numpy
    Generator, the same on every rank) draws the groups of a ``control="random"`` config.
    """
    if config.level != "prompt":
        raise ValueError("filter_groups keeps whole groups: a prompt-level FilterConfig is needed, got level "
                         f"{config.level!r}")
    if "uid" not in batch.non_tensor_batch:
        raise ValueError("filter_groups groups rows by non_tensor_batch['uid'] (set by verl's trainer), which "
                         "this batch lacks")
    if reward_key not in batch.batch.keys():
        raise ValueError(f"filter_groups reads the rewards from batch.batch[{reward_key!r}], which this batch "
                         f"lacks (it has {sorted(batch.batch.keys())})")
    if batch.batch[reward_key].ndim != 2:
        raise ValueError(f"batch.batch[{reward_key!r}] must be one reward per response token (rows x tokens), got "
                         f"shape {tuple(batch.batch[reward_key].shape)}")
    uids = list(batch.non_tensor_batch["uid"])
    returns = batch.batch[reward_key].float().sum(-1).cpu().numpy()
    try:
        table = group_returns(returns, uids)
    except ValueError as e:
        raise ValueError(f"filter_groups: the rows sharing a uid are a group: {e}") from None
    order = list(dict.fromkeys(uids))
    kept = select_groups(table, config, rng=rng)
    kept_uids = {order[g] for g in kept}
    keep = np.array([u in kept_uids for u in uids], dtype=bool)
    out = batch.select_idxs(keep)
    out.meta_info = dict(batch.meta_info)
    if "global_token_num" in out.meta_info and "attention_mask" in out.batch.keys():
        out.meta_info["global_token_num"] = out.batch["attention_mask"].sum(-1).tolist()
    stats = filter_stats(table, kept)
    stats["filter/zero_variance_share"] = stats["filter/zero_variance_groups"] / len(table)
    stats["filter/kept_rows"] = float(keep.sum())
    return out, stats


def think_reasoning(tokenizer, prompt_ids: list[int], reply_ids: list[int]) -> tuple[int, int] | None:
    """The reasoning of a reply as this project's trainer reads it: the token span [start, end) of
    ``reply_ids`` strictly inside ``<think>...</think>`` (from the reply's start when the prompt ends with
    ``<think>``), None when the block is not there or never closed."""
    prefilled = tokenizer.decode(prompt_ids[-8:], skip_special_tokens=False).endswith(THINK_OPEN)
    start, end = think_span(tokenizer, reply_ids, prefilled)
    return None if start is None or end <= start else (start, end)


def cross_pairs(batch: DataProto, tokenizer, max_pairs: int = MAX_PAIRS, seed: int = 0,
                reasoning=think_reasoning) -> DataProto:
    """The cross-paired batch: one row per (reasoning Z_ik, prompt X_j) pair, for your ``compute_log_prob``.

    ``batch`` is a generated batch as verl's trainer holds it (``prompts`` left-padded, ``responses``,
    ``attention_mask``, ``response_mask`` where agent loops mark generated tokens 1 and the env's 0, and
    ``non_tensor_batch["uid"]``). Group i is the rows of one uid (in order of first appearance); X_i its
    first row's prompt (without padding) through ``<think>``; Z_ik the reasoning of row k's first reply
    (the first run of response_mask 1 tokens), found by ``reasoning(tokenizer, prompt_ids, reply_ids)``
    (a token span or None; ``think_reasoning`` by default). Rows without a reasoning are left out. At
    most ``max_pairs`` (prompt, reasoning) pairs are kept (0: all), drawn without replacement with
    ``random.Random(seed)`` as this project's trainer draws them. Identical prompts share one column,
    as in ``ragen_envs.diagnose.cross_loglik``.

    The rows hold ``prompts``, ``responses`` (Z), ``input_ids``, ``attention_mask``, ``position_ids`` and
    ``response_mask`` (1 on Z's tokens) as verl's actor reads them, ``non_tensor_batch`` the row's place
    in the P x G x P array (``PAIR_KEYS``), and ``meta_info`` temperature 1.0 and ``global_token_num``.
    With several data-parallel ranks pad it (verl's ``pad_dataproto_to_divisor``): ``mi_from_log_probs``
    reads the first ``len(pairs)`` rows of the log-probs. Raises ValueError when fewer than two prompts
    have a reasoning (MI compares prompts)."""
    prompts, replies = _first_turns(batch)
    think_ids = chat_encoding.tokenize(tokenizer, THINK_OPEN)
    groups: dict = {}  # uid -> group index
    firsts: dict[int, list[int]] = {}  # group index -> its first row's prompt
    found = []  # (group index, reasoning ids), in batch order
    for row, uid in enumerate(batch.non_tensor_batch["uid"]):
        g = groups.setdefault(uid, len(groups))
        firsts.setdefault(g, prompts[row])
        span = reasoning(tokenizer, prompts[row], replies[row])
        if span is not None:
            found.append((g, replies[row][span[0]:span[1]]))
    columns: dict[tuple, list] = {}  # a distinct X -> its reasonings, as cross_loglik lays them out
    for g, z in sorted(draw(found, max_pairs, random.Random(seed)), key=lambda pair: pair[0]):
        x = firsts[g] if firsts[g][-len(think_ids):] == think_ids else firsts[g] + think_ids
        columns.setdefault(tuple(x), []).append(z)
    if len(columns) < 2:
        raise ValueError(f"cross_pairs needs two prompts with a reasoning, found {len(columns)}: MI compares "
                         "a reasoning's own prompt with the others")
    rows = [(i, k, j, list(x), z) for i, zs in enumerate(columns.values()) for k, z in enumerate(zs)
            for j, x in enumerate(columns)]
    return _pair_batch(rows, tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0)


def pair_loglik(pairs: DataProto, log_probs) -> tuple[np.ndarray, np.ndarray]:
    """(loglik, lengths) for ``ragen_envs.diagnose.mi_metrics``: each row's log-probs summed over its
    reasoning's tokens into ``loglik[i, k, j] = log p(Z_ik | X_j)``, and ``lengths[i, k] = |Z_ik|`` (0:
    an empty slot of a column with fewer reasonings). ``log_probs``: one row per pairs row, aligned with
    ``pairs.batch["responses"]`` (what verl's actor returns as ``old_log_probs``), a tensor, an array or
    a DataProto holding ``old_log_probs`` or ``log_probs``; rows past ``len(pairs)`` (padding) are
    ignored."""
    if isinstance(log_probs, DataProto):
        key = next((k for k in ("old_log_probs", "log_probs") if k in log_probs.batch.keys()), None)
        if key is None:
            raise ValueError(f"the log-probs DataProto holds neither old_log_probs nor log_probs: "
                             f"{sorted(log_probs.batch.keys())}")
        log_probs = log_probs.batch[key]
    lp = log_probs.detach().float().cpu().numpy() if isinstance(log_probs, torch.Tensor) else np.asarray(log_probs)
    mask = pairs.batch["response_mask"].cpu().numpy().astype(bool)
    if lp.ndim != 2 or lp.shape[0] < len(pairs) or lp.shape[1] != mask.shape[1]:
        raise ValueError(f"log_probs must have a row per pairs row ({len(pairs)}) and a column per response token "
                         f"({mask.shape[1]}), got shape {lp.shape}")
    sums = np.where(mask, lp[:len(pairs)], 0.0).sum(axis=1)
    i, k, j = (np.asarray(pairs.non_tensor_batch[key], dtype=int) for key in PAIR_KEYS)
    P, G = int(j.max()) + 1, int(k.max()) + 1
    loglik, lengths = np.zeros((P, G, P)), np.zeros((P, G), dtype=int)
    loglik[i, k, j] = sums
    lengths[i, k] = mask.sum(axis=1)
    return loglik, lengths


def mi_from_log_probs(pairs: DataProto, log_probs, emas: dict | None = None) -> dict[str, float]:
    """The MI proxies of a cross-paired batch from its log-probs (``pair_loglik``): ``mi/<name>`` from
    ``mi_metrics`` (the paper's formulas) and ``mi_code/<name>`` from ``mi_metrics_code`` (RAGEN's released
    code), as this project's trainer logs its first-turn scope. ``emas``, if given, maps ``"mi"`` and/or
    ``"mi_code"`` to a ``ragen_envs.diagnose.MIZScoreEMA`` kept across steps (variants "paper" and
    "code"), adding ``mi/mi_zscore_ema`` and ``mi_code/mi_zscore_ema``."""
    loglik, lengths = pair_loglik(pairs, log_probs)
    out = {f"mi/{k}": v for k, v in mi_metrics(loglik, lengths).items()}
    out.update({f"mi_code/{k}": v for k, v in mi_metrics_code(loglik, lengths).items()})
    for prefix, ema in (emas or {}).items():
        out[f"{prefix}/mi_zscore_ema"] = ema.update(loglik, lengths)
    return out


def _first_turns(batch: DataProto) -> tuple[list[list[int]], list[list[int]]]:
    """Per row: the prompt without its padding, and the first reply (the first run of generated tokens)."""
    for key in ("prompts", "responses", "attention_mask"):
        if key not in batch.batch.keys():
            raise ValueError(f"cross_pairs needs batch.batch[{key!r}] (a generated batch), which this batch lacks")
    if "uid" not in batch.non_tensor_batch:
        raise ValueError("cross_pairs groups rows by non_tensor_batch['uid'] (set by verl's trainer), which this "
                         "batch lacks")
    prompt_ids, response_ids = batch.batch["prompts"], batch.batch["responses"]
    width = prompt_ids.shape[1]
    attention = batch.batch["attention_mask"]
    # single-turn batches may not carry response_mask yet: verl derives it from the attention mask
    generated = batch.batch["response_mask"] if "response_mask" in batch.batch.keys() else attention[:, width:]
    prompts, replies = [], []
    for row in range(len(batch)):
        prompts.append(prompt_ids[row][attention[row, :width].bool()].tolist())
        marks = generated[row].bool().tolist()
        start = marks.index(True) if True in marks else len(marks)
        end = marks.index(False, start) if False in marks[start:] else len(marks)
        replies.append(response_ids[row, start:end].tolist())
    return prompts, replies


def _pair_batch(rows: list[tuple], pad_id: int) -> DataProto:
    """A DataProto of (i, k, j, X ids, Z ids) rows: X left-padded, Z right-padded, as verl lays them out."""
    n, width, longest = len(rows), max(len(r[3]) for r in rows), max(len(r[4]) for r in rows)
    prompts = torch.full((n, width), pad_id, dtype=torch.long)
    responses = torch.full((n, longest), pad_id, dtype=torch.long)
    attention = torch.zeros((n, width + longest), dtype=torch.long)
    for r, (_, _, _, x, z) in enumerate(rows):
        prompts[r, width - len(x):] = torch.tensor(x)
        responses[r, :len(z)] = torch.tensor(z)
        attention[r, width - len(x):width + len(z)] = 1
    return DataProto.from_dict(
        tensors={"prompts": prompts, "responses": responses, "input_ids": torch.cat([prompts, responses], dim=1),
                 "attention_mask": attention, "position_ids": compute_position_id_with_mask(attention),
                 "response_mask": attention[:, width:].clone()},
        non_tensors={key: np.array([r[at] for r in rows]) for at, key in enumerate(PAIR_KEYS)},
        meta_info={"temperature": 1.0, "global_token_num": attention.sum(-1).tolist()})
