"""Asynchronous rollouts: each episode advances on its own, so while one waits on a slow env step (a
sandboxed program, a remote retriever) the others generate.

``AsyncRolloutRunner`` collects the same batches as ``RolloutRunner`` (P groups x G samples, the same
seeds, transitions, prompts in token space, context cap and ``Trajectory`` records); only the order
in which turns happen differs. Generation goes through

- the policy's own ``agenerate(prompt, sampling)`` where it has one: ``OpenAIPolicy`` keeps up to
  ``max_concurrency`` requests in flight to an OpenAI-compatible server (vLLM batches them);
- otherwise a ``RequestBatcher``: requests that arrive while the model is busy wait and then run as
  one ``generate`` batch (the transformers and in-process vLLM backends).

Env steps run on a thread pool (default: one thread per episode). For a deterministic policy the
trajectories equal the synchronous runner's. With sampling, a batch's sampling seed is its first
request's, and which requests share a batch depends on timing: runs are not bit-reproducible.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Callable

from ragen_envs.agent.backends.base import Generation, Policy, Prompt, SamplingConfig
from ragen_envs.agent.rollout import Episode, RolloutConfig, RolloutRunner
from ragen_envs.agent.trajectory import Trajectory


class RequestBatcher:
    """Merges concurrent one-prompt requests into ``policy.generate`` batches, one batch at a time:
    requests made while a batch runs form the next. Requests whose sampling settings differ (other
    than the seed) go in different batches. ``busy_s`` adds up the time spent generating.

    ``waiting()`` (optional) says how many more requests may come soon (episodes still stepping
    their envs); a batch then waits up to ``wait_s`` for them, so that a slow env's episode does not
    hold the others back, yet a little env time does not split a batch in two. ``wait_s=None`` waits
    as long as the last batch took to generate: splitting a batch costs about one more batch (a
    decode step costs nearly the same for few rows as for many), so waiting less than that pays;
    with fast generation the wait shrinks to nothing and every episode runs on its own."""

    def __init__(self, policy: Policy, max_batch: int = 256, wait_s: float | None = None,
                 waiting: Callable[[], int] | None = None):
        self.policy, self.max_batch, self.wait_s, self.waiting = policy, max_batch, wait_s, waiting
        self.last_batch_s = 0.0
        self.queue: list[tuple[Prompt, SamplingConfig, asyncio.Future]] = []
        self.running = False
        self.busy_s = 0.0
        self.batches = 0

    async def generate(self, prompt: Prompt, sampling: SamplingConfig) -> Generation:
        future = asyncio.get_running_loop().create_future()
        self.queue.append((prompt, sampling, future))
        if not self.running:
            self.running = True
            asyncio.get_running_loop().create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        try:
            while self.queue:
                await asyncio.sleep(0)  # requests made in this same loop tick join the batch
                deadline = time.perf_counter() + (self.last_batch_s if self.wait_s is None else self.wait_s)
                while self.waiting and self.waiting() > 0 and len(self.queue) < self.max_batch \
                        and time.perf_counter() < deadline:
                    await asyncio.sleep(0.002)
                key = replace(self.queue[0][1], seed=None)
                batch = [r for r in self.queue if replace(r[1], seed=None) == key][:self.max_batch]
                self.queue = [r for r in self.queue if all(r is not b for b in batch)]
                start = time.perf_counter()
                try:
                    # On the loop's own thread, blocking it: env steps go on in their threads meanwhile,
                    # and torch ran 35 % slower from a worker thread on this project's CPUs.
                    generations = self.policy.generate([p for p, _, _ in batch], batch[0][1])
                except Exception as error:  # every waiting episode hears of it
                    for _, _, future in batch:
                        future.set_exception(error)
                    continue
                finally:
                    self.last_batch_s = time.perf_counter() - start
                    self.busy_s += self.last_batch_s
                    self.batches += 1
                for (_, _, future), generation in zip(batch, generations):
                    future.set_result(generation)
        finally:
            self.running = False


class AsyncRolloutRunner(RolloutRunner):
    """``RolloutRunner``'s batches, each episode on its own (see the module docstring).

    Args:
        env_threads: threads stepping envs (default: one per episode, so every episode can wait on
            its env at once).
        batch_wait_s: how long a generation batch waits for episodes still in an env step to join
            it (``RequestBatcher``); None: as long as the last batch took; 0: it starts with whoever
            is waiting.
    After ``collect``, ``stats`` holds the batch's ``wall_s``, ``generate_busy_s`` (time the model
    was generating; the rest of ``wall_s`` it waited) and ``generate_calls``.
    """

    def __init__(self, envs, policy: Policy, config: RolloutConfig | None = None, env_threads: int | None = None,
                 batch_wait_s: float | None = None):
        super().__init__(envs, policy, config)
        self.env_threads, self.batch_wait_s = env_threads, batch_wait_s
        self.stats: dict[str, float] = {}

    def collect(self, progress: Callable[[int, int], None] | None = None,
                seeds: list[int] | None = None) -> list[Trajectory]:
        """One batch, as ``RolloutRunner.collect``; from inside a running event loop, await ``acollect``."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.acollect(progress, seeds))
        raise RuntimeError("AsyncRolloutRunner.collect() was called inside an event loop: await acollect() there")

    async def acollect(self, progress: Callable[[int, int], None] | None = None,
                       seeds: list[int] | None = None) -> list[Trajectory]:
        c, policy = self.config, self.policy
        episodes, given = self._start(seeds)
        stepping = [0]  # episodes in an env step now: the requests a batch may wait for
        batcher = None if hasattr(policy, "agenerate") else RequestBatcher(policy, wait_s=self.batch_wait_s,
                                                                           waiting=lambda: stepping[0])
        generate = policy.agenerate if batcher is None else batcher.generate
        loop = asyncio.get_running_loop()
        pool = ThreadPoolExecutor(self.env_threads or len(episodes))
        start = time.perf_counter()

        async def play(i: int, e: Episode) -> None:
            for turn in itertools.count():  # ChatEnv ends the episode at its turn limit
                if e.done or e.fit():
                    break
                # One seed per episode and turn: G samples of a group must not draw the same tokens.
                generation = await generate(e.request(), replace(c.sampling, seed=self._sampling_seed(turn) + i))
                reply = self.prefill + generation.text  # the reply starts inside the prefilled <think>
                stepping[0] += 1
                try:
                    record = await loop.run_in_executor(pool, e.step, reply)
                finally:
                    stepping[0] -= 1
                e.record(generation, reply, record)
                if progress:  # the turn the slowest episode still playing is at
                    active = [len(o.trajectory.turns) for o in episodes if not o.done]
                    progress(min(active, default=c.chat.max_turns), len(active))

        policy.reset_cache()  # nothing kept by earlier calls is reused (or held in memory) by this batch
        try:
            await asyncio.gather(*(play(i, e) for i, e in enumerate(episodes)))
        finally:
            policy.reset_cache()
            pool.shutdown()
        trajectories = self._finish(episodes, given)
        self.stats = {"wall_s": time.perf_counter() - start,
                      "generate_busy_s": batcher.busy_s if batcher else float("nan"),
                      "generate_calls": float(batcher.batches if batcher else sum(len(t.turns) for t in trajectories))}
        return trajectories


def make_runner(envs: str | dict[str, int], policy: Policy, config: RolloutConfig | None = None) -> RolloutRunner:
    """The runner ``config`` asks for: ``RolloutRunner``, or ``AsyncRolloutRunner`` with ``asynchronous``."""
    if config is not None and config.asynchronous:
        return AsyncRolloutRunner(envs, policy, config)
    return RolloutRunner(envs, policy, config)
