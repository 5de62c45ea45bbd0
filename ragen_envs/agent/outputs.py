"""Outputs a command writes after long work (trajectories, a trained model, a run folder): checked
before the work starts, and kept somewhere when the place named turns out unwritable at the end."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Callable


def check_writable(folder: str | Path, what: str) -> None:
    """A ValueError (one line) unless files can be written in ``folder`` (created when missing)."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".ragen-write-check-")
        os.close(fd)
        os.unlink(probe)
    except OSError as error:
        raise ValueError(f"cannot write {what} to {folder}: {error.strerror or error}") from None


def save_or_keep(save: Callable[[Path], None], path: str | Path, what: str) -> Path:
    """``save(path)``; when that fails, ``save`` into a fresh place in the temp folder instead and raise a
    ValueError naming both, so that work done is not lost to a full or read-only disk."""
    path = Path(path)
    try:
        save(path)
        return path
    except OSError as error:
        kept = Path(tempfile.gettempdir()) / f"ragen-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{path.name}"
        try:
            save(kept)
        except OSError as second:
            raise ValueError(f"cannot write {what} to {path} ({error.strerror or error}), nor to {kept} "
                             f"({second.strerror or second}): lost") from None
        raise ValueError(f"cannot write {what} to {path} ({error.strerror or error}); kept in {kept} "
                         "instead") from None
