"""Countdown: RAGEN's rule (by default) and the strict reader, RAGEN's data selection, the generator and
the solver."""

import random
import warnings
from fractions import Fraction

import gymnasium as gym
import pytest

import ragen_envs  # noqa: F401
from ragen_envs.countdown.expression import parse, solve
from ragen_envs.countdown.generator import CountdownConfig, generate


def play(answer, target=24, nums=(3, 8, 1), answer_check="strict"):
    env = gym.make("Ragen/Countdown-v0", answer_check=answer_check)
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
def test_the_strict_check_pays_ragens_values_for_expressions(answer, reward, terminated):
    _, r, term, _, info = play(answer)
    assert (r, term, info["action_is_valid"]) == (reward, terminated, True)
    assert info["success"] == (reward == 1.0)


@pytest.mark.parametrize("answer", ["__import__('os').system('echo hi')", "8 ** 3", "-8 + 3 + 1", "(8 + 3", "8 // 3",
                                    "8 + 3 + 1.5", "x", "", "1" * 10_000, "(" * 150 + "1" + ")" * 150, "8 3 1",
                                    "True + 3 + 1", "\x00"])
def test_under_the_strict_check_anything_but_an_expression_is_invalid_and_never_evaluated(answer):
    obs, r, term, _, info = play(answer)
    assert (r, term, info["action_is_valid"]) == (0.0, False, False)


def test_fractions_are_exact():
    assert parse("(1 / 3) * 3").value == 1 and parse("1 / 3 + 1 / 6").value == Fraction(1, 2)
    _, r, *_ = play("8 / (1 - 2 / 3)", target=24, nums=(8, 1, 2, 3))
    assert r == 1.0


# (answer, RAGEN's reward) for nums [3, 5, 2] and target 4, worked from RAGEN's compute_reward: integers
# by regex must be the nums (else 0), then Python evaluation within 1e-5 of the target (1), else 0.1
RAGEN_CASES = [
    ("2 + 5 - 3", 1.0), ("-3+5+2", 1.0), ("(2+5)-3", 1.0), (" 5-3+2", 1.0), ("5-3+2\n", 1.0),
    ("2 * (5 - 3) ", 1.0), ("(5 - 3) * 2.0", 0.0),     # 2.0 reads as integers 2 and 0
    ("2+5-3 = 4", 0.0),             # the 4 is a fifth number
    ("(5-3) × 2", 0.1),             # the right numbers; × is no Python operator
    ("3 5 2", 0.1), ("5 / 3 * 2", 0.1), ("(5, 3, 2)", 0.1), ("5 - 3 - 2", 0.1), ("x + 5 + 3 + 2", 0.1),
    ("3 + 5 + 2 = ?", 0.1), ("5 // 3 * 2", 0.1), ("2 ** 3 - 5", 0.1), ("5 % 3 + 2", 1.0),
    ("hello", 0.0), ("2 + 5", 0.0), ("2 + 5 - 3 + 3", 0.0), ("٣ + 5 - 2", 0.1),  # \d matches Arabic-Indic digits
    ("5 - 3 + 2 if 3 else 0", 0.0), ("5 - 3 + 2 if 3 else 2", 0.0), ("(5 > 3) * 2 + 2", 0.0),
    ("(5 > 3) + 3 + 2 - 2", 0.0), ("not 3 + 5 - 2", 0.1), ("5 - 3 << 2", 0.1), ("9" * 5000, 0.0),
    ("3 ** 5 ** 2", 0.1),
]


@pytest.mark.parametrize("answer, reward", RAGEN_CASES)
def test_the_default_check_is_ragens(answer, reward):
    _, r, term, _, info = play(answer, target=4, nums=(3, 5, 2), answer_check="ragen")
    assert (r, term, info["success"]) == (reward, True, reward == 1.0)


def ragen_reference(text, nums, target):
    """RAGEN's compute_reward, as its code computes it, for strings this test generates itself."""
    import re
    try:
        ok = sorted(int(n) for n in re.findall(r"\d+", text)) == sorted(nums)
    except ValueError:
        ok = False
    if not ok:
        return 0.0
    try:
        return 1.0 if abs(eval(text, {"__builtins__": None}, {}) - target) < 1e-5 else 0.1
    except Exception:
        return 0.1


def outcome(evaluate, text):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        try:
            return repr(evaluate(text))
        except Exception:
            return "fails"


