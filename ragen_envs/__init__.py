"""Gymnasium environments for LLM agents, registered under the ``Ragen/`` namespace.

    import gymnasium, ragen_envs
    env = gymnasium.make("Ragen/Sokoban-v0", dim_room=(8, 8), num_boxes=2)
"""

from __future__ import annotations

import gymnasium

from ragen_envs.base import LLMEnv
from ragen_envs.spaces import CHARSET, TextSpace

__version__ = "0.1.0"

# env id -> entry point; the single place an environment is registered.
ENVIRONMENTS = {
    "Ragen/Sokoban-v0": "ragen_envs.sokoban:SokobanEnv",
    "Ragen/FrozenLake-v0": "ragen_envs.frozenlake:FrozenLakeEnv",
}

for _env_id, _entry_point in ENVIRONMENTS.items():
    if _env_id not in gymnasium.registry:
        # No TimeLimit wrapper: each env truncates at its own `max_steps` argument.
        gymnasium.register(id=_env_id, entry_point=_entry_point)

__all__ = ["CHARSET", "ENVIRONMENTS", "LLMEnv", "TextSpace", "__version__"]
