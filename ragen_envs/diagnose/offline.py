"""The diagnosis of a whole run on disk: per step, the MI proxies, the reward statistics and the reasoning
length, and one verdict for the run (what ``ragen diagnose`` writes to diagnosis.json).

``diagnose_records(policy, tokenizer, records)`` takes the records of ``ragen_envs.diagnose.readers`` and
scores each step with one ``CollapseMonitor`` (so the MI-ZScore-EMAs and the early warning run across the
steps, as they would have during training). Per step only the earliest turn of the step is scored; the
prompt of a group is its first record's.

The verdict: template collapse when, at some step S after the first, Retrieval-Acc fell to within
``CHANCE_FACTOR`` (2) times chance while H(Z|X) stayed within the monitor's entropy band (20 %) of its
first value, having been above that at the first step; or when the monitor's own warning fired (its
MI-ZScore-EMA rule). Otherwise "no collapse signature", saying so when Retrieval-Acc was near chance from
the start (the scorer never told the prompts apart, so there was nothing to lose), or when it fell to chance
with H(Z|X) falling too (a narrowing that entropy shows as well, not the template kind).
"""

from __future__ import annotations

from collections import Counter

from ragen_envs.diagnose.monitor import CollapseMonitor
from ragen_envs.diagnose.readers import Record, usable_steps
from ragen_envs.diagnose.rewards import reward_stats
from ragen_envs.diagnose.texts import MAX_PAIRS

CHANCE_FACTOR = 2.0  # Retrieval-Acc at or below this many times chance counts as "at chance"
NO_COLLAPSE = "no collapse signature"


def diagnose_records(policy, tokenizer, records: list[Record], max_pairs: int = MAX_PAIRS, seed: int = 0) -> dict:
    """``{"rows": [...], "verdict": str, "collapse_step": int | None}``, one row per step in order.

    A row holds ``step``, ``episodes``, ``groups``, the monitor's metrics (``mi/<name>``, ``mi_code/<name>``,
    the MI-ZScore-EMAs, ``warning``), ``reasoning_length`` (mean tokens of the non-empty reasonings),
    ``reward_std`` (each group's, from ``reward_stats``), ``zero_variance_share``, ``rv_std_over_mean``, and
    ``notes``: what was skipped and why (reward statistics need groups of one size >= 2; a step with fewer
    than two groups with a reasoning is not scored). Raises ValueError when no step can be scored."""
    tokenizer = policy.tokenizer if tokenizer is None else tokenizer
    usable = set(usable_steps(records))
    monitor = CollapseMonitor(policy, tokenizer, max_pairs=max_pairs, seed=seed)
    rows = []
    for step in sorted({r.step for r in records}):
        at_step = [r for r in records if r.step == step]
        first_turn = min(r.turn for r in at_step)
        batch = [r for r in at_step if r.turn == first_turn]
        row = {"step": step, "episodes": len(batch), "groups": len({r.group for r in batch}), "notes": []}
        row.update(reward_row([r.reward for r in batch], [r.group for r in batch]))
        reasonings = [r.reasoning for r in batch]
        lengths = [len(tokenizer(z, add_special_tokens=False)["input_ids"]) for z in reasonings if z]
        row["reasoning_length"] = sum(lengths) / len(lengths) if lengths else 0.0
        if step in usable:
            prompts = [r.prompt or tokenizer.decode(r.prompt_ids) for r in batch]
            row.update(monitor.update(step, prompts, reasonings, [r.reward for r in batch], [r.group for r in batch]))
        else:
            row["notes"].append("not scored: fewer than two groups with a non-empty reasoning")
        rows.append(row)
    verdict, step = judge(rows, monitor.entropy_band)
    return {"rows": rows, "verdict": verdict, "collapse_step": step}


def judge(rows: list[dict], entropy_band: float = 0.2) -> tuple[str, int | None]:
    """(the verdict sentence, the step of collapse or None) of a run's rows (see the module docstring)."""
    scored = [r for r in rows if "mi/retrieval_acc" in r]
    if not scored:
        return NO_COLLAPSE + " (no step was scored)", None
    first = scored[0]
    h0 = first["mi/conditional_entropy"]

    def near_chance(row):
        return row["mi/retrieval_acc"] <= CHANCE_FACTOR * row["mi/retrieval_chance"]

    lost = None  # the first step where the input dependence was gone with the entropy falling too
    for row in scored[1:]:
        h = row["mi/conditional_entropy"]
        held = abs(h - h0) <= entropy_band * abs(h0)
        if held and near_chance(row) and not near_chance(first):
            return (f"template collapse: Retrieval-Acc fell to within {CHANCE_FACTOR:g}x chance at step {row['step']} "
                    f"({first['mi/retrieval_acc']:.2f} -> {row['mi/retrieval_acc']:.2f}, chance "
                    f"{row['mi/retrieval_chance']:.2f}) while H(Z|X) held ({h0:.2f} -> {h:.2f} nats/token)",
                    row["step"])
        if row.get("warning"):
            return f"template collapse at step {row['step']}: {row['warning']}", row["step"]
        if lost is None and near_chance(row) and not near_chance(first):
            lost = row
    if all(near_chance(r) for r in scored):
        return (f"{NO_COLLAPSE}: Retrieval-Acc was within {CHANCE_FACTOR:g}x chance from the first scored step on "
                "(the reasoning never told the prompts apart under this model)"), None
    if lost is not None:
        return (f"{NO_COLLAPSE} (not the template kind): Retrieval-Acc fell to within {CHANCE_FACTOR:g}x chance at "
                f"step {lost['step']} ({first['mi/retrieval_acc']:.2f} -> {lost['mi/retrieval_acc']:.2f}) with H(Z|X) "
                f"falling too ({h0:.2f} -> {lost['mi/conditional_entropy']:.2f} nats/token): the reasoning narrowed, "
                "which entropy shows as well"), None
    return NO_COLLAPSE, None


def reward_row(returns: list[float], groups: list) -> dict:
    """A step's reward statistics (``reward_stats``) and ``notes``: why there are none, when groups have one
    sample or unequal sizes."""
    sizes = Counter(groups)
    if not sizes or max(sizes.values()) < 2:
        return {"notes": ["reward statistics skipped: every group has one sample"]}
    if len(set(sizes.values())) > 1:
        return {"notes": [f"reward statistics skipped: groups of unequal size ({sorted(set(sizes.values()))})"]}
    stats = reward_stats(returns, groups)
    return {"reward_std": stats["reward_std"], "zero_variance_share": stats["zero_variance_share"],
            "rv_std_over_mean": stats["rv_std_over_mean"], "notes": []}
