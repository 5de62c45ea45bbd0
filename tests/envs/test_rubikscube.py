"""The 2x2 cube: the move algebra, stickers by hand, the exact distance table, scrambles, the oracle, the
rewards and the end."""

import collections
import itertools
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import ragen_envs  # noqa: F401
from ragen_envs.rubikscube import cube
from ragen_envs.rubikscube.env import RubiksCubeEnv
from ragen_envs.rubikscube.cube import MOVES, SOLVED, apply, apply_all, distance, is_solved

ENV = "Ragen/RubiksCube-v0"


def random_state(seed, length=40):
    rng = np.random.default_rng(seed)
    return apply_all(SOLVED, [MOVES[k] for k in rng.integers(12, size=length)])


STATES = [SOLVED] + [random_state(seed) for seed in range(5)]
# stickers labelled by position, so a permutation shows even where colours repeat
LABELS = "abcdefghijklmnopqrstuvwx"


@pytest.mark.parametrize("move", MOVES)
def test_each_move_has_order_four_and_its_prime_undoes_it(move):
    inverse = move[:-1] if move.endswith("'") else move + "'"
    for state in STATES + [LABELS]:
        assert apply_all(state, [move] * 4) == state and apply_all(state, [move] * 2) != state
        assert apply_all(state, [move, inverse]) == state
    assert apply(LABELS, move) != LABELS


@pytest.mark.parametrize("a, b", [("U", "D"), ("L", "R"), ("F", "B"), ("U'", "D"), ("R'", "L'")])
def test_opposite_faces_commute_and_neighbours_do_not(a, b):
    assert apply_all(LABELS, [a, b]) == apply_all(LABELS, [b, a])
    assert apply_all(LABELS, [a, "F" if a[0] != "F" else "U"]) != apply_all(LABELS, ["F" if a[0] != "F" else "U", a])


def test_known_sequences():
    sexy = ["R", "U", "R'", "U'"]
    for state in STATES + [LABELS]:
        assert apply_all(state, sexy * 6) == state  # (R U R' U') has order 6
        assert all(apply_all(state, sexy * k) != state for k in (1, 2, 3))
    # R and L (U and D, F and B) differ by a whole-cube rotation: R L' is a rotation, still solved
    for pair in (["R", "L'"], ["U", "D'"], ["F", "B'"]):
        after = apply_all(SOLVED, pair)
        assert after != SOLVED and is_solved(after) and distance(after) == 0


@pytest.mark.parametrize("move", MOVES)
def test_moves_keep_colours_and_corners(move):
    for state in STATES:
        after = apply(state, move)
        assert collections.Counter(after) == collections.Counter(state) == collections.Counter(SOLVED)
    perm = cube.PERMS[move]
    slots = {frozenset(s) for s in cube.CORNERS}
    assert len(slots) == 8 and set().union(*slots) == set(range(24))
    # every corner's three stickers land together on one corner, and only the turned layer moves
    assert {frozenset(perm.index(i) for i in slot) for slot in slots} == slots
    assert sum(perm[i] != i for i in range(24)) == 12


def test_stickers_by_hand():
    # Faces U L F R B D, stickers in reading order; U seen from above with B at its top, D from below with
    # F at its top, L F R B from outside with U at their top. U (clockwise from above) sends each side
    # face's top row to its left neighbour: Front's top row comes from Right, Left's from Front.
    assert apply(SOLVED, "U") == "WWWW" "GGOO" "RRGG" "BBRR" "OOBB" "YYYY"
    # R (clockwise from the right) lifts Front's right column onto Up, Up's onto Back (whose left column
    # is on the R side), Back's onto Down, Down's onto Front.
    assert apply(SOLVED, "R") == "WGWG" "OOOO" "GYGY" "RRRR" "WBWB" "YBYB"
    # labelled: Front's top-right sticker (j) goes to Up's back-right, Front's bottom-right (l) to Up's
    # front-right; Right's stickers turn clockwise within the face (m n / o p -> o m / p n)
    after = apply(LABELS, "R")
    assert (after[1], after[3]) == ("j", "l") and after[12:16] == "ompn"
    # F' from solved: Up's front row takes Right's colour
    assert apply(SOLVED, "F'")[2:4] == "RR" and apply(SOLVED, "F")[2:4] == "OO"


