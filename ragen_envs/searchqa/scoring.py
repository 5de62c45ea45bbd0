"""Answer scoring as in HotpotQA's evaluation: normalise (lower case, no punctuation, no articles,
single spaces), then exact match and token F1."""

from __future__ import annotations

import re
import string
from collections import Counter

ARTICLES = re.compile(r"\b(a|an|the)\b")
PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalise(text: str) -> str:
    return " ".join(ARTICLES.sub(" ", text.lower().translate(PUNCTUATION)).split())


def exact_match(prediction: str, gold: str) -> bool:
    return normalise(prediction) == normalise(gold)


def f1(prediction: str, gold: str) -> float:
    p, g = normalise(prediction).split(), normalise(gold).split()
    common = sum((Counter(p) & Counter(g)).values())
    if not common:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def reward(prediction: str, gold: str, min_f1: float = 0.3) -> float:
    """1 on exact match, else the token F1 when it reaches ``min_f1``, else 0."""
    if exact_match(prediction, gold):
        return 1.0
    score = f1(prediction, gold)
    return score if score >= min_f1 else 0.0
