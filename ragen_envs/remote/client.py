"""The base of the clients of envs that run elsewhere (``RemoteEnv``, ``RayEnv``): the env contract's
methods forwarded to the env, and the attributes a client copies from it."""

from __future__ import annotations

import gymnasium as gym

# Env methods a client may call on the env it stands in for (the server and the Ray actors refuse others).
CALLS = ("parse_action", "oracle_action", "oracle_reasoning", "render")


def surface(env: gym.Env) -> dict:
    """What a client needs to stand in for ``env``: the contract's attributes, spaces and metadata."""
    return {"instructions": env.get_wrapper_attr("instructions"),
            "valid_actions": env.get_wrapper_attr("valid_actions"),
            "max_steps": env.get_wrapper_attr("max_steps"),
            "observation_space": env.observation_space, "action_space": env.action_space,
            "metadata": {k: v for k, v in env.metadata.items() if k in ("render_modes", "render_fps")},
            "render_mode": env.render_mode}


class EnvClient(gym.Env):
    """Subclasses implement ``reset``, ``step``, ``close`` and ``_call(method, *args)``."""

    def _take_surface(self, surface: dict) -> None:
        """Copy what the env shows of itself (``surface``)."""
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
