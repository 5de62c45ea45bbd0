"""Answer scoring as in HotpotQA's evaluation (and RAGEN's SearchQA): normalise (lower case, no
punctuation, no articles, single spaces), then exact match and token F1 (0 when either side is yes, no
or noanswer and they differ); an answer naming another candidate, an option of a "..., A or B?"
question or an answer of another question of its kind, scores 0 (a departure from RAGEN, whose F1 pays
that hedge); and RAGEN's reading of an answer from a reply that did not use
finish[...]."""

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


YES_NO = ("yes", "no", "noanswer")


def f1(prediction: str, gold: str) -> float:
    p, g = normalise(prediction), normalise(gold)
    if p != g and (p in YES_NO or g in YES_NO):
        return 0.0
    p, g = p.split(), g.split()
    common = sum((Counter(p) & Counter(g)).values())
    if not common:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


# A question that offers options ends "..., Estonia or Latvia?"
OPTIONS = re.compile(r",\s*([^,?]+?)\s+or\s+([^,?]+?)\s*\?\s*$")


def options(question: str) -> tuple[str, ...]:
    """The options a question offers ("Which is larger, Estonia or Latvia?": Estonia, Latvia), or ()."""
    match = OPTIONS.search(question)
    return match.groups() if match else ()


def hedges(prediction: str, gold: str, question: str, candidates=()) -> bool:
    """Whether the answer names another candidate than the gold one, or fits one as well: a candidate is
    an option of the question ("Estonia or Latvia?") or one of ``candidates``, the answers of questions of
    the same kind. An answer hedges when it holds every word of another candidate ("Estonia Latvia" for
    Estonia, "Eastern Asia" for Western Asia), or, not holding the whole gold answer, fits another
    candidate at least as well by token F1 ("Asia Europe Africa" for Western Asia). F1 would pay a hedge
    more than a guess earns on average, so an answer naming several candidates counts as none of them;
    "the city of Tallinn" still counts for Tallinn. A candidate whose words are all the gold's ("Asia" for
    Western Asia) is no other answer."""
    said, right = set(normalise(prediction).split()), set(normalise(gold).split())
    score, whole = f1(prediction, gold), right <= said
    for candidate in (*options(question), *candidates):
        words = set(normalise(candidate).split())
        if words and not words <= right and (words <= said or not whole and f1(prediction, candidate) >= score):
            return True
    return False


def kind(question: str) -> str:
    """A question's kind, for the candidates of ``hedges``: its first four words, normalised ("what is
    capital of" gathers the capital questions, "in which subregion of" the subregion ones)."""
    return " ".join(normalise(question).split()[:4])


def reward(prediction: str, gold: str, min_f1: float = 0.3, question: str = "", candidates=()) -> float:
    """1 on exact match, else the token F1 when it reaches ``min_f1``, else 0; 0 for an answer that
    names a candidate other than the gold one (an option of ``question``, or one of ``candidates``)."""
    if exact_match(prediction, gold):
        return 1.0
    if hedges(prediction, gold, question, candidates):
        return 0.0
    score = f1(prediction, gold)
    return score if score >= min_f1 else 0.0


THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
BOXED = re.compile(r"\\boxed\{([^}]+)\}")
EMPHASIS = (re.compile(r"\*\*([^*]+)\*\*"), re.compile(r"\*([^*]+)\*"))
SAYS = (re.compile(r"(?:the\s+)?(?:correct\s+)?answer\s+is\s*:?\s*([^.!?]+)", re.IGNORECASE),
        re.compile(r"(?:therefore|thus|so|hence)\s*,?\s*([^.!?]+)", re.IGNORECASE))
EDGES = re.compile(r"^\W+|\W+$")
SENTENCE_END = re.compile(r"[.!?]+")


def extract_answer(text: str) -> str:
    """The answer RAGEN reads from free text (its SearchQA fallback), tried in order: the first
    ``\\boxed{...}``; the first bold (then italic) span of over 2 characters with a word character; what
    follows "the answer is" or "therefore/thus/so/hence" up to the sentence's end, if over 3 characters;
    the first sentence of over 5 characters; else the first 100 characters. <think> blocks are dropped
    and whitespace runs made single spaces first."""
    text = " ".join(THINK.sub("", text.strip()).split())
    if not text:
        return ""
    boxed = BOXED.search(text)
    if boxed:
        return boxed.group(1).strip()
    for pattern in EMPHASIS:
        spans = [m.strip() for m in pattern.findall(text)]
        spans = [m for m in spans if len(m) > 2 and re.search(r"\w", m)]
        if spans:
            return spans[0]
    for pattern in SAYS:
        said = pattern.search(text)
        if said:
            answer = EDGES.sub("", said.group(1).strip())
            if len(answer) > 3:
                return answer
    sentences = [part.strip() for part in SENTENCE_END.split(text) if len(part.strip()) > 5]
    return sentences[0] if sentences else text[:100].strip()
