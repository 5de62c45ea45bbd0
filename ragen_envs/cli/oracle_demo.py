"""Play every environment of the catalogue with its oracle and show each step (text here, and the
frames of image-capable envs as one PNG strip per env in demo_out/).

Run with ``make oracle-demo`` or ``python -m ragen_envs.cli.oracle_demo [--out DIR] [--seed N] [--env ID]``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import gymnasium as gym
import numpy as np

from ragen_envs.base import observation_text
from ragen_envs.registry import ENVIRONMENTS, load_class
from ragen_envs.rendering import png_bytes


def play(env_id: str, seed: int, out: Path) -> float:
    """One oracle episode; returns its return."""
    images = "rgb_array" in load_class(ENVIRONMENTS[env_id]).metadata["render_modes"]
    env = gym.make(env_id, render_mode="rgb_array") if images else gym.make(env_id)
    oracle = env.get_wrapper_attr("oracle_action")
    obs, info = env.reset(seed=seed)
    print(f"=== {env_id} seed={seed}: {ENVIRONMENTS[env_id].description}")
    print(observation_text(obs))
    frames = [env.render()] if images else []
    total = 0.0
    for t in range(env.get_wrapper_attr("max_steps")):
        action = oracle()
        if action is None:
            print("(the oracle knows no action here)")
            break
        obs, reward, terminated, truncated, info = env.step(action)
        total += reward
        if images:
            frames.append(env.render())
        print(f"\nstep {t + 1}: {action} -> reward {reward:+.2f}")
        print(observation_text(obs))
        if terminated or truncated:
            break
    print(f"\nreturn {total:+.2f}, success {info['success']}\n")
    if frames:
        _save_strip(frames, out / f"{env_id.split('/')[-1]}.png")
    env.close()
    return total


def _save_strip(frames: list[np.ndarray], path: Path) -> None:
    """All frames side by side in one PNG."""
    gap = np.full((frames[0].shape[0], 4, 3), 255, dtype=np.uint8)
    strip = np.concatenate([x for f in frames for x in (f, gap)][:-1], axis=1)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png_bytes(strip))
    print(f"frames written to {path}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("demo_out"))
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--env", action="append", choices=list(ENVIRONMENTS), help="default: every env")
    args = parser.parse_args(argv)
    for env_id in args.env or ENVIRONMENTS:
        play(env_id, args.seed, args.out)


if __name__ == "__main__":
    main()
