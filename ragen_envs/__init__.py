"""Gymnasium environments for LLM agents, registered under the ``Ragen/`` namespace.

    import gymnasium, ragen_envs
    env = gymnasium.make("Ragen/Sokoban-v0", dim_room=(8, 8), num_boxes=2)

The catalogue of environments is ``ragen_envs.registry``.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import warnings

from ragen_envs.base import LLMEnv, TextEnv
from ragen_envs.registry import CATALOGUE, ENVIRONMENTS, EnvEntry, MissingExtraError, register, register_clients
from ragen_envs.spaces import CHARSET, TextSpace

__version__ = "0.1.0"

for _entry in CATALOGUE:
    register(_entry)
register_clients()

#: Modules that moved into the sub-packages: their old import paths still work, with a warning.
MOVED = {"ragen_envs.client": "ragen_envs.remote.client", "ragen_envs.wire": "ragen_envs.remote.wire",
         "ragen_envs.ray_pool": "ragen_envs.remote.ray_pool", "ragen_envs.server": "ragen_envs.remote.server",
         "ragen_envs.server.app": "ragen_envs.remote.server.app",
         "ragen_envs.server.config": "ragen_envs.remote.server.config", "ragen_envs.cli_args": "ragen_envs.cli.args",
         "ragen_envs.oracle_demo": "ragen_envs.cli.oracle_demo", "ragen_envs.agent.report": "ragen_envs.cli.report"}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old path as the module at its new place (the same module object), with a warning."""

    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name in MOVED else None

    def create_module(self, spec):
        warnings.warn(f"{spec.name} moved to {MOVED[spec.name]}; import it from there", DeprecationWarning,
                      stacklevel=2)
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _MovedModules())  # before the path finder, which would load a second copy

__all__ = ["CHARSET", "ENVIRONMENTS", "EnvEntry", "LLMEnv", "MissingExtraError", "TextEnv", "TextSpace",
           "__version__"]
