"""The chance level of success: a policy that replies with random valid actions, played on the very
episodes a run played (same seeds, same transition seeds), so a reader can tell skill from chance."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np

from ragen_envs.agent.chat_env import ChatEnv, ChatEnvConfig
from ragen_envs.agent.rollout import RolloutConfig
from ragen_envs.agent.trajectory import Trajectory

HELD_OUT_COLUMNS = ("success", "format_valid", "random_success")  # play_held_out's rows


def random_wins(trajectories: list[Trajectory], chat: ChatEnvConfig, seed: int = 0) -> list[float]:
    """Per trajectory: 1.0 where random valid actions (``max_actions_per_turn`` per reply, up to ``max_turns``
    replies) win its episode, else 0.0; nan for envs with open-text actions (no finite action set, so no
    such policy). Each episode draws from its own generator (``seed`` and the episode's seeds), so its
    result does not depend on the other episodes of the batch."""
    envs: dict[str, ChatEnv] = {}
    wins = []
    for t in trajectories:
        if t.env_id not in envs:
            envs[t.env_id] = ChatEnv(t.env_id, chat, **t.env_kwargs)
        env = envs[t.env_id]
        if not env.valid_actions:
            wins.append(float("nan"))
            continue
        rng = random.Random(f"{seed}/{t.env_id}/{t.seed}/{t.transition_seed}")
        env.reset(seed=t.seed, transition_seed=t.transition_seed)
        while not env.done:
            actions = " || ".join(rng.choice(env.valid_actions) for _ in range(env.max_actions))
            env.step(f"<think>random</think><answer>{actions}</answer>" if chat.enable_think
                     else f"<answer>{actions}</answer>")
        wins.append(float(env.success))
    for env in envs.values():
        env.close()
    return wins


def random_success(trajectories: list[Trajectory], chat: ChatEnvConfig, seed: int = 0) -> dict[str, float]:
    """Per env id: the success rate of random valid actions on the trajectories' episodes (``random_wins``);
    envs with open-text actions are left out."""
    by_env: dict[str, list[float]] = {}
    for t, won in zip(trajectories, random_wins(trajectories, chat, seed)):
        if won == won:
            by_env.setdefault(t.env_id, []).append(won)
    return {env_id: float(np.mean(w)) for env_id, w in by_env.items()}


def held_out_part(envs, config: RolloutConfig,
                  part: tuple[int, int]) -> tuple[dict[str, int], list[int], RolloutConfig]:
    """Rank ``part[0]`` of ``part[1]``'s share of ``config``'s episodes of ``envs`` (an env id or a mix): the
    mix it plays, one env seed per episode, and ``config`` with env_kwargs for that mix's envs only. The
    episodes are those one rank would play (env seeds one after another from ``config.seed``, env by env);
    rank r takes every ``part[1]``-th from the r-th."""
    from ragen_envs.agent.rollout import env_kwargs_by_id, env_mix

    rank, world = part
    if not 0 <= rank < world:
        raise ValueError(f"part={part}: the rank must be in 0..world-1")
    whole = env_mix(envs, config)
    episodes = [env_id for env_id, n in whole.items() for _ in range(n)]
    mine = range(rank, len(episodes), world)
    mix: dict[str, int] = {}
    for i in mine:
        mix[episodes[i]] = mix.get(episodes[i], 0) + 1
    kwargs = env_kwargs_by_id(whole, config.env_kwargs)
    return mix, [config.seed + i for i in mine], replace(config, env_kwargs={k: kwargs[k] for k in mix if k in kwargs})


def held_out_config(rollout: RolloutConfig, episodes: int, seed: int, temperature: float) -> RolloutConfig:
    """The held-out evaluation's settings, for the trainer's validation and the studies alike: ``rollout``'s
    turns, tokens and env arguments, ``episodes`` episodes of one sample each from env seed ``seed`` on,
    sampled at ``temperature`` (0: greedy). The trainer passes its ``eval_seed`` and ``eval_temperature``;
    a study its own seeds, so the boards it committed stay its boards."""
    return replace(rollout, n_groups=episodes, group_size=1, seed=seed,
                   sampling=replace(rollout.sampling, temperature=temperature))


def play_held_out(policy, envs, config: RolloutConfig, seed: int = 0, part: tuple[int, int] = (0, 1)) -> np.ndarray:
    """Play this part's share of ``config``'s episodes of ``envs`` with ``policy`` (``held_out_part``; the
    whole set by default): one row per episode, its ``HELD_OUT_COLUMNS`` (random success seeded by
    ``seed``; nan where the env has no finite action set). All parts' rows together are the whole set's,
    in another order (the policy's sampling draws aside)."""
    from ragen_envs.agent.async_rollout import make_runner

    mix, seeds, config = held_out_part(envs, config, part)
    if not seeds:
        return np.zeros((0, len(HELD_OUT_COLUMNS)))
    runner = make_runner(mix, policy, config)
    try:
        trajectories = runner.collect(seeds=seeds)
    finally:
        runner.close()
    chance = random_wins(trajectories, config.chat, seed)
    return np.array([[t.success, t.format_valid, won] for t, won in zip(trajectories, chance)], dtype=float)


def summarise_held_out(rows: np.ndarray) -> dict[str, float]:
    """``play_held_out``'s rows (of one part or all gathered) as the number of episodes, success, format
    validity and the success of random valid actions (nan where no env has a finite action set)."""
    success, valid, chance = rows.T
    known = chance[chance == chance]
    return {"episodes": len(rows), "success": float(success.mean()),
            "random_success": float(known.mean()) if len(known) else float("nan"),
            "format_valid": float(valid.mean())}


def held_out(policy, envs, config: RolloutConfig, seed: int = 0) -> dict[str, float]:
    """Play ``config``'s episodes of ``envs`` (an env id or a mix) with ``policy``: their number, success
    and format validity, and the success of random valid actions (seeded by ``seed``) on the same episodes
    (nan where no env has a finite action set)."""
    return summarise_held_out(play_held_out(policy, envs, config, seed))
