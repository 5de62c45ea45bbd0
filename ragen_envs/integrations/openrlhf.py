"""OpenRLHF: any registered env as an agent for OpenRLHF's multi-turn agent executor.

OpenRLHF loads ``AgentExecutor`` from the file given to ``--agent_func_path``; that file is:

    from ragen_envs.integrations.openrlhf import agent_executor
    AgentExecutor = agent_executor("Qwen/Qwen2.5-0.5B-Instruct")   # the policy's tokenizer

Its dataset holds the envs' first prompts as template text and the label of each row names its
episode: ``{"env_id": ..., "seed": ...}`` as JSON (``dataset_rows`` writes both). For each prompt
OpenRLHF's ``MultiTurnAgentExecutor`` makes an ``AgentInstance``: ``reset`` starts that episode,
``step`` plays the model's reply through ``ChatEnv`` and returns the env's next message as
``environment_feedback``, the template text up to the next generation, which OpenRLHF appends to the
sequence outside the action ranges (no loss on it, log-prob 0.0). As this project's runner does, each
prompt ends with the reply's prefill (``<think>``, ``ChatEnvConfig.prefill``: the first prompt and
every feedback) and a reply is read as the prefill plus the generated text. Replies are taken to end
with the EOS token, as vLLM stops them (a reply cut by max_tokens ends the sequence anyway).

What the env's reward becomes: ``rewards`` each turn is the turn's reward, which OpenRLHF sums into
the sample's ``reward`` (the training reward: the episode's return, format penalties included);
``scores`` is the episode's success (1.0 or 0.0), the binary score OpenRLHF's dynamic filtering reads;
``extra_logs`` holds ``success`` and ``episode_return``.

Tested against OpenRLHF 0.11.2 (``make test-frameworks``): its ``--agent_func_path`` loader and
``MultiTurnAgentExecutor``, with only the engine scripted (vLLM stubbed to import the loader).
"""

from __future__ import annotations

import json

from ragen_envs.agent import chat_encoding
from ragen_envs.agent.chat_env import ChatEnv, ChatEnvConfig
from ragen_envs.integrations.common import feedback_text, prompt_text, seed_rows

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
    config = chat or ChatEnvConfig()

    class AgentInstance(AgentInstanceBase):
        def __init__(self, *args, **kwargs):
            self.chat: ChatEnv | None = None

        async def reset(self, states: dict, **kwargs) -> dict:
            episode = json.loads(states["label"]) if isinstance(states["label"], str) else dict(states["label"])
            self.chat = ChatEnv(episode["env_id"], config, **env_kwargs)
            self.chat.reset(seed=episode["seed"])
            return {"observation": states["observation"]}

        async def step(self, states: dict, **kwargs) -> dict:
            prefill, text = config.prefill, states["action_text"]
            record = self.chat.step(prefill + text)
            done = self.chat.done
            reply_ids = chat_encoding.tokenize(tokenizer, text) + [tokenizer.eos_token_id]
            feedback = "" if done else feedback_text(tokenizer, self.chat.messages, reply_ids, prefill)
            return {"rewards": torch.tensor(float(record.reward)), "scores": torch.tensor(float(self.chat.success)),
                    "environment_feedback": feedback, "done": done, "sampling_params": states.get("sampling_params"),
                    "extra_logs": {"success": torch.tensor(float(self.chat.success)),
                                   "episode_return": torch.tensor(float(self.chat.episode_return))}}

    class AgentExecutor(MultiTurnAgentExecutor):
        def __init__(self):
            super().__init__(AgentInstance)

    return AgentExecutor


def dataset_rows(env_id: str, n: int, tokenizer, start: int = 0, chat: ChatEnvConfig | None = None) -> list[dict]:
    """Rows ``{"prompt": first prompt as template text, prefill included, "label": '{"env_id": ..., "seed": ...}'}``."""
    prefill = (chat or ChatEnvConfig()).prefill
    return [{"prompt": prompt_text(tokenizer, row["prompt"], prefill),
             "label": json.dumps({"env_id": row["env_id"], "seed": row["seed"]})}
            for row in seed_rows(env_id, n, start, chat)]
