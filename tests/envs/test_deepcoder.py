"""DeepCoder: test formats, partial credit, feedback, retries, the built-in problems."""

import json

import gymnasium as gym
import pytest

from ragen_envs.registry import ENVIRONMENTS, system_problem
from ragen_envs.deepcoder import problems
from ragen_envs.deepcoder.problems import (Problem, from_record, program_of, split_check, stdout_matches,
                                           values_match)

# DeepCoder runs code only in its sandbox (`make test` installs bubblewrap where apt-get runs as root).
SANDBOX_PROBLEM = system_problem(ENVIRONMENTS["Ragen/DeepCoder-v0"])
needs_sandbox = pytest.mark.skipif(SANDBOX_PROBLEM is not None, reason=str(SANDBOX_PROBLEM))

CHECK = '''
import math

def check(candidate):
    assert candidate(2, 3) == 5
    assert candidate(-1, 1) == 0, "message"
    assert abs(candidate(0.1, 0.2) - 0.3) < 1e-9
    x = candidate(1, 1)
    assert x == 2
    for a in range(3):
        assert candidate(a, a) == 2 * a
'''
ADD = Problem("t/add", "Write add(a, b).", tuple(split_check(CHECK, "add", "def add(a, b):\n    pass\n")),
              "def add(a, b):\n    return a + b\n",
              "add", "def add(a, b):\n")


def test_humaneval_checks_split_into_one_test_per_assert():
    kinds = [t["kind"] for t in ADD.tests]
    assert kinds == ["call", "call", "assert", "assert", "assert"]
    assert ADD.tests[0] == {"kind": "call", "fn_name": "add", "args": [2, 3], "expected": 5}
    assert ADD.tests[2]["candidate"] == "candidate" and "import math" in ADD.tests[2]["trusted"]
    assert ADD.tests[2]["trusted"].startswith("def add(a, b):") and ADD.tests[2]["fn_name"] == "add"  # the reference
    assert "x = candidate(1, 1)" in ADD.tests[3]["prelude"]  # setup before an assert stays with it


@pytest.mark.parametrize("got, expected, match", [
    ("1 2\n3\n", "1 2\n3", True), ("0.3333333\n", "0.333333333", True), ("1.0", "1", True), ("1 2", "1  2", True),
    ("1 2", "1 3", False), ("yes", "YES", False), ("1\n2", "1", False), ("", "", True)])
def test_stdout_comparison(got, expected, match):
    assert stdout_matches(got, expected) is match


@pytest.mark.parametrize("got, expected, match", [
    (1, 1.0000000001, True), ([1, [2.0]], [1, [2]], True), (True, 1, False), (1, True, False), ("1", 1, False),
    ({"a": 1}, {"a": 1}, True), ([1, 2], [2, 1], False), (None, None, True)])
def test_value_comparison(got, expected, match):
    assert values_match(got, expected) is match


# (kind, what the program gave, expected, RAGEN's verdict, ours), worked from RAGEN's harness: stdout
# equal after strip(), a call's str(result) == str(expected)
COMPARE_CASES = [
    ("stdio", "1 2\n3\n", "1 2\n3", True, True), ("stdio", "1  2", "1 2", False, True),
    ("stdio", "1.0", "1", False, True), ("stdio", "YES", "yes", False, False),
    ("call", 0.30000000000000004, 0.3, False, True), ("call", (1, 2), [1, 2], False, True),
    ("call", [1, 2], [1, 2], True, True), ("call", True, 1, False, False), ("call", "1", 1, True, False),
    ("call", 10 ** 5000, 1, False, False),
]


@pytest.mark.parametrize("kind, got, expected, ragen, ours", COMPARE_CASES, ids=[str(i) for i in range(10)])
def test_ragens_comparison_on_request(kind, got, expected, ragen, ours):
    from ragen_envs.deepcoder.env import passed
    from ragen_envs.deepcoder.sandbox import Run

    test = {"kind": kind, "expected": expected}
    run = Run("ok", stdout=got) if kind == "stdio" else Run("ok", value=got)
    assert (passed(test, run, "ragen"), passed(test, run)) == (ragen, ours)


def test_deepcoder_preview_records_in_each_format():
    functional = from_record({"problem": "Sum two numbers.", "metadata": json.dumps({"func_name": "add"}),
                              "starter_code": "class Solution:\n    def add(self, a, b):\n",
                              "tests": json.dumps([{"input": "1\n2", "output": "3", "testtype": "functional"},
                                                   {"input": "__import__('os')\n1", "output": "x",
                                                    "testtype": "functional"}])}, "r")
    assert functional.tests[0] == {"kind": "call", "fn_name": "add", "args": [1, 2], "expected": 3}
    assert functional.tests[1]["args"][0] == "__import__('os')"  # a string, never evaluated
    assert "class Solution" in functional.statement
    stdin = from_record({"problem": "Echo.", "tests": {"inputs": ["a\n"], "outputs": ["a\n"]}}, "r")
    assert stdin.tests == ({"kind": "stdio", "stdin": "a\n", "expected": "a\n"},)
    with pytest.raises(ValueError, match="non-empty list"):
        from_record({"problem": "x", "tests": "[]"}, "r")
    with pytest.raises(ValueError, match="'input' and 'output'"):
        from_record({"problem": "x", "tests": [{"in": 1}]}, "r")


