"""The run folder: one run per folder, never mixed with another's files.

A folder that already holds a run (metrics, a config, checkpoints) is only continued with
``resume_from_checkpoint`` or replaced with ``overwrite_output_dir``; otherwise the trainer refuses to
start. Without ``output_dir`` every run gets its own new folder under ``runs/``.
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

# What a run writes; ``overwrite_output_dir`` removes exactly these and nothing else.
RUN_FILES = ("metrics.jsonl", "metrics.csv", "metrics.abandoned.jsonl", "metrics.png", "config.json",
             "tensorboard", "rollouts", "report.html")
CHECKPOINT = re.compile(r"\.?checkpoint-\d+(\.tmp)?$")


def run_files(folder: Path) -> list[Path]:
    """The run's files in ``folder`` (empty when it holds no run)."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.name in RUN_FILES or CHECKPOINT.match(p.name))


def new_folder(algorithm: str, envs: list[str], root: str = "runs") -> Path:
    """``runs/<date>-<time>-<algorithm>-<env>``, unique: a run's own folder."""
    env = envs[0].split("/")[-1] + (f"+{len(envs) - 1}" if len(envs) > 1 else "")
    base = Path(root) / f"{time.strftime('%Y%m%d-%H%M%S')}-{algorithm}-{env}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def check(folder: Path, overwrite: bool) -> list[Path]:
    """The old run's files in ``folder``, which ``clear`` removes; without ``overwrite`` a folder that
    holds a run is refused (a ValueError naming the ways out)."""
    found = run_files(folder)
    if found and not overwrite:
        names = ", ".join(p.name for p in found[:4]) + (", ..." if len(found) > 4 else "")
        raise ValueError(f"{folder} already holds a run ({names}); continue it with --resume latest, "
                         "replace it with --overwrite, or pick another --output-dir")
    return found


def clear(paths: list[Path]) -> None:
    for path in paths:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
