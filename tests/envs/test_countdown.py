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
# by regex must be the nums (else 0), then Python evaluation within 1e-5 of the target (1), else 0.1.
# The default check pays the same for these: arithmetic, text Python cannot parse, or the wrong integers
RAGEN_CASES = [
    ("2 + 5 - 3", 1.0), ("-3+5+2", 1.0), ("(2+5)-3", 1.0), (" 5-3+2", 1.0), ("5-3+2\n", 1.0),
    ("2 * (5 - 3) ", 1.0), ("(5 - 3) * 2.0", 0.0),     # 2.0 reads as integers 2 and 0
    ("+5-3+2", 1.0), ("-(3 - 5) * 2", 1.0),            # signs
    ("2+5-3 = 4", 0.0),             # the 4 is a fifth number
    ("(5-3) × 2", 0.1),             # the right numbers; × is no Python operator
    ("3 5 2", 0.1), ("5 / 3 * 2", 0.1), ("5 - 3 - 2", 0.1), ("3 + 5 + 2 = ?", 0.1),
    ("hello", 0.0), ("2 + 5", 0.0), ("2 + 5 - 3 + 3", 0.0), ("٣ + 5 - 2", 0.1),  # \d matches Arabic-Indic digits
    ("5 - 3 + 2 if 3 else 0", 0.0), ("5 - 3 + 2 if 3 else 2", 0.0), ("(5 > 3) * 2 + 2", 0.0),
    ("(5 > 3) + 3 + 2 - 2", 0.0), ("9" * 5000, 0.0), ("(" * 300 + "5-3+2" + ")" * 300, 0.1),
]


@pytest.mark.parametrize("answer, reward", RAGEN_CASES)
def test_the_default_check_is_ragens(answer, reward):
    _, r, term, _, info = play(answer, target=4, nums=(3, 5, 2), answer_check="ragen")
    assert (r, term, info["success"]) == (reward, True, reward == 1.0)


def test_a_division_by_zero_scores_the_format_credit_as_in_ragen():
    _, r, *_ = play("5 / (2 - 2)", target=4, nums=(2, 5, 2), answer_check="ragen")
    assert r == 0.1 == ragen_reference("5 / (2 - 2)", (2, 5, 2), 4)


# (answer, nums, target, RAGEN's reward): Python that parses but is no arithmetic on the given numbers.
# RAGEN's eval pays it; the default check pays 0 (the documented departure in ragen_rule.py)
DEPARTURES = [
    ("(3+5+2)*False + (True<<(True+True))", (3, 5, 2), 4, 1.0),  # True/False hold no digits: any target
    ("5 % 3 + 2", (3, 5, 2), 4, 1.0), ("2 ** (5 - 3)", (3, 5, 2), 4, 1.0), ("5 > 3 - 2", (3, 5, 2), 1, 1.0),
    ("3_5 + 2", (3, 5, 2), 37, 1.0), ("2*3.5", (2, 3, 5), 7, 1.0),    # numbers not as given
    ("3 + 5  # 2", (3, 5, 2), 8, 1.0),                                # a number hidden in a comment
    ("5 - 3 + 2 + 'x'.find('x')", (3, 5, 2), 4, 1.0),                # a method call runs in RAGEN
    ("x + 5 + 3 + 2", (3, 5, 2), 4, 0.1), ("(5, 3, 2)", (3, 5, 2), 4, 0.1), ("5 // 3 * 2", (3, 5, 2), 4, 0.1),
    ("2 ** 3 - 5", (3, 5, 2), 4, 0.1), ("not 3 + 5 - 2", (3, 5, 2), 4, 0.1), ("5 - 3 << 2", (3, 5, 2), 4, 0.1),
    ("3 ** 5 ** 2", (3, 5, 2), 4, 0.1), ("'3' + '5' + '2'", (3, 5, 2), 4, 0.1),
]


@pytest.mark.parametrize("answer, nums, target, ragens", DEPARTURES)
def test_the_default_check_pays_nothing_for_python_that_is_not_arithmetic(answer, nums, target, ragens):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        assert ragen_reference(answer, nums, target) == ragens  # what RAGEN pays: our own strings, safe
    _, r, term, _, info = play(answer, target=target, nums=nums, answer_check="ragen")
    assert (r, term, info["success"]) == (0.0, True, False)


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


