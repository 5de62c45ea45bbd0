"""``build_once``: a cache for expensive shared tables that builds each one once, even when many threads
ask for it at the same moment (an env server's first resets all arrive together).

``functools.lru_cache`` holds no lock while the function runs: 64 threads that miss at once build the
same table 64 times (seconds each, and the memory of every copy). Here the first caller of a key builds
it and the others of that key wait for its result; callers of other keys do not wait.
"""

from __future__ import annotations

import functools
import threading
from typing import Callable, TypeVar

T = TypeVar("T")


def build_once(fn: Callable[..., T]) -> Callable[..., T]:
    """Decorate ``fn`` so that ``fn(*args)`` runs once per distinct ``args`` (hashable, positional) in
    this process, whatever the number of threads asking at once; every caller gets the same object. A
    call that raises caches nothing (the next caller tries again). ``fn.cache_clear()`` forgets all."""
    results: dict = {}
    locks: dict = {}
    guard = threading.Lock()  # held only to find a key's lock, never while building

    @functools.wraps(fn)
    def cached(*args):
        if args in results:  # the common case: built, no lock taken
            return results[args]
        with guard:
            lock = locks.setdefault(args, threading.Lock())
        with lock:
            if args not in results:  # a thread that waited here finds the first one's result
                results[args] = fn(*args)
        return results[args]

    def cache_clear() -> None:
        with guard:
            results.clear()
            locks.clear()

    cached.cache_clear = cache_clear
    return cached
