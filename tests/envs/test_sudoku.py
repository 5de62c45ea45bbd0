"""Sudoku: unique puzzles, the placement formats, rules and rewards, the solver as oracle."""

import gymnasium as gym
import numpy as np
import pytest

import ragen_envs  # noqa: F401
from ragen_envs.sudoku.puzzles import candidates, generate, solutions


@pytest.mark.parametrize("size, holes", [(4, 8), (9, 32), (9, 45)])
def test_puzzles_have_one_solution_and_the_asked_holes(size, holes):
    for seed in range(10):
        puzzle, solution = generate(np.random.default_rng(seed), size, holes)
        assert (puzzle == 0).sum() == holes and ((puzzle == 0) | (puzzle == solution)).all()
        found = solutions(puzzle, limit=2)
        assert len(found) == 1 and (found[0] == solution).all()
        b = int(size ** 0.5)
        for k in range(size):  # the solution is a Sudoku
            assert sorted(solution[k]) == sorted(solution[:, k]) == list(range(1, size + 1))
            box = solution[k // b * b:k // b * b + b, k % b * b:k % b * b + b]
            assert sorted(box.ravel()) == list(range(1, size + 1))


def test_every_placement_format_and_nothing_else():
    parse = gym.make("Ragen/Sudoku-v0").get_wrapper_attr("parse_action")
    for text in ("place 5 at row 2 col 3", "Place 5 at row 2, column 3", "place 5 at (2,3)", "place 5 at 2, 3",
                 "5 at 2,3", "(2,3,5)", "2,3,5", " 2, 3, 5 "):
        assert parse(text) == (1, 2, 5), text
    for text in ("", "5", "2,3", "place 5", "2,3,5 and 4,4,4", "put 5 at row 2 col 3", "row 2 col 3 = 5"):
        assert parse(text) is None, text


def _cell(env, empty=True):
    puzzle, solution = env.unwrapped.puzzle, env.unwrapped.solution
    r, c = [tuple(rc) for rc in np.argwhere(puzzle == 0 if empty else puzzle != 0)][0]
    return r, c, int(solution[r, c])


def test_rewards_pay_only_right_numbers_once():
    env = gym.make("Ragen/Sudoku-v0")
    env.reset(seed=4)
    r, c, right = _cell(env)
    trial = env.unwrapped.grid.copy()
    legal_wrong = [v for v in candidates(trial, r, c) if v != right]
    fr, fc, fixed = _cell(env, empty=False)
    obs, reward, *_ = env.step(f"{fr + 1},{fc + 1},{fixed}")  # a fixed cell: refused
    assert reward == pytest.approx(-0.1) and "fixed cell" in obs
    clash = next(v for v in range(1, 10) if v not in candidates(trial, r, c))
    obs, reward, _, _, info = env.step(f"place {clash} at row {r + 1} col {c + 1}")
    assert reward == pytest.approx(-0.1) and "clashes with" in obs and "numbers that fit there" in obs
    assert env.unwrapped.grid[r, c] == 0 and not info["action_is_effective"]
    assert legal_wrong  # seed 4's first open cell has a legal wrong number
    # a legal but wrong number is placed and costs the penalty, each time: trial and error is not free
    for _ in range(3):
        obs, reward, _, _, info = env.step(f"{r + 1},{c + 1},{legal_wrong[0]}")
        assert reward == pytest.approx(-0.1) and "it is wrong" in obs and info["action_is_effective"]
    assert env.step(f"{r + 1},{c + 1},{right}")[1] == pytest.approx(1.0)
    obs, reward, *_ = env.step(f"{r + 1},{c + 1},{right}")  # locked once right: nothing more to collect
    assert reward == pytest.approx(-0.1) and "already holds its right number" in obs


def test_the_oracle_solves_and_the_total_is_the_cells_and_the_bonus():
    env = gym.make("Ragen/Sudoku-v0", size=4, holes=8)
    env.reset(seed=0)
    total, steps = 0.0, 0
    while env.get_wrapper_attr("oracle_action")() is not None:
        _, reward, terminated, truncated, info = env.step(env.get_wrapper_attr("oracle_action")())
        total, steps = total + reward, steps + 1
        if terminated or truncated:
            break
    assert info["success"] and terminated and steps == 8 and total == pytest.approx(8 * 1.0 + 10.0)


def test_the_oracle_reasoning_follows_the_grid():
    env = gym.make("Ragen/Sudoku-v0")
    seen = set()
    for seed in range(6):
        env.reset(seed=seed)
        seen.add(env.get_wrapper_attr("oracle_reasoning")())
    assert len(seen) >= 5


@pytest.mark.parametrize("kwargs", [{"size": 6}, {"holes": 81}, {"holes": 0}, {"mistake_penalty": 1.0},
                                    {"max_steps": 0}])
def test_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        gym.make("Ragen/Sudoku-v0", **kwargs)


@pytest.mark.parametrize("digits", [5, 4301, 100_000])
def test_a_huge_number_is_no_placement_and_never_raises(digits):
    # int() of a 4,301-digit numeral raised ValueError out of env.step
    env = gym.make("Ragen/Sudoku-v0")
    env.reset(seed=0)
    _, reward, _, _, info = env.step(f"1,1,{'9' * digits}")
    assert reward == 0.0 and not info["action_is_valid"]


# -- bounds and counted generation (a 16x16 reset ran for minutes, a 49x49 one never ended) ---------------
@pytest.mark.parametrize("env_id, kwargs", [("Ragen/Sudoku-v0", {"size": 16}), ("Ragen/Sudoku-v0", {"size": 49}),
                                            ("Ragen/SudokuMedium-v0", {"size": 16, "holes": 255})])
def test_sizes_past_9_are_refused_before_any_reset(env_id, kwargs):
    from ragen_envs.sudoku import SudokuEnv

    with pytest.raises(ValueError, match=r"^(size must be in \[4, 9\]|holes must be in \[1, 50\]) \(.+\), got "):
        gym.make(env_id, **kwargs)
    with pytest.raises(ValueError, match=r"^size must be in \[4, 9\]"):
        SudokuEnv(**kwargs)


def test_holes_past_50_are_refused():
    with pytest.raises(ValueError, match=r"^holes must be in \[1, 50\] \(.+\), got 255$"):
        gym.make("Ragen/Sudoku-v0", holes=255)


@pytest.mark.parametrize("size, holes", [(4, 15), (9, 32), (9, 50)])
def test_generation_counts_its_search_nodes_well_inside_the_budgets(size, holes):
    from ragen_envs.base import Budget
    from ragen_envs.sudoku.puzzles import DIG_NODES, FILL_NODES

    for seed in range(5):
        fill = Budget(FILL_NODES, "nodes", "size", size, "")
        dig = Budget(DIG_NODES, "nodes", "holes", holes, "")
        puzzle, solution = generate(np.random.default_rng(seed), size, holes, fill=fill, dig=dig)
        same, _ = generate(np.random.default_rng(seed), size, holes)  # counting changes no puzzle
        assert (puzzle == same).all() and len(solutions(puzzle)) == 1
        assert 0 < fill.used <= FILL_NODES // 50 and 0 < dig.used <= DIG_NODES // 20


def test_a_spent_budget_names_the_argument_to_change():
    from ragen_envs.base import Budget, GenerationBudgetError

    # 16x16 with 255 holes, the red team's hang: past a small budget it stops, counted, and says holes
    dig = Budget(5_000, "search nodes digging holes", "holes", 255, "use fewer holes")
    with pytest.raises(GenerationBudgetError, match=r"more than 5,000 search nodes digging holes with holes=255") \
            as error:
        generate(np.random.default_rng(0), 16, 255, dig=dig)
    assert error.value.argument == "holes" and dig.used == 5_001
    fill = Budget(10, "search nodes filling the grid", "size", 9, "use a smaller size")
    with pytest.raises(GenerationBudgetError) as error:
        generate(np.random.default_rng(0), 9, 32, fill=fill)
    assert error.value.argument == "size" and isinstance(error.value, ValueError)
