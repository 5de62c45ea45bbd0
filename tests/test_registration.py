"""The catalogue: registration, presets, optional extras, and the README's table."""

from pathlib import Path

import gymnasium as gym
import pytest

from ragen_envs import ENVIRONMENTS, EnvEntry, MissingExtraError
from ragen_envs.frozenlake import FrozenLakeEnv
from ragen_envs.registry import markdown_table, register
from ragen_envs.sokoban import SokobanEnv
from conftest import env_params


@pytest.mark.parametrize("env_id", env_params(list(ENVIRONMENTS)))
def test_every_catalogue_entry_is_registered(env_id):
    entry = ENVIRONMENTS[env_id]
    env = gym.make(env_id)
    assert env.unwrapped.spec.id == env_id
    for name, value in entry.kwargs.items():  # presets are applied
        assert getattr(env.unwrapped, name, value) == value
    assert entry.description and "\n" not in entry.description
    env.close()


def test_presets_apply_and_can_be_overridden():
    assert gym.make("Ragen/SokobanLarger-v0").unwrapped.dim_room == (8, 8)
    assert gym.make("Ragen/SokobanLarger-v0", dim_room=(7, 7)).unwrapped.dim_room == (7, 7)
    assert gym.make("Ragen/FrozenLakeSlippery-v0").unwrapped.slip == pytest.approx(2 / 3)
    assert "slippery" in gym.make("Ragen/FrozenLakeSlippery-v0").unwrapped.instructions


def test_a_missing_extra_is_named_at_make():
    register(EnvEntry("RagenTest/NeedsExtra-v0", "ragen_envs.sokoban:SokobanEnv", "needs a package",
                      extra="shop", requires=("no_such_module_for_ragen",)))
    with pytest.raises(MissingExtraError, match=r'pip install "ragen-envs\[shop\]"'):
        gym.make("RagenTest/NeedsExtra-v0")
    del ENVIRONMENTS["RagenTest/NeedsExtra-v0"]


def test_readme_table_is_the_catalogue():
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    assert markdown_table() in readme, "regenerate the README's table with `ragen list --markdown`"


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
    ("Ragen/Sokoban-v0", {"solver_nodes": 0}, "solver_nodes"),
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
