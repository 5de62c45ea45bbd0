"""The base of the clients of envs that run elsewhere (``RemoteEnv``, ``RayEnv``): the env contract's
methods forwarded to the env, and the attributes a client copies from it."""

from __future__ import annotations

import gymnasium as gym

# Env methods a client may call on the env it stands in for (the server and the Ray actors refuse others).
CALLS = ("parse_action", "oracle_action", "oracle_reasoning", "render")


class EnvClient(gym.Env):
    """Subclasses implement ``reset``, ``step``, ``close`` and ``_call(method, *args)``."""

    def _take_surface(self, surface: dict) -> None:
        """Copy what the env shows of itself: its instructions, actions, limit, spaces and metadata."""
        self.instructions: str = surface["instructions"]
        self.valid_actions: list[str] | None = surface["valid_actions"]
        self.max_steps: int = surface["max_steps"]
        self.observation_space, self.action_space = surface["observation_space"], surface["action_space"]
        self.metadata, self.render_mode = surface["metadata"], surface["render_mode"]

    def _call(self, method: str, *args):
        raise NotImplementedError

    def render(self):
        return self._call("render")

    def parse_action(self, text: str):
        return self._call("parse_action", text)

    def oracle_action(self) -> str | None:
        return self._call("oracle_action")

    def oracle_reasoning(self) -> str | None:
        return self._call("oracle_reasoning")
