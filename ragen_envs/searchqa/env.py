"""SearchQA: search a corpus, then answer the question.

Observation: the question, the two actions, the queries made so far, and the passages the last
search returned (text).

Action: ``search[query]``, which returns the ``top_k`` best passages for ``query`` (each cut to
``max_passage_chars``, all of them to ``max_total_chars``) as the next observation, or ``finish[answer]``,
which answers. Other text, by ``invalid_action``:
- ``"answer"`` (default, RAGEN's rule): read as ``search[...]``/``finish[...]`` only when it starts and
  ends so (lower case; an empty query searches for nothing); any other text is an answer, read from it
  as RAGEN does (``scoring.extract_answer``: a \\boxed{} answer, a bold span, "the answer is ...", the
  first sentence), scored and ending the episode, with ``info["action_is_valid"]`` False.
- ``"penalize"``: anything but ``search[query]`` or ``finish[answer]`` with a non-empty argument (either
  case; a query up to 500 characters) is an invalid action that changes nothing (the agent loop's
  format penalty then applies).
Empty text, control characters and text over 10,000 characters are invalid actions either way.

Reward: ``search`` 0; ``finish`` 1 on an exact match with the gold answer, else the token F1 when it
is at least 0.3, else 0 (HotpotQA's answer normalisation, ``scoring.py``); an answer that names another
candidate scores 0: another option of a question that offers two ("..., Estonia or Latvia?"), or the
answer of another question of its kind ("Northern Europe, Western Asia" for a subregion question, or a
wrong subregion that shares a word with the right one), and so does one that, without the whole gold
answer, fits another candidate as well ("Asia Europe Africa"; ``scoring.hedges``), so a hedge never pays
(RAGEN's F1 pays it: a departure on purpose). Success, by ``success``:
``"ragen"`` (default) a reward above 0 (an exact match or F1 >= 0.3), ``"exact"`` an exact match.

Termination: an answer ends the episode; it is truncated after ``max_steps`` (default 10).
``info["gold_retrieved"]`` says whether a supporting passage of the question has been returned by
a search so far (False where the data names none); ``info["searches"]`` counts the searches.

Arguments:
- ``dataset``: ``"builtin"`` (default: questions over country facts, generated offline from the
  ``countryinfo`` package; ``corpus.py``), a .jsonl/.json/.parquet file, a list of records, or ``"hub"``
  (HotpotQA's distractor setting, ``hotpotqa/hotpot_qa:distractor``, as RAGEN prepares it) /
  ``"hub:OWNER/NAME[:CONFIG]"``; records have ``question`` and ``answer``, optionally ``supporting``
  (passage ids). Of a dataset's records the first ``max_instances`` (20,000) are kept and a reset with
  seed s plays item ``s % n``, as in RAGEN (``selection="draw"``: all, drawn by the env's generator).
- ``split``: ``"train"`` or ``"test"`` (built-in: a fixed 80/20 split of the questions).
- ``corpus``: ``"builtin"`` (the country passages) or a file / list of passages with ``text`` and
  optionally ``title`` and ``id``, searched with BM25 (``bm25s``; one index per corpus and process).
- ``retriever_url``: a retrieval server to search instead, speaking ``retriever_api``: ``"ragen"``
  (RAGEN's server: ``POST {url}/retrieve``) or ``"search-r1"`` (``POST url``); see ``retrieval.py``.
- ``top_k=5``, ``max_passage_chars=800``, ``max_total_chars=4000`` (RAGEN's), ``max_steps=10`` (the bounds
  of the numbers: ``argument_bounds``, docs/envs.md's table),
  ``invalid_action``, ``success``, ``render_mode`` (``"ansi"`` or None).

``reset(seed=s)`` picks the question from ``s``; ``reset(options={"question": {"question": ...,
"answer": ...}})`` asks a given one. ``oracle_action()`` searches each supporting passage's title
(or the question, where none is named), then finishes with the gold answer.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from ragen_envs import data
from ragen_envs.base import MAX_ANSWER_CHARS, MAX_STEPS, Bounds, TextEnv, check_positive_int, open_text, quoted
from ragen_envs.searchqa import corpus as builtin
from ragen_envs.searchqa.corpus import Passage, Question
from ragen_envs.searchqa.retrieval import HTTPRetriever, PassageIndex, RetrievalError
from ragen_envs.searchqa.scoring import exact_match, extract_answer, kind, reward

HUB_NAME = "hotpotqa/hotpot_qa:distractor"
FIELDS = ("question", "answer")
PASSAGE_FIELDS = ("text",)
ACTION = re.compile(r"\s*(search|finish)\[(.*)\]\s*", re.IGNORECASE | re.DOTALL)
MAX_QUERY_CHARS = 500
QUOTE_CHARS = 200  # the most of a query the observation quotes back
HEDGE_POOL = 5000  # questions whose answers are the candidates of a hedge (enough for every kind here)

INSTRUCTIONS = (
    "Answer the question using a search engine over a document collection. Actions: search[query] "
    "shows the best passages for your query; finish[answer] gives your final answer and ends the "
    "episode. Search as often as you need, then finish with a short answer (a name or a number). "
    "Reward: 1 for the exact answer, partial credit for a close one."
)


def to_question(record: dict, where: str) -> Question:
    question, answer = record["question"], record["answer"]
    if not isinstance(question, str) or not question.strip() or not isinstance(answer, str) or not answer.strip():
        raise ValueError(f"{where}: 'question' and 'answer' must be non-empty strings")
    supporting = record.get("supporting") or ()
    return Question(question.strip(), answer.strip(), str(record.get("kind", "")), tuple(map(str, supporting)))


def load_corpus(source: Any) -> tuple[Passage, ...]:
    if isinstance(source, str) and source == "builtin":
        return builtin.build()[0]
    rows = data.records(source, PASSAGE_FIELDS, "", "train")
    return tuple(Passage(str(r.get("id", i)), str(r.get("title", "")), str(r["text"])) for i, r in enumerate(rows))


class SearchQAEnv(TextEnv):
    instructions = INSTRUCTIONS
    reset_options = ("question",)
    agent_info_keys = ("searches",)  # not gold_retrieved: it says which search found the answer
    shared_on_copy = ("retriever", "_passages", "source", "_kinds")
    argument_bounds = {
        "top_k": Bounds(min=1, max=50, why="passages a search returns; RAGEN's server returns 50 at most"),
        "max_passage_chars": Bounds(min=1, max=TextEnv.max_observation_chars, why="an observation's length"),
        "max_total_chars": Bounds(min=1, max=TextEnv.max_observation_chars, why="an observation's length"),
        "max_steps": MAX_STEPS,
        "max_instances": Bounds(min=1, max=1_000_000, why="records kept"),
    }

    def __init__(self, dataset: Any = "builtin", split: str = "train", corpus: Any = "builtin",
                 retriever_url: str | None = None, retriever_api: str = "ragen", top_k: int = 5,
                 max_passage_chars: int = 800, max_total_chars: int = 4000, max_steps: int = 10,
                 render_mode: str | None = None, invalid_action: Literal["answer", "penalize"] = "answer",
                 success: Literal["ragen", "exact"] = "ragen", selection: Literal["ragen", "draw"] = "ragen",
                 max_instances: int = 20_000):
        super().__init__(max_steps=max_steps, render_mode=render_mode)
        for name, value in (("top_k", top_k), ("max_passage_chars", max_passage_chars),
                            ("max_total_chars", max_total_chars), ("max_instances", max_instances)):
            check_positive_int(name, value)
        self.top_k, self.max_passage_chars, self.max_total_chars = top_k, max_passage_chars, max_total_chars
        self.invalid_action, self.success_rule = invalid_action, success
        ragen = selection == "ragen"
        self.source = data.Source(dataset, split, FIELDS, HUB_NAME, to_question,
                                  shipped=lambda: builtin.questions(split),
                                  select=(lambda items: items[:max_instances]) if ragen else None,
                                  pick=(lambda seed, n: seed % n) if ragen else None)
        self.retriever: PassageIndex | HTTPRetriever = (
            HTTPRetriever(retriever_url, retriever_api) if retriever_url else PassageIndex(load_corpus(corpus)))
        self._passages = {p.id: p for p in getattr(self.retriever, "passages", ())}  # the oracle's titles
        self.question: Question | None = None
        self.queries: list[str] = []
        self.results: list[Passage] = []
        self.error = ""
        self.retrieved: set[str] = set()
        self.answer: str | None = None
        self.reward = 0.0
        # kind -> its answers, built at the first answer and shared with copies (a copy must not build it again)
        self._kinds: dict[str, frozenset[str]] = {}

    def _new_episode(self, options: dict[str, Any]) -> dict[str, Any]:
        if "question" in options:
            self.question = to_question(options["question"], "options['question']")
        else:
            self.question = self.source.sample(self.np_random, self.reset_seed)
        self.queries, self.results, self.error, self.retrieved, self.answer = [], [], "", set(), None
        self.reward = 0.0
        return {}

    def parse_action(self, action: str) -> tuple[str, str] | None:
        if self.invalid_action == "answer":  # RAGEN's reading: prefixes, then anything else is an answer
            text = open_text(action, MAX_ANSWER_CHARS)
            if text is None:
                return None
            if text.startswith("search[") and text.endswith("]"):  # a query is no book either
                query = text[len("search["):-1]
                return None if len(query) > MAX_QUERY_CHARS else ("search", query)
            if text.startswith("finish[") and text.endswith("]"):
                return "finish", text[len("finish["):-1]
            return "answer", text
        match = ACTION.fullmatch(action)
        if match is None:
            return None
        verb, argument = match.group(1).lower(), open_text(match.group(2), MAX_QUERY_CHARS)
        if argument is None or "[" in argument and "]" not in argument:
            return None
        return verb, argument

    def _apply(self, action: tuple[str, str]) -> tuple[float, bool, bool]:
        verb, argument = action
        if verb in ("finish", "answer"):
            self.answer = argument if verb == "finish" else extract_answer(argument)
            self.reward = reward(self.answer, self.question.answer, question=self.question.question,
                                 candidates=self._candidates(self.question.question))
            return self.reward, True, True
        self.queries.append(argument)
        try:
            hits = self.retriever.search(argument, self.top_k)
            self.results, self.error = [h.passage for h in hits], ""
        except RetrievalError as error:
            self.results, self.error = [], str(error)
        self.retrieved.update(p.id for p in self.results)
        return 0.0, False, True

    def _is_valid(self, action: tuple[str, str]) -> bool:
        return action[0] != "answer"

    def _extra_info(self) -> dict[str, Any]:
        gold = set(self.question.supporting) if self.question else set()
        return {"gold_retrieved": bool(gold & self.retrieved), "searches": len(self.queries)}

    def _candidates(self, question: str) -> frozenset[str]:
        """The gold answers of the source's questions of the same kind (``scoring.kind``; the first
        ``HEDGE_POOL`` questions): the candidates an answer must not name beside its own."""
        if not self._kinds:
            kinds: dict[str, set[str]] = {}
            for i in range(min(len(self.source), HEDGE_POOL)):
                item = self.source[i]
                kinds.setdefault(kind(item.question), set()).add(item.answer)
            self._kinds.update({k: frozenset(v) for k, v in kinds.items()})
        return self._kinds.get(kind(question), frozenset())

    def _text(self) -> str:
        lines = [f"Question: {self.question.question}",
                 "Actions: search[query] or finish[answer]."]
        if self.queries:
            # the agent's own words, quoted back normalised and capped: never longer than it wrote them
            lines.append("Searches so far: " + "; ".join(quoted(q, QUOTE_CHARS) for q in self.queries))
            if self.error:
                lines.append(f"Search failed: {self.error}")
            elif not self.results:
                lines.append(f"No passage matches '{quoted(self.queries[-1], QUOTE_CHARS)}'.")
            else:
                shown = []
                for rank, p in enumerate(self.results, start=1):
                    text = p.text if len(p.text) <= self.max_passage_chars else p.text[:self.max_passage_chars] + "..."
                    shown.append(f"[{rank}] {p.title}: {text}" if p.title else f"[{rank}] {text}")
                shown = "\n".join(shown)  # all passages together are cut too, as RAGEN's client does
                cut = shown[:self.max_total_chars] + "..." if len(shown) > self.max_total_chars else shown
                lines += [f"Results for '{quoted(self.queries[-1], QUOTE_CHARS)}':", cut]
        if self.answer is not None:
            lines.append(f"Your answer: {self.answer}")
        return "\n".join(lines)

    def _is_success(self) -> bool:
        if self.answer is None:
            return False
        return self.reward > 0 if self.success_rule == "ragen" else exact_match(self.answer, self.question.answer)

    def oracle_reasoning(self) -> str | None:
        action = self.oracle_action()
        if action is None:
            return None
        if action.startswith("search["):
            return f"To answer \"{self.question.question}\" I look up {action[7:-1]}."
        found = f" The passages on {', '.join(p.title for p in self.results)} say so." if self.results else ""
        return f"The answer to \"{self.question.question}\" is {self.question.answer}.{found}"

    def oracle_action(self) -> str | None:
        if self.question is None or self.answer is not None:
            return None
        for pid in self.question.supporting:
            passage = self._passages.get(pid)
            if pid not in self.retrieved and passage is not None and passage.title not in self.queries:
                return f"search[{passage.title}]"
        if not self.queries:
            return f"search[{self.question.question}]"
        return f"finish[{self.question.answer}]"
