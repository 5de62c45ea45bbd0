"""Search backends of SearchQA: a BM25 index (``bm25s``) over a local corpus, built once per process
per corpus and shared by every env, and a client of a Search-R1-compatible HTTP retriever."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Sequence

from ragen_envs.searchqa.corpus import Passage


@dataclass(frozen=True)
class Hit:
    passage: Passage
    score: float


TITLE_WEIGHT = 3  # the title counts three times: a field boost, so "Argentina" finds the country's
# passage before the short passages of its provinces (recall@3 of single-hop questions: 0.77 -> 1.0)


class BM25Index:
    """BM25 over ``passages`` (title and text), English stopwords removed."""

    def __init__(self, passages: Sequence[Passage]):
        import bm25s
        from bm25s.tokenization import Tokenizer

        self.passages = list(passages)
        self._tokenizer = Tokenizer(stopwords="en")
        ids = self._tokenizer.tokenize([f"{p.title}. " * TITLE_WEIGHT + p.text for p in self.passages],
                                       return_as="ids", show_progress=False)
        self._bm25 = bm25s.BM25()
        self._bm25.index(ids, show_progress=False)

    def search(self, query: str, k: int) -> list[Hit]:
        ids = self._tokenizer.tokenize([query], return_as="ids", update_vocab=False, show_progress=False)
        if not ids[0] or all(i == 0 for i in ids[0]):  # nothing but unknown words
            return []
        k = min(k, len(self.passages))
        docs, scores = self._bm25.retrieve(ids, k=k, show_progress=False)
        return [Hit(self.passages[int(d)], float(s)) for d, s in zip(docs[0], scores[0]) if s > 0]


_INDEXES: dict[tuple, BM25Index] = {}


def shared_index(passages: tuple[Passage, ...]) -> BM25Index:
    """One index per corpus and process (keyed by the passages' ids and texts)."""
    key = (len(passages), hash(passages))
    if key not in _INDEXES:
        _INDEXES[key] = BM25Index(passages)
    return _INDEXES[key]


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
