"""Countdown: the safe expression reader, RAGEN's reward scheme, the generator and the solver."""

import random
from fractions import Fraction

import gymnasium as gym
import pytest

import ragen_envs  # noqa: F401
from ragen_envs.countdown.expression import parse, solve
from ragen_envs.countdown.generator import CountdownConfig, generate


def play(answer, target=24, nums=(3, 8, 1)):
    env = gym.make("Ragen/Countdown-v0")
    env.reset(seed=0, options={"task": {"target": target, "nums": list(nums)}})
    return env.step(answer)


@pytest.mark.parametrize("answer, reward, terminated", [
    ("(8 - 1 - 3) * 6", 0.0, True),        # 6 is not given
    ("8 * 3 * 1", 1.0, True),
    ("8 × 3 ÷ 1 = 24", 1.0, True),          # other spellings and a trailing result
    ("8 + 3 + 1", 0.1, True),               # exactly the numbers, wrong value
    ("8 * 3", 0.0, True),                   # a number left out
    ("8 * 3 * 1 * 1", 0.0, True),           # a number used twice
    ("8 / (3 - 3) + 1", 0.0, True),         # division by zero
    ("24", 0.0, True),
])
def test_rewards_follow_ragens_scheme(answer, reward, terminated):
    _, r, term, _, info = play(answer)
    assert (r, term, info["action_is_valid"]) == (reward, terminated, True)
    assert info["success"] == (reward == 1.0)


@pytest.mark.parametrize("answer", ["__import__('os').system('echo hi')", "8 ** 3", "-8 + 3 + 1", "(8 + 3", "8 // 3",
                                    "8 + 3 + 1.5", "x", "", "1" * 10_000, "(" * 150 + "1" + ")" * 150, "8 3 1",
                                    "True + 3 + 1", "\x00"])
def test_anything_but_an_expression_is_invalid_and_never_evaluated(answer):
    obs, r, term, _, info = play(answer)
    assert (r, term, info["action_is_valid"]) == (0.0, False, False)


def test_fractions_are_exact():
    assert parse("(1 / 3) * 3").value == 1 and parse("1 / 3 + 1 / 6").value == Fraction(1, 2)
    _, r, *_ = play("8 / (1 - 2 / 3)", target=24, nums=(8, 1, 2, 3))
    assert r == 1.0


def test_generated_tasks_are_solvable_in_range_and_use_every_operator():
    config = CountdownConfig()
    tasks = [generate(random.Random(i), config) for i in range(400)]
    assert tasks == [generate(random.Random(i), config) for i in range(400)]  # deterministic
    ops = {op: 0 for op in "+-*/"}
    for task in tasks:
        assert 3 <= len(task.nums) <= 4 and all(1 <= n <= 99 for n in task.nums) and 10 <= task.target <= 100
        expression = parse(task.solution)
        assert expression.value == task.target and expression.numbers == tuple(sorted(task.nums))
        for op in ops:
            ops[op] += op in task.solution
    assert all(count > 10 for count in ops.values()), ops
    small = [generate(random.Random(i), CountdownConfig(2, 2, 10, 1, 20)) for i in range(50)]
    assert all(len(t.nums) == 2 and t.target <= 20 for t in small)


def test_the_solver_finds_an_expression_or_says_none():
    for i in range(100):
        task = generate(random.Random(i))
        found = solve(list(task.nums), task.target)
        assert parse(found).value == task.target and parse(found).numbers == tuple(sorted(task.nums))
    assert solve([1, 1, 1], 100) is None
    assert parse(solve([4, 7, 8, 8], 24)).value == 24


def test_seed_picks_the_task_and_splits_differ():
    env = gym.make("Ragen/Countdown-v0")
    first = env.reset(seed=7)[0]
    assert env.reset(seed=7)[0] == first and env.reset(seed=8)[0] != first
    test = gym.make("Ragen/Countdown-v0", split="test")
    assert test.reset(seed=7)[0] != first
    with pytest.raises(ValueError, match="split"):
        gym.make("Ragen/Countdown-v0", split="dev")


def test_records_from_a_list_and_bad_records_fail_at_construction():
    env = gym.make("Ragen/Countdown-v0", dataset=[{"target": 10, "nums": [2, 5]}])
    assert env.reset(seed=0)[0] == "Target: 10, nums: [2, 5]"
    assert env.step(env.unwrapped.oracle_action())[1] == 1.0
    with pytest.raises(ValueError, match="lacks field.*nums.*expected fields: target, nums"):
        gym.make("Ragen/Countdown-v0", dataset=[{"target": 10, "numbers": [2, 5]}])
    with pytest.raises(ValueError, match="integer"):
        gym.make("Ragen/Countdown-v0", dataset=[{"target": "10", "nums": [2, 5]}])
