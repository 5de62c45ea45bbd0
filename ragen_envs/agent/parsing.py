"""Pull the reasoning and the actions out of a model reply.

The expected shape is ``<think>reasoning</think> <answer>action || action</answer>`` (or just the
answer part with ``enable_think=False``), the reference semantics being the DOTALL regex
``<think>(.*?)</think>\\s*<answer>(.*?)</answer>`` searched anywhere in the text. A literal
``re.search`` of it is quadratic on hostile replies such as ``"<think>" * 100000``: every start
position rescans the rest. ``parse_response`` finds the same match with ``str.find`` in linear time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
ACTION_SEPARATOR = "||"


@dataclass
class ParsedResponse:
    reasoning: str | None  # text between the think tags; None when absent or not asked for
    actions: list[str] = field(default_factory=list)  # stripped, non-empty, at most max_actions
    format_ok: bool = False  # the reply had the required tags in the required order, and an action
    answer: str | None = None  # the raw text between the answer tags; None when the shape was not found


def _match_think_answer(text: str) -> tuple[str, str] | None:
    """Leftmost match of ``<think>(.*?)</think>\\s*<answer>(.*?)</answer>``, in linear time.

    The regex starts at the first ``<think>``: whether a ``</think>`` can end the lazy group (it is
    followed, after whitespace, by ``<answer>`` with a ``</answer>`` later on) does not depend on
    where the group started, so if the first ``<think>`` finds no such ``</think>``, no later one
    does. We walk the ``</think>`` occurrences after it once, left to right.
    """
    open_at = text.find(THINK_OPEN)
    if open_at < 0:
        return None
    last_answer_close = text.rfind(ANSWER_CLOSE)
    close = text.find(THINK_CLOSE, open_at + len(THINK_OPEN))
    while close >= 0:
        after = close + len(THINK_CLOSE)
        if after > last_answer_close:
            return None  # no </answer> left to close an answer
        answer_at = after
        while answer_at < len(text) and text[answer_at].isspace():
            answer_at += 1
        if text.startswith(ANSWER_OPEN, answer_at):
            body = answer_at + len(ANSWER_OPEN)
            end = text.find(ANSWER_CLOSE, body)
            if end >= 0:
                return text[open_at + len(THINK_OPEN):close], text[body:end]
        close = text.find(THINK_CLOSE, after)
    return None


def _match_answer(text: str) -> str | None:
    start = text.find(ANSWER_OPEN)
    if start < 0:
        return None
    end = text.find(ANSWER_CLOSE, start + len(ANSWER_OPEN))
    return None if end < 0 else text[start + len(ANSWER_OPEN):end]


def split_actions(answer: str, max_actions: int) -> list[str]:
    """Actions separated by ``||``, stripped, empty ones dropped, at most ``max_actions``."""
    actions = [a.strip() for a in answer.split(ACTION_SEPARATOR)]
    return [a for a in actions if a][:max_actions]


def parse_response(text: str, max_actions: int = 2, enable_think: bool = True,
                   split: bool = True) -> ParsedResponse:
    """Parse a model reply into reasoning, actions and format validity.

    With ``enable_think`` the reply must hold ``<think>...</think>`` followed (after optional
    whitespace) by ``<answer>...</answer>``; without it, an ``<answer>...</answer>`` anywhere.
    ``format_ok`` is True when that shape is found and the answer names at least one action.
    Extra actions beyond ``max_actions`` are dropped. ``split=False`` takes the whole answer as one
    action (open-text tasks: an answer, a query or a program may itself hold ``||``).
    """
    if not isinstance(text, str):
        raise TypeError(f"parse_response expects a str, got {type(text).__name__}")
    if max_actions < 1:
        raise ValueError(f"max_actions must be at least 1, got {max_actions}")
    if enable_think:
        match = _match_think_answer(text)
        if match is None:
            return ParsedResponse(reasoning=None)
        reasoning, answer = match
        # A model answering a prompt that already opened <think> may open it again: not reasoning.
        at = 0
        while True:  # an index walk, so hostile text stays linear
            while at < len(reasoning) and reasoning[at].isspace():
                at += 1
            if not reasoning.startswith(THINK_OPEN, at):
                break
            at += len(THINK_OPEN)
        reasoning = reasoning[at:]
    else:
        answer = _match_answer(text)
        if answer is None:
            return ParsedResponse(reasoning=None)
        reasoning = None
    actions = split_actions(answer, max_actions) if split else [answer.strip()] if answer.strip() else []
    return ParsedResponse(reasoning=reasoning.strip() if reasoning is not None else None,
                          actions=actions, format_ok=bool(actions), answer=answer)
