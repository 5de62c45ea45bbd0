"""Gymnasium environments for LLM agents, registered under the ``Ragen/`` namespace.

    import gymnasium, ragen_envs
    env = gymnasium.make("Ragen/Sokoban-v0", dim_room=(8, 8), num_boxes=2)

The catalogue of environments is ``ragen_envs.registry``.
"""

from __future__ import annotations

from ragen_envs.base import LLMEnv, TextEnv
from ragen_envs.registry import CATALOGUE, ENVIRONMENTS, EnvEntry, MissingExtraError, register, register_clients
from ragen_envs.spaces import CHARSET, TextSpace

__version__ = "0.1.0"

for _entry in CATALOGUE:
    register(_entry)
register_clients()

__all__ = ["CHARSET", "ENVIRONMENTS", "EnvEntry", "LLMEnv", "MissingExtraError", "TextEnv", "TextSpace",
           "__version__"]
