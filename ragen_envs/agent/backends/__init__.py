"""Policy backends behind one interface (``Policy``): transformers, vLLM, OpenAI-compatible HTTP."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ragen_envs.base import check_choices, check_positive_int

from ragen_envs.agent.backends.base import Generation, Policy, SamplingConfig

BACKENDS = ("transformers", "vllm", "openai")


@dataclass
class PolicyConfig:
    backend: Literal[BACKENDS] = "transformers"  # transformers (CPU default), vllm, or openai (any OpenAI server)
    model: str | None = None  # path or hub id (default: the embedded SmolLM2-135M-Instruct); openai: served name
    base_url: str = "http://127.0.0.1:8000/v1"  # openai backend: the server's URL
    tokenizer: str | None = None  # openai backend: tokenizer path or id (chat template and token ids)
    device: str | None = None  # transformers backend: cpu, cuda, ... (default: cuda when available)
    # torch's CPU threads; None: one per core no other process is busy on (agent/threads.py: torch's own
    # default of one per core slows several-fold beside another busy process)
    threads: int | None = None

    def __post_init__(self):
        check_choices(self)
        if self.threads is not None:
            check_positive_int("--threads", self.threads)
        if self.backend == "openai" and not self.model:
            raise ValueError("--backend openai needs --model, the served model's name")
        if self.backend == "openai" and not self.tokenizer:
            raise ValueError("--backend openai needs --tokenizer, the served model's tokenizer (a folder or "
                             "hub id): prompts are built and scored in its token ids")

    def make(self) -> Policy:
        if self.backend == "openai":
            return make_policy("openai", self.model, base_url=self.base_url, tokenizer=self.tokenizer)
        if self.backend == "transformers":
            return make_policy("transformers", self.model, device=self.device)
        return make_policy(self.backend, self.model)


def make_policy(backend: str, model=None, **kwargs) -> Policy:
    """Build a policy by backend name; imports only what that backend needs."""
    if backend == "transformers":
        from ragen_envs.agent.backends.transformers import TransformersPolicy

        return TransformersPolicy(model, **kwargs)
    if backend == "vllm":
        from ragen_envs.agent.backends.vllm import VLLMPolicy

        return VLLMPolicy(model, **kwargs)
    if backend == "openai":
        from ragen_envs.agent.backends.openai import OpenAIPolicy

        if model is None:
            raise ValueError("the openai backend needs --model (the served model's name)")
        return OpenAIPolicy(model=str(model), **kwargs)
    raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")


__all__ = ["BACKENDS", "Generation", "Policy", "PolicyConfig", "SamplingConfig", "make_policy"]
