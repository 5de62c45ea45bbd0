"""The run folder: one run per folder, never mixed with another's files.

A folder that already holds a run (metrics, a config, checkpoints) is only continued with
``resume_from_checkpoint`` or replaced with ``overwrite_output_dir``; otherwise the trainer refuses to
start. Without ``output_dir`` every run gets its own new folder under ``runs/``.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

# What a run writes; ``overwrite_output_dir`` removes exactly these and nothing else.
RUN_FILES = ("metrics.jsonl", "metrics.csv", "metrics.abandoned.jsonl", "metrics.png", "config.json",
             "tensorboard", "wandb", "rollouts", "report.html", "diagnosis.json", "diagnosis.png")
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


def remove_if_empty(folder: Path) -> None:
    """Remove ``folder`` when nothing is in it (a run that failed before writing anything: a model that
    would not load leaves no empty run folder behind)."""
    try:
        folder.rmdir()
    except OSError:  # not empty, or gone already
        pass


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


# == the run's record ===============================================================================


def read_record(folder: Path) -> dict | None:
    """The run's ``config.json`` (its settings, env, model and history), or None when there is none."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} is unreadable ({error}); it is the run's record") from None
    if not isinstance(record, dict):
        raise ValueError(f"{path} is not a run's record (a mapping of settings)")
    return record


def _leaves(data: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in data.items():
        if isinstance(value, dict) and key != "env":  # env: {id: groups} is one setting
            out.update(_leaves(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def changes(old: dict, new: dict) -> dict[str, tuple]:
    """Dotted setting -> (old, new) for what ``new`` changes of the record ``old``, leaving out the settings a
    resume may change (``TrainerConfig.resume_free``: declared on each field)."""
    from trainers.config import TrainerConfig

    free = TrainerConfig.resume_free(new)
    before, after = _leaves({k: v for k, v in old.items() if k != "history"}), _leaves(new)
    return {key: (before[key], value) for key, value in after.items()
            if key in before and key.split(".")[0] not in free and before[key] != value}


def resumed_record(old: dict | None, new: dict, iteration: int, allow: bool, flag) -> dict:
    """The record a resumed run writes: ``new`` with the old record's history, plus an entry for the
    iterations run so far when settings change. Without ``allow`` a change is refused (ValueError, one
    line naming each setting as ``flag(dotted name)``, old and new value)."""
    if old is None:
        return new
    history = list(old.get("history", []))
    changed = changes(old, new)
    if changed and not allow:
        listed = "; ".join(f"{flag(key)} {before!r} -> {after!r}" for key, (before, after) in changed.items())
        raise ValueError(f"resuming would change the run's settings ({listed}); leave those flags out to resume "
                         f"as recorded in its config.json, or pass --allow-changes (allow_config_changes=True) to "
                         f"change them, recorded in its history")
    first = history[-1]["iterations"][1] + 1 if history else 1
    if changed and first <= iteration:  # settings that never ran an iteration leave no entry
        history.append({"iterations": [first, iteration], "settings": {k: v[0] for k, v in changed.items()}})
    return {**new, "history": history} if history else new