def test_the_program_is_the_last_python_block_or_a_body_for_the_starter():
    answer = "First try:\n```python\nprint(1)\n```\nBetter:\n```python\nprint(2)\n```\n"
    assert program_of(answer, Problem("p", "s", ())) == "print(2)\n"
    assert program_of("    return a + b\n", ADD) == "def add(a, b):\n    return a + b\n"
    assert program_of("print(3)", Problem("p", "s", ())) == "print(3)"


@needs_sandbox
def test_partial_credit_feedback_and_retries():
    env = gym.make("Ragen/DeepCoder-v0", max_attempts=2)
    obs, info = env.reset(seed=0, options={"problem": ADD})
    assert obs == ADD.statement and info["tests"] == 5
    obs, reward, terminated, truncated, info = env.step("```python\ndef add(a, b):\n    return 5\n```")
    assert reward == pytest.approx(1 / 5) and not terminated and not info["success"]
    assert "Passed 1 of 5 tests" in obs and "add(-1, 1)" in obs and "got:\n5" in obs and "1 attempt(s) left" in obs
    obs, reward, terminated, truncated, info = env.step("def add(a, b):\n    return a + b")
    assert (reward, terminated, info["success"]) == (1.0, True, True)


@needs_sandbox
def test_attempts_run_out_and_errors_are_shown():
    env = gym.make("Ragen/DeepCoder-v0")
    env.reset(seed=0, options={"problem": ADD})
    obs, reward, terminated, truncated, info = env.step("def add(a, b):\n    raise ValueError('nope')")
    assert (reward, terminated) == (0.0, True) and "ValueError: nope" in obs
    assert env.step("def add(a, b):\n    return a + b")[1:3] == (0.0, True)  # absorbing: no more attempts


@needs_sandbox
def test_a_returned_object_cannot_fake_equality():
    env = gym.make("Ragen/DeepCoder-v0")
    env.reset(seed=0, options={"problem": ADD})
    cheat = "class Any:\n    def __eq__(self, other):\n        return True\ndef add(a, b):\n    return Any()\n"
    reward = env.step(cheat)[1]
    assert reward < 0.5  # the call tests compare plain values outside the sandbox


def test_builtin_problems():
    human = problems.humaneval()
    assert len(human) == 164 and all(p.tests and p.entry_point for p in human)
    generated = [problems.generate(__import__("random").Random(i), i) for i in range(50)]
    assert generated == [problems.generate(__import__("random").Random(i), i) for i in range(50)]
    assert len({p.statement for p in generated}) > 20
    train, test = problems.builtin_split("train"), problems.builtin_split("test")
    assert len(train) + len(test) == 500 and not {p.id for p in train} & {p.id for p in test}


@needs_sandbox
def test_reference_solutions_pass_their_tests():
    env = gym.make("Ragen/DeepCoder-v0").unwrapped
    sample = problems.builtin()[::10]  # every problem is checked by benchmarks/env_throughput.py
    for problem in sample:
        env.problem = problem
        good, failed = env.evaluate(program_of(problem.solution, problem))
        assert not failed, (problem.id, failed[:1])


def test_deepcoder_preview_through_the_hub_source(monkeypatch):
    from ragen_envs import data
    from tests.contract.test_data import fake_datasets

    calls = fake_datasets(monkeypatch, rows=[{"problem": "Print the sum of two numbers.", "tests": json.dumps(
        [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]), "metadata": "{}"}])
    monkeypatch.setattr(data, "hub_reachable", lambda timeout=3.0: True)
    data.load_hub.cache_clear()
    with pytest.warns(UserWarning, match="weaker"):
        env = gym.make("Ragen/DeepCoder-v0", dataset="hub", sandbox="rlimit")
    name = "agentica-org/DeepCoder-Preview-Dataset"  # RAGEN's split: train from three sources
    assert calls == [((name, config), "train") for config in ("primeintellect", "taco", "lcbv5")]
    assert len(env.unwrapped.source) == 3
    with pytest.warns(UserWarning, match="weaker"):
        gym.make("Ragen/DeepCoder-v0", dataset="hub", sandbox="rlimit", split="test")
    assert calls[3:] == [((name, config), "test") for config in ("codeforces", "lcbv5")]
    assert env.reset(seed=0)[0].startswith("Print the sum of two numbers.")
    assert env.step("```python\na, b = map(int, input().split())\nprint(a + b)\n```")[1] == 1.0
    data.load_hub.cache_clear()


def test_integers_compare_exactly_and_nothing_a_program_returns_raises():
    # Red-team findings: a relative tolerance passed off-by-one answers of seven digits, and a huge
    # integer where a float was expected raised OverflowError out of env.step.
    assert not stdout_matches("832041\n", "832040\n") and not values_match(832041, 832040)
    assert not stdout_matches("12345678901234567891", "12345678901234567890")
    assert stdout_matches("1.0", "1") and values_match(2.0, 2) and values_match(0.30000000001, 0.3)
    assert values_match(10 ** 400, 0.5) is False and values_match(-10 ** 400, 1e300) is False


def test_no_generated_problem_is_solved_by_a_constant_or_an_echo():
    import collections
    import random

    for i in range(problems.GENERATED_COUNT):
        p = problems.generate(random.Random(i), i)
        outputs = collections.Counter(t["expected"].strip() for t in p.tests)
        assert max(outputs.values()) <= (len(p.tests) + 1) // 2, (p.id, outputs)
        assert not any(stdout_matches(t["stdin"], t["expected"]) for t in p.tests), p.id
