"""Rollout throughput: the grouped runner against a naive one-env-at-a-time loop and against an upper
bound, same model.

Prints generated tokens/s and env turns/s (replies processed by the envs; valid actions among them
are counted as steps: a small model makes few) for:
- naive: each episode played alone, one ``generate`` call per turn (batch of 1);
- grouped, prompts recomputed: ``RolloutRunner``, all unfinished episodes of a turn in one
  ``generate`` call, every turn's prompt run through the model in full;
- grouped: the same with each episode's KV cache kept across turns (the default);
- upper bound: one batched decode of P x G rows after the first turn's prompt, no env, no stop, the
  same tokens per row as all turns together: what this model and machine do at best;
and the same grouped run on vLLM when it is installed (``make test-vllm`` builds .venv-vllm;
run this script with that venv's python, LD_PRELOAD set as in the Makefile).

Then, with an env whose every step takes 50-200 ms (``--env-delay-ms``; as a sandboxed program or a
remote retriever would), the synchronous grouped runner (env steps on P x G threads, but each turn
waits for its slowest env) against ``AsyncRolloutRunner`` (each episode on its own): episodes/s, and
the time the model sat waiting (wall time minus time spent generating). These rows use the
warm-started model on FrozenLakeCoord (``make demo``'s; ``--model`` overrides it): the untrained
model's replies seldom hold a valid action, and a reply without one never reaches the env.

    python benchmarks/speed/rollout_throughput.py [--groups 2 --group-size 4 --max-turns 2 --max-new-tokens 32]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from dataclasses import replace
from pathlib import Path

import gymnasium as gym
import numpy as np

from ragen_envs.agent import ChatEnv, ChatEnvConfig, RolloutConfig, RolloutRunner, SamplingConfig
from ragen_envs.agent import chat_encoding
from ragen_envs.agent.async_rollout import AsyncRolloutRunner
from ragen_envs.agent.backends.base import Generation, Policy
from ragen_envs.registry import ENVIRONMENTS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "studies"))  # findings.py: benchmarks/studies/


def naive(env_id: str, policy, config: RolloutConfig) -> tuple[int, int, int, float]:
    """Play the same P x G episodes one by one; return (generated tokens, turns, env steps, seconds)."""
    tokens = turns = steps = 0
    start = time.perf_counter()
    for group in range(config.n_groups):
        for sample in range(config.group_size):
            env = ChatEnv(env_id, config.chat)
            prompt = policy.encode_chat(env.reset(seed=config.seed + group))
            for turn in range(config.chat.max_turns):
                sampling = SamplingConfig(**{**config.sampling.__dict__, "seed": group * 1000 + sample * 10 + turn})
                gen = policy.generate([prompt], sampling)[0]
                record = env.step(gen.text)
                tokens += len(gen.token_ids)
                turns += 1
                steps += record.env_steps
                if env.done:
                    break
                prompt = chat_encoding.extend(policy.tokenizer, prompt, gen.token_ids, env.messages)
    return tokens, turns, steps, time.perf_counter() - start


def grouped(env_id: str, policy, config: RolloutConfig, reuse_cache: bool = True) -> tuple[int, int, int, float]:
    policy.reuse_cache = reuse_cache
    start = time.perf_counter()
    trajs = RolloutRunner(env_id, policy, config).collect()
    seconds = time.perf_counter() - start
    tokens = sum(len(t.response_ids) for traj in trajs for t in traj.turns)
    turns = sum(traj.num_turns for traj in trajs)
    steps = sum(len(t.actions) for traj in trajs for t in traj.turns)
    return tokens, turns, steps, seconds


def upper_bound(env_id: str, policy, config: RolloutConfig) -> tuple[int, int, int, float]:
    """One batched decode of every episode's first prompt for all turns' tokens at once, no env."""
    prompt = policy.encode_chat(ChatEnv(env_id, config.chat).reset(seed=config.seed))
    rows = config.n_groups * config.group_size
    new = config.chat.max_turns * config.sampling.max_new_tokens
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=new, stop=[], seed=0)
    eos, policy.eos_ids = policy.eos_ids, set()  # every row decodes all its tokens
    try:
        start = time.perf_counter()
        gens = policy.generate([prompt] * rows, sampling)
        seconds = time.perf_counter() - start
    finally:
        policy.eos_ids = eos
    return sum(len(g.token_ids) for g in gens), 0, 0, seconds


class SlowSteps(gym.Wrapper):
    """``env_id`` whose steps each take a uniform ``low_ms``..``high_ms`` (its own random stream)."""

    def __init__(self, env_id: str, low_ms: float, high_ms: float, seed: int = 0):
        super().__init__(gym.make(env_id))
        self.low, self.high = low_ms / 1000, high_ms / 1000
        self.delays = np.random.default_rng(seed)

    def step(self, action):
        time.sleep(self.delays.uniform(self.low, self.high))
        return self.env.step(action)


SLOW_ID = "Bench/SlowSteps-v0"
if SLOW_ID not in gym.registry:
    gym.register(SLOW_ID, entry_point=SlowSteps)


class TimedPolicy:
    """Adds up the time ``policy.generate`` runs (the rest of a rollout the model waits)."""

    def __init__(self, policy):
        self.policy, self.busy = policy, 0.0

    def __getattr__(self, name):
        return getattr(self.policy, name)

    def generate(self, prompts, sampling):
        start = time.perf_counter()
        try:
            return self.policy.generate(prompts, sampling)
        finally:
            self.busy += time.perf_counter() - start


class InstantMoves(Policy):
    """Replies at once with two valid moves (random, seeded by the prompt): the env-bound limit, where
    generation costs nothing and all time is env time."""

    def __init__(self, tokenizer):
        self.tokenizer, self.max_context = tokenizer, 8192

    def generate(self, prompts, sampling):
        out = []
        for prompt in prompts:
            ids = self.prompt_ids(prompt)
            moves = np.random.default_rng(len(ids)).choice(["Up", "Down", "Left", "Right"], 2)
            text = f"<think>go</think><answer>{moves[0]} || {moves[1]}</answer>"
            tokens = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
            out.append(Generation(text, ids, tokens, [-1.0] * len(tokens), "stop"))
        return out

    def score(self, prompt_ids, continuations):
        raise NotImplementedError


def slow_env_rows(env_id: str, policy, config: RolloutConfig, low_ms: float, high_ms: float) -> None:
    """Synchronous against asynchronous rollouts with slow env steps, with the model and with
    instant replies."""
    slow = replace(config, env_kwargs={"env_id": env_id, "low_ms": low_ms, "high_ms": high_ms},
                   env_workers=config.n_groups * config.group_size)
    print(f"\nenv steps taking {low_ms:g}-{high_ms:g} ms: synchronous grouped runner against the asynchronous one")
    print(f"{'run':40s} {'episodes':>8s} {'turns':>6s} {'tokens':>7s} {'seconds':>8s} {'episodes/s':>11s} "
          f"{'generating s':>13s} {'waiting s':>10s} {'vs sync':>8s}")
    for label, replies in (("model", policy), ("instant replies", InstantMoves(policy.tokenizer))):
        runs(label, replies, slow)


def runs(label: str, policy, slow: RolloutConfig) -> None:
    results = []
    for name, runner_class in (("synchronous, threaded envs", RolloutRunner), ("asynchronous", AsyncRolloutRunner)):
        timed = TimedPolicy(policy)
        start = time.perf_counter()
        trajectories = runner_class(SLOW_ID, timed, slow).collect()
        seconds = time.perf_counter() - start
        turns = sum(t.num_turns for t in trajectories)
        tokens = sum(len(turn.response_ids) for t in trajectories for turn in t.turns)
        results.append(len(trajectories) / seconds)
        print(f"{label + ', ' + name:40s} {len(trajectories):8d} {turns:6d} {tokens:7d} {seconds:8.1f} "
              f"{results[-1]:11.3f} {timed.busy:13.1f} "
              f"{seconds - timed.busy:10.1f} {results[-1] / results[0]:7.2f}x", flush=True)


def row(name: str, result, baseline=None) -> None:
    tokens, turns, steps, seconds = result
    line = (f"{name:30s} {tokens:7d} {turns:6d} {steps:6d} {seconds:8.1f} {tokens / seconds:9.1f} "
            f"{turns / seconds:8.2f}")
    if baseline:
        line += f" {tokens / seconds / (baseline[0] / baseline[3]):9.2f}x"
    print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--env", choices=list(ENVIRONMENTS), default=next(iter(ENVIRONMENTS)))
    parser.add_argument("--max-turns", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--model", default=None, help="default: the embedded SmolLM2-135M-Instruct")
    parser.add_argument("--skip-naive", action="store_true", help="leave out the slow one-by-one loop")
    parser.add_argument("--env-delay-ms", type=float, nargs=2, default=(50, 200), metavar=("LOW", "HIGH"),
                        help="the slow env's step time for the synchronous-against-asynchronous rows")
    parser.add_argument("--only", choices=("tokens", "async"), default=None,
                        help="run only the token-throughput rows or only the slow-env rows")
    args = parser.parse_args()
    config = RolloutConfig(n_groups=args.groups, group_size=args.group_size,
                           chat=ChatEnvConfig(max_turns=args.max_turns),
                           sampling=SamplingConfig(temperature=1.0, max_new_tokens=args.max_new_tokens, seed=0))

    from ragen_envs.agent.backends.transformers import TransformersPolicy

    policy = TransformersPolicy(args.model)
    policy.generate([[{"role": "user", "content": "warm up"}]], SamplingConfig(max_new_tokens=2))
    print(f"{args.env}: {args.groups} groups x {args.group_size}, {args.max_turns} turns, "
          f"{args.max_new_tokens} new tokens per turn")
    print(f"{'run':30s} {'tokens':>7s} {'turns':>6s} {'steps':>6s} {'seconds':>8s} {'tokens/s':>9s} "
          f"{'turns/s':>8s} {'tokens/s vs naive':>18s}")
    if args.only != "async":
        token_rows(args, policy, config)
    if args.only != "tokens":
        import findings

        warm = TransformersPolicy(findings.warm_start_model()) if args.model is None else policy
        slow_env_rows(findings.WARM_ENV if args.model is None else args.env, warm, config, *args.env_delay_ms)


def token_rows(args, policy, config: RolloutConfig) -> None:
    base = None
    if not args.skip_naive:
        base = naive(args.env, policy, config)
        row("naive loop, transformers", base)
    row("grouped, prompts recomputed", grouped(args.env, policy, config, reuse_cache=False), base)
    row("grouped, KV cache kept", grouped(args.env, policy, config), base)
    row("upper bound: one batched decode", upper_bound(args.env, policy, config), base)
    if importlib.util.find_spec("vllm") is not None:
        from ragen_envs.agent.backends.vllm import VLLMPolicy

        fast = VLLMPolicy(args.model, max_model_len=4096)
        fast.generate([[{"role": "user", "content": "warm up"}]], SamplingConfig(max_new_tokens=2))
        row("grouped runner, vLLM", grouped(args.env, fast, config), base)
    else:
        print("(vLLM not installed: no vLLM row)")


if __name__ == "__main__":
    main()
