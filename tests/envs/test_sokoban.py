from collections import Counter, deque

import gymnasium as gym
import numpy as np
import pytest

from ragen_envs.grid import DIRECTIONS
from ragen_envs.sokoban import SokobanEnv
from ragen_envs.sokoban.generator import generate_level
from ragen_envs.sokoban.solver import solve

LEVEL = """\
#######
#P_X_O#
#__X_O#
#_____#
#######"""


def make(**kwargs):
    return gym.make("Ragen/Sokoban-v0", dim_room=(5, 7), num_boxes=2, **kwargs)


def test_given_level_renders_back_exactly():
    env = make()
    obs, info = env.reset(options={"level": LEVEL})
    assert obs == LEVEL
    # Box (1,3): Right x3 (walk, push, push); walk Left, Left, Down to (2,2); push box (2,3) Right x2.
    # Doing the lower box first costs 9; nothing is shorter than 8.
    assert info["optimal_solution_length"] == 8


def test_rewards_by_hand():
    env = make()
    env.reset(options={"level": LEVEL})
    # Walking right: player to (1,2), box ahead at (1,3).
    obs, reward, terminated, _, info = env.step("Right")
    assert reward == pytest.approx(-0.1) and info["action_is_effective"] and not terminated
    # Push the box (1,3) -> (1,4): floor, no bonus.
    _, reward, _, _, _ = env.step("Right")
    assert reward == pytest.approx(-0.1)
    # Push it onto the target (1,5): +1.
    obs, reward, _, _, _ = env.step("Right")
    assert reward == pytest.approx(0.9)
    assert obs.splitlines()[1] == "#___P√#"
    # Pushing into the wall behind the box does nothing but costs the step.
    obs2, reward, _, _, info = env.step("Right")
    assert obs2 == obs and reward == pytest.approx(-0.1) and not info["action_is_effective"]
    # Pushing a box off its target: -0.1 - 1.
    env.reset(options={"level": "#######\n#__P√_#\n#_____#\n#_X__O#\n#######"})
    _, reward, _, _, _ = env.step("Right")  # pushes the box off its target onto floor
    assert reward == pytest.approx(-1.1)


def test_solved_gives_ten_and_terminates():
    env = make()
    env.reset(options={"level": "#######\n#__PX√#\n#O____#\n#_____#\n#######"})
    _, reward, terminated, truncated, info = env.step("Left")
    assert reward == pytest.approx(-0.1) and not terminated
    env.reset(options={"level": "#######\n#_PXO√#\n#_____#\n#_____#\n#######"})
    _, reward, terminated, truncated, info = env.step("Right")
    assert reward == pytest.approx(-0.1 + 1 + 10)
    assert terminated and not truncated and info["success"]


def test_malformed_levels_are_rejected():
    env = make()
    with pytest.raises(ValueError, match="enclosed"):
        env.reset(options={"level": "_______\n#P_X_O#\n#__X_O#\n#_____#\n#######"})
    with pytest.raises(ValueError, match="symbols"):
        env.reset(options={"level": LEVEL.replace("_", "?", 1)})
    with pytest.raises(ValueError, match="boxes"):
        env.reset(options={"level": LEVEL.replace("X", "_", 1)})
    with pytest.raises(ValueError, match="board is"):
        env.reset(options={"level": "###\n#P#\n###"})


def _bfs_length(level):
    """Reference: plain breadth-first search over (player, boxes) states."""
    cols = level.cols
    floor = ~level.walls.ravel()
    start = (level.player, frozenset(level.boxes))
    seen = {start}
    queue = deque([(start, 0)])
    while queue:
        (player, boxes), depth = queue.popleft()
        if boxes <= level.targets:
            return depth
        for dr, dc in DIRECTIONS.values():
            step = dr * cols + dc
            nxt = player + step
            if not floor[nxt]:
                continue
            nboxes = boxes
            if nxt in boxes:
                if not floor[nxt + step] or nxt + step in boxes:
                    continue
                nboxes = boxes - {nxt} | {nxt + step}
            state = (nxt, nboxes)
            if state not in seen:
                seen.add(state)
                queue.append((state, depth + 1))
    return None


@pytest.mark.parametrize("dim_room, num_boxes", [((6, 6), 1), ((6, 7), 2)])
def test_solver_is_optimal_against_breadth_first_search(dim_room, num_boxes):
    rng = np.random.default_rng(0)
    for _ in range(40):
        level = generate_level(rng, dim_room, num_boxes, search_depth=100)
        moves = solve(level.walls, level.targets, level.boxes, level.player)
        assert moves is not None and len(moves) == _bfs_length(level)


def test_solver_reports_unsolvable():
    env = make()
    # The box in the corner can never reach its target.
    env.reset(options={"level": "#######\n#X___O#\n#P__X_#\n#____O#\n#######"})
    assert env.unwrapped.solve() is None


