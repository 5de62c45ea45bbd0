"""The 2x2 cube: stickers, the 12 quarter turns, and an exact distance table as the solver.

Geometry (every table here is derived from it): x points to R, y to U, z to F; the eight cubies sit at
(+-1, +-1, +-1). A state is a string of 24 colour letters, face by face in the order U L F R B D, each
face's 4 stickers in reading order (top-left, top-right, bottom-left, bottom-right) as that face is seen
from outside in the usual net: U seen from above with B at its top, D seen from below with F at its
top, and L F R B seen from the side with U at their top. A move X turns the layer of face X 90 degrees
clockwise as seen looking at X from outside; X' turns it back.

On a 2x2 a turn of a face and the same turn of the opposite face (R and L, U and D, F and B) differ
only by a whole-cube rotation, and every orientation of a solved cube counts as solved. So the distance
to solved is computed on the cube as seen with one corner (D-B-L) fixed in place, where only U, R and F
move: its corner permutation (7! = 5040) and twists (3 ** 6 = 729) index a breadth-first distance
table over all 3,674,160 positions, built with numpy once a process (under half a second).
"""

from __future__ import annotations

import itertools
from operator import itemgetter

import numpy as np

from ragen_envs.base import Budget
from ragen_envs.once import build_once

FACES = "ULFRBD"
COLOURS = "WOGRBY"  # each face's colour in the solved cube, in FACES order
SOLVED = "".join(c * 4 for c in COLOURS)
MOVES = ("U", "U'", "D", "D'", "L", "L'", "R", "R'", "F", "F'", "B", "B'")
GODS_NUMBER = 14  # the farthest position, in quarter turns
# Scrambles tried (each up to its dead end) before a GenerationBudgetError: depth 14 takes 200 on average
# (1,483 the most of 100 seeds; the count is about geometric, so past 10,000 one reset in e**50), 13 takes 3.
MAX_SCRAMBLES = 10_000

# face: (outward normal, the direction of its "right" and of its "down" in the net)
FRAMES = {"U": ((0, 1, 0), (1, 0, 0), (0, 0, 1)), "L": ((-1, 0, 0), (0, 0, 1), (0, -1, 0)),
          "F": ((0, 0, 1), (1, 0, 0), (0, -1, 0)), "R": ((1, 0, 0), (0, 0, -1), (0, -1, 0)),
          "B": ((0, 0, -1), (-1, 0, 0), (0, -1, 0)), "D": ((0, -1, 0), (1, 0, 0), (0, 0, -1))}


def _stickers() -> list[tuple[tuple, tuple]]:
    """(cubie position, outward normal) of each sticker, in state order."""
    out = []
    for face in FACES:
        normal, right, down = (np.array(v) for v in FRAMES[face])
        for row, col in itertools.product((-1, 1), repeat=2):
            out.append((tuple(normal + col * right + row * down), tuple(normal)))
    return out


STICKERS = _stickers()
INDEX = {s: i for i, s in enumerate(STICKERS)}


def _quarter(axis: tuple, v: tuple) -> tuple:
    """v turned 90 degrees clockwise as seen from the tip of ``axis`` (a unit axis)."""
    a, v = np.array(axis), np.array(v)
    return tuple(int(x) for x in a * (a @ v) - np.cross(a, v))


def _turn(axis: tuple, layer: bool) -> tuple[int, ...]:
    """The sticker permutation (new[i] = old[perm[i]]) of a clockwise quarter turn about ``axis`` of the
    layer on its side (``layer``) or of the whole cube."""
    perm = list(range(24))
    for i, (pos, normal) in enumerate(STICKERS):
        if not layer or np.dot(pos, axis) > 0:
            perm[INDEX[(_quarter(axis, pos), _quarter(axis, normal))]] = i
    return tuple(perm)


def _then(first: tuple, second: tuple) -> tuple:
    """The permutation of ``first`` followed by ``second``."""
    return tuple(first[i] for i in second)


def _inverse(perm: tuple) -> tuple:
    out = [0] * len(perm)
    for i, p in enumerate(perm):
        out[p] = i
    return tuple(out)


