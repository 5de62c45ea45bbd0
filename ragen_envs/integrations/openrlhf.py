"""OpenRLHF: any registered env as an agent for OpenRLHF's multi-turn agent executor.

OpenRLHF loads ``AgentExecutor`` from the file given to ``--agent_func_path``; that file is:

    from ragen_envs.integrations.openrlhf import agent_executor
    AgentExecutor = agent_executor("Qwen/Qwen2.5-0.5B-Instruct")   # the policy's tokenizer

Its dataset holds the envs' first prompts with the chat template applied, and the label of each row
names its episode: ``{"env_id": ..., "seed": ...}`` as JSON (``dataset_rows`` writes both). For each
prompt OpenRLHF makes an ``AgentInstance``: ``reset`` starts that episode, ``step`` plays the model's
reply through ``ChatEnv`` and returns the turn's reward and, as ``environment_feedback``, the template
text of the env's next message up to the next generation, which OpenRLHF appends to the sequence (its
tokens are masked out of the loss). Replies are taken to end with the EOS token, as vLLM stops them.

Written against ``openrlhf.utils.agent`` (``AgentInstanceBase``, ``MultiTurnAgentExecutor``); OpenRLHF
needs DeepSpeed, Ray and vLLM on GPUs, so the tests drive it through a faithful reading of that file.
"""

from __future__ import annotations

import json

from ragen_envs.agent.chat_env import ChatEnv, ChatEnvConfig
from ragen_envs.integrations.common import feedback_text, seed_rows

try:
    import torch
    from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor
except ImportError:  # pragma: no cover - depends on the installed packages
    raise ImportError("ragen_envs.integrations.openrlhf needs OpenRLHF: pip install openrlhf") from None


def agent_executor(tokenizer, chat: ChatEnvConfig | None = None, **env_kwargs) -> type:
    """The ``AgentExecutor`` class OpenRLHF loads; ``tokenizer`` is the policy's (a name, path or object)."""
    if isinstance(tokenizer, str):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tokenizer)

    class AgentInstance(AgentInstanceBase):
        def __init__(self, *args, **kwargs):
            self.chat: ChatEnv | None = None

        async def reset(self, states: dict, **kwargs) -> dict:
            episode = json.loads(states["label"]) if isinstance(states["label"], str) else dict(states["label"])
            self.chat = ChatEnv(episode["env_id"], chat, **env_kwargs)
            self.chat.reset(seed=episode["seed"])
            return {"observation": states["observation"]}

        async def step(self, states: dict, **kwargs) -> dict:
            record = self.chat.step(states["action_text"])
            done = self.chat.done
            feedback = "" if done else feedback_text(tokenizer, self.chat.messages)
            return {"rewards": torch.tensor(record.reward), "scores": torch.tensor(self.chat.episode_return),
                    "environment_feedback": feedback, "done": done, "sampling_params": states.get("sampling_params"),
                    "extra_logs": {"success": torch.tensor(float(self.chat.success))}}

    class AgentExecutor(MultiTurnAgentExecutor):
        def __init__(self):
            super().__init__(AgentInstance)

    return AgentExecutor


def dataset_rows(env_id: str, n: int, tokenizer, start: int = 0, chat: ChatEnvConfig | None = None) -> list[dict]:
    """Rows ``{"prompt": first prompt as template text, "label": '{"env_id": ..., "seed": ...}'}``."""
    return [{"prompt": tokenizer.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True),
             "label": json.dumps({"env_id": row["env_id"], "seed": row["seed"]})}
            for row in seed_rows(env_id, n, start, chat)]
