import gymnasium as gym
import pytest

from ragen_envs import ENVIRONMENTS
from ragen_envs.frozenlake import FrozenLakeEnv
from ragen_envs.sokoban import SokobanEnv


def test_every_env_is_registered(env_id):
    assert env_id in ENVIRONMENTS
    env = gym.make(env_id)
    assert env.unwrapped.spec.id == env_id
    env.close()


def test_module_prefixed_id():
    env = gym.make("ragen_envs:Ragen/Sokoban-v0")
    assert isinstance(env.unwrapped, SokobanEnv)


def test_kwargs_pass_through():
    env = gym.make("Ragen/Sokoban-v0", dim_room=(7, 8), num_boxes=2, max_steps=30, search_depth=50)
    obs, _ = env.reset(seed=3)
    rows = obs.splitlines()
    assert len(rows) == 7 and all(len(r) == 8 for r in rows)
    assert sum(r.count("X") + r.count("√") for r in rows) == 2
    assert env.unwrapped.max_steps == 30
    lake = gym.make("Ragen/FrozenLake-v0", size=6, p=0.9, slip=0.25)
    assert isinstance(lake.unwrapped, FrozenLakeEnv) and lake.unwrapped.slip == 0.25
    assert len(lake.reset(seed=0)[0].splitlines()) == 6


def test_unknown_kwarg_is_rejected_by_name(env_id):
    with pytest.raises(TypeError, match="no_such_argument"):
        gym.make(env_id, no_such_argument=1)


@pytest.mark.filterwarnings("ignore:.*render_mode")
@pytest.mark.parametrize("env_id, kwargs, match", [
    ("Ragen/Sokoban-v0", {"dim_room": (2, 9)}, "dim_room"),
    ("Ragen/Sokoban-v0", {"dim_room": "6x6"}, "dim_room"),
    ("Ragen/Sokoban-v0", {"num_boxes": 0}, "num_boxes"),
    ("Ragen/Sokoban-v0", {"num_boxes": 10}, "num_boxes"),
    ("Ragen/Sokoban-v0", {"search_depth": 0}, "search_depth"),
    ("Ragen/Sokoban-v0", {"max_steps": 0}, "max_steps"),
    ("Ragen/Sokoban-v0", {"observation_format": "ascii"}, "observation_format"),
    ("Ragen/Sokoban-v0", {"observation_type": "video"}, "observation_type"),
    ("Ragen/Sokoban-v0", {"render_mode": "rgb"}, "render_mode"),
    ("Ragen/FrozenLake-v0", {"slip": 1.5}, "slip"),
    ("Ragen/FrozenLake-v0", {"slip": -0.1}, "slip"),
    ("Ragen/FrozenLake-v0", {"p": 0}, "p "),
    ("Ragen/FrozenLake-v0", {"size": 1}, "size"),
])
def test_bad_argument_values_get_clear_errors(env_id, kwargs, match):
    with pytest.raises(ValueError, match=match):
        gym.make(env_id, **kwargs)
