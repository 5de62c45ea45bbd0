"""Countdown tasks built from a random expression tree, so every task is solvable. By default the
tree adds and subtracts only, as RAGEN's data is filtered to tasks solvable with + and -;
``operators="+-*/"`` also multiplies and divides (with the default ranges, of 2,000 such tasks the
generating expression uses × in 9% and ÷ in 12%, - in 89% and + in 65%). Task i of a split comes
from ``Random(base + i)``: deterministic and random-access."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

from ragen_envs.base import Budget, check_choices

# Largest number or target (in size) a task may hold: far beyond any puzzle, small enough that the
# solver's fractions and the observation's digits stay cheap.
MAX_VALUE = 10**9
# Most numbers a task may hold: the solver's limit (and the generator's).
MAX_NUMBERS = 6
# Expressions drawn for one task before a GenerationBudgetError: the default ranges take 2 on average (9 the
# most of 2,000 tasks; with * and / 8 on average and 54 the most).
MAX_DRAWS = 10_000


@dataclass(frozen=True)
class CountdownConfig:
    min_numbers: int = 3  # numbers per task, at least
    max_numbers: int = 4  # numbers per task, at most
    max_number: int = 99  # each number is drawn from 1..max_number
    min_target: int = 10  # the target lies in min_target..max_target
    max_target: int = 100
    # the operators of the generating expression: "+-" (RAGEN's tasks, signed sums) or "+-*/"
    operators: Literal["+-", "+-*/"] = "+-"

    def __post_init__(self):
        check_choices(self)
        if not 2 <= self.min_numbers <= self.max_numbers <= MAX_NUMBERS:
            raise ValueError(f"need 2 <= min_numbers <= max_numbers <= {MAX_NUMBERS}, "
                             f"got {self.min_numbers}, {self.max_numbers}")
        if not 2 <= self.max_number <= MAX_VALUE:
            raise ValueError(f"need 2 <= max_number <= {MAX_VALUE}, got {self.max_number}")
        if not 1 <= self.min_target <= self.max_target <= MAX_VALUE:
            raise ValueError(f"need 1 <= min_target <= max_target <= {MAX_VALUE}, "
                             f"got {self.min_target}, {self.max_target}")


@dataclass(frozen=True)
class CountdownTask:
    target: int
    nums: tuple[int, ...]
    solution: str | None = field(default=None, compare=False)  # an expression reaching the target, if known


def generate(rng: random.Random, config: CountdownConfig = CountdownConfig(),
             budget: Budget | None = None) -> CountdownTask:
    """Draw numbers, combine them at random with an operator each (integer steps only), and keep a
    result that lands in the target range; each draw spends one unit of ``budget`` (default: ``MAX_DRAWS``)."""
    budget = budget or Budget(MAX_DRAWS, "expressions drawn", "min_target", config.min_target,
                              f"no draw lands in {config.min_target}..{config.max_target}: widen the target "
                              "range (min_target, max_target) or change max_number")
    while True:
        budget.spend()
        count = rng.randint(config.min_numbers, config.max_numbers)
        nums = [rng.randint(1, config.max_number) for _ in range(count)]
        items = [(Fraction(n), str(n)) for n in nums]
        while len(items) > 1:
            a, b = items.pop(rng.randrange(len(items))), items.pop(rng.randrange(len(items)))
            op = rng.choice(config.operators)
            if op == "-" and a[0] < b[0] or op == "/" and (b[0] == 0 or a[0] % b[0] or b[0] == 1):
                a, b = b, a  # try the other order before giving up on this draw
            if op == "-" and a[0] <= b[0] or op == "/" and (b[0] == 0 or a[0] % b[0] or b[0] == 1):
                items = []  # no integer step with this operator: draw again
                break
            value = {"+": a[0] + b[0], "-": a[0] - b[0], "*": a[0] * b[0], "/": a[0] / b[0]}[op]
            items.append((value, f"({a[1]} {op} {b[1]})"))
        if len(items) == 1 and config.min_target <= items[0][0] <= config.max_target:
            rng.shuffle(nums)
            return CountdownTask(int(items[0][0]), tuple(nums), items[0][1][1:-1])
