"""The peer of `ragen serve` in `env_server_load.py --vs-openenv`: openenv-core's own server
(``create_app``) serving a catalogue env through a thin OpenEnv ``Environment``, as an OpenEnv user
would wrap it. Same WebSocket protocol at ``/ws``, same env, its own process.

    python benchmarks/speed/openenv_peer.py --env Ragen/FrozenLake-v0 --port 8001 [--max-sessions 64]
"""

from __future__ import annotations

import argparse
import uuid
from typing import Any

import gymnasium as gym
import uvicorn
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State

import ragen_envs  # noqa: F401  (registers the Ragen/ namespace)


class TextAction(Action):
    action: str


class TextObservation(Observation):
    text: str = ""
    info: dict[str, Any] = {}


def environment(env_id: str) -> type[Environment]:
    class RagenEnvironment(Environment):
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self):
            super().__init__()
            self.env = gym.make(env_id)
            self._state = State(episode_id=None, step_count=0)

        def reset(self, seed=None, episode_id=None, **kwargs) -> TextObservation:
            obs, info = self.env.reset(seed=seed)
            self._state = State(episode_id=episode_id or uuid.uuid4().hex, step_count=0)
            return TextObservation(text=obs, info=info, done=False, reward=None)

        def step(self, action: TextAction, timeout_s=None, **kwargs) -> TextObservation:
            obs, reward, terminated, truncated, info = self.env.step(action.action)
            self._state.step_count += 1
            return TextObservation(text=obs, info=info, done=terminated or truncated, reward=reward)

        @property
        def state(self) -> State:
            return self._state

        def close(self) -> None:
            self.env.close()

    return RagenEnvironment


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--max-sessions", type=int, default=64)
    args = parser.parse_args()
    app = create_app(environment(args.env), TextAction, TextObservation, env_name=args.env,
                     max_concurrent_envs=args.max_sessions)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", ws_max_size=1 << 20)


if __name__ == "__main__":
    main()
