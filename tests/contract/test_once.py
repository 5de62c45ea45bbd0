"""Shared tables (``ragen_envs.once.build_once``) build once however many threads ask at the same moment."""

import json
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


def test_a_bounded_cache_keeps_the_latest_results():
    calls = []

    @build_once(maxsize=2)
    def square(n):
        calls.append(n)
        return n * n

    assert [square(n) for n in (1, 2, 1, 3, 1, 2)] == [1, 4, 1, 9, 1, 4]
    assert calls == [1, 2, 3, 2]  # 2 was the oldest when 3 came


def test_threads_that_read_one_dataset_file_at_once_read_it_once(tmp_path, monkeypatch):
    from ragen_envs import data

    path = tmp_path / "items.jsonl"
    path.write_text('{"a": 1}\n')
    reads, real = [], json.loads
    monkeypatch.setattr(data.json, "loads", lambda text: reads.append(1) or time.sleep(0.2) or real(text))
    data.load_file.cache_clear()
    rows = _at_once(lambda: data.load_file(str(path), path.stat().st_mtime_ns))
    assert len(reads) == 1 and all(r is rows[0] for r in rows)
