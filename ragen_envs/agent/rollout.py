"""Grouped multi-turn rollouts: P prompt groups x G samples, batched across envs each turn.

The G envs of a group are reset with the same seed (one initial state), then each draws its own
random transitions (FrozenLake's slip); groups get different seeds, and the seeds advance between
calls so training never sees a batch twice. Each turn the
prompts of all unfinished episodes go to the policy in one ``generate`` call; finished episodes
drop out. Envs step in a thread pool when ``env_workers > 1`` (slow envs: code execution, search).

Prompts are kept in token space (``chat_encoding.extend``): turn t+1's prompt is turn t's prompt,
the tokens the model generated, and the new environment message, so a trainer that replays the
stored ``prompt_ids`` sees exactly what the model saw. A prompt carries the images its messages show
(``TokenPrompt``); a backend that takes images only in chat messages (``Policy.chat_images``) is sent
the messages instead, and a history whose old images were dropped (``ChatEnvConfig.max_images``) is
encoded again from its messages.

Context cap: when a prompt would exceed ``max_prompt_tokens``, the oldest complete turns (a user
message with the assistant reply after it) are dropped, the system message and the latest user
message always kept, and the prompt is re-encoded from text (``Turn.messages_dropped`` says how
many messages were left out). If even system + latest message do not fit, the episode ends there
with ``Trajectory.context_overflow``. Nothing is cut mid-message or mid-token.

Context window (``context_window_mode``, RAGEN's): a prompt may show only the last turns, as a chat
(``limited_multi_turn``) or as text in one user message (``single_turn``, ``context_window``); such a
prompt is encoded from its messages, and the cap then applies to it.
"""

from __future__ import annotations

import itertools
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Literal

import gymnasium as gym
import numpy as np

from ragen_envs.agent import chat_encoding, prompts, vision
from ragen_envs.agent.backends.base import Policy, Prompt, SamplingConfig, TokenPrompt
from ragen_envs.agent.chat_env import ChatEnv, ChatEnvConfig
from ragen_envs.agent.trajectory import Trajectory, Turn, think_span
from ragen_envs.base import check_choices, check_positive_int, declared


WINDOW_MODES = ("full", "limited_multi_turn", "single_turn")


@dataclass
class RolloutConfig:
    n_groups: int = declared(8, flag="groups", help="P: prompt groups (per env without a count)")
    group_size: int = declared(4, help="G: samples per group, all from the same initial state")
    chat: ChatEnvConfig = declared(factory=ChatEnvConfig, help="turns, actions per turn, format, penalty")
    sampling: SamplingConfig = declared(factory=SamplingConfig, help="temperature, top-p, tokens per turn")
    max_prompt_tokens: int | None = declared(None, help="default: the model's context minus max_new_tokens")
    context_window_mode: Literal[WINDOW_MODES] = declared(
        "full", help="what a prompt shows of the episode (RAGEN's context_window_mode): \"full\", the whole chat; "
        "\"limited_multi_turn\", the chat of the last max_context_window turns; \"single_turn\", one user message "
        "with the last max_context_window - 1 turns as text before the current one. Where old turns leave the "
        "prompt, each turn trains as a sequence of its own (Trajectory.segments), as RAGEN's per-turn samples")
    max_context_window: int = declared(-1, help="turns a windowed prompt shows, the current one included (RAGEN's "
                                       "max_context_window): -1 all, 1 none before")
    env_workers: int = declared(1, help="threads stepping envs (1: in the calling thread)")
    asynchronous: bool = declared(False, help="each episode advances on its own (AsyncRolloutRunner): generation "
                                  "overlaps slow env steps")
    seed: int = declared(0, help="first env seed (later batches continue from it); sampling and shuffling derive "
                         "from it")
    env_kwargs: dict[str, Any] = declared(factory=dict, help="JSON keyword arguments for gym.make: {\"slip\": 0.2} "
                                          "for a single env, {\"ENV_ID\": {...}, ...} for a mix")

    def __post_init__(self):
        for name in ("n_groups", "group_size", "env_workers"):
            check_positive_int(name, getattr(self, name))
        if self.max_prompt_tokens is not None:
            check_positive_int("max_prompt_tokens", self.max_prompt_tokens)
        check_choices(self)
        k = self.max_context_window
        if k != -1 and (not isinstance(k, int) or isinstance(k, bool) or k < 1):
            raise ValueError(f"max_context_window must be -1 (every turn) or a positive integer, "
                             f"got {self.max_context_window!r}")
        if not isinstance(self.env_kwargs, dict):
            raise ValueError(f"env_kwargs must be a JSON object, got {self.env_kwargs!r}")


