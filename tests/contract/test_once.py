"""Shared tables (``ragen_envs.once.build_once``) build once however many threads ask at the same moment."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from ragen_envs import bm25
from ragen_envs.once import build_once


def _at_once(fn, threads: int = 16) -> list:
    start = threading.Barrier(threads)

    def call(_):
        start.wait(timeout=60)
        return fn()

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(call, range(threads)))


def test_a_key_builds_once_and_a_failed_build_caches_nothing():
    calls = []

    @build_once
    def table(key):
        calls.append(key)
        if len(calls) == 1:
            raise RuntimeError("first build fails")
        return object()

    with pytest.raises(RuntimeError):
        table("a")
    results = _at_once(lambda: table("a"))
    assert calls == ["a", "a"] and all(r is results[0] for r in results)


def test_threads_asking_for_a_search_index_at_once_build_it_once(monkeypatch):
    pytest.importorskip("bm25s")
    built = []
    # a build that takes a while, as a real index does: every thread arrives while the first builds
    monkeypatch.setattr(bm25, "BM25Index", lambda texts: built.append(1) or time.sleep(0.2) or object())
    key = ("test", object())  # a corpus no other test has built
    indexes = _at_once(lambda: bm25.shared_index(key, lambda: ["a text"]))
    assert len(built) == 1 and all(i is indexes[0] for i in indexes)
