"""MetaMathQA: answer a math question; a wrong answer may be retried, for half the reward each time.

Observation: the question (text); after a wrong answer also "Incorrect. Please think again." and
the answers tried so far.

Action: the answer as free text (``18``, ``$18``, ``\\boxed{3/4}``, ``The answer is: 0.75``); it is
checked against the gold answer after normalising both (``answers.py``: case, ``$``, ``\\boxed{}``,
thousands separators, trailing ``.0``; numbers compare numerically within 1e-6, ``3/4`` equals
``0.75``). An empty answer (or a non-string) is an invalid action.

Reward: a correct answer ends the episode with ``1 / 2**k``, k the wrong answers before it (1, 0.5,
0.25, ...); a wrong one gives 0 and the episode goes on.

Termination: terminated on a correct answer; truncated after ``max_attempts`` answers (default 3;
invalid ones count too). RAGEN's config turns retries off without saying so; here they are on
unless ``max_attempts=1``.

Arguments:
- ``dataset``: ``"builtin"`` (default: generated grade-school word problems, offline; ``generator.py``),
  a .jsonl/.json/.parquet file, a list of records, or ``"hub"`` (``meta-math/MetaMathQA``) /
  ``"hub:OWNER/NAME"``. Records have MetaMathQA's fields ``query`` and ``response`` (the gold answer
  follows "The answer is:" in ``response``); see ``ragen_envs/data.py``.
- ``split``: ``"train"`` or ``"test"`` (built-in: disjoint seeds; hub: the dataset's split).
- ``max_attempts=3``, ``render_mode`` (``"ansi"`` or None).

``reset(seed=s)`` picks the question from ``s``; ``reset(options={"problem": {"query": ..., "response":
...}})`` asks a given one. ``oracle_action()`` returns the gold answer.
"""

from __future__ import annotations

from typing import Any

from ragen_envs import data
from ragen_envs.base import TextEnv, check_positive_int, open_text
from ragen_envs.metamath.answers import gold_from_response, is_correct
from ragen_envs.metamath.generator import generate

HUB_NAME = "meta-math/MetaMathQA"
FIELDS = ("query", "response")
MAX_ANSWER_CHARS = 2000  # longer text is not an answer (it is not compared at all)
RETRY = "Incorrect. Please think again."

INSTRUCTIONS = (
    "Solve the math problem. Answer with the final answer only (a number or an expression), e.g. 42 "
    "or 3/4. A correct answer scores 1; after a wrong answer you may try again, and each retry halves "
    "the reward."
)


def to_problem(record: dict, where: str = "record") -> tuple[str, str]:
    """(question, gold answer) of a record; a ValueError names what is wrong."""
    query, response = record["query"], record["response"]
    gold = gold_from_response(response) if isinstance(response, str) else None
    if not isinstance(query, str) or not query.strip() or gold is None:
        raise ValueError(f"{where}: needs a non-empty 'query' and a 'response' ending in 'The answer is: ...'")
    return query.strip(), gold


def builtin_problem(rng) -> tuple[str, str]:
    return to_problem(generate(rng))


class MetaMathQAEnv(TextEnv):
    instructions = INSTRUCTIONS

    def __init__(self, dataset: Any = "builtin", split: str = "train", max_attempts: int = 3,
                 render_mode: str | None = None):
        check_positive_int("max_attempts", max_attempts)
        super().__init__(max_steps=max_attempts, render_mode=render_mode)
        self.max_attempts = max_attempts
        self.source = data.Source(dataset, split, FIELDS, HUB_NAME, to_problem,
                                  generate=builtin_problem)
        self.question = self.gold = ""
        self.wrong: list[str] = []
        self.solved = False

    def _new_episode(self, options: dict[str, Any]) -> dict[str, Any]:
        if "problem" in options:
            self.question, self.gold = to_problem(options["problem"], "options['problem']")
        else:
            self.question, self.gold = self.source.sample(self.np_random)
        self.wrong, self.solved = [], False
        return {}

    def parse_action(self, action: str) -> str | None:
        return open_text(action, MAX_ANSWER_CHARS)

    def _apply(self, answer: str) -> tuple[float, bool, bool]:
        if is_correct(answer, self.gold):
            self.solved = True
            return 1.0 / 2 ** len(self.wrong), True, True
        self.wrong.append(answer)
        return 0.0, False, True

    def _text(self) -> str:
        if not self.wrong or self.solved:
            return self.question
        tried = "; ".join(self.wrong)
        return f"{self.question}\n{RETRY} (tried: {tried}; {self.max_steps - self._elapsed_steps} attempts left)"

    def _is_success(self) -> bool:
        return self.solved

    def oracle_action(self) -> str | None:
        return None if self.solved else self.gold

    def oracle_reasoning(self) -> str | None:
        if self.solved:
            return None
        tried = f" It is not {', '.join(self.wrong)}." if self.wrong else ""
        return f"{self.question.split('?')[0].strip()}?{tried} Working it through gives {self.gold}."
