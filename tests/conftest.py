import os

# pygame windows in tests run headless.
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("SDL_AUDIODRIVER", "dummy")

import pytest  # noqa: E402

import ragen_envs  # noqa: E402, F401  (registers the envs)

ENV_IDS = ["Ragen/Sokoban-v0", "Ragen/FrozenLake-v0"]


@pytest.fixture(params=ENV_IDS)
def env_id(request):
    return request.param
