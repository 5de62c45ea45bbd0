"""Cross-scoring from text: (prompt, reasoning) strings to the token ids that ``cross_loglik`` scores.

Each pair X + Z is tokenised once, as one text, and split where Z's first character starts, so the ids
are exactly those of the joined text: what a model reading X then Z sees. A token that spans the split
(the end of X merged with the start of Z) has no side, so it is an error rather than a silent guess.
"""

from __future__ import annotations

import random
import re

from ragen_envs.agent.parsing import THINK_CLOSE, THINK_OPEN
from ragen_envs.diagnose.mi import cross_loglik, draw

MAX_PAIRS = 64  # (prompt, reasoning) pairs scored per scope, as RAGEN's collapse detection draws


def read_reasoning(reply: str, pattern: str | None = None, prefilled: bool = False) -> str:
    """The reasoning Z of a model reply, "" when it has none.

    By default the text between the first ``<think>`` and the next ``</think>``; with ``prefilled`` (the
    prompt already ended with ``<think>``, so the reply starts inside the block) the text up to the first
    ``</think>``. ``pattern``, if given, is a regular expression (searched with ``re.DOTALL``) used
    instead: its first group is the reasoning, or the whole match when it has no group. A block never
    closed is no reasoning (the reply ran out of tokens mid-thought)."""
    if pattern is not None:
        match = re.search(pattern, reply, re.S)
        return "" if match is None else match.group(1 if match.re.groups else 0)
    start = 0 if prefilled else reply.find(THINK_OPEN)
    if start < 0:
        return ""
    start += 0 if prefilled else len(THINK_OPEN)
    end = reply.find(THINK_CLOSE, start)
    return "" if end < 0 else reply[start:end]


def _split(tokenizer, x: str, z: str) -> tuple[list[int], list[int]]:
    """The ids of x + z, cut where z starts."""
    enc = tokenizer(x + z, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = list(enc["input_ids"]), enc["offset_mapping"]
    cut = next((n for n, (_, end) in enumerate(offsets) if end > len(x)), len(ids))
    if cut < len(ids) and offsets[cut][0] < len(x):
        raise ValueError(f"the token {tokenizer.decode(ids[cut])!r} spans the end of the prompt and the start of "
                         f"the reasoning: end the prompt where a token ends (e.g. with {THINK_OPEN!r} or a newline)")
    return ids[:cut], ids[cut:]


def encode_pairs(tokenizer, prompts: list[str], reasonings: list[list[str]], max_pairs: int = MAX_PAIRS,
                 seed: int = 0, opener: str = THINK_OPEN) -> tuple[list[list[int]], list[list[list[int]]]]:
    """Token ids of text pairs for ``cross_loglik``: (prompt ids X_i, reasoning ids Z_ik per prompt).

    ``prompts[i]`` is a prompt as the model read it (e.g. a chat template's text with the generation
    prompt), ``reasonings[i]`` the reasonings sampled for it (``read_reasoning`` of each reply; "" = none,
    left out). ``opener`` is appended to a prompt that does not end with it already (the reasoning
    follows ``<think>``; "" appends nothing). At most ``max_pairs`` (prompt, reasoning) pairs are kept
    (0: all), drawn without replacement with ``random.Random(seed)`` when there are more; prompts left
    without a reasoning are dropped. ``tokenizer`` must be a fast Hugging Face tokenizer (it reports
    character offsets). Raises ValueError where a token spans a prompt's end and its reasoning's start,
    or where a prompt's ids depend on the reasoning after it."""
    pairs = [(i, z) for i, zs in enumerate(reasonings) for z in zs if z]
    by_prompt: dict[int, list[list[int]]] = {}
    prompt_ids: dict[int, list[int]] = {}
    for i, z in sorted(draw(pairs, max_pairs, random.Random(seed)), key=lambda pair: pair[0]):
        x = prompts[i] if not opener or prompts[i].endswith(opener) else prompts[i] + opener
        x_ids, z_ids = _split(tokenizer, x, z)
        if prompt_ids.setdefault(i, x_ids) != x_ids:
            raise ValueError(f"prompt {i} tokenises differently before different reasonings: end it where a "
                             f"token ends (e.g. with {THINK_OPEN!r} or a newline)")
        by_prompt.setdefault(i, []).append(z_ids)
    return [prompt_ids[i] for i in by_prompt], list(by_prompt.values())


def score_texts(policy, tokenizer, prompts: list[str], reasonings: list[list[str]], max_pairs: int = MAX_PAIRS,
                seed: int = 0, opener: str = THINK_OPEN, progress=None):
    """Score every reasoning under every prompt, from text: (loglik, lengths) for ``mi_metrics``.

    ``policy`` is any backend's policy (``make_policy``: transformers, vllm, openai), ``tokenizer`` its
    fast tokenizer (None: ``policy.tokenizer``); ``prompts``, ``reasonings``, ``max_pairs``, ``seed`` and
    ``opener`` as for ``encode_pairs``, whose ids ``cross_loglik`` scores. Needs two prompts with a
    reasoning for a meaningful MI (one gives a 1 x G x 1 array)."""
    tokenizer = policy.tokenizer if tokenizer is None else tokenizer
    x_ids, z_ids = encode_pairs(tokenizer, prompts, reasonings, max_pairs, seed, opener)
    if not x_ids:
        raise ValueError("no prompt has a non-empty reasoning: nothing to score")
    return cross_loglik(policy, x_ids, z_ids, progress)
