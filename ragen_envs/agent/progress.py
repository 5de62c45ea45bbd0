"""Progress on stderr, so it never splits a line of the metrics table on stdout: one status line per
long step (model loading, conversion, checkpoint writing), and a bar for loops (eval turns, warm-start
steps)."""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager


@contextmanager
def step(message: str):
    """Print ``message ...`` now and `` done (1.2 s)`` (or `` failed``) on the same line at the end;
    transformers' own progress bars are silenced meanwhile, so they cannot break the line. The body
    may add to the result with ``note.append("512 MB")``."""
    start = time.perf_counter()
    print(f"{message} ...", end="", file=sys.stderr, flush=True)
    note: list[str] = []
    bars = _library_bars()
    was_on = bars is not None and bars.is_progress_bar_enabled()
    if was_on:
        bars.disable_progress_bar()
    try:
        yield note
    except BaseException:
        print(" failed", file=sys.stderr, flush=True)
        raise
    finally:
        if was_on:
            bars.enable_progress_bar()
    extra = "".join(f", {n}" for n in note)
    print(f" done ({time.perf_counter() - start:.1f} s{extra})", file=sys.stderr, flush=True)


def _library_bars():
    """transformers' progress-bar switch, when transformers is already loaded (never imported here)."""
    if "transformers" not in sys.modules:
        return None
    from transformers.utils import logging

    return logging


def bar(total: int, unit: str, desc: str | None = None):
    """A progress bar (tqdm when installed, else a line per update) as ``update(done, **postfix)``;
    it closes when ``done`` reaches ``total``. ``update.print(line)`` prints a line to stdout without
    breaking the bar (it is cleared, then drawn again below the line)."""
    try:
        from tqdm import tqdm
    except ImportError:
        def fallback(done: int, **postfix) -> None:
            extra = "".join(f", {k} {v}" for k, v in postfix.items())
            print(f"{desc or unit} {done}/{total}{extra}", file=sys.stderr, flush=True)
        fallback.print = lambda line: print(line, flush=True)
        return fallback
    shown = tqdm(total=total, unit=unit, desc=desc, file=sys.stderr)

    def update(done: int, **postfix) -> None:
        shown.n = done
        shown.set_postfix(postfix)
        shown.refresh()
        if done >= total:
            shown.close()

    def write(line: str) -> None:
        tqdm.write(line, file=sys.stdout)
        sys.stdout.flush()
    update.print = write
    return update
