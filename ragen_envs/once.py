"""``build_once``: a cache for expensive shared tables that builds each one once, even when many threads
ask for it at the same moment (an env server's first resets all arrive together).

``functools.lru_cache`` holds no lock while the function runs: 64 threads that miss at once build the
same table 64 times (seconds each, and the memory of every copy). Here the first caller of a key builds
it and the others of that key wait for its result; callers of other keys do not wait.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from typing import Callable, TypeVar

T = TypeVar("T")


def build_once(fn: Callable[..., T] | None = None, *, maxsize: int | None = None):
    """Decorate ``fn`` so that ``fn(*args)`` runs once per distinct ``args`` (hashable, positional) in
    this process, whatever the number of threads asking at once; every caller gets the same object. A
    call that raises caches nothing (the next caller tries again). ``maxsize``: keep only the latest that
    many results (None: all). ``fn.cache_clear()`` forgets all. Use as ``@build_once`` or
    ``@build_once(maxsize=8)``."""
    if fn is None:
        return lambda f: build_once(f, maxsize=maxsize)
    results: OrderedDict = OrderedDict()
    locks: dict = {}
    guard = threading.Lock()  # held only to look up or change the tables, never while building

    @functools.wraps(fn)
    def cached(*args):
        with guard:
            if args in results:  # the common case: built
                results.move_to_end(args)
                return results[args]
            lock = locks.setdefault(args, threading.Lock())
        with lock:
            with guard:
                if args in results:  # a thread that waited here finds the first one's result
                    return results[args]
            value = fn(*args)
            with guard:
                results[args] = value
                locks.pop(args, None)
                while maxsize is not None and len(results) > maxsize:
                    results.popitem(last=False)
        return value

    def cache_clear() -> None:
        with guard:
            results.clear()
            locks.clear()

    cached.cache_clear = cache_clear
    return cached
