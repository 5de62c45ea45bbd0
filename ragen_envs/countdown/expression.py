"""Countdown answers: arithmetic over integers with + - * / and parentheses, read with ``ast`` and
evaluated in exact fractions. Model output is never passed to ``eval``: anything but integer
literals written in decimal digits, the four operators and parentheses (names, calls, powers,
``True``, ``3_5``, ``0x1F``, floats, strings; unary minus unless ``signs``) is not an expression here.
Both answer checks read answers with ``arithmetic`` below, so values stay small: only + - * / over
literals are computed, and a value's numerator and denominator grow no longer than the literals'
digits together (the strict check reads 200 characters; RAGEN's rule computes only once the
literals are the task's numbers).

``solve`` is the oracle's exhaustive search, with a work bound so that no task pins a worker."""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass
from fractions import Fraction

MAX_CHARS = 200  # longer answers are not read at all: a 4-number expression needs a few dozen
ALLOWED = set("0123456789+-*/() \t")
OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
SIGNS = {ast.USub: operator.neg, ast.UAdd: operator.pos}
# Other ways models write the operators.
SPELLINGS = str.maketrans({"×": "*", "÷": "/", "−": "-", "–": "-", "·": "*"})
# Search steps solve() takes at most: any 5-number task is searched to the end (274,381 steps at most,
# a second or two), a 6-number one can need 25 million (over 40 s): there the solver may give up.
MAX_SOLVE_STEPS = 300_000


class _NotAnExpression(Exception):
    pass


@dataclass(frozen=True)
class Expression:
    text: str  # as read, normalised (operators spelled + - * /)
    numbers: tuple[int, ...]  # the integer literals used, sorted
    value: Fraction | None  # None when it divides by zero


def parse(text: str) -> Expression | None:
    """The expression in ``text`` (an optional ``= result`` after it is ignored), or None: the strict
    check's reader (no unary minus)."""
    if not isinstance(text, str) or len(text) > MAX_CHARS:
        return None
    text = text.translate(SPELLINGS).strip()
    left, equals, _ = text.partition("=")
    text = left.strip() if equals else text
    if not text or not set(text) <= ALLOWED:
        return None
    try:
        return arithmetic(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def arithmetic(text: str, signs: bool = False) -> Expression | None:
    """``text`` as Python's parser reads it, when that is an expression over decimal integer literals
    with + - * / and parentheses (and unary - and + with ``signs``); None when it is any other Python
    expression. Raises SyntaxError (or ValueError, RecursionError, MemoryError on hostile text) when
    Python cannot read it at all: RAGEN's rule pays that apart from a trick that does parse."""
    tree = ast.parse(text, mode="eval").body
    numbers: list[int] = []
    try:
        value = _evaluate(tree, text, numbers, signs)
    except _NotAnExpression:
        return None
    return Expression(text=text, numbers=tuple(sorted(numbers)), value=value)


def _evaluate(node: ast.AST, text: str, numbers: list[int], signs: bool) -> Fraction | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        written = ast.get_source_segment(text, node)
        if not (written.isascii() and written.isdigit()):  # 3_5, 0x1F, 0b11: not a number as given
            raise _NotAnExpression
        numbers.append(node.value)
        return Fraction(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in OPS:
        left, right = _evaluate(node.left, text, numbers, signs), _evaluate(node.right, text, numbers, signs)
        if left is None or right is None or (isinstance(node.op, ast.Div) and right == 0):
            return None
        return OPS[type(node.op)](left, right)
    if signs and isinstance(node, ast.UnaryOp) and type(node.op) in SIGNS:
        operand = _evaluate(node.operand, text, numbers, signs)
        return None if operand is None else SIGNS[type(node.op)](operand)
    raise _NotAnExpression


def solve(nums: list[int], target: int, max_steps: int | None = None) -> str | None:
    """An expression using each of ``nums`` once that equals ``target``, or None: there is none, or
    none was found in ``max_steps`` search steps (default ``MAX_SOLVE_STEPS``). The search tries every
    pair and operator, in exact fractions; up to 6 numbers."""
    if not 1 <= len(nums) <= 6:
        raise ValueError(f"solve takes 1 to 6 numbers, got {len(nums)}")
    max_steps = MAX_SOLVE_STEPS if max_steps is None else max_steps
    failed: set[tuple[Fraction, ...]] = set()
    steps = 0

    class GiveUp(Exception):
        pass

    def search(items: list[tuple[Fraction, str]]) -> str | None:
        nonlocal steps
        steps += 1
        if steps > max_steps:
            raise GiveUp
        if len(items) == 1:
            return items[0][1] if items[0][0] == target else None
        key = tuple(sorted(v for v, _ in items))
        if key in failed:
            return None
        for i in range(len(items)):
            for j in range(i + 1, len(items)):
                (a, x), (b, y) = items[i], items[j]
                rest = [items[k] for k in range(len(items)) if k not in (i, j)]
                candidates = [(a + b, f"({x} + {y})"), (a * b, f"({x} * {y})"), (a - b, f"({x} - {y})"),
                              (b - a, f"({y} - {x})")]
                if b != 0:
                    candidates.append((a / b, f"({x} / {y})"))
                if a != 0:
                    candidates.append((b / a, f"({y} / {x})"))
                for value, text in candidates:
                    found = search(rest + [(value, text)])
                    if found is not None:
                        return found
        failed.add(key)
        return None

    try:
        found = search([(Fraction(n), str(n)) for n in nums])
    except GiveUp:
        return None
    return None if found is None else _strip_outer(found)


def _strip_outer(text: str) -> str:
    if text.startswith("(") and text.endswith(")"):
        depth = 0
        for i, ch in enumerate(text):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0 and i < len(text) - 1:
                return text
        return text[1:-1]
    return text
