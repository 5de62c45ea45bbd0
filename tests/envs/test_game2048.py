"""2048: sliding and merging, the rewards, the new tiles, the end, the lookahead oracle."""

import gymnasium as gym
import numpy as np
import pytest

import ragen_envs  # noqa: F401
from ragen_envs.game2048.env import slide

GRID = np.array([[2, 2, 4, 0], [0, 0, 0, 0], [2, 0, 2, 2], [4, 4, 4, 4]])


@pytest.mark.parametrize("move, after, merged", [
    ("Up", [[4, 2, 4, 2], [4, 4, 2, 4], [0, 0, 4, 0], [0, 0, 0, 0]], 4),
    ("Right", [[0, 0, 4, 4], [0, 0, 0, 0], [0, 0, 2, 4], [0, 0, 8, 8]], 24),
    ("Down", [[0, 0, 0, 0], [0, 0, 4, 0], [4, 2, 2, 2], [4, 4, 4, 4]], 4),
    ("Left", [[4, 4, 0, 0], [0, 0, 0, 0], [4, 2, 0, 0], [8, 8, 0, 0]], 24),
])
def test_slides_by_hand(move, after, merged):
    # a tile merges once a move; the pair nearest the wall merges first ([2, 2, 2] right -> [., 2, 4])
    assert slide(GRID, move)[0].tolist() == after and slide(GRID, move)[1] == merged


def test_a_move_scores_the_log_of_its_merges_and_spawns_one_tile():
    env = gym.make("Ragen/2048-v0")
    env.reset(seed=0)
    env.unwrapped.grid = GRID.copy()
    _, reward, terminated, _, info = env.step("right")
    assert reward == pytest.approx(0.1 * np.log2(25)) and not terminated
    assert info["score"] == 24 and (env.unwrapped.grid != 0).sum() == (slide(GRID, "Right")[0] != 0).sum() + 1
    before = env.unwrapped.grid.copy()
    stuck = next((m for m in ("Up", "Right", "Down", "Left") if np.array_equal(slide(before, m)[0], before)), None)
    if stuck:  # a move that changes nothing: no tile, no reward, a step spent
        _, reward, _, _, info = env.step(stuck)
        assert reward == 0 and np.array_equal(env.unwrapped.grid, before) and not info["action_is_effective"]


def test_new_tiles_are_mostly_twos_and_follow_the_transition_seed():
    env = gym.make("Ragen/2048-v0")
    tiles = []
    for seed in range(300):
        env.reset(seed=seed)
        tiles += [int(v) for v in env.unwrapped.grid.ravel() if v]
    assert set(tiles) == {2, 4} and tiles.count(2) / len(tiles) == pytest.approx(0.9, abs=0.04)
    grids = []
    for t in (1, 1, 2):
        env.reset(seed=5, options={"transition_seed": t})
        start = env.unwrapped.grid.copy()
        env.step(env.get_wrapper_attr("oracle_action")())
        grids.append((start.tolist(), env.unwrapped.grid.tolist()))
    assert grids[0] == grids[1] and grids[0][0] == grids[2][0]  # same start, the same seed the same tiles


def test_the_game_ends_when_nothing_moves_and_success_is_the_target_tile():
    env = gym.make("Ragen/2048-v0", target=32)
    env.reset(seed=0)
    env.unwrapped.grid = np.array([[2, 4, 2, 4], [4, 2, 4, 2], [2, 4, 2, 4], [4, 2, 16, 16]])
    _, reward, terminated, _, info = env.step("Left")  # 16 + 16 -> 32, then a tile fills the gap
    assert reward == pytest.approx(0.1 * np.log2(33)) and info["success"] and info["max_tile"] == 32
    assert terminated and env.unwrapped.moves() == []  # a full grid without a merge: nothing moves
    assert env.step("Up")[2] and env.unwrapped.grid[3, 2] == 32  # and the end is absorbing
    env.reset(seed=1)
    env.unwrapped.grid = np.array([[2, 4, 2, 4], [4, 2, 4, 2], [2, 4, 2, 4], [4, 2, 4, 0]])
    _, _, terminated, _, _ = env.step("Right")  # the last cell's new tile may leave a move or none
    assert terminated == (not env.unwrapped.moves())


def test_the_lookahead_oracle_outplays_random_moves():
    env = gym.make("Ragen/2048-v0")
    rng = np.random.default_rng(0)

    def play(choose):
        tiles = []
        for seed in range(4):
            env.reset(seed=seed)
            for _ in range(150):
                _, _, terminated, truncated, info = env.step(choose())
                if terminated or truncated:
                    break
            tiles.append(info["max_tile"])
        return np.mean(tiles)

    assert play(lambda: env.get_wrapper_attr("oracle_action")()) > 2 * play(
        lambda: ("Up", "Right", "Down", "Left")[rng.integers(4)])


@pytest.mark.parametrize("kwargs", [{"size": 1}, {"target": 100}, {"two_prob": 2.0}, {"max_steps": 0}])
def test_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        gym.make("Ragen/2048-v0", **kwargs)


# -- bounds: size 32 overflowed the reward range's float with an OverflowError that named nothing ---------
@pytest.mark.parametrize("kwargs, message", [
    ({"size": 32}, r"^size must be in \[2, 8\] \(.+\), got 32$"),
    ({"size": 9}, r"^size must be in \[2, 8\]"),
    ({"target": 2 ** 40}, r"^target must be in \[4, 1048576\]"),
    ({"two_prob": 1.5}, r"^two_prob must be in \[0, 1\]"),
])
def test_arguments_past_their_bounds_are_refused_by_name(kwargs, message):
    from ragen_envs.game2048 import Game2048Env

    with pytest.raises(ValueError, match=message):
        gym.make("Ragen/2048-v0", **kwargs)
    with pytest.raises(ValueError, match=message):
        Game2048Env(**kwargs)


def test_the_largest_allowed_grid_plays_with_a_finite_reward_range():
    env = gym.make("Ragen/2048-v0", size=8, target=2 ** 20)
    env.reset(seed=0)
    assert np.isfinite(env.unwrapped.reward_range[1])
    assert env.step("Left")[4]["action_is_valid"]
