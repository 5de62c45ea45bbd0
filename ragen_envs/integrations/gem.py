"""GEM (``pip install gem-llm``): any registered env as a ``gem.Env``, registered with GEM.

    import gem
    import ragen_envs.integrations.gem     # registers the catalogue as "ragen:Sokoban-v0", ...
    env = gem.make("ragen:Sokoban-v0")
    obs, info = env.reset(seed=3)
    obs, reward, terminated, truncated, info = env.step(reply)

``gem.make_vec`` and GEM's wrappers (``concat_chat``, ``episode_tracking``, ...) take it as they take
GEM's own games; ``register(env_id)`` registers an env outside the catalogue. An env is text in, text
out, as GEM's games are: ``reset`` returns the episode's first prompt and ``step`` plays the model's
reply through ``ChatEnv`` (parsing, format penalty, feedback) and returns the env's next user message
("" when the episode is over). GEM has no system role (its chat wrappers render user and assistant
turns), so the first observation is the system prompt and the first user message as one text, the
instructions first, as GEM's games put their instructions in the first observation.

GEM renders the chat itself, so a reply is read as ``common.as_reply`` says (the prefill before
it, as the runner would have prompted).

What the env's reward becomes: each step's ``reward`` is that turn's reward (env rewards plus the
format penalty); over the episode they sum to its return (``episode_tracking``'s
``cumulative_rewards``). ``terminated``: the episode ended; ``truncated`` with it when the turn limit
(``ChatEnvConfig.max_turns``) ended an episode that had not succeeded. ``info`` has ``success``,
``format_ok``, the turn's ``actions`` and ``episode_return``.

Tested against gem-llm 0.1.0 (``make test-frameworks``): ``gem.make_vec`` with GEM's own wrappers.
"""

from __future__ import annotations

from typing import Any

from ragen_envs.agent.chat_env import ChatEnv, ChatEnvConfig
from ragen_envs.integrations.common import as_reply

try:
    import gem
    from gem.envs.registration import ENV_REGISTRY
except ImportError:  # pragma: no cover - depends on the installed packages
    raise ImportError("ragen_envs.integrations.gem needs GEM: pip install gem-llm") from None

__all__ = ["RagenGemEnv", "register", "gem_id"]


def _text(content, env_id: str) -> str:
    if not isinstance(content, str):  # GEM's observations are text
        raise ValueError(f"{env_id} shows images; GEM's envs are text: play it with ragen's RolloutRunner")
    return content


class RagenGemEnv(gem.Env):
    def __init__(self, env: str, chat: ChatEnvConfig | dict | None = None, seed: int | None = None,
                 **env_kwargs):
        # seed: gem.make_vec passes one to each env; GEM's games ignore it too (reset(seed) seeds them)
        super().__init__()
        config = ChatEnvConfig(**chat) if isinstance(chat, dict) else chat or ChatEnvConfig()
        self.chat = ChatEnv(env, config, **env_kwargs)
        self.ragen_env_id = env

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        system, user = self.chat.reset(seed=seed)
        text = f"{_text(system['content'], self.ragen_env_id)}\n\n{_text(user['content'], self.ragen_env_id)}"
        return text, {"env_id": self.ragen_env_id, "seed": seed}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        chat = self.chat
        record = chat.step(as_reply(action, chat.config.prefill))
        truncated = chat.done and not chat.success and len(chat.turns) >= chat.config.max_turns
        obs = "" if chat.done else _text(chat.messages[-1]["content"], self.ragen_env_id)
        return obs, float(record.reward), chat.done, truncated, {
            "success": chat.success, "format_ok": record.format_ok, "actions": list(record.actions),
            "episode_return": chat.episode_return}

    def close(self):
        self.chat.close()


def gem_id(env_id: str) -> str:
    """GEM's id of a registered env: "Ragen/Sokoban-v0" -> "ragen:Sokoban-v0"."""
    return "ragen:" + env_id.split("/", 1)[-1]


def register(env_id: str) -> str:
    """Register ``env_id`` with GEM (once) and return its GEM id."""
    if gem_id(env_id) not in ENV_REGISTRY:
        gem.register(gem_id(env_id), f"{__name__}:RagenGemEnv", env=env_id)
    return gem_id(env_id)


def _register_catalogue():
    from ragen_envs.registry import ENVIRONMENTS

    for env_id in ENVIRONMENTS:
        register(env_id)


_register_catalogue()