@pytest.mark.parametrize("dim_room, num_boxes, count", [((6, 6), 1, 300), ((8, 8), 2, 100),
                                                        ((10, 10), 3, 40)])
def test_generated_levels_are_solvable_and_never_start_solved(dim_room, num_boxes, count):
    env = gym.make("Ragen/Sokoban-v0", dim_room=dim_room, num_boxes=num_boxes)
    lengths = Counter()
    for seed in range(count):
        obs, info = env.reset(seed=seed)
        assert "X" in obs, "a level must not start solved"
        moves = env.unwrapped.solve()
        assert moves, f"seed {seed}: unsolvable level\n{obs}"
        if info["optimal_solution_length"] is not None:
            assert info["optimal_solution_length"] == len(moves)
        for i, action in enumerate(moves):
            _, _, terminated, _, info = env.step(action)
            assert terminated == (i == len(moves) - 1)
        assert info["success"]
        lengths[len(moves)] += 1
    assert len(lengths) > 3  # levels vary in difficulty


def test_truncation_at_max_steps():
    env = gym.make("Ragen/Sokoban-v0", max_steps=5)
    env.reset(options={"level": "######\n#P___#\n#____#\n#_X__#\n#O___#\n######"})
    flags = [env.step(a)[2:4] for a in ["Right", "Left", "Right", "Left", "Right"]]
    assert flags == [(False, False)] * 4 + [(False, True)]


def test_coord_format_lists_every_object():
    env = make(observation_format="coord")
    obs, _ = env.reset(options={"level": LEVEL})
    assert "Board size: 5 rows x 7 columns" in obs
    assert "Player: (1, 1)" in obs
    assert "Boxes: (1, 3), (2, 3)" in obs
    assert "Targets: (1, 5), (2, 5)" in obs
    both = make(observation_format="grid_coord").reset(options={"level": LEVEL})[0]
    assert both.startswith(LEVEL + "\n") and both.endswith(obs)


def test_player_on_target_symbol():
    env = make()
    obs, _ = env.reset(options={"level": "#######\n#__SX_#\n#__X_O#\n#_____#\n#######"})
    assert obs.splitlines()[1] == "#__SX_#"
    obs, *_ = env.step("Left")
    assert obs.splitlines()[1] == "#_POX_#"


def test_solver_unsolvable_level_has_none_length():
    env = gym.make("Ragen/Sokoban-v0", dim_room=(5, 7), num_boxes=1)
    _, info = env.reset(options={"level": "#######\n#X___O#\n#__P__#\n#_____#\n#######"})
    assert info["optimal_solution_length"] is None


def test_class_is_usable_without_gymnasium_make():
    env = SokobanEnv()
    obs, _ = env.reset(seed=0)
    assert len(obs.splitlines()) == 6


def test_the_solver_budget_bounds_the_reset():
    # A budget too small for a 10x10 room with three boxes: the length is reported unknown, not stalled on.
    small = gym.make("Ragen/Sokoban-v0", dim_room=(10, 10), num_boxes=3, solver_nodes=50).unwrapped
    full = gym.make("Ragen/Sokoban-v0", dim_room=(10, 10), num_boxes=3).unwrapped
    lengths = [(small.reset(seed=s)[1]["optimal_solution_length"], full.reset(seed=s)[1]["optimal_solution_length"])
               for s in range(20)]
    assert any(a is None and b is not None for a, b in lengths)
    assert all(a == b for a, b in lengths if a is not None)


@pytest.mark.parametrize("dim_room", [(3, 3), (4, 4), (3, 4)])  # (2, 9): below dim_room's bounds, refused there
def test_a_room_too_small_for_any_box_says_so(dim_room):
    with pytest.raises(ValueError, match=r"too small for any box.*three free cells in a line"):
        gym.make("Ragen/Sokoban-v0", dim_room=dim_room)
    assert gym.make("Ragen/Sokoban-v0", dim_room=(3, 5)).reset(seed=0)[0].count("X") == 1


def test_presets_apply_and_can_be_overridden():
    assert gym.make("Ragen/SokobanLarger-v0").unwrapped.dim_room == (8, 8)
    assert gym.make("Ragen/SokobanLarger-v0", dim_room=(7, 7)).unwrapped.dim_room == (7, 7)


def test_kwargs_pass_through():
    env = gym.make("Ragen/Sokoban-v0", dim_room=(7, 8), num_boxes=2, max_steps=30, search_depth=50)
    obs, _ = env.reset(seed=3)
    rows = obs.splitlines()
    assert len(rows) == 7 and all(len(r) == 8 for r in rows)
    assert sum(r.count("X") + r.count("√") for r in rows) == 2
    assert env.unwrapped.max_steps == 30