def _move_perms() -> dict[str, tuple]:
    perms = {}
    for face in FACES:
        perms[face] = _turn(FRAMES[face][0], layer=True)
        perms[face + "'"] = _inverse(perms[face])
    return {m: perms[m] for m in MOVES}


PERMS = _move_perms()
_APPLY = {m: itemgetter(*p) for m, p in PERMS.items()}


def apply(state: str, move: str) -> str:
    return "".join(_APPLY[move](state))


def apply_all(state: str, moves) -> str:
    for move in moves:
        state = apply(state, move)
    return state


def is_solved(state: str) -> bool:
    """Every face one colour (in any orientation of the whole cube)."""
    return all(len(set(state[k:k + 4])) == 1 for k in range(0, 24, 4))


def _rotations() -> list[tuple]:
    """The 24 whole-cube rotations as sticker permutations (closure of quarter turns about x and y)."""
    gens = [_turn((1, 0, 0), layer=False), _turn((0, 1, 0), layer=False)]
    seen, todo = {tuple(range(24))}, [tuple(range(24))]
    while todo:
        perm = todo.pop()
        for g in gens:
            nxt = _then(perm, g)
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return sorted(seen)


ROTATIONS = _rotations()


def _corners() -> list[tuple[int, int, int]]:
    """Each corner slot's three stickers: its U or D sticker first, then clockwise seen from outside
    (so a turn maps a slot's triple onto another's as a cyclic shift). The D-B-L slot is last."""
    slots = []
    for pos in itertools.product((-1, 1), repeat=3):
        ids = [i for i, (p, _) in enumerate(STICKERS) if p == pos]
        ids.sort(key=lambda i: STICKERS[i][1][1] == 0)  # the U/D sticker first
        a, b, c = (np.array(STICKERS[i][1]) for i in ids)
        if np.cross(a, b) @ c > 0:  # counter-clockwise: swap the other two
            ids[1], ids[2] = ids[2], ids[1]
        slots.append(tuple(ids))
    fixed = next(s for s in slots if STICKERS[s[0]][0] == (-1, -1, -1))
    return [s for s in slots if s != fixed] + [fixed]


CORNERS = _corners()
FIXED = CORNERS[-1]
# cubie of each colour set (the solved cube's slot numbers), and the U/D colours that mark a twist
CUBIE = {frozenset(SOLVED[i] for i in slot): k for k, slot in enumerate(CORNERS)}
UD = {SOLVED[0], SOLVED[20]}


def _orienting_rotations() -> dict[tuple[int, int], tuple]:
    """(slot of the fixed cubie, position of its U/D sticker in that slot) -> the rotation that puts it
    back in its own slot, untwisted."""
    table = {}
    for rot in ROTATIONS:
        state = "".join(itemgetter(*rot)(SOLVED))
        table[_locate_fixed(state)] = _inverse(rot)
    return table


def _locate_fixed(state: str) -> tuple[int, int]:
    target = frozenset(SOLVED[i] for i in FIXED)
    for k, slot in enumerate(CORNERS):
        colours = [state[i] for i in slot]
        if frozenset(colours) == target:
            return k, next(j for j, c in enumerate(colours) if c in UD)
    raise ValueError(f"no {''.join(sorted(target))} corner in {state!r}")


ORIENT = {key: itemgetter(*rot) for key, rot in _orienting_rotations().items()}
PERM_LIST = list(itertools.permutations(range(7)))
PERM_RANK = {p: k for k, p in enumerate(PERM_LIST)}
N_TWISTS = 3 ** 6


def coordinate(state: str) -> int:
    """The index of ``state``'s position (its rotation class) in the distance table."""
    state = "".join(ORIENT[_locate_fixed(state)](state))
    cubies, twist = [], 0
    for slot in CORNERS[:-1]:
        colours = [state[i] for i in slot]
        cubies.append(CUBIE[frozenset(colours)])
        if len(cubies) < 7:  # the last twist follows from the others (their sum is 0 mod 3)
            twist = 3 * twist + next(j for j, c in enumerate(colours) if c in UD)
    return PERM_RANK[tuple(cubies)] * N_TWISTS + twist


