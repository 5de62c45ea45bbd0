"""The trainers' public names, reachable from ``ragen_envs``: ``from ragen_envs.training import Trainer,
TrainerConfig`` is ``from trainers import Trainer, TrainerConfig``, with one difference for a library user: a
folder named ``trainers`` in the working directory (or anywhere earlier on ``sys.path``) that hides this
package's own ``trainers`` is named in the error instead of failing as "cannot import name 'Trainer'".

Importing this module loads nothing; a name loads ``trainers`` when first asked for (``Trainer`` then loads
torch and transformers, the ``llm`` extra; the configs need neither)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SHOWN = ("Trainer", "TrainerConfig")  # what dir() and tab completion show; every name of trainers.__all__ is served


def trainers_shadowed() -> str | None:
    """One line saying which ``trainers`` hides this package's own, or None where ``import trainers`` finds
    the one installed beside ``ragen_envs`` (found without importing it)."""
    ours = Path(__file__).resolve().parents[1] / "trainers" / "__init__.py"
    try:
        spec = importlib.util.find_spec("trainers")
    except (ImportError, ValueError):  # ValueError: sys.modules["trainers"] has no spec
        spec = None
    found = spec.origin if spec is not None else None
    if found is not None and Path(found).resolve() == ours:
        return None
    where = found or (list(spec.submodule_search_locations or []) if spec is not None else None)
    if where is None:
        return (f"the 'trainers' package of ragen-envs is not installed (expected at {ours.parent}): reinstall "
                "ragen-envs")
    return (f"'trainers' is imported from {where}, not from ragen-envs ({ours.parent}): a folder of that name in "
            "the working directory or earlier on sys.path hides it; rename that folder or run from another one")


def __dir__():
    return sorted([*SHOWN, "trainers_shadowed"])


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    problem = trainers_shadowed()
    if problem is not None:
        raise ImportError(f"ragen_envs.training.{name}: {problem}")
    import trainers

    if name not in trainers.__all__:
        raise AttributeError(f"module 'ragen_envs.training' has no attribute {name!r} (it serves trainers.__all__: "
                             f"{', '.join(trainers.__all__)})")
    return getattr(trainers, name)
