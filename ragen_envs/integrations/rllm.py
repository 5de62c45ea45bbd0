"""rLLM: any registered env as an rLLM ``BaseEnv`` (text observations, one reply per step).

    env = RagenEnv.from_dict({"env_id": "Ragen/Sokoban-v0", "seed": 3})
    observation, info = env.reset()                 # the env's first user message
    observation, reward, done, info = env.step(reply)

rLLM's agent keeps the chat history and formats it; this env parses each reply (``ChatEnv``: the
``<think>/<answer>`` format, the format penalty) and answers with the env's next user message.
``info`` carries ``instructions`` at reset (the system prompt ``ChatEnv`` would show), and
``success``, ``actions`` and ``format_ok`` after each step.

rLLM's agent renders the chat itself, so a reply is read as ``common.as_reply`` says (the prefill before
it, as the runner would have prompted). What the env's reward becomes: each
step's ``reward`` is that turn's reward (env rewards plus the format penalty); they sum to the
episode's return.

Written against ``rllm.environments.base`` (``BaseEnv``: ``reset``, ``step``, ``close``,
``from_dict``, ``is_multithread_safe``). rLLM is not on this machine's package index, so it is the one
adapter still tested against a reading of that interface (tests/integrations/test_integrations.py),
not the real package.
"""

from __future__ import annotations

from typing import Any

from ragen_envs.agent.chat_env import ChatEnv, ChatEnvConfig
from ragen_envs.integrations.common import as_reply

try:
    from rllm.environments.base.base_env import BaseEnv
except ImportError:  # pragma: no cover - depends on the installed packages
    raise ImportError("ragen_envs.integrations.rllm needs rLLM (pip install rllm, or from its repository)") from None


class RagenEnv(BaseEnv):
    def __init__(self, env_id: str, seed: int | None = None, chat: ChatEnvConfig | dict | None = None, **env_kwargs):
        self.chat = ChatEnv(env_id, ChatEnvConfig(**chat) if isinstance(chat, dict) else chat, **env_kwargs)
        self.seed = seed

    def reset(self) -> tuple[str, dict[str, Any]]:
        messages = self.chat.reset(seed=self.seed)
        return messages[-1]["content"], {"instructions": messages[0]["content"], "seed": self.seed}

    def step(self, action: Any) -> tuple[str, float, bool, dict[str, Any]]:
        text = action if isinstance(action, str) else getattr(action, "action", str(action))
        record = self.chat.step(as_reply(text, self.chat.config.prefill))
        observation = "" if self.chat.done else self.chat.messages[-1]["content"]
        return observation, float(record.reward), self.chat.done, {
            "success": self.chat.success, "actions": list(record.actions), "format_ok": record.format_ok}

    def close(self) -> None:
        self.chat.close()

    @staticmethod
    def from_dict(info: dict) -> "RagenEnv":
        info = dict(info)
        return RagenEnv(info.pop("env_id"), info.pop("seed", None), info.pop("chat", None),
                        **info.pop("env_kwargs", {}))

    @staticmethod
    def is_multithread_safe() -> bool:
        return True  # each instance owns its env; nothing is shared
