"""Text space used by every environment, with a correct shared-memory path for async vector envs.

Gymnasium's ``AsyncVectorEnv(shared_memory=True)`` reads a Text batch from shared memory once, at
construction, as a tuple of strings; every later ``reset``/``step`` then returns that stale tuple
(Gymnasium issue 1164). Arrays don't have the problem because their read returns a live view. We give
Text the same: reading returns a live view that decodes the shared buffer on access and turns into a
plain tuple of strings when the vector env copies it (its default ``copy=True``).
"""

from __future__ import annotations

import string
from collections.abc import Sequence

import numpy as np
from gymnasium.spaces import Text
from gymnasium.vector.utils import read_from_shared_memory

# Every character our environments print. Environments with other symbols extend it.
CHARSET = string.ascii_letters + string.digits + string.punctuation + " \n" + "√"


class TextSpace(Text):
    """``gymnasium.spaces.Text`` whose async shared-memory batches stay current."""


class SharedTextBatch(Sequence):
    """Read-only live view of ``n`` strings stored as padded character indices in shared memory."""

    def __init__(self, space: Text, buffer: np.ndarray):
        self._chars = np.array(space.character_list + ("",))  # padding index decodes to ""
        self._buffer = buffer

    def __len__(self) -> int:
        return self._buffer.shape[0]

    def __getitem__(self, index):
        if isinstance(index, slice):
            return tuple(self)[index]
        return "".join(self._chars[self._buffer[index]])

    def __eq__(self, other) -> bool:
        return tuple(self) == tuple(other) if isinstance(other, Sequence) else NotImplemented

    def __repr__(self) -> str:
        return repr(tuple(self))

    def __deepcopy__(self, memo) -> tuple[str, ...]:
        return tuple(self)


@read_from_shared_memory.register(TextSpace)
def _read_text_view(space: TextSpace, shared_memory, n: int = 1) -> SharedTextBatch:
    data = np.frombuffer(shared_memory.get_obj(), dtype=np.int32).reshape(n, space.max_length)
    return SharedTextBatch(space, data)
