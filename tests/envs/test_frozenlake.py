import gymnasium as gym
import numpy as np
import pytest

from ragen_envs.frozenlake.env import generate_map, shortest_path

OPEN = "_____\n_____\n__P__\n_____\n____G"  # no holes: every move from the centre lands


def make(**kwargs):
    return gym.make("Ragen/FrozenLake-v0", **kwargs)


def _landing(obs: str) -> str:
    r, c = divmod(obs.replace("\n", "").index("P"), 5)
    return {(1, 2): "Up", (3, 2): "Down", (2, 1): "Left", (2, 3): "Right"}[(r, c)]


@pytest.mark.parametrize("slip", [0.0, 0.2, 0.5, 0.8, 1.0])
def test_slip_frequencies(slip):
    env = make(size=5, slip=slip)
    env.reset(seed=123)
    n = 6000
    counts = {"Up": 0, "Down": 0, "Left": 0, "Right": 0}
    for _ in range(n):
        env.reset(options={"map": OPEN})
        counts[_landing(env.step("Up")[0])] += 1
    assert counts["Down"] == 0  # never backwards
    if slip == 0:
        assert counts["Up"] == n
        return
    if slip == 1:
        assert counts["Up"] == 0
    expected = {"Up": (1 - slip) * n, "Left": slip / 2 * n, "Right": slip / 2 * n}
    chi2 = sum((counts[k] - e) ** 2 / e for k, e in expected.items() if e > 0)
    assert chi2 < 18.4, (counts, expected)  # chi-square, 2 degrees of freedom, p = 1e-4


def test_slip_zero_is_deterministic():
    for seed in range(20):
        a, b = make(), make()
        a.reset(seed=seed)
        b.reset(seed=seed + 1000)  # a different random stream cannot matter without slip
        b.reset(options={"map": a.unwrapped.grid_text()})
        for action in ["Up", "Left", "Down", "Right", "Right", "Down"]:
            assert a.step(action)[:4] == b.step(action)[:4]


def test_hole_terminates_without_reward():
    env = make()
    env.reset(options={"map": "P_O_\n____\n____\n___G"})
    obs, reward, terminated, _, info = env.step("Right")
    assert (reward, terminated, info["success"]) == (0.0, False, False)
    obs, reward, terminated, _, info = env.step("Right")
    assert obs.splitlines()[0] == "__X_"
    assert (reward, terminated, info["success"]) == (0.0, True, False)


def test_goal_gives_one_and_terminates():
    env = make()
    env.reset(options={"map": "____\n____\n____\n__PG"})
    obs, reward, terminated, truncated, info = env.step("right")
    assert obs.splitlines()[3] == "___√"
    assert (reward, terminated, truncated, info["success"]) == (1.0, True, False, True)


def test_moving_off_the_board_stays_put():
    env = make()
    obs, _ = env.reset(options={"map": "P___\n____\n____\n___G"})
    new, reward, terminated, _, info = env.step("Up")
    assert new == obs and reward == 0.0 and not terminated
    assert info["action_is_valid"] and not info["action_is_effective"]


@pytest.mark.parametrize("size, p", [(4, 0.8), (6, 0.6), (8, 0.9), (3, 0.3)])
def test_generated_maps_always_have_a_path(size, p):
    rng = np.random.default_rng(0)
    holes_seen = 0
    for _ in range(300):
        holes, start, goal = generate_map(rng, size, p)
        assert start != goal and not holes[start] and not holes[goal]
        assert shortest_path(holes, start, goal)
        holes_seen += holes.sum()
    assert holes_seen > 0


def test_start_and_goal_are_anywhere():
    starts, goals = set(), set()
    env = make()
    for seed in range(200):
        obs, _ = env.reset(seed=seed)
        flat = obs.replace("\n", "")
        starts.add(flat.index("P"))
        goals.add(flat.index("G"))
    assert len(starts) == 16 and len(goals) == 16


def test_shortest_path_oracle_always_succeeds_without_slip():
    env = make(size=6)
    for seed in range(100):
        _, info = env.reset(seed=seed)
        path = env.unwrapped.shortest_path()
        assert len(path) == info["optimal_solution_length"]
        for action in path:
            _, reward, terminated, _, info = env.step(action)
        assert terminated and reward == 1.0 and info["success"]


