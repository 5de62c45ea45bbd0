"""SkyRL-gym: any registered env as a ``BaseTextEnv``, registered with ``skyrl_gym`` as ``"ragen"``.

    import ragen_envs.integrations.skyrl as ragen_skyrl
    rows = ragen_skyrl.dataset_rows("Ragen/Sokoban-v0", 512)   # {"prompt", "env_class": "ragen", ...}
    env = skyrl_gym.make("ragen", env_config={}, extras=rows[0])

SkyRL builds one env per sample with the dataset row as ``extras``; the row names the env
(``env_id``) and its seed (top level or in ``extra_info``), and ``env_config`` may hold
``env_kwargs`` and ``chat`` (a dict of ``ChatEnvConfig`` fields). ``init`` returns the env's own first
prompt (system and user messages), ``step(reply)`` plays the reply through ``ChatEnv`` (parsing,
format penalty, feedback) and returns the next user message, the turn's reward and ``done``; the
episode's outcome is in the metadata and ``get_metrics``.

SkyRL renders the chat itself, so a reply is read as ``common.as_reply`` says (the prefill before
it, as the runner would have prompted).

What the env's reward becomes: each step's ``reward`` is that turn's reward (env rewards plus the
format penalty), which SkyRL credits to that turn's response; over the episode they sum to its
return. ``turns`` counts the model's replies, as ``BaseTextEnv`` counts them against ``max_turns``.
"""

from __future__ import annotations

from typing import Any

from ragen_envs.agent.chat_env import ChatEnv, ChatEnvConfig
from ragen_envs.extras import install_hint
from ragen_envs.integrations.common import as_reply, seed_rows

try:
    import skyrl_gym
    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
except ImportError:  # pragma: no cover - depends on the installed extras
    raise ImportError(f"ragen_envs.integrations.skyrl needs SkyRL-gym: {install_hint('skyrl')}") from None

ENV_CLASS = "ragen"


def _get(config: Any, key: str, default=None):
    return (config or {}).get(key, default) if hasattr(config or {}, "get") else getattr(config, key, default)


class RagenTextEnv(BaseTextEnv):
    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__()
        extras = dict(extras or {})
        info = extras.get("extra_info") or {}
        self.env_id = extras.get("env_id") or info.get("env_id") or _get(env_config, "env_id")
        if not self.env_id:
            raise ValueError("a 'ragen' SkyRL env needs env_id in the dataset row (dataset_rows() writes it)")
        self.seed = extras.get("seed", info.get("seed"))
        chat = ChatEnvConfig(**dict(_get(env_config, "chat") or {}))
        self.chat = ChatEnv(self.env_id, chat, **dict(_get(env_config, "env_kwargs") or {}))
        self.max_turns = chat.max_turns
        self.prefill = chat.prefill

    def init(self, prompt):
        """The env's own first prompt for the row's seed (the dataset's prompt is the same text)."""
        return [dict(m) for m in self.chat.reset(seed=self.seed)], {"env_id": self.env_id, "seed": self.seed}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        record = self.chat.step(as_reply(action, self.prefill))
        self.turns += 1
        done = self.chat.done
        observations = [] if done else [dict(self.chat.messages[-1])]
        return BaseTextEnvStepOutput(observations=observations, reward=float(record.reward), done=done,
                                     metadata={"success": self.chat.success, "format_ok": record.format_ok,
                                               "actions": list(record.actions)})

    def get_metrics(self) -> dict[str, Any]:
        return {"success": float(self.chat.success), "episode_return": self.chat.episode_return,
                "turns": self.turns}

    def close(self):
        self.chat.close()


def dataset_rows(env_id: str, n: int, start: int = 0, chat: ChatEnvConfig | None = None) -> list[dict]:
    """SkyRL dataset rows: the env's first prompt per seed, ``env_class`` "ragen", ``env_id`` and ``seed``."""
    return [{**row, "env_class": ENV_CLASS} for row in seed_rows(env_id, n, start, chat)]


if ENV_CLASS not in skyrl_gym.envs.registration.registry:
    skyrl_gym.register(id=ENV_CLASS, entry_point=f"{__name__}:RagenTextEnv")
