"""The audit's policies that do not read the task (benchmarks/blind_audit.py) find what they should."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import blind_audit  # noqa: E402
from ragen_envs.bandit.env import PAIRS  # noqa: E402


HELD = list(range(blind_audit.HELD_OUT, blind_audit.HELD_OUT + 40))


@pytest.fixture(scope="module")
def depth_one_plan():
    """The blind plan the search finds for RAGEN's depth-1 cube (the ragen2-main preset)."""
    s = blind_audit.setting("Ragen/RubiksCube-v0", "ragen2-main")
    assert s.env_kwargs == {"scramble_depth": 1} and s.budget == 20
    train = list(range(30))  # enough to hold each of the six positions
    return blind_audit.blind_plan(s, train, blind_audit.alphabet(s, train), width=8)


def test_the_beam_search_finds_the_fixed_plan_that_solves_a_cube_one_turn_deep(depth_one_plan):
    # eleven fixed moves solve every scramble; a greedy search without looking one move ahead finds
    # one move and stops gaining
    s = blind_audit.setting("Ragen/RubiksCube-v0", "ragen2-main")
    assert len(depth_one_plan) <= 20 and blind_audit.plan_success(s, depth_one_plan, HELD) == 1.0
    assert ("Ragen/RubiksCube-v0", "ragen2-main") in blind_audit.EXPLAINED  # its docs say why


def test_a_blind_plan_cannot_solve_the_default_cube(depth_one_plan):
    s = blind_audit.setting("Ragen/RubiksCube-v0", "defaults")
    assert s.budget == 20 and blind_audit._make(s).scramble_depth == 3
    rand, oracle = blind_audit.baselines(s, HELD)
    assert oracle == 1.0 and blind_audit.plan_success(s, depth_one_plan, HELD) < rand + (oracle - rand) / 2


def test_no_surface_feature_of_the_held_out_bandit_names_tells_the_risky_arm():
    # "pull the longer name" scored 1.00 on the old held-out pairs; every rule that reads the names' form
    # must pick the risky arm in about half of the pairs (at most 7 of 12)
    # (a rule that ties picks by the order shown, which the env draws at random: half a pair each way)
    risky = {pair[1] for pair in PAIRS["test"]}
    for name, rule in blind_audit.surface_rules():
        right = sum((rule([s, r]) in risky) + (rule([r, s]) in risky) for s, r in PAIRS["test"]) / 2
        assert right <= 7, f"the rule '{name}' picks the risky arm in {right} of {len(PAIRS['test'])} pairs"


def test_the_surface_policy_is_fitted_on_training_seeds_and_contained_on_bandit_test():
    rows = blind_audit.audit("Ragen/BanditTest-v0", "defaults", seeds=60)
    surface = next(r for r in rows if r["policy"] == "surface-feature")
    assert surface["verdict"] == "contained" and surface["success"] < surface["bar"]
    # on the training names the longer name is the risky one in most pairs, and the audit sees it
    train = blind_audit.audit("Ragen/Bandit-v0", "defaults", seeds=60)
    assert next(r for r in train if r["policy"] == "surface-feature")["success"] > 0.75
