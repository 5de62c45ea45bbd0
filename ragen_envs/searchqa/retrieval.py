"""Search backends of SearchQA: BM25 over a local corpus (``ragen_envs.bm25``, one index per corpus and
process) and a client of an HTTP retriever speaking RAGEN's API or Search-R1's."""

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
    """A retrieval server. ``api="ragen"``: RAGEN's (``scripts/retrieval/server.py``), ``POST
    {url}/retrieve`` with ``{"query": q, "top_k": k}`` (k at most 50) answered by ``{"results": [{"id",
    "content", "score"}, ...]}``. ``api="search-r1"``: ``POST url`` with ``{"queries": [q], "topk": k,
    "return_scores": true}`` answered by ``{"result": [[{"document": {"contents": "Title\\ntext"},
    "score": s}, ...]]}``."""

    def __init__(self, url: str, api: str = "ragen", timeout: float = 10.0):
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"retriever_url must be an http(s) URL, got {url!r}")
        if api not in APIS:
            raise ValueError(f"retriever_api must be one of {', '.join(map(repr, APIS))}, got {api!r}")
        self.url = url.rstrip("/") + "/retrieve" if api == "ragen" else url
        self.api, self.timeout = api, timeout

    def search(self, query: str, k: int) -> list[Hit]:
        body = ({"query": query, "top_k": min(k, 50)} if self.api == "ragen"
                else {"queries": [query], "topk": k, "return_scores": True})
        request = urllib.request.Request(self.url, json.dumps(body).encode(), {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                reply = json.loads(response.read())
            return _ragen_hits(reply["results"])[:k] if self.api == "ragen" else _search_r1_hits(reply["result"][0])
        except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError, TypeError, AttributeError) as error:
            raise RetrievalError(f"the retriever at {self.url} failed: {error}") from None


APIS = ("ragen", "search-r1")


def _ragen_hits(results: list) -> list[Hit]:
    return [Hit(Passage(str(item.get("id", f"doc_{rank}")), "", str(item.get("content", ""))),
                float(item.get("score", 0.0))) for rank, item in enumerate(results, start=1)]


def _search_r1_hits(result: list) -> list[Hit]:
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