def plain_arithmetic(text):
    """True: Python parses ``text`` as integers with + - * /, brackets and signs; False: as other Python;
    None: it does not parse (checked here apart from the env's evaluator)."""
    import ast
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(text.lstrip(" \t"), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    allowed = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.USub, ast.UAdd)
    return all(isinstance(n, allowed) or isinstance(n, ast.Constant) and type(n.value) is int
               and ast.get_source_segment(text.lstrip(" \t"), n).isdigit()  # not 3_5
               for n in ast.walk(tree))


def test_the_default_check_is_ragens_on_arithmetic_and_unparsable_text_and_pays_nothing_for_other_python():
    from ragen_envs.countdown.ragen_rule import reward

    rng = random.Random(0)
    tokens = ["+", "-", "*", "/", "//", "%", "**", "<<", ">>", "&", "|", "^", "==", "<", "and", "or", "not",
              "(", ")", " ", "-", "~", "if", "else", ",", "[", "]", ".5", "1.", "0", "True", "_"]
    paid = refused = 0
    for _ in range(20_000):
        nums = [rng.randint(1, 9) for _ in range(3)]
        parts = [str(nums[0]), rng.choice("+-*"), str(nums[1]), rng.choice("+-*"), str(nums[2])]
        target = rng.choice([rng.randint(1, 20), eval("".join(parts))])  # our own text: safe to eval
        for _ in range(rng.randint(0, 4)):
            parts.insert(rng.randint(0, len(parts)), rng.choice(tokens))
        text = " ".join(parts) if rng.random() < 0.5 else "".join(parts)
        if text.count("**") > 1:  # (9 ** 9 ** 9 would take Python minutes)
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            expected = ragen_reference(text, nums, target)
        kind = plain_arithmetic(text)
        ours = reward(text, nums, target)
        if kind is False:
            assert ours == 0.0, text
            refused += expected > 0
        else:
            assert ours == expected, text
            paid += expected == 1.0
    assert paid > 200 and refused > 200  # solved ones too, and tricks RAGEN pays


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
    with pytest.raises(ValueError, match="'answer_check' must be one of 'ragen', 'strict'"):
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


# Answers that made RAGEN's eval (and this env's first evaluator) build huge values or recurse deep
W = "(True<<(" + "+".join(["True"] * 31) + "))"  # 2**31, built without a digit
HOSTILE = [
    f"'%*s' % ({W}, '') and 5 - 3 + 2",   # the red team's memory bomb: %-formatting 2 GB, then the target
    "'x' * (True << 40) and 5 - 3 + 2", "9**9**9 + 3 + 5 + 2", "3 ** 5 ** 2 ** 9",
    "(" * 4990 + "5-3+2" + ")" * 4990, "-" * 9990 + "5-3+2", "+-" * 4990 + "5-3+2", "~" * 9990 + "5-3+2",
    "9" * 4000, "9" * 4400 + " + 5 - 3 + 2", "1e100000", "5 - 3 + 2 + 1e100000", "[5, 3, 2] * (True << 60)",
    "*".join(["99999"] * 1000), "(5 - 3 + 2" + " * 9" * 2000 + ")", "5/3/2" * 1000, "\n".join(["5-3+2"] * 900),
    "9" * 99 + " * " + "9" * 99,
]


@pytest.mark.parametrize("answer_check", ["ragen", "strict"])
def test_hostile_answers_are_scored_at_once_and_never_raise(answer_check):
    import time

    env = gym.make("Ragen/Countdown-v0", answer_check=answer_check)
    for answer in HOSTILE:
        env.reset(seed=0, options={"task": {"target": 4, "nums": [3, 5, 2]}})
        start = time.perf_counter()
        _, r, *_ = env.step(answer)
        assert time.perf_counter() - start < 1.0, answer[:60]  # generous: each takes microseconds
        assert r in (0.0, 0.1), answer[:60]


@pytest.mark.parametrize("answer_check", ["ragen", "strict"])
def test_step_never_raises_on_any_string(answer_check):
    rng = random.Random(1)
    pieces = ["3", "5", "2", "0", "+", "-", "*", "/", "**", "%", "<<", "(", ")", "[", "]", "{", "}", ",", ".",
              "_", "'", '"', "#", " ", "\n", "\t", "\\", "True", "x", "lambda", ":", "=", "×", "٣", "\x00",
              "\ud800", "\U0001f600", "if", "else", "f'{", "e9", "0x", "j", "@", "!", "?", "`", "$"]
    env = gym.make("Ragen/Countdown-v0", answer_check=answer_check)
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 30)))
        env.reset(seed=0, options={"task": {"target": 4, "nums": [3, 5, 2]}})
        _, r, *_ = env.step(text)
        assert r in (0.0, 0.1, 1.0)
    for action in (None, 7, b"5-3+2", ["5-3+2"]):
        env.reset(seed=0, options={"task": {"target": 4, "nums": [3, 5, 2]}})
        assert env.step(action)[1:3] == (0.0, False)


