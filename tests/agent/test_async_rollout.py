"""The asynchronous runner: the synchronous runner's trajectories for a deterministic policy, episodes
that generate while others wait on their envs, and many requests in flight to an OpenAI server."""

import threading
import time
import zlib
from dataclasses import replace

import gymnasium as gym
import pytest

from ragen_envs.agent import ChatEnvConfig, RolloutConfig, RolloutRunner, SamplingConfig
from ragen_envs.agent.async_rollout import AsyncRolloutRunner, RequestBatcher
from ragen_envs.agent.backends.base import Generation, Policy
from tests.agent.test_backends import COMPLETION, FakeServer, _client
from conftest import DEFAULT, SMOKE

REPLIES = ["<think>down</think><answer>Down</answer>", "<think>r</think><answer>Right || Down</answer>",
           "<think>l</think><answer>Left</answer>", "no format at all", "<think>u</think><answer>Up</answer>"]


class PromptKeyed(Policy):
    """Deterministic: the reply is a function of the prompt's tokens alone, however requests are batched.
    Records the batch sizes and whether any env step was running while it generated."""

    def __init__(self, tokenizer, stepping=None):
        self.tokenizer, self.max_context = tokenizer, 4096
        self.batch_sizes, self.overlapped, self.stepping = [], 0, stepping

    def generate(self, prompts, sampling):
        self.batch_sizes.append(len(prompts))
        if self.stepping is not None and self.stepping[0] > 0:
            self.overlapped += 1
        out = []
        for prompt in prompts:
            ids = self.prompt_ids(prompt)
            text = REPLIES[zlib.crc32(str(ids).encode()) % len(REPLIES)]
            tokens = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
            out.append(Generation(text, ids, tokens, [-1.0] * len(tokens), "stop"))
        return out

    def score(self, prompt_ids, continuations):
        raise NotImplementedError


class SlowSteps(gym.Wrapper):
    """A FrozenLake whose steps take a while (as a sandbox or a remote retriever would), counted while
    running: 20 ms, or 200 ms for every other env made, so some episodes are back long before others."""

    stepping = [0]
    made = [0]
    lock = threading.Lock()

    def __init__(self, env):
        super().__init__(env)
        with self.lock:
            self.made[0] += 1
            self.delay = 0.2 if self.made[0] % 2 else 0.02

    def step(self, action):
        with self.lock:
            self.stepping[0] += 1
        try:
            time.sleep(self.delay)
            return self.env.step(action)
        finally:
            with self.lock:
                self.stepping[0] -= 1


if "Test/SlowFrozenLake-v0" not in gym.registry:
    gym.register("Test/SlowFrozenLake-v0", entry_point=lambda **kw: SlowSteps(gym.make(SMOKE, **kw)))

CONFIG = RolloutConfig(n_groups=3, group_size=2, seed=11, chat=ChatEnvConfig(max_turns=4))


def records(trajectories):
    return [t.to_dict() for t in trajectories]


@pytest.mark.parametrize("env_id", [SMOKE, DEFAULT])
def test_a_deterministic_policy_gives_the_synchronous_runners_trajectories(tokenizer, env_id):
    sync = RolloutRunner(env_id, PromptKeyed(tokenizer), CONFIG)
    run = AsyncRolloutRunner(env_id, PromptKeyed(tokenizer), CONFIG)
    for _ in range(2):  # the second batch continues the seeds, as the synchronous runner does
        assert records(run.collect()) == records(sync.collect())
    assert run.next_seed == sync.next_seed
    given = run.collect(seeds=[40, 41, 42])
    assert [t.seed for t in given] == [40, 40, 41, 41, 42, 42] and run.next_seed == sync.next_seed


def test_episodes_generate_while_others_wait_on_their_envs(tokenizer):
    policy = PromptKeyed(tokenizer, stepping=SlowSteps.stepping)
    run = AsyncRolloutRunner("Test/SlowFrozenLake-v0", policy, CONFIG, batch_wait_s=0.0)
    trajectories = run.collect()
    assert records(trajectories) == records(RolloutRunner("Test/SlowFrozenLake-v0", PromptKeyed(tokenizer),
                                                          CONFIG).collect())
    assert policy.overlapped > 0  # some generation ran while an env step was in progress
    assert run.stats["generate_calls"] == len(policy.batch_sizes) and run.stats["wall_s"] > 0