def test_solved_is_one_colour_a_face_in_any_orientation():
    assert is_solved(SOLVED) and not any(is_solved(apply(SOLVED, m)) for m in MOVES)
    rotated = ["".join(SOLVED[i] for i in rot) for rot in cube.ROTATIONS]
    assert len(set(rotated)) == 24 and all(is_solved(s) and distance(s) == 0 for s in rotated)


def test_the_distance_table_is_the_pocket_cube_s():
    # positions by quarter turns from solved (a fixed corner): the known counts, 3,674,160 in all
    counts = np.bincount(cube.distance_table())
    assert counts.tolist() == [1, 6, 27, 120, 534, 2256, 8969, 33058, 114149, 360508, 930588, 1350852,
                               782536, 90280, 276]


def test_threads_that_ask_for_the_table_at_once_build_it_once(monkeypatch):
    # an env server's first burst of resets: every thread misses the cache at the same moment
    builds, real = [], cube._coordinate_tables
    monkeypatch.setattr(cube, "_coordinate_tables", lambda: builds.append(1) or real())
    cube.distance_table.cache_clear()
    start = threading.Barrier(16)

    def first_access(_):
        start.wait(timeout=60)
        return cube.distance_table()

    with ThreadPoolExecutor(16) as pool:
        tables = list(pool.map(first_access, range(16)))
    assert len(builds) == 1 and all(t is tables[0] for t in tables)


def test_distances_agree_with_a_plain_search_over_stickers():
    # breadth-first over sticker strings with all 12 moves, from the 24 orientations of the solved cube
    # (nothing of the table's coordinates): each position is 24 strings
    frontier = {"".join(SOLVED[i] for i in rot) for rot in cube.ROTATIONS}
    seen = dict.fromkeys(frontier, 0)
    for depth in range(1, 5):
        frontier = {apply(s, m) for s in frontier for m in MOVES} - seen.keys()
        seen.update(dict.fromkeys(frontier, depth))
        assert len(frontier) == 24 * [1, 6, 27, 120, 534][depth]
    rng = np.random.default_rng(0)
    states = list(seen)
    for k in rng.integers(len(states), size=300):
        assert distance(states[k]) == seen[states[k]]


def test_coordinates_follow_the_moves():
    # the move tables on coordinates agree with the sticker moves, on cubes whose D-B-L corner is in place
    # (U, U', R, R', F, F' keep it; the table's frame)
    perm_table, twist_table = cube._coordinate_tables()
    rng = np.random.default_rng(2)
    for state in [apply_all(SOLVED, [("U", "R", "F'")[k] for k in rng.integers(3, size=30)]) for _ in range(5)]:
        p, t = divmod(cube.coordinate(state), cube.N_TWISTS)
        for m, move in enumerate(("U", "U'", "R", "R'", "F", "F'")):
            assert cube.coordinate(apply(state, move)) == perm_table[m, p] * cube.N_TWISTS + twist_table[m, t]
    for state in STATES:
        for a, b in (("D", "U"), ("L", "R"), ("B", "F"), ("D'", "U'")):  # the same position, rotated
            assert cube.coordinate(apply(state, a)) == cube.coordinate(apply(state, b))


@pytest.mark.parametrize("depth", [1, 2, 3, 6, 9, 12])
def test_a_scramble_is_exactly_its_depth_and_follows_the_seed(depth):
    env = gym.make(ENV, scramble_depth=depth)
    starts = []
    for seed in range(8):
        _, info = env.reset(seed=seed)
        state = env.unwrapped.state
        assert distance(state) == depth == info["distance"] == info["optimal_solution_length"]
        assert not is_solved(state) and not info["success"]
        env.reset(seed=seed)
        assert env.unwrapped.state == state
        starts.append(state)
    assert len(set(starts)) > 1
    if depth == 1:  # every one-move scramble is undone by a move
        assert all(any(is_solved(apply(s, m)) for m in MOVES) for s in starts)


