"""Play each environment with its oracle and show the frames (text here, PNGs in demo_out/).

Run with ``make oracle-demo`` or ``python -m ragen_envs.oracle_demo [--out DIR] [--seed N]``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import gymnasium as gym
import numpy as np

import ragen_envs  # noqa: F401  (registers the envs)


def play(env_id: str, seed: int, out: Path, plan, **kwargs) -> None:
    env = gym.make(env_id, render_mode="rgb_array", observation_format="grid", **kwargs)
    obs, info = env.reset(seed=seed)
    print(f"=== {env_id} {kwargs or ''} seed={seed}: optimal length {info['optimal_solution_length']}")
    print(obs)
    frames = [env.render()]
    total, done = 0.0, False
    for t, action in enumerate(plan(env.unwrapped)):
        obs, reward, terminated, truncated, info = env.step(action)
        total += reward
        frames.append(env.render())
        print(f"\nstep {t + 1}: {action} -> reward {reward:+.1f}")
        print(obs)
        if terminated or truncated:
            done = True
            break
    print(f"\nreturn {total:+.1f}, success {info['success']}, finished {done}\n")
    _save_strip(frames, out / f"{env_id.split('/')[-1]}.png")
    env.close()


def _save_strip(frames: list[np.ndarray], path: Path) -> None:
    """All frames side by side in one PNG."""
    try:
        import pygame
    except ImportError:
        print("(pygame not installed: no PNG written)")
        return
    gap = np.full((frames[0].shape[0], 4, 3), 255, dtype=np.uint8)
    strip = np.concatenate([x for f in frames for x in (f, gap)][:-1], axis=1)
    path.parent.mkdir(parents=True, exist_ok=True)
    pygame.image.save(pygame.surfarray.make_surface(strip.transpose(1, 0, 2)), str(path))
    print(f"frames written to {path}")


def _frozenlake_policy(env):
    """Follow the optimal policy (it accounts for slip) until the episode ends, at most max_steps."""
    for _ in range(env.max_steps):
        yield env.optimal_action()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("demo_out"))
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args(argv)
    play("Ragen/Sokoban-v0", args.seed, args.out, lambda env: env.solve())
    play("Ragen/FrozenLake-v0", args.seed, args.out, lambda env: env.shortest_path())
    play("Ragen/FrozenLake-v0", args.seed, args.out / "slippery", _frozenlake_policy, slip=0.3)


if __name__ == "__main__":
    main()