def test_a_short_wait_keeps_a_turn_in_one_batch(tokenizer):
    # Env steps of 20 or 200 ms and a wait of up to 60 s (it ends once no episode is stepping, so a loaded
    # machine costs nothing): every batch holds all live episodes, as in the synchronous runner, instead of
    # whoever was first back from its env.
    policy, sync = PromptKeyed(tokenizer), PromptKeyed(tokenizer)
    AsyncRolloutRunner("Test/SlowFrozenLake-v0", policy, CONFIG, batch_wait_s=60.0).collect()
    RolloutRunner("Test/SlowFrozenLake-v0", sync, CONFIG).collect()
    assert policy.batch_sizes == sync.batch_sizes


def test_requests_made_together_are_batched(tokenizer):
    import asyncio

    policy = PromptKeyed(tokenizer)
    batcher = RequestBatcher(policy)
    prompts = [[1, 2, k] for k in range(5)]

    async def main():
        return await asyncio.gather(*(batcher.generate(p, SamplingConfig(seed=k)) for k, p in enumerate(prompts)))

    generations = asyncio.run(main())
    assert policy.batch_sizes == [5] and [g.prompt_ids for g in generations] == prompts
    asyncio.run(main())
    assert policy.batch_sizes == [5, 5]


def test_a_failing_generation_reaches_every_waiting_episode(tokenizer):
    class Broken(PromptKeyed):
        def generate(self, prompts, sampling):
            raise RuntimeError("backend down")

    with pytest.raises(RuntimeError, match="backend down"):
        AsyncRolloutRunner(SMOKE, Broken(tokenizer), CONFIG).collect()


def test_openai_requests_are_in_flight_together(tokenizer):
    server = FakeServer([(200, COMPLETION, 1.0)])  # each answer takes long enough for the others to arrive
    try:
        policy = _client(tokenizer, server.url, max_concurrency=8)
        config = RolloutConfig(n_groups=4, group_size=2, chat=ChatEnvConfig(max_turns=1))
        trajectories = AsyncRolloutRunner(SMOKE, policy, config).collect()
        assert len(trajectories) == 8 and all(len(t.turns) == 1 for t in trajectories)
        assert len(server.requests) == 8
        seeds = [body["seed"] for _, body in server.requests]
        assert len(set(seeds)) == 8  # each episode samples on its own stream
        assert server.peak > 1  # requests were answered concurrently, not one after another
    finally:
        server.close()


def test_collect_inside_an_event_loop_says_to_await(tokenizer):
    import asyncio

    run = AsyncRolloutRunner(SMOKE, PromptKeyed(tokenizer), CONFIG)

    async def inside():
        with pytest.raises(RuntimeError, match="acollect"):
            run.collect()
        return await run.acollect()

    assert len(asyncio.run(inside())) == 6


def test_the_trainer_and_eval_roll_out_asynchronously_when_asked(tokenizer, tmp_path):
    from ragen_envs.cli import parse
    from tests.numerics import assert_same_gradients, record_gradients
    from tests.trainers.test_trainer import config, make_model
    from trainers import Trainer

    rollouts, gradients = [], []
    for asynchronous in (False, True):
        cfg = config(tmp_path / str(asynchronous))
        cfg = replace(cfg, rollout=replace(cfg.rollout, asynchronous=asynchronous))
        trainer = Trainer(make_model(tokenizer), SMOKE, cfg, tokenizer=tokenizer,
                          rollout_policy=PromptKeyed(tokenizer))
        assert isinstance(trainer.runner, AsyncRolloutRunner) == asynchronous
        collect = trainer.runner.collect

        def recorded(*args, collect=collect, **kwargs):
            trajectories = collect(*args, **kwargs)
            rollouts.append(records(trajectories))
            return trajectories

        trainer.runner.collect = recorded
        gradients.append(record_gradients(trainer.optimizer))
        trainer.train()
    assert len(rollouts) == 2 and rollouts[0] == rollouts[1]  # the same episodes, token for token
    assert_same_gradients(*gradients)  # so the same steps (numerics.py: gradients, not weights after AdamW)
    assert parse(["eval", "--env", SMOKE, "--asynchronous"]).asynchronous is True