def test_depth_one_scrambles_cover_the_moves():
    env = gym.make(ENV, scramble_depth=1)  # RAGEN's depth (the default is 3: depth 1 is solved blind)
    starts = set()
    for seed in range(200):
        env.reset(seed=seed)
        starts.add(env.unwrapped.state)
    assert starts == {apply(SOLVED, m) for m in MOVES}


@pytest.mark.parametrize("depth", [1, 2, 3, 4, 5, 6])
def test_the_oracle_solves_in_the_fewest_moves_for_reward_one_once(depth):
    env = gym.make(ENV, scramble_depth=depth)
    oracle = env.get_wrapper_attr("oracle_action")
    for seed in range(12):
        env.reset(seed=seed)
        rewards = []
        for step in range(depth):
            assert f"The cube is {depth - step} quarter" in env.get_wrapper_attr("oracle_reasoning")()
            _, reward, terminated, truncated, info = env.step(oracle())
            rewards.append(reward)
            assert info["distance"] == depth - step - 1 and not truncated
        assert rewards == [0.0] * (depth - 1) + [1.0] and terminated and info["success"]
        assert oracle() is None
        _, reward, still, _, info = env.step("R")  # over: nothing more to earn
        assert reward == 0.0 and still and info["episode_over"]


def test_the_oracle_solves_from_wherever_the_agent_wanders():
    env = gym.make(ENV, scramble_depth=3, max_steps=40)
    env.reset(seed=3)
    rng = np.random.default_rng(3)
    for _ in range(12):  # wander away from the scramble
        env.step(MOVES[rng.integers(12)])
    state = env.unwrapped.state
    moves = cube.solution(state)
    assert len(moves) == distance(state) and is_solved(apply_all(state, moves))
    for move in moves[:-1]:
        assert env.step(env.get_wrapper_attr("oracle_action")())[1] == 0.0
    assert env.step(env.get_wrapper_attr("oracle_action")())[1:3] == (1.0, True)


def test_deep_positions_are_solved_optimally():
    rng = np.random.default_rng(1)
    for depth in (11, 12, 13, 14):
        state = cube.scramble(depth, rng)
        moves = cube.solution(state)
        assert len(moves) == depth == distance(state) and is_solved(apply_all(state, moves))


def test_wrong_moves_earn_nothing_and_the_episode_truncates():
    env = gym.make(ENV, scramble_depth=2, max_steps=6)
    env.reset(seed=0)
    for k in range(6):
        move = next(m for m in MOVES if distance(apply(env.unwrapped.state, m)) > 1)  # never the last move
        _, reward, terminated, truncated, info = env.step(move)
        assert reward == 0.0 and not terminated and info["action_is_valid"] and info["action_is_effective"]
        assert truncated == (k == 5)
    assert env.step(env.get_wrapper_attr("oracle_action")())[1] == 0.0  # nothing after the end


def test_actions_are_parsed():
    env = gym.make(ENV)
    env.reset(seed=0)
    parse = env.get_wrapper_attr("parse_action")
    assert [parse(a) for a in ("U", "U'", " r' ", "F’", "b")] == ["U", "U'", "R'", "F'", "B"]
    for text in ("U2", "Ui", "U prime", "UU", "X", "R U", "'", "", "M"):
        assert parse(text) is None
    before = env.unwrapped.state
    _, reward, _, _, info = env.step("U2")
    assert env.unwrapped.state == before and reward == 0.0 and not info["action_is_valid"]
    for a, b in itertools.product(("U", "U'"), repeat=2):  # U and U' are different moves
        assert (apply(before, parse(a)) == apply(before, parse(b))) == (a == b)


