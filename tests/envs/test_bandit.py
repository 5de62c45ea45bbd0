"""Bandit: RAGEN's two-armed bandit, its payouts, splits and parsing."""

import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import ragen_envs  # noqa: F401
from ragen_envs import ENVIRONMENTS
from ragen_envs.bandit.env import PAIRS


def test_the_risky_arm_pays_more_on_average_and_the_steady_one_always_the_same():
    env = gym.make("Ragen/Bandit-v0")
    risky, steady = [], []
    for seed in range(2000):
        env.reset(seed=seed)
        arm = env.unwrapped.risky if seed % 2 else env.unwrapped.steady
        _, reward, terminated, _, info = env.step(arm)
        (risky if seed % 2 else steady).append(reward)
        assert terminated and info["success"] == bool(seed % 2)
    assert set(steady) == {0.1} and set(risky) == {0.0, 1.0}
    assert np.mean(risky) == pytest.approx(0.25, abs=0.04)  # 1000 pulls: 4 standard errors


def test_arms_by_name_or_position_and_nothing_else():
    env = gym.make("Ragen/Bandit-v0")
    obs, info = env.reset(seed=3)
    first, second = info["arms"]
    assert f"Arm 1: {first}" in obs and f"Arm 2: {second}" in obs
    parse = env.get_wrapper_attr("parse_action")
    assert parse(f"  {first.upper()} ") == first and parse("2") == second
    for bad in ("", "3", "both", f"{first} or {second}", obs):
        assert parse(bad) is None
    obs2, reward, terminated, _, info = env.step("neither")
    assert obs2 == obs and reward == 0 and not terminated and not info["action_is_valid"]
    assert env.step("2")[2]  # a valid pull ends the episode


def test_splits_hold_different_names_and_the_order_is_random():
    assert not {n for pair in PAIRS["train"] for n in pair} & {n for pair in PAIRS["test"] for n in pair}
    test = gym.make("Ragen/Bandit-v0", split="test")
    names = {tuple(test.reset(seed=s)[1]["arms"]) for s in range(200)}
    assert {frozenset(n) for n in names} <= {frozenset(p) for p in PAIRS["test"]}
    assert any(n[0] in dict(PAIRS["test"]) for n in names) and any(n[1] in dict(PAIRS["test"]) for n in names)


def test_the_transition_seed_draws_the_payout_not_the_arms():
    env = gym.make("Ragen/Bandit-v0")
    paid = []
    for t in range(40):
        _, info = env.reset(seed=7, options={"transition_seed": t})
        assert info["arms"] == gym.make("Ragen/Bandit-v0").reset(seed=7)[1]["arms"]
        paid.append(env.step(env.unwrapped.risky)[1])
    assert set(paid) == {0.0, 1.0}


@pytest.mark.parametrize("kwargs", [{"split": "val"}, {"jackpot_prob": 1.5}, {"steady_reward": 0.5},
                                    {"max_steps": 0}])
def test_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        gym.make("Ragen/Bandit-v0", **kwargs)


def test_the_oracle_reasons_from_the_names():
    env = gym.make("Ragen/Bandit-v0")
    env.reset(seed=1)
    first = env.get_wrapper_attr("oracle_reasoning")()
    env.reset(seed=2)
    assert env.unwrapped.risky in env.get_wrapper_attr("oracle_reasoning")() and first != \
        env.get_wrapper_attr("oracle_reasoning")()


@pytest.mark.parametrize("kwargs, message", [
    ({"jackpot": float("inf")}, r"^jackpot must be in \[0, 1000\] \(.+\), got inf$"),
    ({"jackpot_prob": float("nan")}, r"^jackpot_prob must be in \[0, 1\]"),
    ({"steady_reward": -1.0}, r"^steady_reward must be in \[0, 1000\]"),
])
def test_rewards_past_their_bounds_are_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message):
        gym.make("Ragen/Bandit-v0", **kwargs)


# -- what a policy that reads the names' form, not their meaning, earns (benchmarks/audits/blind_audit.py) -
def _blind_audit():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "audits"))
    import blind_audit

    return blind_audit


@pytest.mark.parametrize("split", ["train", "test"])
def test_no_surface_feature_of_the_names_tells_the_risky_arm(split):
    # "pull the longer name" scored 1.00 on the old held-out pairs (and 0.88 on the training ones); every
    # rule that reads the names' form must pick the risky arm in about half of the pairs (at most 7 of
    # 12). A rule that ties picks by the order shown, which the env draws at random: half a pair each way.
    risky = {pair[1] for pair in PAIRS[split]}
    for name, rule in _blind_audit().surface_rules():
        right = sum((rule([s, r]) in risky) + (rule([r, s]) in risky) for s, r in PAIRS[split]) / 2
        assert right <= 7, f"the rule '{name}' picks the risky arm in {right} of {len(PAIRS[split])} pairs"


def test_the_audits_surface_policy_fitted_on_training_seeds_is_contained_on_held_out_ones():
    audit = _blind_audit()
    for split in ("train", "test"):
        env_id = next(e.id for e in ENVIRONMENTS.values() if e.package == "bandit"
                      and e.kwargs.get("split", "train") == split)
        surface = next(r for r in audit.audit(env_id, "defaults", seeds=60) if r["policy"] == "surface-feature")
        assert surface["verdict"] == "contained" and surface["success"] < surface["bar"], surface