def _slot_moves(move: str) -> list[tuple[int, int]]:
    """For each slot s: (the slot its cubie goes to, the shift of its triple) under ``move``."""
    perm = PERMS[move]
    where = {old: new for new, old in enumerate(perm)}
    out = []
    for slot in CORNERS:
        moved = [where[i] for i in slot]
        k, target = next((k, t) for k, t in enumerate(CORNERS) if set(t) == set(moved))
        shift = target.index(moved[0])
        assert [target[(j + shift) % 3] for j in range(3)] == moved, "a turn must keep a corner's order"
        out.append((k, shift))
    return out


def _coordinate_tables() -> tuple[np.ndarray, np.ndarray]:
    """Permutation and twist move tables of U, U', R, R', F, F' (the moves that keep D-B-L in place)."""
    moves = ("U", "U'", "R", "R'", "F", "F'")
    perm_table = np.zeros((6, len(PERM_LIST)), dtype=np.int64)
    twist_table = np.zeros((6, N_TWISTS), dtype=np.int64)
    for m, move in enumerate(moves):
        slots = _slot_moves(move)
        assert slots[7] == (7, 0), "D-B-L stays"
        for k, cubies in enumerate(PERM_LIST):
            new = [0] * 7
            for s, (t, _) in enumerate(slots[:7]):
                new[t] = cubies[s]
            perm_table[m, k] = PERM_RANK[tuple(new)]
        for k in range(N_TWISTS):
            twists = [(k // 3 ** (5 - j)) % 3 for j in range(6)]
            twists.append(-sum(twists) % 3)
            new = [0] * 7
            for s, (t, shift) in enumerate(slots[:7]):
                new[t] = (twists[s] + shift) % 3
            twist_table[m, k] = sum(v * 3 ** (5 - j) for j, v in enumerate(new[:6]))
    return perm_table, twist_table


@build_once  # concurrent first resets (an env server's) build it once, not once per thread
def distance_table() -> np.ndarray:
    """Quarter turns to solved of every position (int8), by breadth-first search from solved."""
    perm_table, twist_table = _coordinate_tables()
    dist = np.full(len(PERM_LIST) * N_TWISTS, -1, dtype=np.int8)
    dist[0] = 0  # the solved cube: identity permutation, no twist
    frontier, depth = np.array([0]), 0
    while len(frontier):
        depth += 1
        perms, twists = np.divmod(frontier, N_TWISTS)
        for m in range(6):
            nxt = perm_table[m, perms] * N_TWISTS + twist_table[m, twists]
            nxt = nxt[dist[nxt] < 0]
            dist[nxt] = depth
        frontier = np.flatnonzero(dist == depth)
    dist.setflags(write=False)
    return dist


def distance(state: str) -> int:
    """The fewest quarter turns (of the 12) that solve ``state``."""
    return int(distance_table()[coordinate(state)])


def solve_step(state: str) -> str | None:
    """A first move of a shortest solution (the first in MOVES order), None when solved."""
    d = distance(state)
    if d == 0:
        return None
    return next(m for m in MOVES if distance(apply(state, m)) == d - 1)


def solution(state: str) -> list[str]:
    """A shortest solution, move by move."""
    moves = []
    while (move := solve_step(state)) is not None:
        moves.append(move)
        state = apply(state, move)
    return moves


def scramble(depth: int, rng: np.random.Generator, budget: Budget | None = None) -> str:
    """A state exactly ``depth`` quarter turns from solved: random moves from the solved cube, each one
    drawn among those that take it one turn farther, starting again from solved at a dead end. Each try
    spends one unit of ``budget`` (default: ``MAX_SCRAMBLES`` tries)."""
    budget = budget or Budget(MAX_SCRAMBLES, "scrambles tried", "scramble_depth", depth,
                              "use a smaller scramble_depth")
    while True:
        budget.spend()
        state = SOLVED
        for d in range(depth):
            farther = [m for m in MOVES if distance(apply(state, m)) == d + 1]
            if not farther:
                break
            state = apply(state, farther[int(rng.integers(len(farther)))])
        else:
            return state
