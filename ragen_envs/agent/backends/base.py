"""The policy interface every backend implements, and what it returns.

``generate(prompts, sampling)`` takes chat message lists (encoded with the backend's chat template)
or token-id lists (used as they are: the rollout runner builds multi-turn prompts in token space,
see ``ragen_envs.agent.chat_encoding``) and returns one ``Generation`` per prompt.
``score(prompt_ids, continuations)`` teacher-forces each continuation after the shared prompt and
returns per-token log-probabilities; the prompt's prefix is computed once for all continuations.

Images (``vision``): a chat prompt carries its own, in its messages; token ids carry theirs as a
``TokenPrompt`` (ids with ``images``, in the order of their placeholders). A backend that takes images
only inside chat messages (an OpenAI-compatible server) says so with ``chat_images``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ragen_envs.agent import vision
from ragen_envs.agent.chat_encoding import Message, encode_chat, tokenize
from ragen_envs.base import check_positive_int, declared

Images = list[np.ndarray]  # one prompt's images
# The transformers backend's memory: sequences per forward pass, and the megabytes of KV cache it keeps from
# one turn to the next (beyond them a reply's cache is dropped and its next prompt runs in full). None: no
# bound, because a bound measured worse: at 256 MB a 4 x 4 Sokoban eval peaked at 2.09x the unbounded run's
# memory (the full prompts' prefill costs more than the caches it saves; benchmarks/speed/eval_memory.py).
# Declared here, where PolicyConfig and TransformersPolicy both read them without torch.
FORWARD_BATCH = 32
KEPT_CACHE_MB = None


class TokenPrompt(list):
    """Token ids that carry the images their placeholders stand for (``images``, in order)."""

    def __init__(self, ids=(), images: Images = ()):
        super().__init__(ids)
        self.images = list(images)


Prompt = list[Message] | list[int]  # a token-id prompt may be a TokenPrompt


@dataclass
class SamplingConfig:
    temperature: float = declared(1.0, help="0 = greedy")
    top_p: float = declared(1.0, help="nucleus sampling mass (1 = off)")
    top_k: int = declared(0, help="keep the k most likely tokens (0 = off)")
    max_new_tokens: int = declared(128, help="generated tokens per turn at most")
    stop: list[str] = declared(factory=lambda: ["</answer>"], help="kept in the output text")
    seed: int | None = declared(None, flag="sampling-seed", help="sampling seed; each prompt of a batch draws its "
                                "own stream from it (None: from the rollout seed)")

    def __post_init__(self):
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        check_positive_int("max_new_tokens", self.max_new_tokens)


@dataclass
class Generation:
    text: str  # the reply, special tokens removed, stop string kept
    prompt_ids: list[int]
    token_ids: list[int]  # generated ids, the end-of-turn token included when one was generated
    # log p(token) under the model at the sampling temperature (1 when greedy), before top-k/top-p:
    # what a trainer's teacher forcing at that temperature reproduces.
    logprobs: list[float]
    finish_reason: str  # "stop" (end-of-turn token or stop string) or "length"
    # entropy (nats) of each step's sampling distribution, temperature applied, before top-k/top-p;
    # None where the backend does not see the whole distribution (vLLM, OpenAI servers)
    entropies: list[float] | None = None


class Policy(ABC):
    """A language model that writes replies and scores continuations."""

    #: a Hugging Face tokenizer with a chat template
    tokenizer: Any
    #: the model's context window in tokens
    max_context: int
    #: a vision-language model's processor (tokenizer + image processor); None: text only
    processor: Any = None
    #: images reach the model only inside chat messages (token-id prompts cannot carry them)
    chat_images: bool = False

    @abstractmethod
    def generate(self, prompts: Sequence[Prompt], sampling: SamplingConfig) -> list[Generation]:
        ...

    @abstractmethod
    def score(self, prompt_ids: list[int], continuations: Sequence[list[int]]) -> list[np.ndarray]:
        """``prompt_ids`` may be a ``TokenPrompt``: the continuations are scored after its images too."""

    def reset_cache(self) -> None:
        """Drop whatever a backend keeps from one ``generate`` call to the next (the transformers
        backend's per-episode KV caches): the weights may change before the next call."""

    @property
    def encoder(self):
        """What turns chat text into ids: the processor of a vision-language model, else the tokenizer."""
        return self.processor if self.processor is not None else self.tokenizer

    def encode_chat(self, messages: list[Message]) -> list[int]:
        """Token ids of a conversation, ending with the assistant's generation prompt."""
        self.prompt_images(messages)  # a clear error where images meet a text-only model
        return encode_chat(self.encoder, messages)

    def prompt_images(self, prompt: Prompt) -> Images:
        """A prompt's images (a chat prompt's, or a ``TokenPrompt``'s); a clear error when the model
        cannot see them."""
        images = vision.message_images(prompt) if is_chat(prompt) else list(getattr(prompt, "images", ()))
        if images and self.processor is None:
            raise ValueError("the prompt shows images, but there is no image processor here to encode them: use a "
                             "vision-language model (a folder with a processor; the openai backend: --tokenizer "
                             "naming one), or a text env")
        return images

    def prompt_ids(self, prompt: Prompt) -> list[int]:
        """A prompt's token ids; a chat ending with an assistant message is continued from its text."""
        if is_chat(prompt) and prompt[-1]["role"] == "assistant":
            return self.encode_chat(prompt[:-1]) + tokenize(self.encoder, prompt[-1]["content"])
        if is_chat(prompt):
            return self.encode_chat(prompt)
        return [int(t) for t in prompt]


def is_chat(prompt: Prompt) -> bool:
    """A list of chat messages, as opposed to a list of token ids."""
    return bool(prompt) and isinstance(prompt[0], dict)
