"""TRL: ``GRPOTrainer`` trains on multi-turn episodes of any registered env.

    from trl import GRPOConfig, GRPOTrainer
    from ragen_envs.integrations.trl import EnvRollout, env_reward

    rollout = EnvRollout("Ragen/Sokoban-v0")          # settings: a RolloutConfig (turns, tokens, ...)
    trainer = GRPOTrainer(model=..., reward_funcs=env_reward, train_dataset=rollout.dataset(512),
                          args=GRPOConfig(num_generations=4, ...), rollout_func=rollout)
    trainer.train()

``rollout.dataset(n)`` holds one row per env seed: ``prompt`` is the episode's first chat prompt
(system and user messages, as ``ChatEnv`` writes them) and ``seed`` its seed. Called by the trainer
with a batch of prompts (each repeated ``num_generations`` times), the rollout plays each group's
episodes from that seed with the trainer's current model (this project's transformers backend:
the KV cache kept across turns), each sample drawing its own transitions, and returns per sample:

- ``prompt_ids``: the first turn's prompt tokens;
- ``completion_ids``: every later token of the episode: replies, and the env's messages between them;
- ``env_mask``: 1 on reply tokens, 0 on env tokens (TRL leaves them out of the loss);
- ``logprobs``: each reply token's sampling log-probability (0.0 on env tokens);
- ``env_reward``, ``success``: the episode's return (format penalties included) and outcome, which
  TRL hands to the reward functions; ``env_reward`` (below) returns the former, so the env's return is
  the sample's reward GRPO normalises within its group.

The episodes are this project's ``RolloutRunner``'s, so its conventions hold as they are: each prompt
ends with the reply's prefill (``<think>``, ``ChatEnvConfig.prefill``), masked as env tokens.

An episode whose prompt outgrew the context (old turns dropped) is cut where the chain broke: the
completion ends with the last reply that still extends the first prompt.

TRL's ``environment_factory`` interface (tool-calling models) is ``ToolEnv``: the env's action as a
tool method, ``reset`` returning the first observation, ``get_reward`` the episode's return.
"""

from __future__ import annotations

import json
from dataclasses import replace

import gymnasium as gym

from ragen_envs.agent.backends.transformers import TransformersPolicy
from ragen_envs.agent.rollout import RolloutConfig, RolloutRunner, env_kwargs_by_id
from ragen_envs.base import observation_text
from ragen_envs.extras import install_hint
from ragen_envs.integrations.common import seed_rows

try:
    import trl  # noqa: F401  (the extra this adapter is for)
except ImportError:  # pragma: no cover - depends on the installed extras
    raise ImportError(f"ragen_envs.integrations.trl needs TRL: {install_hint('trl')}") from None


def env_reward(completions, env_reward, **kwargs) -> list[float]:
    """A TRL reward function: the episode's return as the env gave it (``EnvRollout`` fills it in)."""
    return [float(r) for r in env_reward]


def _key(messages) -> str:
    return json.dumps([[m["role"], m["content"]] for m in messages])