NO_MODEL = object()  # check_envs without a model to check


def env_mix(envs: str | dict[str, int], config: RolloutConfig) -> dict[str, int]:
    """The run's envs as {id: groups}: an env id gets ``config.n_groups``."""
    mix = {envs: config.n_groups} if isinstance(envs, str) else dict(envs)
    if not mix or any(not isinstance(n, int) or n < 1 for n in mix.values()):
        raise ValueError(f"envs must be an env id or a dict of env id -> groups >= 1, got {envs!r}")
    return mix


def env_kwargs_by_id(mix: dict[str, int], env_kwargs: dict[str, Any]) -> dict[str, dict]:
    """``env_kwargs`` keyed by env id. The flat form ({"slip": 0.2}) belongs to the run's only env;
    keys naming an env outside the run are an error, not silently ignored."""
    if not env_kwargs:
        return {}
    keyed = [key for key in env_kwargs if key in mix or key in gym.registry or "/" in key]
    if not keyed:
        if len(mix) > 1:
            raise ValueError(f"env_kwargs {env_kwargs} are not keyed by env id, but the run has several envs "
                             f"({', '.join(mix)}): write {{\"ENV_ID\": {{...}}}}")
        return {next(iter(mix)): dict(env_kwargs)}
    if len(keyed) < len(env_kwargs):
        raise ValueError(f"env_kwargs mixes env ids and arguments: {sorted(env_kwargs)}")
    for env_id, kwargs in env_kwargs.items():
        if env_id not in mix:
            raise ValueError(f"env_kwargs has arguments for {env_id}, which is not in this run "
                             f"({', '.join(mix)})")
        if not isinstance(kwargs, dict):
            raise ValueError(f"env_kwargs[{env_id!r}] must be a JSON object of arguments, got {kwargs!r}")
    return {env_id: dict(kwargs) for env_id, kwargs in env_kwargs.items()}


def check_envs(envs: str | dict[str, int], config: RolloutConfig, model: Any = NO_MODEL) -> dict[str, int]:
    """Build each env of the run once, so a bad id or argument fails now, not after a model loads; with
    ``model`` (a path or hub id; None: the embedded default), an env that shows images needs it to be a
    vision-language model. Returns the mix; a ValueError names the env and the problem."""
    mix = env_mix(envs, config)
    kwargs = env_kwargs_by_id(mix, config.env_kwargs)
    visual = []
    for env_id in mix:
        try:
            env = gym.make(env_id, **kwargs.get(env_id, {}))
        except gym.error.Error as error:
            raise ValueError(f"{env_id}: {error}") from None
        except (TypeError, ValueError) as error:
            raise ValueError(f"{env_id} {kwargs.get(env_id, {})}: {error}") from None
        if vision.shows_images(env.observation_space):
            visual.append(env_id)
        env.close()
    if visual and (model is None or isinstance(model, (str, os.PathLike))):
        from ragen_envs.agent.default_model import is_vision_model, resolve_model

        if model is None or not is_vision_model(resolve_model(model)):  # the embedded default is a text model
            raise ValueError(f"{', '.join(visual)} shows images and {model or 'the embedded default model'} is a "
                             "text model: use a vision-language model (a folder with a processor) or a text env")
    return mix


def _without_oldest(messages: list[dict], k: int) -> list[dict]:
    """``messages`` without the ``k`` after the system message (the oldest turns, as the context cap drops them)."""
    return [messages[0], *messages[1 + k:]]


def context_window(messages: list[dict], mode: str, turns: int) -> list[dict]:
    """What a prompt shows of ``messages`` (system, then user and assistant by turns, the current user
    message last) under ``RolloutConfig.context_window_mode`` and a window of ``turns`` (-1: all)."""
    start = 1 if turns == -1 else max(1, len(messages) - (2 * turns - 1))  # the oldest user message shown
    if mode == "full" or mode == "limited_multi_turn" and start == 1:
        return messages
    if mode == "limited_multi_turn":
        return [messages[0], *messages[start:]]
    earlier = messages[start:-1]  # single_turn: the earlier (user, assistant) pairs, as text
    if not earlier:
        return [messages[0], messages[-1]]
    text = prompts.EARLIER_TURNS.format(n=len(earlier) // 2) + "".join(
        prompts.EARLIER_TURN.format(shown=vision.message_text(u["content"]), reply=vision.message_text(a["content"]))
        for u, a in zip(earlier[::2], earlier[1::2])) + prompts.CURRENT_TURN
    current = messages[-1]["content"]
    content = text + current if isinstance(current, str) else [{"type": "text", "text": text}, *current]
    return [messages[0], {"role": "user", "content": content}]