def python_eval(text):
    return eval(text, {"__builtins__": None}, {})


def test_the_ragen_check_agrees_with_python_evaluation_on_random_expressions():
    import ast

    from ragen_envs.countdown.ragen_rule import _evaluate, reward

    def evaluate(text):
        return _evaluate(ast.parse(text.lstrip(" \t"), mode="eval").body)

    rng = random.Random(0)
    tokens = ["+", "-", "*", "/", "//", "%", "**", "<<", ">>", "&", "|", "^", "==", "<", "and", "or", "not",
              "(", ")", " ", "-", "~", "if", "else", ",", "[", "]", ".5", "1.", "0"]
    checked = paid = 0
    for _ in range(20_000):
        nums = [rng.randint(1, 9) for _ in range(3)]
        parts = [str(nums[0]), rng.choice("+-*"), str(nums[1]), rng.choice("+-*"), str(nums[2])]
        target = rng.choice([rng.randint(1, 20), eval("".join(parts))])  # our own text: safe to eval
        for _ in range(rng.randint(0, 4)):
            parts.insert(rng.randint(0, len(parts)), rng.choice(tokens))
        text = " ".join(parts) if rng.random() < 0.5 else "".join(parts)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            expected = ragen_reference(text, nums, target)
        assert reward(text, nums, target) == expected, text
        if text.count("**") < 2:  # (9 ** 9 ** 9 would take Python minutes)
            assert outcome(evaluate, text) == outcome(python_eval, text), text
        checked += 1
        paid += expected == 1.0
    assert paid > 200  # solved ones too


def test_ragens_data_keeps_the_first_records_solvable_with_plus_and_minus_and_picks_seed_mod_n():
    records = [{"target": 10, "nums": [2, 5]},          # 10 needs *: dropped
               {"target": 3, "nums": [5, 2]},           # 5 - 2
               {"target": 1, "nums": [2, 4, 7]},        # -2 - 4 + 7
               {"target": 14, "nums": [2, 5, 7]}]       # 2 + 5 + 7, but past max_instances=3
    env = gym.make("Ragen/Countdown-v0", dataset=records, max_instances=3)
    picked = [env.reset(seed=s)[0] for s in range(4)]
    assert picked == ["Target: 3, nums: [5, 2]", "Target: 1, nums: [2, 4, 7]"] * 2
    everything = gym.make("Ragen/Countdown-v0", dataset=records, selection="all")
    shown = {f"Target: {r['target']}, nums: {r['nums']}" for r in records}
    assert {everything.reset(seed=s)[0] for s in range(40)} == shown
    with pytest.raises(ValueError, match="no record passes"):
        gym.make("Ragen/Countdown-v0", dataset=records[:1])
    with pytest.raises(ValueError, match="answer_check must be one of"):
        gym.make("Ragen/Countdown-v0", answer_check="lenient")


def test_generated_tasks_are_signed_sums_by_default_as_ragens_data():
    from ragen_envs.countdown.ragen_rule import has_solution

    tasks = [generate(random.Random(i)) for i in range(300)]
    assert all(has_solution(t.nums, t.target) and not set(t.solution) & set("*/") for t in tasks)


def test_generated_tasks_are_solvable_in_range_and_use_every_operator():
    config = CountdownConfig(operators="+-*/")
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
    small = [generate(random.Random(i), CountdownConfig(2, 2, 10, 1, 20, "+-*/")) for i in range(50)]
    assert all(len(t.nums) == 2 and t.target <= 20 for t in small)


def test_the_solver_finds_an_expression_or_says_none():
    for i in range(100):
        task = generate(random.Random(i), CountdownConfig(operators="+-*/"))
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
    env = gym.make("Ragen/Countdown-v0", dataset=[{"target": 10, "nums": [2, 5]}], selection="all")
    assert env.reset(seed=0)[0] == "Target: 10, nums: [2, 5]"
    assert env.step(env.unwrapped.oracle_action())[1] == 1.0
    with pytest.raises(ValueError, match="lacks field.*nums.*expected fields: target, nums"):
        gym.make("Ragen/Countdown-v0", dataset=[{"target": 10, "numbers": [2, 5]}])
    with pytest.raises(ValueError, match="integer"):
        gym.make("Ragen/Countdown-v0", dataset=[{"target": "10", "nums": [2, 5]}])
