"""What the adapters share: one dataset row per env seed (the episode's first chat prompt), the
template text between turns, and the episode played in token space against a framework's server.

The reply's prefill (``ChatEnvConfig.prefill``, ``<think>``), as this project's ``RolloutRunner`` uses it:
where an adapter builds the prompt (verl, AReaL, OpenRLHF, TRL), each prompt ends with the prefill and a
reply is read as the prefill plus the generated text; where the framework renders the chat itself (SkyRL,
GEM, rLLM, ART), the prompt cannot end with it, so a reply is read as the prefill plus the reply unless the
reply opens with the prefill already (``as_reply``)."""

from __future__ import annotations

from dataclasses import dataclass, field

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


@dataclass
class TokenEpisode:
    """An episode as one token sequence: the prompt, then replies and the env's messages between them."""
    ids: list[int]
    prompt_length: int
    mask: list[int] = field(default_factory=list)  # per token after the prompt: 1 generated, 0 the env's
    logprobs: list[float] = field(default_factory=list)  # the server's on generated tokens, 0.0 on the env's
    versions: list[int] = field(default_factory=list)  # the policy version of generated tokens, -1 on the env's


async def play_in_tokens(chat: ChatEnv, tokenizer, prompt_ids: list[int], limit: int, generate) -> TokenEpisode:
    """Play ``chat``'s episode (reset already, its first prompt ``prompt_ids``, ending with the prefill) as
    this project's ``RolloutRunner`` plays it: each reply is read as the prefill plus the generated text,
    and the env's next message is appended in token space (``env_ids``) after it. ``generate(ids)`` is the
    framework's server: it returns the reply's token ids, their log-probabilities and policy versions (None:
    not reported). The sequence stops at ``limit`` tokens, the prompt's included, a reply cut there."""
    prefill = chat.config.prefill
    episode = TokenEpisode(list(prompt_ids), len(prompt_ids))
    ids = episode.ids
    while not chat.done and len(ids) < limit:
        reply, logprobs, versions = await generate(list(ids))
        reply = list(reply)[:limit - len(ids)]
        chat.step(prefill + tokenizer.decode(reply, skip_special_tokens=True))
        ids += reply
        episode.mask += [1] * len(reply)
        episode.logprobs += list(logprobs or [0.0] * len(reply))[:len(reply)]
        episode.versions += list(versions or [-1] * len(reply))[:len(reply)]
        if chat.done or len(ids) >= limit:
            break
        env = env_ids(tokenizer, reply, chat.messages, prefill)[:limit - len(ids)]
        ids += env
        episode.mask += [0] * len(env)
        episode.logprobs += [0.0] * len(env)
        episode.versions += [-1] * len(env)
    return episode
