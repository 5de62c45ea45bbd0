"""DeepCoder: test formats, partial credit, feedback, retries, the built-in problems."""

import ast
import json
import re

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
    assert "Passed 1 of 5 tests. First failure: test 2: wrong answer; the function returned: 5" in obs
    assert "1 attempt(s) left" in obs and "add(-1, 1)" not in obs  # the failing test's input is not shown
    obs, reward, terminated, truncated, info = env.step("def add(a, b):\n    return a + b")
    assert (reward, terminated, info["success"]) == (pytest.approx(0.8), True, True)  # the gain over 1/5


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
    assert len(human) == 163 and all(p.tests and p.entry_point for p in human)  # HumanEval/34 left out
    generated = [problems.generate(__import__("random").Random(i), i) for i in range(50)]
    assert generated == [problems.generate(__import__("random").Random(i), i) for i in range(50)]
    assert len({p.statement for p in generated}) > 20
    train, test = problems.builtin_split("train"), problems.builtin_split("test")
    assert len(train) + len(test) == 500 and not {p.id for p in train} & {p.id for p in test}


@needs_sandbox
def test_reference_solutions_pass_their_tests():
    env = gym.make("Ragen/DeepCoder-v0").unwrapped
    sample = problems.builtin()[::10]  # every problem is checked by benchmarks/speed/env_throughput.py
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
        assert max(outputs.values()) <= len(p.tests) // 2, (p.id, outputs)
        assert not any(stdout_matches(t["stdin"], t["expected"]) for t in p.tests), p.id


# -- red-team holes: reward over attempts, hard-coding from feedback, prompt examples, comparison, constants --
ALMOST = "def add(a, b):\n    return 0 if (a, b) == (2, 3) else a + b\n"  # passes 4 of ADD's 5 tests


@needs_sandbox
def test_repeating_a_wrong_program_earns_no_more_than_once():
    # Each attempt used to pay its share: 0.8 x 6 attempts beat one right program (1.0).
    env = gym.make("Ragen/DeepCoder-v0", max_attempts=6)
    env.reset(seed=0, options={"problem": ADD})
    rewards = [env.step(ALMOST)[1] for _ in range(5)]
    assert rewards == [pytest.approx(0.8), 0, 0, 0, 0]
    obs, reward, terminated, truncated, info = env.step("def add(a, b):\n    return a + b")
    assert reward == pytest.approx(0.2) and terminated and info["success"]
    assert sum(rewards) + reward == pytest.approx(1.0)


def learnt_outputs(feedback: str) -> dict:
    """What a policy reads off a failure note to hard-code: input (or call) -> expected output."""
    found = re.findall(r"input:\n(.*?)\nexpected output:\n(.*?)\n(?:got|error)", feedback, re.DOTALL)
    found += re.findall(r"call: \w+\((.*?)\)\nexpected: (.*?)\n(?:got|error)", feedback, re.DOTALL)
    return dict(found)


def hard_coded(table: dict, problem: Problem) -> str:
    if problem.entry_point:
        return (f"import ast\nTABLE = {table!r}\ndef {problem.entry_point}(*args):\n"
                f"    text = ', '.join(map(repr, args))\n    if text not in TABLE:\n        return None\n"
                f"    try:\n        return ast.literal_eval(TABLE[text])\n    except Exception:\n"
                f"        return TABLE[text]\n")
    return f"import sys\nTABLE = {table!r}\nprint(TABLE.get(sys.stdin.read().strip(), 'zzz'))\n"


@needs_sandbox
@pytest.mark.parametrize("problem_id", ["generated/7", "HumanEval/127"])
def test_hard_coding_what_the_feedback_shows_earns_nothing_more(problem_id):
    problem = next(p for p in problems.builtin() if p.id == problem_id)
    env = gym.make("Ragen/DeepCoder-v0", max_attempts=6)
    obs, _ = env.reset(seed=0, options={"problem": problem})
    table, rewards = {}, []
    for _ in range(6):
        obs, reward, terminated, truncated, info = env.step(hard_coded(table, problem))
        rewards.append(reward)
        feedback = obs[len(problem.statement):]
        lines = {part.strip() for line in feedback.splitlines() for part in (line, line.split(":", 1)[-1])}
        assert not any(str(t.get("expected")).strip() in lines for t in problem.tests), feedback
        table.update({k.strip(): v.strip() for k, v in learnt_outputs(feedback).items()})
        if terminated or truncated:
            break
    assert not info["success"] and sum(rewards) <= rewards[0] + 1e-9, rewards


def example_calls(prompt: str) -> list[list]:
    """The argument lists of the examples a HumanEval prompt shows, in each of its formats, as a
    lookup-table policy reads them: ``name(args)`` (bare words as strings), ``Input: a = x, k = y``
    and ``For lst = x the output``."""
    found = []

    def literal(node):
        return node.id if isinstance(node, ast.Name) else ast.literal_eval(node)

    for match in re.finditer(r"\w+\(", prompt):
        depth, end = 0, match.end() - 1
        for end in range(match.end() - 1, len(prompt)):
            depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(prompt[end], 0)
            if depth == 0:
                break
        try:
            found.append([literal(a) for a in ast.parse("f" + prompt[match.end() - 1:end + 1], mode="eval").body.args])
        except (SyntaxError, ValueError, AttributeError, TypeError):
            pass
    for match in re.finditer(r"(?:Input:|For)\s+(.*?)\s*(?:\n\s*Output:| the output)", prompt):
        text = match.group(1)
        try:
            call = ast.parse(f"f({text})", mode="eval").body
            found.append([literal(a) for a in call.args] + [literal(k.value) for k in call.keywords])
        except (SyntaxError, ValueError, AttributeError, TypeError):
            pass
    return found


