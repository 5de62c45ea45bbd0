"""What the server says about the envs it serves: OpenEnv's ``/metadata`` and ``/schema``, and the
descriptions its MCP tools carry. Built from the envs themselves (instructions, actions, spaces)."""

from __future__ import annotations

import gymnasium as gym

from ragen_envs import __version__
from ragen_envs.once import build_once
from ragen_envs.registry import ENVIRONMENTS
from ragen_envs.remote import wire
from ragen_envs.remote.client import surface

# An OpenEnv session's state (the WebSocket "state" reply, GET /v1/sessions/ID, the MCP "state" tool).
STATE_SCHEMA = {"type": "object", "title": "State", "properties": {
    "episode_id": {"type": ["string", "null"], "description": "the episode's id (set at reset)"},
    "step_count": {"type": "integer", "minimum": 0, "description": "steps since the last reset"},
    "env_id": {"type": "string", "description": "the env of the session"}}}


def grammar(valid_actions: list[str] | None) -> str:
    """The action grammar in words."""
    if valid_actions:
        return f"one of {', '.join(valid_actions)} (case-insensitive); anything else is an invalid action"
    return "free text, by the env's instructions; text it cannot parse is an invalid action (no change, reward 0)"


@build_once  # concurrent /metadata requests make the env once
def env_metadata(env_id: str, kwargs: str = "{}") -> dict:
    """One served env: its catalogue description, instructions, actions and spaces. ``kwargs``: the
    server's gym.make arguments for it, as JSON (a cache key)."""
    import json

    env = gym.make(env_id, **json.loads(kwargs))
    try:
        shown = surface(env)
    finally:
        env.close()
    return {"name": env_id, "description": ENVIRONMENTS[env_id].description, "version": __version__,
            "author": "ragen-envs", "readme_content": shown["instructions"], "instructions": shown["instructions"],
            "valid_actions": shown["valid_actions"], "action_grammar": grammar(shown["valid_actions"]),
            "max_steps": shown["max_steps"], "observation_space": wire.space_to_json(shown["observation_space"]),
            "action_space": wire.space_to_json(shown["action_space"])}


def env_schema(meta: dict) -> dict:
    """OpenEnv's three JSON schemas for one env: its action, its observation (as the WebSocket protocol
    and the MCP tools send it) and a session's state."""
    action = {"type": "string", "description": meta["action_grammar"]}
    if meta["valid_actions"]:
        action["examples"] = list(meta["valid_actions"])
    observation = {"type": "object", "title": "Observation", "properties": {
        "text": {"type": "string", "description": "the env's text observation"},
        "info": {"type": "object", "description": "action_is_valid, action_is_effective, success, ..."},
        "terminated": {"type": "boolean"}, "truncated": {"type": "boolean"}},
        "description": f"observation space: {meta['observation_space']}"}
    return {"action": {"type": "object", "title": "Action", "properties": {"action": action}, "required": ["action"]},
            "observation": observation, "state": STATE_SCHEMA}


def server_metadata(envs: dict[str, dict]) -> dict:
    """``/metadata``: the server's name and description, and each served env's."""
    names = ", ".join(envs)
    return {"name": "ragen-envs", "version": __version__, "author": "ragen-envs",
            "description": f"Gymnasium environments for LLM agents with text actions, served: {names}",
            "envs": envs}


def server_schema(envs: dict[str, dict]) -> dict:
    """``/schema``: the first served env's schemas (the env of ``/ws``), and every env's under "envs"."""
    schemas = {env_id: env_schema(meta) for env_id, meta in envs.items()}
    return {**next(iter(schemas.values())), "envs": schemas}
