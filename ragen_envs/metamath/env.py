"""MetaMathQA: answer a math question; a wrong answer may be retried, for half the reward each time.

Observation: the question (text); after a wrong answer also "Incorrect. Please think again." and
the answers tried so far (the last 10, and how many before them).

Action: the answer as free text; any non-empty text (without control characters, up to 2,000
characters) is an answer. Its check, by ``answer_check``:
- ``"exact"`` (default, RAGEN's rule): equal to the label (what follows the first "The answer is: " of
  the record's response) after lowercasing and removing all whitespace; ``$18``, ``18.0`` and
  ``\\boxed{18}`` are wrong for 18.
- ``"normalized"``: both sides normalised (``answers.py``: case, ``$``, ``\\boxed{}``, thousands
  separators, trailing ``.0``; numbers compare numerically within 1e-6, ``3/4`` equals ``0.75``; a
  numeral over 100 characters or with an exponent beyond 400 is not read as a number).

Reward: a correct answer ends the episode with ``1 / 2**k``, k the wrong answers before it (1, 0.5,
0.25, ...); a wrong one gives 0 and the episode goes on.

Termination: terminated on a correct answer; truncated after ``max_attempts`` answers (default 3;
invalid ones count too). RAGEN's runs allow one answer (``max_attempts=1`` in the ragen2-main preset).

Arguments:
- ``dataset``: ``"builtin"`` (default: generated grade-school word problems, offline; ``generator.py``),
  a .jsonl/.json/.parquet file, a list of records, or ``"hub"`` (``meta-math/MetaMathQA``) /
  ``"hub:OWNER/NAME"``. Records have MetaMathQA's fields ``query`` and ``response`` (the gold answer
  follows "The answer is:" in ``response``); see ``ragen_envs/data.py``.
- ``split``: ``"train"`` or ``"test"`` (built-in: disjoint seeds). MetaMathQA has a train split only,
  and RAGEN validates on it too: the hub source reads it for both.
- ``selection``: of a dataset's records, ``"ragen"`` (default): a reset with seed s plays item
  ``Random(s).randint(0, n - 1)`` (RAGEN's pick); ``"draw"``: the env's generator draws one.
- ``answer_check`` (above), ``max_attempts=3`` (its bounds: ``argument_bounds``, docs/envs.md's table),
  ``render_mode`` (``"ansi"`` or None).

``reset(seed=s)`` picks the question from ``s``; ``reset(options={"problem": {"query": ..., "response":
...}})`` asks a given one. ``oracle_action()`` returns the gold answer (RAGEN's label under "exact").
"""

from __future__ import annotations

import random
from collections import deque
from typing import Any, Literal, NamedTuple

from ragen_envs import data
from ragen_envs.base import MAX_STEPS, TextEnv, check_positive_int, open_text
from ragen_envs.metamath.answers import exact_match, gold_from_response, is_correct, ragen_label
from ragen_envs.metamath.generator import generate

HUB_NAME = "meta-math/MetaMathQA"
FIELDS = ("query", "response")
MAX_ANSWER_CHARS = 2000  # longer text is not an answer (it is not compared at all)
RETRY = "Incorrect. Please think again."
SHOWN_TRIES = 10  # the observation lists the last few wrong answers, so it stays small however many

INSTRUCTIONS = (
    "Solve the math problem. Answer with the final answer only (a number or an expression), e.g. 42 "
    "or 3/4. A correct answer scores 1; after a wrong answer you may try again, and each retry halves "
    "the reward."
)


class Problem(NamedTuple):
    question: str
    gold: str  # the answer as the normalised check reads it (after the last "The answer is")
    label: str | None  # RAGEN's label (after the first "The answer is: "); None: RAGEN finds none


def to_problem(record: dict, where: str = "record") -> Problem:
    """The problem of a record; a ValueError names what is wrong."""
    query, response = record["query"], record["response"]
    gold = gold_from_response(response) if isinstance(response, str) else None
    if not isinstance(query, str) or not query.strip() or gold is None:
        raise ValueError(f"{where}: needs a non-empty 'query' and a 'response' ending in 'The answer is: ...'")
    return Problem(query.strip(), gold, ragen_label(response))


def builtin_problem(rng) -> Problem:
    return to_problem(generate(rng))


class MetaMathQAEnv(TextEnv):
    instructions = INSTRUCTIONS
    reset_options = ("problem",)
    argument_bounds = {"max_attempts": MAX_STEPS}  # its steps

    def __init__(self, dataset: Any = "builtin", split: str = "train", max_attempts: int = 3,
                 render_mode: str | None = None, answer_check: Literal["exact", "normalized"] = "exact",
                 selection: Literal["ragen", "draw"] = "ragen"):
        check_positive_int("max_attempts", max_attempts)
        super().__init__(max_steps=max_attempts, render_mode=render_mode)
        self.max_attempts, self.answer_check = max_attempts, answer_check
        self.source = data.Source(dataset, "train" if data.is_hub(dataset) else split, FIELDS, HUB_NAME, to_problem,
                                  generate=builtin_problem,
                                  pick=(lambda seed, n: random.Random(seed).randint(0, n - 1))
                                  if selection == "ragen" else None)
        self.question = self.gold = ""
        self.label: str | None = None
        self.wrong: deque[str] = deque(maxlen=SHOWN_TRIES)  # the latest wrong answers
        self.wrong_count = 0
        self.solved = False

    def _new_episode(self, options: dict[str, Any]) -> dict[str, Any]:
        problem = (to_problem(options["problem"], "options['problem']") if "problem" in options
                   else self.source.sample(self.np_random, self.reset_seed))
        self.question, self.gold, self.label = problem
        self.wrong.clear()
        self.wrong_count, self.solved = 0, False
        return {}

    def parse_action(self, action: str) -> str | None:
        return open_text(action, MAX_ANSWER_CHARS)

    def _apply(self, answer: str) -> tuple[float, bool, bool]:
        if exact_match(answer, self.label) if self.answer_check == "exact" else is_correct(answer, self.gold):
            self.solved = True
            return 0.5 ** self.wrong_count, True, True  # a float power: 1 / 2**1024 overflowed
        self.wrong.append(answer)
        self.wrong_count += 1
        return 0.0, False, True

    def _text(self) -> str:
        if not self.wrong or self.solved:
            return self.question
        earlier = self.wrong_count - len(self.wrong)
        tried = (f"{earlier} more, then " if earlier else "") + "; ".join(self.wrong)
        return f"{self.question}\n{RETRY} (tried: {tried}; {self.max_steps - self._elapsed_steps} attempts left)"

    def _is_success(self) -> bool:
        return self.solved

    def oracle_action(self) -> str | None:
        if self.solved or self.answer_check == "exact" and self.label is None:
            return None
        return self.label if self.answer_check == "exact" else self.gold

    def oracle_reasoning(self) -> str | None:
        answer = self.oracle_action()
        if answer is None:
            return None
        tried = f" It is not {', '.join(self.wrong)}." if self.wrong else ""
        return f"{self.question.split('?')[0].strip()}?{tried} Working it through gives {answer}."
