"""RAGEN's Countdown rule (``ragen/env/countdown/env.py``), reproduced without running model text.

RAGEN scores an answer in two steps: the integers found in it by the regular expression ``\\d+`` must
be the given numbers (in any order), else 0; then the text is evaluated as a Python expression with no
builtins, and scores 1 when the value is within 1e-5 of the target, else 0.1 (also when evaluation
fails: a syntax error such as ``(5-3) × 2``, a name, a division by zero). So ``2+5-3 = 4`` scores 0 (it
names a 4), ``-3+5+2`` scores 1 and ``3 5 2`` 0.1.

Here the text is parsed with Python's own parser (``ast``, so what fails to parse fails as in ``eval``)
and the tree is evaluated node by node over constants, operators, comparisons, conditionals and
literal containers, with Python's operator semantics. What reaches further (names, calls, attributes,
subscripts, lambdas, comprehensions) is scored as a failed evaluation (0.1): a name fails in RAGEN as
well; calls and attribute look-ups would run there, which no answer to an arithmetic puzzle needs.
Powers, shifts and repetitions that would build a value beyond ``MAX_BITS`` bits or ``MAX_ITEMS`` items
fail too (RAGEN would spend memory and time on a value that cannot equal a small target anyway).

RAGEN's data keeps the tasks its ``has_solution`` accepts: some choice of signs for the numbers, padded
with zeros to four and cut to four, sums to the target.
"""

from __future__ import annotations

import ast
import itertools
import operator
import re
import warnings

SCORE, FORMAT_SCORE = 1.0, 0.1  # RAGEN's CountdownEnvConfig.score and format_score
TOLERANCE = 1e-5
MAX_BITS = 1 << 16
MAX_ITEMS = 1 << 16
INTEGERS = re.compile(r"\d+")

BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
          ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
          ast.LShift: operator.lshift, ast.RShift: operator.rshift, ast.BitOr: operator.or_,
          ast.BitXor: operator.xor, ast.BitAnd: operator.and_, ast.MatMult: operator.matmul}
UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg, ast.Invert: operator.invert, ast.Not: operator.not_}
COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
           ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not,
           ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}
CONTAINERS = {ast.Tuple: tuple, ast.List: list, ast.Set: set}


class _Fails(Exception):
    """The evaluation fails (RAGEN's bare ``except`` gives 0.1)."""


def reward(text: str, nums, target) -> float:
    """RAGEN's reward of the answer ``text`` for the task (``nums``, ``target``): 1, 0.1 or 0."""
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
            tree = ast.parse(text.lstrip(" \t"), mode="eval")
        value = _evaluate(tree.body)
        return SCORE if abs(value - target) < TOLERANCE else FORMAT_SCORE
    except Exception:  # noqa: BLE001 - RAGEN catches everything here, and so scores every failure 0.1
        return FORMAT_SCORE


def has_solution(nums, target) -> bool:
    """RAGEN's data filter: signs for the first four numbers (zeros where fewer) that sum to ``target``."""
    padded = (list(nums) + [0] * 4)[:4]
    return any(sum(s * n for s, n in zip(signs, padded)) == target for signs in itertools.product((1, -1), repeat=4))


def _evaluate(node: ast.AST):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        _check_size(node.op, left, right)
        return BINARY[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp):
        return UNARY[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BoolOp):
        value = None
        for operand in node.values:  # short-circuit as Python does
            value = _evaluate(operand)
            if bool(value) == isinstance(node.op, ast.Or):
                return value
        return value
    if isinstance(node, ast.Compare):
        left = _evaluate(node.left)
        for op, comparator in zip(node.ops, node.comparators):
            right = _evaluate(comparator)
            if not COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _evaluate(node.body) if _evaluate(node.test) else _evaluate(node.orelse)
    if type(node) in CONTAINERS and not any(isinstance(e, ast.Starred) for e in node.elts):
        return CONTAINERS[type(node)](_evaluate(e) for e in node.elts)
    raise _Fails(type(node).__name__)


def _check_size(op: ast.operator, left, right) -> None:
    """Refuse operations whose result would be huge (see the module docstring)."""
    ints = all(isinstance(v, int) for v in (left, right))
    if isinstance(op, ast.Pow) and ints and right > 0 and abs(left) > 1 \
            and right * abs(left).bit_length() > MAX_BITS:
        raise _Fails("power too large")
    if isinstance(op, ast.LShift) and ints and right > MAX_BITS:
        raise _Fails("shift too large")
    if isinstance(op, ast.Mult):
        for seq, count in ((left, right), (right, left)):
            if isinstance(seq, (str, bytes, tuple, list)) and isinstance(count, int) \
                    and count * max(len(seq), 1) > MAX_ITEMS:
                raise _Fails("repetition too large")
