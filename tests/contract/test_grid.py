"""The grid games (Sokoban, FrozenLake): every observation format and type, images, rendering and the
shared-memory vector path of each. The contract all envs share is tests/contract/test_env_contract.py."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from ragen_envs.grid import OBSERVATION_FORMATS, OBSERVATION_TYPES

HOSTILE_ACTIONS = [
    "", " ", "\n", "up down", "upp", "Up!", "<answer>Up</answer>", "U p", "\x00", "上", "🙂" * 10,
    "Up" * 100_000, "x" * 1_000_000, None, 3, 1.5, b"Up", ["Up"],
]


@pytest.mark.parametrize("observation_format", OBSERVATION_FORMATS)
@pytest.mark.parametrize("observation_type", OBSERVATION_TYPES)
def test_check_env_passes(env_id, observation_format, observation_type):
    env = gym.make(env_id, observation_format=observation_format, observation_type=observation_type)
    check_env(env.unwrapped, skip_render_check=False)
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)


def test_observations_stay_in_space_through_episodes(env_id):
    env = gym.make(env_id, observation_format="grid_coord", observation_type="both")
    rng = np.random.default_rng(0)
    actions = env.unwrapped.valid_actions
    for episode in range(20):
        obs, _ = env.reset(seed=episode)
        for _ in range(30):
            assert env.observation_space.contains(obs)
            obs, _, terminated, truncated, _ = env.step(actions[rng.integers(len(actions))])
            if terminated or truncated:
                break


def test_actions_are_case_insensitive_and_stripped(env_id):
    for action in ["Up", "up", "UP", "  uP \n", "down", "Left", "RIGHT"]:
        env = gym.make(env_id)
        env.reset(seed=1)
        _, _, _, _, info = env.step(action)
        assert info["action_is_valid"], action


@pytest.mark.parametrize("action", HOSTILE_ACTIONS, ids=lambda a: repr(a)[:20])
def test_hostile_actions_change_nothing(env_id, action):
    env = gym.make(env_id, observation_type="both")
    obs, _ = env.reset(seed=2)
    new_obs, reward, terminated, truncated, info = env.step(action)
    assert info["action_is_valid"] is False and info["action_is_effective"] is False
    assert reward == 0.0 and not terminated
    assert new_obs["text"] == obs["text"]
    np.testing.assert_array_equal(new_obs["image"], obs["image"])


def test_reset_reports_the_optimal_length(env_id):
    env = gym.make(env_id)
    _, info = env.reset(seed=0)
    assert isinstance(info["optimal_solution_length"], int) and info["optimal_solution_length"] >= 1


def test_agent_facing_description(env_id):
    env = gym.make(env_id).unwrapped
    assert env.valid_actions == ["Up", "Down", "Left", "Right"]
    for word in ["Up", "Down", "Left", "Right", "P"]:
        assert word in env.instructions


@pytest.mark.parametrize("observation_type", OBSERVATION_TYPES)
def test_make_vec_sync_and_async_agree(env_id, observation_type):
    # Async uses Gymnasium's defaults, shared memory included: stale Text batches are our fix to prove.
    vecs = [gym.make_vec(env_id, num_envs=3, vectorization_mode=mode, observation_type=observation_type)
            for mode in ("sync", "async")]
    try:
        steps = [[], []]
        for out, vec in zip(steps, vecs):
            obs, _ = vec.reset(seed=11)
            out.append(obs)
            for t in range(12):
                obs, reward, term, trunc, _ = vec.step(("Up", "Left", "Down") if t % 2 else ("Right",) * 3)
                out.append((obs, reward.tolist(), term.tolist(), trunc.tolist()))
        _assert_same(steps[0], steps[1])
    finally:
        for vec in vecs:
            vec.close()


def _assert_same(a, b):
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            _assert_same(a[key], b[key])
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_same(x, y)
    else:
        assert a == b


def test_async_without_copy_returns_current_strings(env_id):
    vec = gym.make_vec(env_id, num_envs=2, vectorization_mode="async", vector_kwargs={"copy": False})
    sync = gym.make_vec(env_id, num_envs=2, vectorization_mode="sync")
    try:
        assert tuple(vec.reset(seed=4)[0]) == tuple(sync.reset(seed=4)[0])
        for _ in range(5):
            assert tuple(vec.step(("Down", "Right"))[0]) == tuple(sync.step(("Down", "Right"))[0])
    finally:
        vec.close()
        sync.close()


def test_render_modes(env_id):
    ansi = gym.make(env_id, render_mode="ansi")
    obs, _ = ansi.reset(seed=0)
    assert ansi.render() == obs
    rgb = gym.make(env_id, render_mode="rgb_array", observation_type="both")
    obs, _ = rgb.reset(seed=0)
    frame = rgb.render()
    assert frame.dtype == np.uint8 and frame.shape == obs["image"].shape
    np.testing.assert_array_equal(frame, obs["image"])
    human = gym.make(env_id, render_mode="human")
    human.reset(seed=0)
    human.step("Up")
    assert human.render() is None
    human.close()


def test_images_differ_between_tiles(env_id):
    env = gym.make(env_id, observation_type="image")
    before, _ = env.reset(seed=0)
    for action in env.unwrapped.valid_actions:
        after, _, terminated, _, info = env.step(action)
        if info["action_is_effective"]:
            assert not np.array_equal(before, after)
            return
    pytest.fail("no action moved the player")


def test_solution_lengths_mix_difficulties_and_a_seed_still_fixes_the_episode(env_id):
    from ragen_envs import base

    mix = (1, 1, 1, 5)  # how often each is drawn: tests/envs/test_frozenlake.py
    env = gym.make(env_id, solution_lengths=mix)
    assert {env.reset(seed=seed)[1]["optimal_solution_length"] for seed in range(20)} == {1, 5}
    first = env.reset(seed=7)[0]
    base._LENGTH_DRAWS.clear()  # found again without the shared finds: the same episode
    assert gym.make(env_id, solution_lengths=mix).reset(seed=7)[0] == first
    assert gym.make(env_id, solution_lengths=(5,)).reset(seed=7)[1]["optimal_solution_length"] == 5


def test_envs_made_alike_share_a_seeds_find_instead_of_searching_again(env_id):
    from ragen_envs import base

    base._LENGTH_DRAWS.clear()
    made = [gym.make(env_id, solution_lengths=(6,)) for _ in range(3)]
    draws = []
    for env in made:
        inner = env.unwrapped
        count = [0]
        original = inner._new_episode

        def counted(options, original=original, count=count):
            count[0] += 1
            return original(options)
        inner._new_episode = counted
        env.reset(seed=11, options={"transition_seed": len(draws)})
        draws.append(count[0])
    assert draws[0] > 1 and draws[1:] == [1, 1]  # 6-move episodes are rare: the first searched
    assert len({env.unwrapped.text_observation() for env in made}) == 1  # the same board


def test_solution_lengths_out_of_reach_or_malformed_say_so(env_id):
    from ragen_envs.base import GenerationBudgetError

    env = gym.make(env_id, solution_lengths=(300,))
    with pytest.raises(GenerationBudgetError, match="came out 300 moves long") as error:
        env.reset(seed=0)
    assert error.value.argument == "solution_lengths"
    for bad in [(), (0,), "12", (1.5,), True, [2, None]]:
        with pytest.raises(ValueError, match="solution_lengths"):
            gym.make(env_id, solution_lengths=bad)


def test_render_without_a_render_mode_says_so_as_gymnasium_does(env_id):
    env = gym.make(env_id)
    env.reset(seed=0)
    with pytest.warns(UserWarning, match="without specifying any render mode"):
        assert env.unwrapped.render() is None


def test_without_pygame_gymnasiums_check_env_passes_and_human_rendering_names_its_extra(env_id):
    # check_env makes the env in every declared render mode: "human" is declared only where pygame is
    import subprocess
    import sys

    script = ("import sys; sys.modules['pygame'] = None\n"  # as on the core install
              "import gymnasium as gym, ragen_envs\nfrom gymnasium.utils.env_checker import check_env\n"
              f"env = gym.make({env_id!r})\nprint(env.unwrapped.metadata['render_modes'])\n"
              "check_env(env.unwrapped, skip_render_check=False)\n"
              f"try:\n    gym.make({env_id!r}, render_mode='human')\nexcept ImportError as e:\n    print(e)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    modes, said = done.stdout.splitlines()
    assert done.returncode == 0 and modes == "['ansi', 'rgb_array']", done.stderr
    assert said == 'render_mode="human" needs pygame, which is not installed: pip install "ragen-envs[image]" ' \
        '(from a clone of the repository: pip install ".[image]")'
    assert "human" in gym.make(env_id).unwrapped.metadata["render_modes"]  # here, with pygame
