"""Policy backends behind one interface (``Policy``): transformers, vLLM, OpenAI-compatible HTTP."""

from __future__ import annotations

from ragen_envs.agent.backends.base import Generation, Policy, SamplingConfig

BACKENDS = ("transformers", "vllm", "openai")


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


__all__ = ["BACKENDS", "Generation", "Policy", "SamplingConfig", "make_policy"]
