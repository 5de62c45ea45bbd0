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


def env_ids(tokenizer, reply_ids: list[int], messages: list[dict], prefill: str = "") -> list[int]:
    """The tokens between a reply (``reply_ids``, ``messages[-2]``) and the next generation: the end of
    the assistant's turn unless the reply holds it (an EOS it generated), the new user message
    (``messages[-1]``), the generation prompt and ``prefill`` (``ChatEnvConfig.prefill``: the reply's
    message starts with it, its tokens do not), as ``chat_encoding.extend`` appends them."""
    return chat_encoding.extend(tokenizer, [], reply_ids, messages, prefill)[len(reply_ids):]


def feedback_text(tokenizer, messages: list[dict], reply_ids: list[int], prefill: str = "") -> str:
    """``env_ids`` as text, for frameworks that join prompt, reply and env text themselves (OpenRLHF)."""
    return tokenizer.decode(env_ids(tokenizer, reply_ids, messages, prefill), skip_special_tokens=False)


def prompt_text(tokenizer, messages: list[dict], prefill: str = "") -> str:
    """The first prompt as template text, ending with the generation prompt and ``prefill``."""
    return chat_encoding.render(tokenizer, messages, add_generation_prompt=True) + prefill


def as_reply(text: str, prefill: str) -> str:
    """A reply as this project's runner reads it: the prefill (``ChatEnvConfig.prefill``, ``<think>``)
    followed by the generated text. For frameworks that render the chat themselves, whose prompt cannot
    end with the prefill: a reply that opens with it already (the model wrote it) is taken as it is."""
    return text if not prefill or text.lstrip().startswith(prefill) else prefill + text
