"""AReaL: any registered env as an AReaL ``RolloutWorkflow``.

    from ragen_envs.integrations.areal import RagenWorkflow, dataset_rows
    workflow = RagenWorkflow(config.gconfig, tokenizer)        # AReaL's GenerationHyperparameters
    batch = rollout_engine.rollout_batch(dataset_rows("Ragen/Sokoban-v0", 8), workflow=workflow)

Each data row names its episode (``env_id``, ``seed``; ``messages`` is its first prompt, what AReaL's
datasets carry). ``arun_episode`` plays it through ``ChatEnv`` against AReaL's inference engine
(``engine.agenerate(ModelRequest)``) as this project's ``RolloutRunner`` plays it: the prompt ends with
the reply's prefill (``<think>``, ``ChatEnvConfig.prefill``), each reply is read as the prefill plus
the generated text, and the env's next message is appended in token space (``chat_encoding.extend``),
followed by the prefill again. It returns AReaL's tensor trajectory, each ``[1, seqlen]``, the format
of AReaL's own ``MultiTurnWorkflow`` that ``check_trajectory_format`` validates:

- ``input_ids`` the whole episode; ``loss_mask`` 1 on reply tokens, 0 on the prompt and env tokens;
- ``logprobs`` the engine's (0.0 elsewhere), ``versions`` the policy version of each reply token (-1
  elsewhere), ``attention_mask`` all ones;
- ``rewards`` (``[1]``): the episode's return (format penalties included), the one reward AReaL's
  PPO/GRPO actor gives the sequence.

``stats_tracker`` gets ``reward``, ``success`` and ``num_turns`` (the model's replies) under the
rollout's scope. The episode stops at ``gconfig.max_tokens`` (prompt and generated tokens).

Tested against AReaL 1.0.4 (``make test-frameworks``; installed with ``--no-deps``: it pins torch
below this project's 2.13): its ``WorkflowExecutor`` with ``check_trajectory_format`` on, only the
inference engine scripted.
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

import torch

from ragen_envs.agent import chat_encoding
from ragen_envs.agent.chat_env import ChatEnv, ChatEnvConfig
from ragen_envs.integrations.common import play_in_tokens, seed_rows

try:
    from areal import workflow_context
    from areal.api import ModelRequest, RolloutWorkflow
    from areal.utils import stats_tracker
except ImportError:  # pragma: no cover - depends on the installed packages
    raise ImportError("ragen_envs.integrations.areal needs AReaL: pip install areal (--no-deps beside a newer "
                      "torch than it pins)") from None

__all__ = ["RagenWorkflow", "dataset_rows"]


class RagenWorkflow(RolloutWorkflow):
    def __init__(self, gconfig, tokenizer, chat: ChatEnvConfig | None = None, env_kwargs: dict | None = None):
        self.gconfig = gconfig.new_with_stop_and_pad_token_ids(tokenizer)  # stop at EOS, as AReaL's workflows do
        self.tokenizer = tokenizer
        self.chat_config = chat or ChatEnvConfig()
        self.env_kwargs = dict(env_kwargs or {})

    async def arun_episode(self, engine, data: dict[str, Any]) -> dict[str, torch.Tensor]:
        tok = self.tokenizer
        chat = ChatEnv(data["env_id"], self.chat_config, **{**self.env_kwargs, **data.get("env_kwargs", {})})

        async def generate(ids):
            resp = await engine.agenerate(ModelRequest(rid=uuid4().hex, input_ids=ids,
                                                       gconfig=self.gconfig.new(n_samples=1), tokenizer=tok))
            return resp.output_tokens, resp.output_logprobs, resp.output_versions

        try:
            prompt = chat_encoding.encode_chat(tok, chat.reset(seed=data.get("seed")))
            prompt += chat_encoding.tokenize(tok, self.chat_config.prefill)
            # AReaL's budget, gconfig.max_tokens, counts the whole sequence
            played = await play_in_tokens(chat, tok, prompt, int(self.gconfig.max_tokens), generate)
        finally:
            chat.close()
        stats_tracker.get(workflow_context.stat_scope()).scalar(
            reward=chat.episode_return, success=float(chat.success), num_turns=len(chat.turns))
        before = len(prompt)  # the prompt's tokens: no loss, no log-probability, no version
        trajectory = dict(input_ids=torch.tensor(played.ids, dtype=torch.int32),
                          logprobs=torch.tensor([0.0] * before + played.logprobs, dtype=torch.float32),
                          loss_mask=torch.tensor([0] * before + played.mask, dtype=torch.int32),
                          versions=torch.tensor([-1] * before + played.versions, dtype=torch.int32),
                          rewards=torch.tensor(chat.episode_return, dtype=torch.float32),
                          attention_mask=torch.ones(len(played.ids), dtype=torch.bool))
        return {k: v.unsqueeze(0) for k, v in trajectory.items()}


def dataset_rows(env_id: str, n: int, start: int = 0, chat: ChatEnvConfig | None = None) -> list[dict]:
    """AReaL data rows: ``messages`` (the first chat prompt), ``env_id`` and ``seed``."""
    return [{"messages": row["prompt"], "env_id": env_id, "seed": row["seed"]}
            for row in seed_rows(env_id, n, start, chat)]
