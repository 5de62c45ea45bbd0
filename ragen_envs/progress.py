"""One status line per long step (model loading, conversion, checkpoint writing), on stderr, so it
never splits a line of the metrics table on stdout."""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager


@contextmanager
def step(message: str):
    """Print ``message ...`` now and `` done (1.2 s)`` (or `` failed``) on the same line at the end.
    The body may append to the result with ``note.append("512 MB")``."""
    start = time.perf_counter()
    print(f"{message} ...", end="", file=sys.stderr, flush=True)
    note: list[str] = []
    try:
        yield note
    except BaseException:
        print(" failed", file=sys.stderr, flush=True)
        raise
    extra = "".join(f", {n}" for n in note)
    print(f" done ({time.perf_counter() - start:.1f} s{extra})", file=sys.stderr, flush=True)