def _success_rate(policy, slip, episodes=300):
    env = make(size=5, slip=slip, max_steps=40)
    rng = np.random.default_rng(0)
    wins = 0
    for seed in range(episodes):
        env.reset(seed=seed)
        done = False
        while not done:
            _, _, terminated, truncated, info = env.step(policy(env.unwrapped, rng))
            done = terminated or truncated
        wins += info["success"]
    return wins / episodes


def test_optimal_policy_beats_random_and_shortest_path_under_slip():
    optimal = _success_rate(lambda env, rng: env.optimal_action(), 0.4)
    naive = _success_rate(lambda env, rng: (env.shortest_path() or ["Up"])[0], 0.4)
    random = _success_rate(lambda env, rng: ["Up", "Down", "Left", "Right"][rng.integers(4)], 0.4)
    assert optimal > random + 0.2
    assert optimal >= naive


def test_coord_format():
    env = make(observation_format="coord")
    obs, _ = env.reset(options={"map": "P_O_\n____\nO___\n___G"})
    assert "Board size: 4 rows x 4 columns" in obs
    assert "Player: (0, 0)" in obs and "Goal: (3, 3)" in obs and "Holes: (0, 2), (2, 0)" in obs


def test_instructions_mention_slip_only_when_slippery():
    assert "slippery" not in make().unwrapped.instructions
    assert "30%" in make(slip=0.3).unwrapped.instructions


def test_bad_maps_are_rejected():
    env = make()
    with pytest.raises(ValueError, match="P"):
        env.reset(options={"map": "____\n____\n____\n___G"})
    with pytest.raises(ValueError, match="symbols"):
        env.reset(options={"map": "P__#\n____\n____\n___G"})


def test_presets_apply_and_kwargs_pass_through():
    import gymnasium as gym

    assert gym.make("Ragen/FrozenLakeSlippery-v0").unwrapped.slip == pytest.approx(2 / 3)
    assert "slippery" in gym.make("Ragen/FrozenLakeSlippery-v0").unwrapped.instructions
    lake = gym.make("Ragen/FrozenLake-v0", size=6, p=0.9, slip=0.25)
    assert lake.unwrapped.slip == 0.25
    assert len(lake.reset(seed=0)[0].splitlines()) == 6


# -- bounds and counted map draws --------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, message", [
    ({"size": 21}, r"^size must be in \[2, 20\] \(rows and columns\), got 21$"),
    ({"p": 0}, r"^p must be > 0 and <= 1 \(.+\), got 0$"),
    ({"slip": float("nan")}, r"^slip must be in \[0, 1\]"),
    ({"max_steps": 10**9}, r"^max_steps must be in \[1, 10000\]"),
])
def test_arguments_past_their_bounds_are_refused_by_name(kwargs, message):
    from ragen_envs.frozenlake import FrozenLakeEnv

    with pytest.raises(ValueError, match=message):
        FrozenLakeEnv(**kwargs)


@pytest.mark.parametrize("size, p", [(20, 5e-324), (20, 0.3), (2, 5e-324), (4, 0.8)])
def test_map_draws_are_counted_and_the_extremes_need_few(size, p):
    from ragen_envs.base import Budget
    from ragen_envs.frozenlake.env import MAX_ATTEMPTS

    for seed in range(5):
        budget = Budget(MAX_ATTEMPTS, "maps drawn", "p", p, "")
        holes, start, goal = generate_map(np.random.default_rng(seed), size, p, budget=budget)
        assert shortest_path(holes, start, goal) is not None
        assert 1 <= budget.used <= MAX_ATTEMPTS // 10


def test_a_spent_map_budget_names_p():
    from ragen_envs.base import Budget, GenerationBudgetError

    # at p ~ 0 a 20x20 map has a path only when start and goal are neighbours (1 draw in 100)
    budget = Budget(2, "maps drawn", "p", 1e-9, "raise p")
    with pytest.raises(GenerationBudgetError, match=r"more than 2 maps drawn with p=1e-09: raise p") as error:
        generate_map(np.random.default_rng(0), 20, 1e-9, budget=budget)
    assert error.value.argument == "p" and budget.used == 3


def test_a_length_listed_three_times_is_drawn_three_times_as_often():
    env = gym.make("Ragen/FrozenLake-v0", solution_lengths=(1, 1, 1, 5))
    lengths = [env.reset(seed=seed)[1]["optimal_solution_length"] for seed in range(400)]
    assert set(lengths) == {1, 5} and 2.3 < lengths.count(1) / lengths.count(5) < 4  # 3 : 1, 95 % band
