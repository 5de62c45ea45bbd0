"""Countdown: reach the target with the given numbers, in one answer.

Observation: ``Target: 24, nums: [3, 8, 1]`` (text).

Action: an arithmetic expression that uses each given number exactly once, e.g. ``(8 - 1 - 3) * 6``.
Model text is never ``eval``-ed: both checks read it with ``ast`` and compute only + - * / over integer
literals, in exact fractions (``expression.arithmetic``), so no answer costs more than milliseconds.

Reward and validity, by ``answer_check``:
- ``"ragen"`` (default, RAGEN's rule, ``ragen_rule.py``): any text is an answer (but empty text, control
  characters or over 10,000 characters: an invalid action, as in every env here). 0 unless the
  integers in it are exactly the given numbers; then 1 when it is arithmetic on them (decimal integer
  literals, + - * /, parentheses, signs as in ``-3+5+2``) whose value is within 1e-5 of the target,
  0.1 when such arithmetic misses or divides by zero, 0.1 when Python cannot parse it (``(5-3) × 2``,
  ``3 5 2``), and 0 when Python parses it as anything else (``True``, names, ``%``, ``**``, ``3_5``,
  ``2*3.5``, strings, calls, a number in a comment): a documented departure from RAGEN, whose ``eval``
  pays such tricks (``True`` holds no digit: ``(3+5+2)*False + (True<<True)`` is 2, and any target is
  built so). ``2+5-3 = 4`` scores 0 (it names a 4).
- ``"strict"``: only an expression over integers with + - * / and parentheses is an answer (``×``,
  ``÷`` and a trailing ``= 24`` are accepted; words, calls, powers, unary minus, over 200 characters
  are invalid actions that change nothing). 1 when it equals the target and uses exactly the given
  numbers, 0.1 when it uses them but misses, else 0.

Termination: the first answer ends the episode (a single-answer task); an invalid action changes
nothing (reward 0); the episode is truncated after ``max_steps`` calls (default 3). Steps after the end
are the base class's (``ragen_envs/base.py``): nothing applied, reward 0.

Arguments:
- ``dataset``: ``"builtin"`` (default: generated offline, always solvable; with ``operators="+-"``, the
  default, signed sums as in RAGEN's data), a .jsonl/.json/.parquet file, a list of records, or ``"hub"``
  (``Jiayi-Pan/Countdown-Tasks-3to4``) / ``"hub:OWNER/NAME"``; records have the fields ``target`` and
  ``nums`` (``ragen_envs/data.py``): 1 to 6 numbers from 0 to 10**9, a target within +-10**9.
- ``selection``: of a dataset's records, ``"ragen"`` (default) keeps RAGEN's: the first ``max_instances``
  (20,000), then those solvable with + and - alone, and a reset with seed s plays item ``s % len``;
  ``"all"`` keeps every record and draws one from the env's generator.
- ``split``: ``"train"`` or ``"test"`` (built-in: disjoint seeds; hub: the dataset's split).
- ``min_numbers=3``, ``max_numbers=4``, ``max_number=99``, ``min_target=10``, ``max_target=100``,
  ``operators="+-"``: the built-in generator's settings (``generator.CountdownConfig``).
- ``answer_check`` (above), ``max_steps=3``, ``render_mode`` (``"ansi"`` or None).
- The bounds of the numbers: ``argument_bounds`` (docs/envs.md's table); a target range the generator's
  draws do not reach is a GenerationBudgetError at reset, naming ``min_target``.

``reset(seed=s)`` picks the task from ``s``; ``reset(options={"task": {"target": 24, "nums": [...]}})``
plays a given one, held to a record's bounds (a ValueError otherwise). ``oracle_action()`` returns a
solving expression: the generator's, else the solver's (``expression.solve``), which searches every
task of up to 5 numbers to the end and gives up (None) after a bounded search on 6, so no task pins
a worker for more than a second or two.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Literal

from ragen_envs import data
from ragen_envs.base import MAX_ANSWER_CHARS, MAX_STEPS, Bounds, TextEnv, check_positive_int, open_text
from ragen_envs.countdown import ragen_rule
from ragen_envs.countdown.expression import Expression, parse, solve
from ragen_envs.countdown.generator import MAX_NUMBERS, MAX_VALUE, CountdownConfig, CountdownTask, generate

HUB_NAME = "Jiayi-Pan/Countdown-Tasks-3to4"
FIELDS = ("target", "nums")

INSTRUCTIONS = (
    "Countdown: combine the given numbers with +, -, * and / (and parentheses) to reach the target. "
    "Use each number exactly once. Answer with the expression only, e.g. (8 - 2) * 4 for target 24 "
    "with nums [2, 4, 8]. Reward: 1 if it reaches the target, 0.1 if it uses exactly the given "
    "numbers but misses, 0 otherwise. You have one answer."
)


def to_task(record: dict, where: str = "record") -> CountdownTask:
    """A task from a record with ``target`` and ``nums``; a ValueError says what is wrong. The bounds
    keep a client's task as cheap as a generated one (the solver, the observation's digits); a
    negative number could never be written in an answer."""
    target, nums = record["target"], record["nums"]
    if type(target) is not int or not isinstance(nums, (list, tuple)) or not nums \
            or any(type(n) is not int for n in nums):
        raise ValueError(f"{where}: target must be an integer and nums a list of integers, "
                         f"got target={_brief(target)}, nums={_brief(nums)}")
    if len(nums) > MAX_NUMBERS or abs(target) > MAX_VALUE or any(not 0 <= n <= MAX_VALUE for n in nums):
        raise ValueError(f"{where}: need 1 to {MAX_NUMBERS} nums from 0 to {MAX_VALUE} and a target within "
                         f"+-{MAX_VALUE}, got target={_brief(target)}, nums={_brief(nums)}")
    return CountdownTask(target, tuple(nums))


def _brief(value) -> str:
    """``repr(value)`` cut short: a hostile task may hold millions of numbers, or more digits than
    ``repr`` prints."""
    if isinstance(value, (list, tuple)) and len(value) > 10:
        return f"[{', '.join(map(_brief, value[:10]))}, ... ({len(value)} in all)]"
    try:
        text = repr(value)
    except ValueError:  # an int over Python's 4,300-digit limit
        return f"<{type(value).__name__} too large to print>"
    return text if len(text) <= 200 else text[:200] + "..."


class CountdownEnv(TextEnv):
    instructions = INSTRUCTIONS
    reset_options = ("task",)
    agent_info_keys = ("target", "nums")  # what the prompt shows
    argument_bounds = {
        "max_steps": MAX_STEPS,
        "max_instances": Bounds(min=1, max=1_000_000, why="records kept, each checked for a +- solution"),
        # the built-in generator's (CountdownConfig checks how they go together); a target range no draw
        # reaches is a GenerationBudgetError at reset (generator.MAX_DRAWS)
        "min_numbers": Bounds(min=2, max=MAX_NUMBERS, why="the solver's limit"),
        "max_numbers": Bounds(min=2, max=MAX_NUMBERS, why="the solver's limit"),
        "max_number": Bounds(min=2, max=MAX_VALUE, why="numbers are drawn from 1 to it"),
        "min_target": Bounds(min=1, max=MAX_VALUE, why="and at most max_target"),
        "max_target": Bounds(min=1, max=MAX_VALUE, why="and at least min_target"),
    }

    def __init__(self, dataset: Any = "builtin", split: str = "train", max_steps: int = 3,
                 render_mode: str | None = None, answer_check: Literal["ragen", "strict"] = "ragen",
                 selection: Literal["ragen", "all"] = "ragen", max_instances: int = 20_000, **ranges):
        super().__init__(max_steps=max_steps, render_mode=render_mode)
        self.answer_check, self.selection = answer_check, selection
        check_positive_int("max_instances", max_instances)
        try:  # the generator's settings, with their defaults declared once: CountdownConfig's
            self.generator_config = CountdownConfig(**ranges)
        except TypeError as error:
            raise TypeError(f"CountdownEnv: {error}".replace("CountdownConfig.__init__() ", "")) from None
        ragen = selection == "ragen"
        self.source = data.Source(
            dataset, split, FIELDS, HUB_NAME, to_task, generate=partial(generate, config=self.generator_config),
            select=(lambda tasks: [t for t in tasks[:max_instances] if ragen_rule.has_solution(t.nums, t.target)])
            if ragen else None,
            pick=(lambda seed, n: seed % n) if ragen else None)
        self.task: CountdownTask | None = None
        self.answer: Expression | str | None = None
        self.reward = 0.0

    def _new_episode(self, options: dict[str, Any]) -> dict[str, Any]:
        if "task" in options:
            self.task = to_task(options["task"], "options['task']")
        else:
            self.task = self.source.sample(self.np_random, self.reset_seed)
        self.answer, self.reward = None, 0.0
        return {"target": self.task.target, "nums": list(self.task.nums)}

    def parse_action(self, action: str) -> Expression | str | None:
        if self.answer_check == "ragen":  # RAGEN steps any non-empty answer (not a NUL or a book, though)
            return open_text(action, MAX_ANSWER_CHARS)
        return parse(action)

    def _apply(self, expression: Expression | str) -> tuple[float, bool, bool]:
        self.answer = expression
        if isinstance(expression, str):
            self.reward = ragen_rule.reward(expression, self.task.nums, self.task.target)
        elif expression.numbers != tuple(sorted(self.task.nums)):
            self.reward = 0.0
        elif expression.value == self.task.target:
            self.reward = 1.0
        else:
            self.reward = 0.1
        return self.reward, True, True

    def _text(self) -> str:
        text = f"Target: {self.task.target}, nums: {list(self.task.nums)}"
        if isinstance(self.answer, str):
            text += f"\nYour answer: {self.answer} (reward {self.reward:g})"
        elif self.answer is not None:
            value = "undefined (division by zero)" if self.answer.value is None else _show(self.answer.value)
            text += f"\nYour answer: {self.answer.text} = {value}"
        return text

    def _is_success(self) -> bool:
        return self.reward == 1.0

    def oracle_action(self) -> str | None:
        if self.task is None or self._terminated:
            return None
        return self.task.solution or solve(list(self.task.nums), self.task.target)

    def oracle_reasoning(self) -> str | None:
        action = self.oracle_action()
        return None if action is None else _reasoning(self.task, action)


def _reasoning(task: CountdownTask, expression: str) -> str:
    return f"I need {task.target} from {list(task.nums)}, each number once. {expression} = {task.target}."


def _show(value) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"
