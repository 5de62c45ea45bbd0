"""The audit's policies that do not read the task (benchmarks/audits/blind_audit.py) run over every env; the
envs' own test files hold what they find there (tests/envs/test_rubikscube.py, test_bandit.py)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "audits"))

import blind_audit  # noqa: E402
from conftest import USABLE_IDS  # noqa: E402
from ragen_envs import ENVIRONMENTS  # noqa: E402


@pytest.mark.parametrize("env_id", USABLE_IDS)
def test_no_policy_that_skips_the_task_reaches_half_the_oracles_lift(env_id):
    # the audit's rule, at a small size (`make audit` runs 200 seeds and plans up to 40 actions): a blind
    # plan or a surface choice whose held-out success reaches random + (oracle - random) / 2 is a bug,
    # unless the env's docs say why
    # a one-pull bandit is cheap and its 12 pairs few: more seeds, to tell a surface rule from luck; a
    # DeepCoder step runs a program in the sandbox: fewer
    seeds = {"bandit": 60, "deepcoder": 4}.get(ENVIRONMENTS[env_id].package, 12)
    rows = [row for name in blind_audit.SETTINGS
            for row in blind_audit.audit(env_id, name, seeds=seeds, max_plan=8, open_text_actions=4)]
    assert not [r for r in rows if r["verdict"] == "BUG"], rows


def test_a_surface_rule_picks_by_the_feature_it_names():
    rules = dict(blind_audit.surface_rules())
    assert rules["most length"](["Ab", "Abcd"]) == "Abcd" and rules["least length"](["Ab", "Abcd"]) == "Ab"
    assert rules["most alphabet"](["Bob", "Al"]) == "Al"  # first in the alphabet
    assert rules["most hyphens"](["a-b", "ab"]) == "a-b" and rules["first shown"](["x", "y"]) == "x"
