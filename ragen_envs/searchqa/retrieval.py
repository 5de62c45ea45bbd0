"""Search backends of SearchQA: BM25 over a local corpus (``ragen_envs.bm25``, one index per corpus and
process) and a client of a Search-R1-compatible HTTP retriever."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass

from ragen_envs.bm25 import shared_index
from ragen_envs.searchqa.corpus import Passage


@dataclass(frozen=True)
class Hit:
    passage: Passage
    score: float


TITLE_WEIGHT = 3  # the title counts three times: a field boost, so "Argentina" finds the country's
# passage before the short passages of its provinces (recall@3 of single-hop questions: 0.77 -> 1.0)


class PassageIndex:
    """BM25 over passages (title and text); the index is shared per corpus and process."""

    def __init__(self, passages: tuple[Passage, ...]):
        self.passages = passages
        self._index = shared_index(("passages", len(passages), hash(passages)),
                                   lambda: [f"{p.title}. " * TITLE_WEIGHT + p.text for p in passages])

    def search(self, query: str, k: int) -> list[Hit]:
        return [Hit(self.passages[i], score) for i, score in self._index.search(query, k)]


class HTTPRetriever:
    """A Search-R1-style server: ``POST url`` with ``{"queries": [...], "topk": k, "return_scores": true}``
    answered by ``{"result": [[{"document": {"contents": "Title\\ntext"}, "score": s}, ...]]}``."""

    def __init__(self, url: str, timeout: float = 10.0):
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"retriever_url must be an http(s) URL, got {url!r}")
        self.url, self.timeout = url, timeout

    def search(self, query: str, k: int) -> list[Hit]:
        body = json.dumps({"queries": [query], "topk": k, "return_scores": True}).encode()
        request = urllib.request.Request(self.url, body, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                result = json.loads(response.read())["result"][0]
        except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError, TypeError) as error:
            raise RetrievalError(f"the retriever at {self.url} failed: {error}") from None
        hits = []
        for rank, item in enumerate(result):
            document = item.get("document", item) if isinstance(item, dict) else {}
            contents = str(document.get("contents", ""))
            title, _, text = contents.partition("\n")
            passage = Passage(str(document.get("id", rank)), title.strip().strip('"'), text.strip() or title)
            hits.append(Hit(passage, float(item.get("score", 0.0)) if isinstance(item, dict) else 0.0))
        return hits


class RetrievalError(RuntimeError):
    """The search backend failed; the env shows it as the observation and the episode goes on."""
