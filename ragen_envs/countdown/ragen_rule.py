"""RAGEN's Countdown rule (``ragen/env/countdown/env.py``), without running model text, and refusing
answers that reach the target without doing arithmetic on the numbers.

RAGEN scores an answer in two steps: the integers found in it by the regular expression ``\\d+`` must
be the given numbers (in any order), else 0; then the text is evaluated as a Python expression with no
builtins, and scores 1 when the value is within 1e-5 of the target, else 0.1 (also when evaluation
fails: a syntax error such as ``(5-3) × 2``, a name, a division by zero). So ``2+5-3 = 4`` scores 0 (it
names a 4), ``-3+5+2`` scores 1 and ``3 5 2`` 0.1.

Here the first step is RAGEN's. For the second the text is read with Python's own parser (``ast``, so
what fails to parse fails as in ``eval``) and evaluated only when it is plain arithmetic: the given
numbers as decimal integer literals, + - * /, parentheses and signs (unary - and +, as in ``-3+5+2``),
in exact fractions (``expression.arithmetic``, the strict check's evaluator). Then it scores 1 within
1e-5 of the target, else 0.1; text Python cannot parse scores 0.1, as in RAGEN; and so does a division
by zero.

A documented departure, like DeepCoder's harness: text that Python parses but that is not plain
arithmetic scores 0, where RAGEN's ``eval`` pays 1 or 0.1. Numbers that hold no digits (``True``,
``False``) or are not written as given (``3_5``, ``0x1F``, ``2*3.5``), names, other operators (``%``,
``**``, ``//``, ``<<``, comparisons, ``not``), strings, calls, tuples: with these ``(3+5+2)*False +
(True<<(True+True))`` builds any target, and ``'%*s' % (W, '')`` gigabytes. No reward for a
non-arithmetic trick, so a policy learns none; and nothing but + - * / over the few given numbers is
ever computed, so every answer is scored in microseconds and bytes. A number in a comment
(``3 + 5  # 2``) is not used either: 0.

RAGEN's data keeps the tasks its ``has_solution`` accepts: some choice of signs for the numbers, padded
with zeros to four and cut to four, sums to the target.
"""

from __future__ import annotations

import itertools
import re
import warnings
from fractions import Fraction

from ragen_envs.countdown.expression import arithmetic

SCORE, FORMAT_SCORE = 1.0, 0.1  # RAGEN's CountdownEnvConfig.score and format_score
TOLERANCE = Fraction(1, 10**5)
INTEGERS = re.compile(r"\d+")


def reward(text: str, nums, target) -> float:
    """The reward of the answer ``text`` for the task (``nums``, ``target``): 1, 0.1 or 0."""
    try:
        found = sorted(int(n) for n in INTEGERS.findall(text))
    except ValueError:  # a run of digits longer than Python converts: RAGEN's check fails
        return 0.0
    if found != sorted(nums):
        return 0.0
    try:
        # eval() of a string drops its leading spaces and tabs; ast.parse does not. A model's "3 is 5" is
        # no reason for a SyntaxWarning in the log
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            expression = arithmetic(text.lstrip(" \t"), signs=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # does not parse: RAGEN's failure
        return FORMAT_SCORE
    if expression is None or list(expression.numbers) != found:  # parses, but is no arithmetic on the
        return 0.0  # numbers (the departure above), or hides some in a comment: "3 + 5  # 2"
    if expression.value is None:  # a division by zero
        return FORMAT_SCORE
    return SCORE if abs(expression.value - target) < TOLERANCE else FORMAT_SCORE


def has_solution(nums, target) -> bool:
    """RAGEN's data filter: signs for the first four numbers (zeros where fewer) that sum to ``target``."""
    padded = (list(nums) + [0] * 4)[:4]
    return any(sum(s * n for s, n in zip(signs, padded)) == target for signs in itertools.product((1, -1), repeat=4))
