"""verl: any registered env as a verl agent loop (``AgentLoopBase``), registered as ``"ragen_agent"``.

In verl's config, ``actor_rollout_ref.rollout.agent.agent_loop_config_path`` lists this class (or
import this module so ``@register`` runs), and each dataset row sets ``agent_name: ragen_agent`` and
names its episode in ``extra_info``: ``{"env_id": ..., "seed": ...}`` (``dataset_rows`` writes them).

``run`` plays the episode through ``ChatEnv`` against verl's LLM server (``LLMServerClient.generate``),
as this project's ``RolloutRunner`` plays it: the prompt ends with the reply's prefill (``<think>``,
``ChatEnvConfig.prefill``), each reply is read as the prefill plus the generated text, and the env's
next message is appended in token space (``chat_encoding.extend``), followed by the prefill again. So

- ``response_ids`` holds replies and env messages, ``response_mask`` 1 on reply tokens and 0 on env
  tokens (the prefills included), ``response_logprobs`` the server's log-probabilities (0.0 on env tokens);
- ``reward_score`` is the episode's return (format penalties included); verl writes it into
  ``rm_scores`` at the last response token, the only reward the episode gets;
- ``num_turns`` counts messages as verl's own loops do: user and assistant, not the system prompt;
- ``extra_fields["success"]`` the outcome.

Generation stops at ``rollout.response_length`` tokens; a first prompt over ``rollout.prompt_length``
is cut from the left, as verl cuts its own. Tested against verl 0.9.1 (``make test-frameworks``):
its ``RLHFDataset``, ``collate_fn`` and ``AgentLoopWorker``, with only the LLM server scripted.
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from ragen_envs.agent import chat_encoding
from ragen_envs.agent.chat_env import ChatEnv, ChatEnvConfig
from ragen_envs.integrations.common import play_in_tokens, seed_rows

try:
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register
except ImportError:  # pragma: no cover - depends on the installed packages
    raise ImportError("ragen_envs.integrations.verl needs verl: pip install verl") from None


@register("ragen_agent")
class RagenAgentLoop(AgentLoopBase):
    chat_config = ChatEnvConfig()  # turns, format, penalty and prefill; set a subclass's to change them

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        episode = dict(kwargs.get("extra_info") or {})
        chat = ChatEnv(episode["env_id"], self.chat_config, **episode.get("env_kwargs", {}))

        async def generate(ids):
            output = await self.server_manager.generate(uuid4().hex, prompt_ids=ids, sampling_params=sampling_params)
            return output.token_ids, output.log_probs, None

        try:
            prompt_ids = self._cap_text_prompt_length(
                chat_encoding.encode_chat(self.tokenizer, chat.reset(seed=episode.get("seed")))
                + chat_encoding.tokenize(self.tokenizer, self.chat_config.prefill))
            # verl's budget counts response tokens (rollout.response_length), the env's included
            played = await play_in_tokens(chat, self.tokenizer, prompt_ids,
                                          len(prompt_ids) + int(self.rollout_config.response_length), generate)
        finally:
            chat.close()
        return AgentLoopOutput(prompt_ids=prompt_ids, response_ids=played.ids[len(prompt_ids):],
                               response_mask=played.mask, response_logprobs=played.logprobs,
                               reward_score=chat.episode_return,
                               num_turns=sum(m["role"] != "system" for m in chat.messages),
                               metrics=AgentLoopMetrics(), extra_fields={"success": chat.success})


def dataset_rows(env_id: str, n: int, start: int = 0, chat: ChatEnvConfig | None = None) -> list[dict]:
    """verl dataset rows: ``prompt`` (the first chat prompt), ``agent_name`` and ``extra_info``."""
    return [{"prompt": row["prompt"], "agent_name": "ragen_agent", "data_source": env_id,
             "extra_info": {"env_id": env_id, "seed": row["seed"]}} for row in seed_rows(env_id, n, start, chat)]