def test_the_observation_shows_every_face_and_the_instructions_the_notation():
    env = gym.make(ENV)
    obs, _ = env.reset(seed=0)
    lines = obs.splitlines()
    state = env.unwrapped.state
    for k, name in enumerate(("Up", "Left", "Front", "Right", "Back", "Down")):
        assert lines[k] == f"{name}: {state[4 * k]} {state[4 * k + 1]} / {state[4 * k + 2]} {state[4 * k + 3]}"
    assert all(m in lines[-1] for m in MOVES)
    instructions = env.get_wrapper_attr("instructions")
    assert "clockwise" in instructions and "U'" in instructions and "single colour" in instructions


@pytest.mark.parametrize("kwargs", [{"scramble_depth": 0}, {"scramble_depth": 15}, {"scramble_depth": True},
                                    {"scramble_depth": 2.0}, {"max_steps": 0}, {"max_steps": -1}])
def test_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        gym.make(ENV, **kwargs)


# -- counted scrambles ---------------------------------------------------------------------------------------
def test_scrambles_are_counted_tries_and_the_deepest_needs_far_fewer_than_the_budget():
    from ragen_envs.base import Budget

    for depth, most in [(1, 1), (12, 10), (14, cube.MAX_SCRAMBLES // 4)]:
        for seed in range(3):
            budget = Budget(cube.MAX_SCRAMBLES, "scrambles tried", "scramble_depth", depth, "")
            state = cube.scramble(depth, np.random.default_rng(seed), budget)
            assert distance(state) == depth and state == cube.scramble(depth, np.random.default_rng(seed))
            assert 1 <= budget.used <= most


def test_a_spent_scramble_budget_names_scramble_depth():
    from ragen_envs.base import Budget, GenerationBudgetError

    budget = Budget(5, "scrambles tried", "scramble_depth", 14, "use a smaller scramble_depth")
    with pytest.raises(GenerationBudgetError, match="more than 5 scrambles tried with scramble_depth=14") as error:
        cube.scramble(14, np.random.default_rng(0), budget)  # depth 14 takes about 200 tries
    assert error.value.argument == "scramble_depth" and budget.used == 6
    with pytest.raises(ValueError, match=r"^scramble_depth must be in \[1, 14\] \(.+\), got 15$"):
        gym.make(ENV, scramble_depth=15)


# -- what a policy that never reads the cube earns (benchmarks/audits/blind_audit.py) ------------------
def _blind_audit():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "audits"))
    import blind_audit

    return blind_audit


HELD = list(range(100_000, 100_040))


@pytest.fixture(scope="module")
def depth_one_plan():
    """The fixed plan the audit's beam search finds for RAGEN's depth-1 cube (the ragen2-main preset)."""
    audit = _blind_audit()
    s = audit.setting(ENV, "ragen2-main")
    assert s.env_kwargs == {"scramble_depth": 1} and s.budget == 20
    train = list(range(30))  # enough to hold each of the six positions
    return audit.blind_plan(s, train, audit.alphabet(s, train), width=8)


def test_a_fixed_plan_solves_ragens_depth_one_and_the_docs_say_why(depth_one_plan):
    # eleven fixed moves (try a turn, undo it, try the next) solve every scramble; a search that does not
    # look a move ahead finds one move and stops gaining
    audit = _blind_audit()
    assert len(depth_one_plan) <= 20
    assert audit.plan_success(audit.setting(ENV, "ragen2-main"), depth_one_plan, HELD) == 1.0
    assert ("rubikscube", "ragen2-main") in audit.EXPLAINED
    assert "solved without looking" in sys.modules[RubiksCubeEnv.__module__].__doc__


def test_the_default_depth_is_not_solved_blind(depth_one_plan):
    audit = _blind_audit()
    s = audit.setting(ENV, "defaults")
    assert s.budget == 20 and audit._make(s).scramble_depth == 3
    rand, oracle = audit.baselines(s, HELD)
    assert oracle == 1.0 and audit.plan_success(s, depth_one_plan, HELD) < rand + (oracle - rand) / 2
    # no fixed sequence of 20 moves passes through more than 20 of depth 3's 120 positions
    assert audit.plan_success(s, ["U"] * 20, HELD) <= 20 / 120
