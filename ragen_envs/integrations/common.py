"""What the adapters share: one dataset row per env seed (the episode's first chat prompt), and the
template text between turns."""

from __future__ import annotations

from ragen_envs.agent import chat_encoding, vision
from ragen_envs.agent.chat_env import ChatEnv, ChatEnvConfig


def seed_rows(env_id: str, n: int, start: int = 0, chat: ChatEnvConfig | None = None,
              max_response_tokens: int | None = None, **env_kwargs) -> list[dict]:
    """Rows ``{"prompt": [system, user messages], "env_id": ..., "seed": s}`` for seeds ``start`` ..
    ``start + n - 1``: the prompt is exactly what ``ChatEnv`` shows at that seed's reset."""
    env = ChatEnv(env_id, chat, max_response_tokens, **env_kwargs)
    try:
        rows = [{"prompt": [dict(m) for m in env.reset(seed=seed)], "env_id": env_id, "seed": seed}
                for seed in range(start, start + n)]
    finally:
        env.close()
    if any(vision.message_images(row["prompt"]) for row in rows):  # a dataset row of these frameworks holds text
        raise ValueError(f"{env_id} shows images; the framework adapters take text envs: play it with "
                         f"ragen's RolloutRunner or Trainer and a vision-language model")
    return rows


def env_ids(tokenizer, reply_ids: list[int], messages: list[dict]) -> list[int]:
    """The tokens between a reply (``reply_ids``, ``messages[-2]``) and the next generation: the end of
    the assistant's turn unless the reply holds it (an EOS it generated), the new user message
    (``messages[-1]``) and the generation prompt, as ``chat_encoding.extend`` appends them."""
    return chat_encoding.extend(tokenizer, [], reply_ids, messages)[len(reply_ids):]


def feedback_text(tokenizer, messages: list[dict], reply_ended_with_eos: bool = True) -> str:
    """``env_ids`` as text, for frameworks that join prompt, reply and env text themselves (OpenRLHF);
    the reply is ``messages[-2]``, ended by the EOS token when the engine stopped there."""
    reply_ids = chat_encoding.tokenize(tokenizer, messages[-2]["content"])
    if reply_ended_with_eos:
        reply_ids.append(tokenizer.eos_token_id)
    return tokenizer.decode(env_ids(tokenizer, reply_ids, messages), skip_special_tokens=False)
