"""The text space every environment uses: any Unicode text, and correct async vector envs.

``TextSpace`` is a ``gymnasium.spaces.Text`` whose ``contains`` admits any string of allowed length:
math symbols, code, any language. ``charset`` only says what ``sample()`` draws from. An observation
can therefore never fail ``check_env`` or a vector env for holding an unexpected character.

Async vector envs with shared memory (Gymnasium's default) store a Text batch as one int32 per
character. Gymnasium stores indices into the space's charset, which fails on other characters, and
reads the batch once, at construction, as a tuple of strings: every later ``reset``/``step`` returns
that stale tuple (Gymnasium issue 1164). For ``TextSpace`` we store Unicode code points (0 pads) and
reading returns a live view that decodes the buffer on access and becomes a plain tuple of strings
when the vector env copies it (its default ``copy=True``).
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.spaces import Text
from gymnasium.vector.utils import read_from_shared_memory, write_to_shared_memory

# What ``sample()`` draws from: printable ASCII and the symbols our envs print. Contained text may
# hold any character.
CHARSET = string.ascii_letters + string.digits + string.punctuation + " \n" + "√×÷−≤≥≠π"


class TextSpace(Text):
    """``gymnasium.spaces.Text`` that contains any Unicode string of allowed length."""

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length


class SharedTextBatch(Sequence):
    """Read-only live view of ``n`` strings stored as code points + 1 (0: padding) in shared memory."""

    def __init__(self, buffer: np.ndarray):
        self._buffer = buffer

    def __len__(self) -> int:
        return self._buffer.shape[0]

    def __getitem__(self, index):
        if isinstance(index, slice):
            return tuple(self)[index]
        row = self._buffer[index]
        return "".join(map(chr, (row[row > 0] - 1).tolist()))

    def __eq__(self, other) -> bool:
        return tuple(self) == tuple(other) if isinstance(other, Sequence) else NotImplemented

    def __repr__(self) -> str:
        return repr(tuple(self))

    def __deepcopy__(self, memo) -> tuple[str, ...]:
        return tuple(self)


@write_to_shared_memory.register(TextSpace)
def _write_text(space: TextSpace, index: int, value: str, shared_memory) -> None:
    size = space.max_length
    if not space.contains(value):
        raise ValueError(f"observation of {len(value)} characters does not fit {space}")
    row = np.frombuffer(shared_memory.get_obj(), dtype=np.int32)[index * size:(index + 1) * size]
    row[:] = 0
    row[:len(value)] = np.fromiter((ord(c) + 1 for c in value), dtype=np.int32, count=len(value))


@read_from_shared_memory.register(TextSpace)
def _read_text_view(space: TextSpace, shared_memory, n: int = 1) -> SharedTextBatch:
    return SharedTextBatch(np.frombuffer(shared_memory.get_obj(), dtype=np.int32).reshape(n, space.max_length))