@dataclass(eq=False)
class Episode:
    """One episode of a batch as both runners play it: its env, the prompt its next turn is sent (None:
    to be encoded from its messages), how many old messages the context cap leaves out of it, and its
    record. ``runner`` supplies the policy and the settings."""

    env: ChatEnv
    trajectory: Trajectory
    runner: RolloutRunner = field(repr=False)
    prompt: TokenPrompt | None = None
    dropped: int = 0

    @property
    def done(self) -> bool:
        return self.env.done

    def shown(self) -> list[dict]:
        """The messages its prompt is built from: the chat under the context window (``context_window``;
        the chat itself, the same list, when nothing is left out)."""
        c = self.runner.config
        return context_window(self.env.messages, c.context_window_mode, c.max_context_window)

    def fit(self) -> bool:
        """Make the prompt fit the context (see the module docstring). True: it cannot, and the episode
        was ended."""
        policy, prefill_ids, limit = self.runner.policy, self.runner.prefill_ids, self.runner.max_prompt_tokens
        messages = self.shown()
        if self.prompt is None:
            self.prompt = TokenPrompt(policy.encode_chat(messages) + prefill_ids, vision.message_images(messages))
        if len(self.prompt) <= limit:
            return False
        for k in range(2, len(messages) - 1, 2):  # drop (user, assistant) pairs after the system message
            kept = _without_oldest(messages, k)
            ids = policy.encode_chat(kept) + prefill_ids
            if len(ids) <= limit:
                self.prompt, self.dropped = TokenPrompt(ids, vision.message_images(kept)), k
                return False
        self.env.done = True
        self.trajectory.context_overflow = True
        return True

    def request(self) -> Prompt:
        """What the policy is sent: the prompt, or, where images travel only in chat messages, the
        messages it holds (the reply's prefill as an assistant message to continue)."""
        prefill = self.runner.prefill
        if not (self.runner.policy.chat_images and self.prompt.images):
            return self.prompt
        kept = _without_oldest(self.shown(), self.dropped)
        return kept + ([{"role": "assistant", "content": prefill}] if prefill else [])

    def step(self, reply: str):
        return self.env.step(reply)

    def record(self, gen, reply: str, record) -> None:
        """Store the turn and, unless the episode ended, extend the prompt with the reply and the env's answer."""
        tok, prefill, prompt = self.runner.policy.encoder, self.runner.prefill, self.prompt
        start, end = think_span(tok, gen.token_ids, bool(prefill)) if self.runner.config.chat.enable_think \
            else (None, None)
        self.trajectory.turns.append(Turn(
            prompt_ids=prompt, response_ids=gen.token_ids, logprobs=gen.logprobs,
            response=reply, reasoning=record.reasoning, actions=record.actions,
            reward=record.reward, format_ok=record.format_ok, finish_reason=gen.finish_reason,
            think_start=start, think_end=end, messages_dropped=self.dropped,
            entropies=gen.entropies, images=prompt.images, grounded=record.grounded))
        if self.env.done:
            return
        messages = self.env.messages
        # earlier messages changed (max_images) or the context window leaves turns out: encoded again next turn
        if self.env.history_rewritten or self.shown() is not messages:
            self.prompt = None
            return
        self.prompt = TokenPrompt(chat_encoding.extend(tok, prompt, gen.token_ids, messages, prefill),
                                  [*prompt.images, *vision.message_images(messages[-1:])])

    def finish(self) -> Trajectory:
        """The record, with the whole chat, the return and the outcome."""
        self.trajectory.messages = list(self.env.messages)
        self.trajectory.episode_return = self.env.episode_return
        self.trajectory.success = self.env.success
        return self.trajectory