def test_other_symbols_draw_the_same_game():
    """RAGEN's SokobanDifferentGridVocab: the same levels and moves, written in W . G C B A @."""
    plain, vocab = gym.make("Ragen/Sokoban-v0"), gym.make("Ragen/SokobanGridVocab-v0")
    table = str.maketrans(SokobanEnv.SYMBOLS, "W.GCBA@")
    for seed in range(5):
        a, _ = plain.reset(seed=seed)
        b, _ = vocab.reset(seed=seed)
        assert a.translate(table) == b
        for action in ("Up", "Left", "Down", "Right"):
            a, ra, *_ = plain.step(action)
            b, rb, *_ = vocab.step(action)
            assert a.translate(table) == b and ra == rb
    assert "W wall, . floor, G target, B box, C box on target, A player, @ player on target" in \
        vocab.unwrapped.instructions
    replayed, _ = vocab.reset(options={"level": b})  # a level given in its own symbols
    assert replayed == b
    for bad in ("W.GCBA", "W.GCBAA", "W.GC A@"):
        with pytest.raises(ValueError, match="symbols"):
            SokobanEnv(symbols=bad)


# -- bounds and counted generation (search_depth=1e9 allocated 7.45 GiB of moves) ------------------------
@pytest.mark.parametrize("kwargs, message", [
    ({"search_depth": 10**9}, r"^search_depth must be in \[1, 1000\] \(.+\), got 1000000000$"),
    ({"solver_nodes": 10**9}, r"^solver_nodes must be in \[1, 50000\]"),
    ({"dim_room": (2, 9)}, r"^each number of dim_room must be in \[3, 20\] \(.+\), got \(2, 9\)$"),
    ({"dim_room": (4, 100)}, r"^each number of dim_room must be in \[3, 20\]"),
    ({"num_boxes": 11, "dim_room": (20, 20)}, r"^num_boxes must be in \[1, 10\]"),
    ({"max_steps": 10**6}, r"^max_steps must be in \[1, 10000\]"),
])
def test_arguments_past_their_bounds_are_refused_before_any_reset(kwargs, message):
    with pytest.raises(ValueError, match=message):
        gym.make("Ragen/Sokoban-v0", **kwargs)
    with pytest.raises(ValueError, match=message):
        SokobanEnv(**kwargs)


def test_a_huge_float_search_depth_is_refused_before_any_allocation():
    with pytest.raises(ValueError, match=r"^search_depth must be in \[1, 1000\]"):
        SokobanEnv(search_depth=1e9)  # gym.make refuses a float as no integer first


def test_generation_counts_the_rooms_it_carves():
    from ragen_envs.base import Budget
    from ragen_envs.sokoban.generator import MAX_ATTEMPTS

    for dim_room, num_boxes, depth in [((6, 6), 1, 300), ((20, 20), 10, 1000), ((20, 20), 10, 1), ((3, 5), 1, 1)]:
        for seed in range(5):
            budget = Budget(MAX_ATTEMPTS, "rooms", "dim_room", dim_room, "")
            level = generate_level(np.random.default_rng(seed), dim_room, num_boxes, depth, budget=budget)
            same = generate_level(np.random.default_rng(seed), dim_room, num_boxes, depth)  # counting changes nothing
            assert (level.boxes, level.player) == (same.boxes, same.player) and len(level.boxes) == num_boxes
            assert 1 <= budget.used <= MAX_ATTEMPTS // 10


def test_a_spent_room_budget_names_dim_room():
    from ragen_envs.base import Budget, GenerationBudgetError

    budget = Budget(3, "rooms", "dim_room", (3, 5), "use a larger room")
    for seed in range(50):  # a 1x3 corridor with one reverse move seldom moves its box: some seed spends 3 rooms
        try:
            generate_level(np.random.default_rng(seed), (3, 5), 1, 1, budget=budget)
        except GenerationBudgetError as error:
            assert error.argument == "dim_room" and "more than 3 rooms with dim_room=(3, 5)" in str(error)
            assert budget.used == 4
            return
        budget.used = 0
    pytest.fail("no seed spent the budget")


def test_the_success_reward_pays_one_for_the_solve_and_nothing_else():
    env = make(reward="success")
    words = env.unwrapped.instructions
    assert env.unwrapped.reward_range == (0.0, 1.0) and "1 when every box is on a target, 0 otherwise" in words
    assert "-0.1 per move" not in words and "-0.1 per move" in make().unwrapped.instructions
    env.reset(options={"level": "#######\n#__P√_#\n#_____#\n#_X__O#\n#######"})
    assert env.step("Right")[1] == 0.0  # a box pushed off its target costs nothing
    assert env.step("Left")[1] == 0.0 and env.step("Up")[1] == 0.0  # nor does a step or a wall
    env.reset(options={"level": "#######\n#_PXO√#\n#_____#\n#_____#\n#######"})
    _, reward, terminated, _, info = env.step("Right")
    assert (reward, terminated, info["success"]) == (1.0, True, True)
    for making in (make, SokobanEnv):  # by gym.make, and the class itself
        with pytest.raises(ValueError, match="reward'? must be one of 'shaped', 'success', got 'sparse'"):
            making(reward="sparse")