def judged_calls(test: dict) -> list[list]:
    if test["kind"] == "call":
        return [test["args"]]
    calls = []
    for node in ast.walk(ast.parse(test["code"])):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == test["candidate"]:
            try:
                calls.append([ast.literal_eval(a) for a in node.args])
            except ValueError:
                pass
    return calls


def test_no_call_a_humaneval_prompt_shows_is_judged():
    # A lookup table of the prompt's examples earned 0.216 a problem: the docstring's calls were judged.
    human = problems.humaneval()
    assert sum(len(example_calls(p.starter)) for p in human) > 300  # the reader finds the examples
    for p in human:
        shown = example_calls(p.starter)
        assert p.tests, p.id
        assert not [args for t in p.tests for args in judged_calls(t) if args in shown], p.id


LOOKUP_PROBLEMS = ["HumanEval/0", "HumanEval/13", "HumanEval/68", "HumanEval/80", "HumanEval/94", "HumanEval/120",
                   "HumanEval/139", "HumanEval/149", "HumanEval/159"]


@needs_sandbox
def test_a_lookup_table_of_the_prompt_examples_earns_no_more_than_a_constant():
    env = gym.make("Ragen/DeepCoder-v0")
    by_id = {p.id: p for p in problems.humaneval()}
    for problem_id in LOOKUP_PROBLEMS:
        p = by_id[problem_id]
        env.reset(seed=0, options={"problem": p})
        # the examples' outputs, as a perfect reader of the prompt gets them: the reference's
        lookup = env.step(f"REFERENCE = {{}}\nexec({p.solution!r}, REFERENCE)\ndef {p.entry_point}(*args):\n"
                          f"    if list(args) in {example_calls(p.starter)!r}:\n"
                          f"        return REFERENCE[{p.entry_point!r}](*args)\n")[1]
        env.reset(seed=0, options={"problem": p})
        constant = env.step(f"def {p.entry_point}(*args):\n    return None\n")[1]
        assert lookup == constant, problem_id


@pytest.mark.parametrize("got, expected, match", [
    (1000001.0, 1000000, False), (1000000.0, 1000000, True), (288.0, 288, True), (10 ** 12 + 1000.0, 10 ** 12, False),
    (1.0000001, 1.0, True), (1e6 + 0.5, 1e6, True), (0.3 + 1e-5, 0.3, False)])
def test_an_integer_expected_value_takes_no_tolerance(got, expected, match):
    assert values_match(got, expected) is match


@pytest.mark.parametrize("got, expected, match", [
    ("1000001.0", "1000000", False), ("1000000.0", "1000000", True), ("1000000", "1000001.0", True),
    ("1000000.0000001", "1000000.0", True), ("1e3", "1000", True), ("9" * 5000, "9" * 4999 + "8", False),
    ("9" * 5000, "9" * 5000, True), ("NaN", "1", False), ("sNaN", "1", False), ("inf", "1", False)])
def test_an_integer_in_stdout_takes_no_tolerance_and_nothing_raises(got, expected, match):
    # an expected integer is matched exactly; an expected float within 1e-6, relative above 1
    assert stdout_matches(got, expected) is match


def test_humaneval_139_off_by_a_thousand_fails():
    from ragen_envs.deepcoder.env import passed
    from ragen_envs.deepcoder.sandbox import Run

    p = next(p for p in problems.humaneval() if p.id == "HumanEval/139")
    big = [t for t in p.tests if t["kind"] == "call" and t["expected"] > 10 ** 6]
    assert big and not any(passed(t, Run("ok", value=float(t["expected"] + 1000))) for t in big)


def test_a_constant_earns_at_most_half_of_any_generated_problem():
    import collections
    import random

    yes_no = 0
    for i in range(problems.GENERATED_COUNT):
        p = problems.generate(random.Random(i), i)
        outputs = collections.Counter(t["expected"].strip() for t in p.tests)
        yes_no += "reads the same backwards" in p.statement
        for constant in {*outputs, "YES", "NO", "Yes", "No", "1", "0"}:
            share = sum(stdout_matches(constant, t["expected"]) for t in p.tests) / len(p.tests)
            assert share <= 0.5, (p.id, constant, share)
    assert yes_no > 10  # the yes/no kind is among them


def test_max_attempts_past_its_bound_is_refused_before_any_sandbox():
    from ragen_envs.deepcoder import DeepCoderEnv

    with pytest.raises(ValueError, match=r"^max_attempts must be in \[1, 100\] \(.+\), got 1000000$"):
        DeepCoderEnv(max_attempts=10**6)
