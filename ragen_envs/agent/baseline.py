"""The chance level of success: a policy that replies with random valid actions, played on the very
episodes a run played (same seeds, same transition seeds), so a reader can tell skill from chance."""

from __future__ import annotations

import random

import numpy as np

from ragen_envs.agent.chat_env import ChatEnv, ChatEnvConfig
from ragen_envs.agent.rollout import RolloutConfig
from ragen_envs.agent.trajectory import Trajectory


def random_success(trajectories: list[Trajectory], chat: ChatEnvConfig, seed: int = 0) -> dict[str, float]:
    """Per env id: the success rate of random valid actions (``max_actions_per_turn`` per reply, up to
    ``max_turns`` replies) on the trajectories' episodes. Envs with open-text actions (no finite
    action set, so no such policy) are left out."""
    rng = random.Random(seed)
    envs: dict[str, ChatEnv] = {}
    wins: dict[str, list[bool]] = {}
    for t in trajectories:
        if t.env_id not in envs:
            envs[t.env_id] = ChatEnv(t.env_id, chat, **t.env_kwargs)
        env = envs[t.env_id]
        if not env.valid_actions:
            continue
        env.reset(seed=t.seed, transition_seed=t.transition_seed)
        while not env.done:
            actions = " || ".join(rng.choice(env.valid_actions) for _ in range(env.max_actions))
            env.step(f"<think>random</think><answer>{actions}</answer>" if chat.enable_think
                     else f"<answer>{actions}</answer>")
        wins.setdefault(t.env_id, []).append(env.success)
    for env in envs.values():
        env.close()
    return {env_id: sum(w) / len(w) for env_id, w in wins.items()}


def held_out(policy, envs, config: RolloutConfig, seed: int = 0) -> dict[str, float]:
    """Play ``config``'s episodes of ``envs`` (an env id or a mix) with ``policy``: their number, success
    and format validity, and the success of random valid actions (seeded by ``seed``) on the same episodes
    (nan where no env has a finite action set)."""
    from ragen_envs.agent.async_rollout import make_runner

    runner = make_runner(envs, policy, config)
    try:
        trajectories = runner.collect()
    finally:
        runner.close()
    chance = random_success(trajectories, config.chat, seed)
    return {"episodes": len(trajectories), "success": float(np.mean([t.success for t in trajectories])),
            "random_success": float(np.mean(list(chance.values()))) if chance else float("nan"),
            "format_valid": float(np.mean([t.format_valid for t in trajectories]))}