class EnvRollout:
    """A ``rollout_func`` for ``GRPOTrainer`` that plays ``env_id``'s episodes (see the module docstring).

    Args:
        env_id: a registered env id (``ragen list``), ``Ragen/Remote-v0`` included.
        config: turns, tokens per turn, sampling, env arguments and seed; its ``n_groups`` and
            ``group_size`` come from each batch instead.
        policy: the backend that generates (default: this project's transformers backend on the
            trainer's model, made on the first call).
    """

    def __init__(self, env_id: str, config: RolloutConfig | None = None, policy=None):
        self.env_id = env_id
        self.config = config or RolloutConfig()
        gym.make(env_id, **self._env_kwargs()).close()  # a bad id or argument fails here, not mid-training
        self.policy = policy
        self._seeds: dict[str, int] = {}  # first prompt -> env seed
        self._runners: dict[tuple[int, int], RolloutRunner] = {}

    def _env_kwargs(self) -> dict:
        return env_kwargs_by_id({self.env_id: 1}, self.config.env_kwargs).get(self.env_id, {})

    def dataset(self, n: int, start: int = 0):
        """A ``datasets.Dataset`` of ``n`` episodes' first prompts, seeds ``start`` .. ``start + n - 1``."""
        from datasets import Dataset

        rows = seed_rows(self.env_id, n, start, self.config.chat, self.config.sampling.max_new_tokens,
                         **self._env_kwargs())
        for row in rows:
            self._seeds.setdefault(_key(row["prompt"]), row["seed"])
        return Dataset.from_list(rows)

    def __call__(self, prompts: list, trainer) -> dict[str, list]:
        g = trainer.num_generations if trainer.model.training else trainer.num_generations_eval
        if len(prompts) % g:
            raise ValueError(f"{len(prompts)} prompts do not split into groups of num_generations={g}")
        seeds = []
        for k in range(0, len(prompts), g):
            key = _key(prompts[k])
            if key not in self._seeds:
                raise ValueError("a prompt that EnvRollout.dataset() did not make: train on rollout.dataset(n), "
                                 "whose prompts are the envs' own first prompts")
            seeds.append(self._seeds[key])
        runner = self._runner(len(seeds), g, trainer)
        trajectories = runner.collect(seeds=seeds)
        out = {name: [] for name in ("prompt_ids", "completion_ids", "logprobs", "env_mask", "env_reward", "success")}
        for t in trajectories:
            first = t.segments()[0]
            cut = len(t.turns[0].prompt_ids)
            out["prompt_ids"].append(first.ids[:cut])
            out["completion_ids"].append(first.ids[cut:])
            out["logprobs"].append(first.logprobs[cut:])
            out["env_mask"].append(first.generated[cut:])
            out["env_reward"].append(t.episode_return)
            out["success"].append(t.success)
        return out

    def _runner(self, groups: int, group_size: int, trainer) -> RolloutRunner:
        if self.policy is None:  # the trainer's model itself: it samples from the current weights
            self.policy = TransformersPolicy(trainer.accelerator.unwrap_model(trainer.model), trainer.processing_class,
                                             device=str(trainer.accelerator.device))
        if (groups, group_size) not in self._runners:
            config = replace(self.config, n_groups=groups, group_size=group_size)
            self._runners[(groups, group_size)] = RolloutRunner(self.env_id, self.policy, config)
        return self._runners[(groups, group_size)]


class ToolEnv:
    """TRL's ``environment_factory`` interface: ``GRPOTrainer(environment_factory=lambda: ToolEnv(ID))``.

    TRL calls ``reset(**row)`` before each rollout (a dataset row may carry ``seed``) and appends the
    returned text, the env's instructions and first observation, to the prompt; the model then calls
    the ``act`` tool, whose result is the env's reply; ``get_reward`` gives the episode's return.
    """

    def __init__(self, env_id: str, **env_kwargs):
        self.env = gym.make(env_id, **env_kwargs)
        self.reward = 0.0
        self.done = False

    def reset(self, seed: int | None = None, **row) -> str:
        obs, _ = self.env.reset(seed=seed)
        self.reward, self.done = 0.0, False
        return f"{self.env.get_wrapper_attr('instructions')}\n\n{observation_text(obs)}"

    def act(self, action: str) -> str:
        """Play one action in the environment.

        Args:
            action: The action, in the form the instructions give (for example a move name).

        Returns:
            What the environment shows after the action, with the reward received.
        """
        if self.done:
            return "The episode is over."
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.reward += float(reward)
        self.done = terminated or truncated
        valid = "" if info.get("action_is_valid", True) else " (not a valid action: nothing changed)"
        end = " The episode is over." if self.done else ""
        return f"{observation_text(obs)}\nReward: {float(reward):g}{valid}.{end}"

    def get_reward(self) -> float:
        return self.reward
