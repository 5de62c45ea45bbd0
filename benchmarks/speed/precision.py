"""fp32 against bf16 on this machine: generation, and a training step with bf16 autocast.

The backends and the trainer pick fp32 on CPUs without native bf16 ("auto"); this measures why.
Prints seconds and the bf16/fp32 time ratio for:
- generating 8 x 32 tokens after Sokoban prompts (transformers backend, weights in each dtype);
- one forward + backward of the transformer body over 4 of those prompts (fp32 weights, with and
  without bf16 autocast; the LM head is left out to keep the run short).

    python benchmarks/speed/precision.py
"""

from __future__ import annotations

import time
from contextlib import nullcontext

import torch

from ragen_envs.agent import ChatEnv, SamplingConfig
from ragen_envs.agent.backends.transformers import TransformersPolicy
from ragen_envs.registry import env_for


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    prompts = [ChatEnv(env_for("default")).reset(seed=i) for i in range(8)]
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=32, seed=0, stop=[])
    gen = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        policy = TransformersPolicy(dtype=dtype, device="cpu")
        policy.generate(prompts[:1], SamplingConfig(max_new_tokens=2))  # warm up
        gen[name] = timed(lambda: policy.generate(prompts, sampling))
    model = TransformersPolicy(dtype=torch.float32, device="cpu")
    ids = torch.tensor([model.encode_chat(prompts[0])] * 4)
    train = {}
    for name, context in (("fp32", nullcontext), ("bf16", lambda: torch.autocast("cpu", dtype=torch.bfloat16))):
        def step():
            with context():
                loss = model.model.base_model(input_ids=ids).last_hidden_state.float().pow(2).mean()
            loss.backward()
        step()  # warm up
        train[name] = timed(step)
    print(f"{'work':44s} {'fp32 s':>8s} {'bf16 s':>8s} {'bf16/fp32':>10s}")
    print(f"{'generate 8 x 32 tokens (transformers)':44s} {gen['fp32']:8.1f} {gen['bf16']:8.1f} "
          f"{gen['bf16'] / gen['fp32']:9.2f}x")
    print(f"{f'forward+backward 4 x {ids.shape[1]} tokens':44s} {train['fp32']:8.1f} {train['bf16']:8.1f} "
          f"{train['bf16'] / train['fp32']:9.2f}x")


if __name__ == "__main__":
    main()
