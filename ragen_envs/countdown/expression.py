"""Countdown answers: arithmetic over integers with + - * / and parentheses, read with ``ast`` and
evaluated in exact fractions. Model output is never passed to ``eval``: anything but integer
literals, the four operators and parentheses (names, calls, powers, unary minus) is not an
expression here."""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass
from fractions import Fraction

MAX_CHARS = 200  # longer answers are not read at all: a 4-number expression needs a few dozen
ALLOWED = set("0123456789+-*/() \t")
OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
SYMBOLS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
# Other ways models write the operators.
SPELLINGS = str.maketrans({"×": "*", "÷": "/", "−": "-", "–": "-", "·": "*"})


class _NotAnExpression(Exception):
    pass


@dataclass(frozen=True)
class Expression:
    text: str  # as read, normalised (operators spelled + - * /)
    numbers: tuple[int, ...]  # the integer literals used, sorted
    value: Fraction | None  # None when it divides by zero


def parse(text: str) -> Expression | None:
    """The expression in ``text`` (an optional ``= result`` after it is ignored), or None."""
    if not isinstance(text, str) or len(text) > MAX_CHARS:
        return None
    text = text.translate(SPELLINGS).strip()
    left, equals, _ = text.partition("=")
    text = left.strip() if equals else text
    if not text or not set(text) <= ALLOWED:
        return None
    try:
        tree = ast.parse(text, mode="eval").body
        numbers: list[int] = []
        value = _evaluate(tree, numbers)
    except (SyntaxError, ValueError, RecursionError, MemoryError, _NotAnExpression):
        return None
    return Expression(text=text, numbers=tuple(sorted(numbers)), value=value)


def _evaluate(node: ast.AST, numbers: list[int]) -> Fraction | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        numbers.append(node.value)
        return Fraction(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in OPS:
        left, right = _evaluate(node.left, numbers), _evaluate(node.right, numbers)
        if left is None or right is None or (isinstance(node.op, ast.Div) and right == 0):
            return None
        return OPS[type(node.op)](left, right)
    raise _NotAnExpression


def solve(nums: list[int], target: int) -> str | None:
    """An expression using each of ``nums`` once that equals ``target``, or None (exhaustive search
    over pairs and operators, in exact fractions; up to 6 numbers)."""
    if not 1 <= len(nums) <= 6:
        raise ValueError(f"solve takes 1 to 6 numbers, got {len(nums)}")
    failed: set[tuple[Fraction, ...]] = set()

    def search(items: list[tuple[Fraction, str]]) -> str | None:
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

    found = search([(Fraction(n), str(n)) for n in nums])
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
