"""Countdown: reach the target with the given numbers and + - * /, in one answer.

Observation: ``Target: 24, nums: [3, 8, 1]`` (text).

Action: an arithmetic expression that uses each given number exactly once with + - * / and
parentheses, e.g. ``(8 - 1 - 3) * 6``; ``×``, ``÷`` and a trailing ``= 24`` are accepted. It is read
with ``ast`` and evaluated in exact fractions (``expression.py``), never ``eval``-ed. Text that is not
such an expression (words, calls, powers, unary minus, over 200 characters) is an invalid action.

Reward (RAGEN's scheme): 1 when the expression equals the target and uses exactly the given
numbers; 0.1 when it uses exactly the given numbers but misses the target; 0 otherwise (other
numbers, a number used twice or left out, a division by zero).

Termination: the first valid expression ends the episode (a single-answer task); text that is not
an expression changes nothing (reward 0), and the episode is truncated after ``max_steps`` calls
(default 3).

Arguments:
- ``dataset``: ``"builtin"`` (default: generated, offline), a .jsonl/.json/.parquet file, a list of
  records, or ``"hub"`` (``Jiayi-Pan/Countdown-Tasks-3to4``) / ``"hub:OWNER/NAME"``; records have the
  fields ``target`` and ``nums`` (``ragen_envs/data.py``).
- ``split``: ``"train"`` or ``"test"`` (built-in: disjoint seeds; hub: the dataset's split).
- ``min_numbers=3``, ``max_numbers=4``, ``max_number=99``, ``min_target=10``, ``max_target=100``:
  the built-in generator's ranges (``generator.CountdownConfig``).
- ``max_steps=3``, ``render_mode`` (``"ansi"`` or None).

``reset(seed=s)`` picks the task from ``s``; ``reset(options={"task": {"target": 24, "nums": [...]}})``
plays a given one. ``oracle_action()`` returns a solving expression (the solver, ``expression.solve``).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from ragen_envs import data
from ragen_envs.base import TextEnv
from ragen_envs.countdown.expression import Expression, parse, solve
from ragen_envs.countdown.generator import CountdownConfig, CountdownTask, generate

HUB_NAME = "Jiayi-Pan/Countdown-Tasks-3to4"
FIELDS = ("target", "nums")

INSTRUCTIONS = (
    "Countdown: combine the given numbers with +, -, * and / (and parentheses) to reach the target. "
    "Use each number exactly once. Answer with the expression only, e.g. (8 - 2) * 4 for target 24 "
    "with nums [2, 4, 8]. Reward: 1 if it reaches the target, 0.1 if it uses exactly the given "
    "numbers but misses, 0 otherwise. You have one answer."
)


def to_task(record: dict, where: str = "record") -> CountdownTask:
    """A task from a record with ``target`` and ``nums``; a ValueError says what is wrong."""
    target, nums = record["target"], record["nums"]
    if type(target) is not int or not isinstance(nums, (list, tuple)) or not nums \
            or any(type(n) is not int for n in nums):
        raise ValueError(f"{where}: target must be an integer and nums a list of integers, "
                         f"got target={target!r}, nums={nums!r}")
    return CountdownTask(target, tuple(nums))


class CountdownEnv(TextEnv):
    instructions = INSTRUCTIONS

    def __init__(self, dataset: Any = "builtin", split: str = "train", max_steps: int = 3,
                 render_mode: str | None = None, **ranges):
        super().__init__(max_steps=max_steps, render_mode=render_mode)
        try:  # the generator's ranges, with their defaults declared once: CountdownConfig's
            self.generator_config = CountdownConfig(**ranges)
        except TypeError as error:
            raise TypeError(f"CountdownEnv: {error}".replace("CountdownConfig.__init__() ", "")) from None
        self.source = data.Source(dataset, split, FIELDS, HUB_NAME, to_task,
                                  generate=partial(generate, config=self.generator_config))
        self.task: CountdownTask | None = None
        self.answer: Expression | None = None
        self.reward = 0.0

    def _new_episode(self, options: dict[str, Any]) -> dict[str, Any]:
        if "task" in options:
            self.task = to_task(options["task"], "options['task']")
        else:
            self.task = self.source.sample(self.np_random)
        self.answer, self.reward = None, 0.0
        return {"target": self.task.target, "nums": list(self.task.nums)}

    def parse_action(self, action: str) -> Expression | None:
        return parse(action)

    def _apply(self, expression: Expression) -> tuple[float, bool, bool]:
        self.answer = expression
        if expression.numbers != tuple(sorted(self.task.nums)):
            self.reward = 0.0
        elif expression.value == self.task.target:
            self.reward = 1.0
        else:
            self.reward = 0.1
        return self.reward, True, True

    def _text(self) -> str:
        text = f"Target: {self.task.target}, nums: {list(self.task.nums)}"
        if self.answer is not None:
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