class RolloutRunner:
    """Collects grouped rollouts of ``envs`` (an env id, or a dict env id -> number of groups)."""

    def __init__(self, envs: str | dict[str, int], policy: Policy, config: RolloutConfig | None = None):
        self.config = config or RolloutConfig()
        self.policy = policy
        self.mix = mix = env_mix(envs, self.config)  # id -> groups
        self.env_kwargs = env_kwargs_by_id(mix, self.config.env_kwargs)
        self.group_envs = [env_id for env_id, n in mix.items() for _ in range(n)]
        self.next_seed = self.config.seed
        self.calls = 0
        chat = self.config.chat
        self.prefill = chat.prefill  # opens every reply
        self.prefill_ids = chat_encoding.tokenize(policy.tokenizer, self.prefill) if self.prefill else []
        self._envs: list[ChatEnv] | None = None

    @property
    def max_prompt_tokens(self) -> int:
        c = self.config
        if c.max_prompt_tokens is not None:
            return c.max_prompt_tokens
        return self.policy.max_context - c.sampling.max_new_tokens

    def _make_envs(self) -> list[ChatEnv]:
        if self._envs is None:  # built once, reset every call
            g = self.config.group_size
            self._envs = [ChatEnv(env_id, self.config.chat, self.config.sampling.max_new_tokens,
                                  **self.env_kwargs.get(env_id, {}))
                          for env_id in self.group_envs for _ in range(g)]
        return self._envs

    def labels(self) -> dict[str, str]:
        """Each env id of the mix as tables name it (``ChatEnv.label``: a remote client by its served env)."""
        return {env.env_id: env.label for env in self._make_envs()}

    def collect(self, progress: Callable[[int, int], None] | None = None,
                seeds: list[int] | None = None) -> list[Trajectory]:
        """One batch: P x G trajectories, ordered by group. ``progress(turn, active)`` is called
        before each turn's generation. ``seeds``: one env seed per group (default: the next P seeds
        of the run; given seeds leave that sequence where it was)."""
        c, policy = self.config, self.policy
        episodes, given = self._start(seeds)
        policy.reset_cache()  # nothing kept by earlier calls is reused (or held in memory) by this batch
        active = episodes
        pool = ThreadPoolExecutor(c.env_workers) if c.env_workers > 1 else None
        try:
            for turn in itertools.count():  # ChatEnv ends each episode at its turn limit: the one place it is kept
                active = [e for e in active if not e.done and not e.fit()]
                if not active:
                    break
                if progress:
                    progress(turn, len(active))
                sampling = replace(c.sampling, seed=self._sampling_seed(turn))
                generations = policy.generate([e.request() for e in active], sampling)
                # With a prefilled <think>, the reply's text starts with it, as its tokens follow it.
                replies = [self.prefill + gen.text for gen in generations]
                records = list((pool.map if pool else map)(Episode.step, active, replies))
                for e, gen, reply, record in zip(active, generations, replies, records):
                    e.record(gen, reply, record)
                active = [e for e in active if not e.done]
        finally:
            policy.reset_cache()
            if pool:
                pool.shutdown()
        return self._finish(episodes, given)

    # -- what both runners share (this one and async_rollout.AsyncRolloutRunner) ---------------------
    def _start(self, seeds: list[int] | None) -> tuple[list[Episode], bool]:
        """Reset every env for a batch; returns its episodes and whether seeds were given."""
        envs, g = self._make_envs(), self.config.group_size
        if seeds is not None and len(seeds) != len(self.group_envs):
            raise ValueError(f"collect(seeds=...) takes one seed per group: {len(self.group_envs)}, got {len(seeds)}")
        given = seeds is not None
        seeds = list(seeds) if given else [self.next_seed + i for i in range(len(self.group_envs))]
        episodes = []
        for i, env in enumerate(envs):
            group = i // g
            # Same initial state within a group; each sample then draws its own transitions (slip).
            transitions = int(np.random.SeedSequence([seeds[group], i % g]).generate_state(1)[0])
            messages = env.reset(seed=seeds[group], transition_seed=transitions)
            episodes.append(Episode(env, Trajectory(env_id=env.env_id, group=group, seed=seeds[group],
                                                    messages=messages, transition_seed=transitions,
                                                    env_kwargs=self.env_kwargs.get(env.env_id, {})), self))
        return episodes, given

    def _finish(self, episodes: list[Episode], given: bool) -> list[Trajectory]:
        trajectories = [e.finish() for e in episodes]
        if not given:
            self.next_seed += len(self.group_envs)
        self.calls += 1
        return trajectories

    def state_dict(self) -> dict:
        """Where the run's seed sequence stands (the same on every rank): a checkpoint's part."""
        return {"calls": self.calls, "seed_offset": self.next_seed - self.config.seed}

    def load_state_dict(self, state: dict) -> None:
        """Continue the seed sequence of ``state_dict()`` (of this rank's own seeds)."""
        self.calls = state["calls"]
        self.next_seed = self.config.seed + state["seed_offset"]

    def _sampling_seed(self, turn: int) -> int:
        """A fresh sampling seed per call and turn, from the configured seed: rollouts replay exactly."""
        base = self.config.sampling.seed if self.config.sampling.seed is not None else self.config.seed
        return int(np.random.SeedSequence([base, self.calls, turn]).generate_state(1)[0])

    def close(self) -> None:
        for env in self._envs or []:
            env.close()
