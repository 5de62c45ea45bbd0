"""The base class every ragen-envs environment shares.

An ``LLMEnv`` takes its action as text and returns text observations. ``step`` never raises on a bad
action: an action the env cannot parse changes no state, gives reward 0 and
``info["action_is_valid"] = False``. Every ``info`` carries ``action_is_valid``, ``action_is_effective``
(the state changed) and ``success``.

Subclasses implement ``_new_episode``, ``parse_action``, ``_apply``, ``_observation`` and
``_is_success``, and set
``instructions`` (what an agent needs to know) and, where finite, ``valid_actions``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from ragen_envs.spaces import CHARSET, TextSpace

# Longest action string an agent is expected to send; longer ones are still accepted (and rejected
# as invalid by the env's parser), the bound only describes the action space.
MAX_ACTION_CHARS = 4096


class LLMEnv(gym.Env):
    """Base for text-in, text-out environments. See the module docstring for the contract."""

    metadata: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 4}

    #: Task description for the agent: goal, symbols, action format. Set by each subclass.
    instructions: str = ""
    #: The finite list of valid actions, or None where actions are open text (search, code...).
    valid_actions: list[str] | None = None

    def __init__(self, max_steps: int, render_mode: str | None = None):
        if not isinstance(max_steps, int) or isinstance(max_steps, bool) or max_steps < 1:
            raise ValueError(f"max_steps must be a positive integer, got {max_steps!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}"
            )
        self.max_steps = max_steps
        self.render_mode = render_mode
        self.action_space = TextSpace(MAX_ACTION_CHARS, min_length=0, charset=CHARSET)
        self._elapsed_steps = 0

    # -- what subclasses implement -------------------------------------------------------------
    def _new_episode(self, options: dict[str, Any]) -> dict[str, Any]:
        """Set up a new episode from ``self.np_random`` (or ``options``); return extra reset info."""
        raise NotImplementedError

    def parse_action(self, action: str) -> Any | None:
        """Turn the action text into the env's own action, or None when it is not valid."""
        raise NotImplementedError

    def _apply(self, action: Any) -> tuple[float, bool, bool]:
        """Apply a parsed action; return (reward, terminated, action_is_effective)."""
        raise NotImplementedError

    def _observation(self) -> Any:
        raise NotImplementedError

    def _is_success(self) -> bool:
        raise NotImplementedError

    # -- the shared step -------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._elapsed_steps = 0
        extra = self._new_episode(options or {})
        if self.render_mode == "human":
            self.render()
        return self._observation(), self._info(valid=True, effective=False, **extra)

    def step(self, action: str):
        # Every call counts towards max_steps, invalid ones too, so an episode always ends.
        self._elapsed_steps += 1
        parsed = self.parse_action(action) if isinstance(action, str) else None
        if parsed is None:
            reward, terminated, effective = 0.0, False, False
        else:
            reward, terminated, effective = self._apply(parsed)
        truncated = not terminated and self._elapsed_steps >= self.max_steps
        if self.render_mode == "human":
            self.render()
        info = self._info(valid=parsed is not None, effective=effective)
        return self._observation(), float(reward), terminated, truncated, info

    def _info(self, valid: bool, effective: bool, **extra) -> dict[str, Any]:
        return {"action_is_valid": valid, "action_is_effective": effective,
                "success": self._is_success(), **extra}

    def parse_choice(self, action: str) -> str | None:
        """Case-insensitive match of ``action`` against ``valid_actions``: the canonical name or None."""
        key = action.strip().lower()
        for name in self.valid_actions or ():
            if key == name.lower():
                return name
        return None
