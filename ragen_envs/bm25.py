"""BM25 search over a list of texts (``bm25s``), English stopwords removed; one index per corpus and
process, shared by every env that searches it (SearchQA's passages, WebShop's products)."""

from __future__ import annotations

from typing import Callable, Hashable, Sequence

from ragen_envs.once import build_once


class BM25Index:
    def __init__(self, texts: Sequence[str]):
        import bm25s
        from bm25s.tokenization import Tokenizer

        self.size = len(texts)
        self._tokenizer = Tokenizer(stopwords="en")
        ids = self._tokenizer.tokenize(list(texts), return_as="ids", show_progress=False)
        self._bm25 = bm25s.BM25()
        self._bm25.index(ids, show_progress=False)

    def search(self, query: str, k: int) -> list[tuple[int, float]]:
        """(text index, score) of the best ``k`` texts with a positive score, best first."""
        ids = self._tokenizer.tokenize([query], return_as="ids", update_vocab=False, show_progress=False)
        if not ids[0] or all(i == 0 for i in ids[0]):  # nothing but unknown words
            return []
        docs, scores = self._bm25.retrieve(ids, k=min(k, self.size), show_progress=False)
        return [(int(d), float(s)) for d, s in zip(docs[0], scores[0]) if s > 0]


_TEXTS: dict[Hashable, Callable[[], Sequence[str]]] = {}


def shared_index(key: Hashable, texts: Callable[[], Sequence[str]]) -> BM25Index:
    """The index of the corpus named by ``key``, built from ``texts()`` the first time in this process
    (once, however many threads ask at the same moment)."""
    _TEXTS.setdefault(key, texts)
    return _built_index(key)


@build_once
def _built_index(key: Hashable) -> BM25Index:
    return BM25Index(_TEXTS[key]())
