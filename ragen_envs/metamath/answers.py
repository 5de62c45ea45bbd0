"""Checking a free-text math answer against the gold one, by RAGEN's rule or by a normalised one.

RAGEN's rule (``exact_match``; ``ragen/env/metamathqa/env.py``): the label is what follows the first
"The answer is: " of the worked response, and an answer is correct when it equals the label after both
are lowercased and stripped of all whitespace, so ``$18``, ``18.0``, ``\\boxed{18}`` and ``1,000`` (for
1000) are wrong.

The normalised rule (``is_correct``): both sides are normalised: what follows "The answer is" when present,
the inside of ``\\boxed{}``, no ``$`` or ``\\(\\)``, lower case, no thousands separators, no trailing period,
``\\frac{a}{b}`` as ``a/b``. Equal texts match; otherwise, when the gold answer is a number, the answer
matches if it is a number (``0.75``, ``3/4``, ``1e-3``, ``18.0``) or holds exactly one number (``18 dollars``)
within 1e-6 of it (relative to the gold value when that exceeds 1).
"""

from __future__ import annotations

import re
from fractions import Fraction

ANSWER_IS = re.compile(r"the answer is\s*:?", re.IGNORECASE)
RAGEN_LABEL = re.compile(r"The answer is: (.*?)$", re.DOTALL)
WHITESPACE = re.compile(r"\s+")
THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
FRAC = re.compile(r"\\d?frac\{([^{}]*)\}\{([^{}]*)\}")
NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?(?:/\d+)?")
TOLERANCE = 1e-6
# Longest numeral read as a number, and its largest exponent: ``1e100000000`` (11 characters) would
# build a hundred-million-digit integer; no gold answer needs more.
MAX_NUMBER_CHARS = 100
MAX_EXPONENT = 400
EXPONENT = re.compile(r"e([-+]?\d+)", re.IGNORECASE)


def unbox(text: str) -> str:
    """The inside of the last ``\\boxed{...}`` (braces balanced), or ``text``."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return text
    depth, i = 0, start + len("\\boxed")
    for j in range(i, len(text)):
        depth += text[j] == "{"
        depth -= text[j] == "}"
        if depth == 0:
            return text[i + 1:j]
    return text[i + 1:]


def normalise(text: str) -> str:
    parts = ANSWER_IS.split(text)
    text = unbox(parts[-1])
    text = text.replace("$", "").replace("\\(", "").replace("\\)", "").replace("\\!", "")
    text = FRAC.sub(r"(\1)/(\2)", text)
    text = THOUSANDS.sub("", text.strip().lower())
    text = re.sub(r"\s+", " ", text).strip().rstrip(".").strip()
    text = re.sub(r"^\((-?\d+)\)/\((\d+)\)$", r"\1/\2", text)  # "(3)/(4)" from \frac{3}{4}
    return text


def to_number(text: str) -> Fraction | None:
    text = text.replace(" ", "")
    exponent = EXPONENT.search(text)
    if len(text) > MAX_NUMBER_CHARS or exponent and abs(int(exponent.group(1))) > MAX_EXPONENT:
        return None
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None


def is_correct(answer: str, gold: str) -> bool:
    a, g = normalise(answer), normalise(gold)
    if a == g:
        return True
    gold_value = to_number(g)
    if gold_value is None:
        return False
    value = to_number(a)
    if value is None:
        numbers = NUMBER.findall(a)
        if len(numbers) != 1:
            return False
        value = to_number(numbers[0])
        if value is None:
            return False
    return abs(value - gold_value) <= TOLERANCE * max(1, abs(gold_value))


def gold_from_response(response: str) -> str | None:
    """MetaMathQA's gold answer: what follows the last "The answer is:" of a worked solution."""
    parts = ANSWER_IS.split(response)
    return parts[-1].strip() if len(parts) > 1 and parts[-1].strip() else None


def ragen_label(response: str) -> str | None:
    """RAGEN's label: what follows the first "The answer is: " of the response, stripped (None: none)."""
    match = RAGEN_LABEL.search(response)
    return match.group(1).strip() if match else None


def exact_match(answer: str, label: str | None) -> bool:
    """RAGEN's check: equal after lowercasing and removing every whitespace character (no label: never)."""
    return label is not None and WHITESPACE.sub("", answer.strip().lower()) == WHITESPACE.sub("", label.lower())