@pytest.mark.parametrize("answer_check", ["ragen", "strict"])
def test_steps_after_the_end_pay_nothing(answer_check):
    env = gym.make("Ragen/Countdown-v0", answer_check=answer_check)
    env.reset(seed=0, options={"task": {"target": 4, "nums": [3, 5, 2]}})
    assert env.step("5 - 3 + 2")[1:3] == (1.0, True)
    assert env.step("5 - 3 + 2")[1:3] == (0.0, True)  # terminated
    env.reset(seed=0, options={"task": {"target": 4, "nums": [3, 5, 2]}})
    for _ in range(3):
        _, r, terminated, truncated, _ = env.step("\x00")
    assert (r, terminated, truncated) == (0.0, False, True)
    assert env.step("5 - 3 + 2")[1:4] == (0.0, False, True)  # truncated


@pytest.mark.parametrize("task", [
    {"target": 24, "nums": [1, 2, 3, 4, 5, 6, 7]},           # more numbers than the solver takes
    {"target": 24, "nums": [10**10, 2]}, {"target": 10**10, "nums": [3, 5]},
    {"target": 24, "nums": [2 ** 20_000, 3]},                  # more digits than Python prints
    {"target": 1, "nums": [-3, 4]},                            # no answer can write a -3
    {"target": 24, "nums": list(range(100_000))},
])
def test_reset_refuses_a_client_task_beyond_a_records_bounds(task):
    env = gym.make("Ragen/Countdown-v0")
    with pytest.raises(ValueError, match="need 1 to 6 nums from 0 to 1000000000"):
        env.reset(options={"task": task})


def test_the_solver_gives_up_after_a_bounded_search(monkeypatch):
    from ragen_envs.countdown import expression

    six = [97, 89, 83, 79, 73, 71]
    late = 97 * 89 * 83 * 79 + 73 + 71  # found after some 10,000 search steps
    assert solve(six, late, max_steps=10_000) is None
    assert parse(solve(six, late)).value == late  # within MAX_SOLVE_STEPS
    assert solve(six, 10**9 - 7, max_steps=10_000) is None  # no solution: the whole search would take 40 s
    # The env's oracle goes through the bound: the worst client task (6 large numbers) costs no more
    monkeypatch.setattr(expression, "MAX_SOLVE_STEPS", 10_000)
    env = gym.make("Ragen/Countdown-v0")
    env.reset(options={"task": {"target": late, "nums": six}})
    assert env.unwrapped.oracle_action() is None


# -- counted generation: a target range no draw reaches stops, named, instead of a RuntimeError -------------
def test_the_generator_counts_its_draws():
    from ragen_envs.base import Budget
    from ragen_envs.countdown.generator import MAX_DRAWS

    wide = CountdownConfig(max_numbers=6, max_target=10**9)
    for config in (CountdownConfig(), CountdownConfig(operators="+-*/"), wide):
        for seed in range(20):
            budget = Budget(MAX_DRAWS, "expressions drawn", "min_target", config.min_target, "")
            task = generate(random.Random(seed), config, budget)
            assert task == generate(random.Random(seed), config)  # counting changes no task
            assert 1 <= budget.used <= MAX_DRAWS // 100


def test_an_unreachable_target_range_names_min_target():
    from ragen_envs.base import Budget, GenerationBudgetError

    config = CountdownConfig(max_number=2)  # at most four 2s: never 10
    budget = Budget(300, "expressions drawn", "min_target", 10, "widen the target range")
    with pytest.raises(GenerationBudgetError, match="more than 300 expressions drawn with min_target=10") as error:
        generate(random.Random(0), config, budget)
    assert error.value.argument == "min_target" and budget.used == 301
    env = gym.make("Ragen/Countdown-v0", max_number=2)
    with pytest.raises(GenerationBudgetError, match=r"min_target=10: no draw lands in 10\.\.100"):
        env.reset(seed=0)
    with pytest.raises(ValueError, match=r"^max_number must be in \[2, 1000000000\]"):
        gym.make("Ragen/Countdown-v0", max_number=10**12)
