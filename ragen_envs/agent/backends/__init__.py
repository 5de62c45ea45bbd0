"""Policy backends behind one interface (``Policy``): transformers, vLLM, OpenAI-compatible HTTP."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Literal

from ragen_envs.base import bounded, check_bounds, check_choices, check_positive_int, declared

from ragen_envs.agent.backends.base import FORWARD_BATCH, KEPT_CACHE_MB, Generation, Policy, SamplingConfig

BACKENDS = ("transformers", "vllm", "openai")


@dataclass
class VLLMConfig:
    """vLLM's engine settings (``--backend vllm``); under torchrun every rank builds its own engine with them."""

    gpu_memory_utilization: float = bounded(0.3, above=0, max=1, flag="vllm_gpu_memory_utilization",
                                            help="share of the GPU's memory the engine takes for its weights and KV "
                                            "cache: vLLM's own default (0.9) leaves the trainer in the same process "
                                            "too little; 0.3 is TRL's colocated engine's (RAGEN's base.yaml gives "
                                            "verl 0.5)")
    tensor_parallel_size: int = bounded(1, min=1, flag="vllm_tensor_parallel_size", help="GPUs one engine spans; "
                                        "above 1 in a single process only (under torchrun each rank rolls out its "
                                        "own prompts)")
    max_model_len: int = bounded(4096, min=1, flag="vllm_max_model_len", help="the context (prompt + reply tokens) "
                                 "the engine reserves KV cache for; longer prompts are refused by it")
    sleep_level: int = bounded(1, min=0, max=2, flag="vllm_sleep_level", help="while the trainer updates (CUDA "
                               "only, vLLM's sleep mode): 1 moves the engine's weights to CPU memory and frees its "
                               "KV cache, 2 frees both (the new weights are loaded right after), 0 keeps it awake")
    engine_args: dict = declared(factory=dict, flag="vllm_engine_args", help="more of vllm.LLM's engine arguments, "
                                 "as JSON: '{\"enforce_eager\": true, \"max_num_seqs\": 128}'")

    def __post_init__(self):
        for f in fields(self):  # an int where vLLM wants one: 0.5 GPUs or a 4096.5-token context is a typo
            if f.type in ("int", int) and (not isinstance(getattr(self, f.name), int)
                                           or isinstance(getattr(self, f.name), bool)):
                raise ValueError(f"{f.name} must be an integer, got {getattr(self, f.name)!r}")
        check_bounds(self)
        # the engine arguments these settings and the backend own: one place each
        owned = {f.name: f.metadata["flag"] for f in fields(self) if f.name not in ("sleep_level", "engine_args")}
        owned.update(enable_sleep_mode="vllm_sleep_level", model="model")
        for key in self.engine_args:
            if key in owned:
                flag = "--" + owned[key].replace("_", "-")
                raise ValueError(f"vllm engine_args: give {key!r} with {flag}, not in the JSON")
        if self.tensor_parallel_size > 1 and int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise ValueError(f"vllm tensor_parallel_size {self.tensor_parallel_size} under torchrun: each rank rolls "
                             "out its own prompt groups on an engine of its own, which cannot span other ranks' GPUs; "
                             "use 1 there, or one process with the engine over several GPUs")


@dataclass
class PolicyConfig:
    backend: Literal[BACKENDS] = declared("transformers", help="transformers (CPU default), vllm, or openai (any "
                                          "OpenAI server)")
    model: str | None = declared(None, help="path or hub id (default: the embedded SmolLM2-135M-Instruct); openai: "
                                 "served name")
    base_url: str = declared("http://127.0.0.1:8000/v1", help="openai backend: the server's URL")
    tokenizer: str | None = declared(None, help="openai backend: tokenizer path or id (chat template and token ids)")
    device: str | None = declared(None, help="transformers backend: cpu, cuda, ... (default: cuda when available)")
    threads: int | None = declared(None, help="torch's CPU threads; None: one per core no other process is busy on "
                                   "(agent/threads.py: torch's own default of one per core slows several-fold beside "
                                   "another busy process)")
    batch_size: int = bounded(FORWARD_BATCH, min=1, flag="forward_batch", help="transformers backend: most "
                              "sequences one forward pass runs; fewer take less memory, a little slower")
    kept_cache_mb: float | None = bounded(KEPT_CACHE_MB, min=0, help="transformers backend: the most MB of KV cache "
                                          "kept from one turn to the next (the last turn's and the new one's are "
                                          "both held while a turn runs: twice this); a reply over it has its next "
                                          "prompt run in full, whose prefill may take more memory than the cache "
                                          "did; None: no bound")
    vllm: VLLMConfig = declared(factory=VLLMConfig, help="vLLM's engine (--backend vllm)")

    def __post_init__(self):
        check_choices(self)
        check_bounds(self)
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
            return make_policy("transformers", self.model, device=self.device, batch_size=self.batch_size,
                               kept_cache_mb=self.kept_cache_mb)
        return make_policy(self.backend, self.model, config=self.vllm)


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


__all__ = ["BACKENDS", "Generation", "Policy", "PolicyConfig", "SamplingConfig", "VLLMConfig", "make_policy"]
